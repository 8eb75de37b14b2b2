import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kernels  # noqa: E402

# Before anything imports triton: no GPU -> the Triton interpreter on CPU tensors.
kernels.use_interpreter()

from kernels import backend  # noqa: E402


def pytest_collection_modifyitems(config, items):
    b = backend.detect()
    if b.gpu is not None and b.cupy_version:
        return
    why = ("no GPU on this machine (CuPy finds no device): GPU tests run with `pytest -m gpu` on an "
           "NVIDIA or AMD GPU" if b.gpu is None else "GPU found but CuPy is missing: pip install -e .[cuda13]")
    skip = pytest.mark.skip(reason=why)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """Fresh random inputs per test, reproducible from the test's name."""
    import numpy as np
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


ON_GPU = backend.detect().gpu is not None
DEVICE = "cuda" if ON_GPU and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
