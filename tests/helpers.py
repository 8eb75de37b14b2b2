"""What several test modules share: array metadata without a GPU, and the HIP compiler."""
import shutil

import numpy as np
import pytest


class FakeDeviceArray:
    """Metadata of a GPU array, to drive the argument checks on a machine without one."""

    def __init__(self, shape, dtype="float32", contiguous=True):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.flags = {"C_CONTIGUOUS": contiguous}
        self.__cuda_array_interface__ = {}


def hipcc() -> str:
    """The HIP compiler's path, or skip the test that needs it, saying how to get it."""
    path = shutil.which("hipcc")
    if not path:
        pytest.skip("hipcc not found: apt-get install hipcc (Debian's HIP compiler) to compile the HIP sources")
    return path
