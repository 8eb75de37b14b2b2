"""What several test modules share: array metadata without a GPU, the HIP compiler, and the
course's scripts (bench/, tests/) loaded as modules."""
import importlib.util
import shutil

import numpy as np
import pytest


class FakeDeviceArray:
    """Metadata of a GPU array, to drive the argument checks on a machine without one."""

    def __init__(self, shape, dtype="float32", contiguous=True):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.flags = {"C_CONTIGUOUS": contiguous}
        self.__cuda_array_interface__ = {}

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        n, known = int(np.prod(self.shape)), int(np.prod([s for s in shape if s != -1]))
        return FakeDeviceArray(tuple(n // known if s == -1 else s for s in shape), self.dtype, self.flags["C_CONTIGUOUS"])


def load_script(relpath: str):
    """A script of the checkout (not a package module: bench/traffic.py, tests/print_quotes.py, ...)
    loaded as a module, so that a test can call its functions."""
    from a07_softmax.paths import ROOT

    path = ROOT / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compiled_for_sm90(source: str, folder):
    """NVRTC's result for `source` (a CUDA translation unit) compiled for sm_90 without a GPU, the
    compile asserted to succeed; the test is skipped where NVRTC is not installed."""
    import pytest

    from a07_softmax import native

    path = folder / "probe.cu"
    path.write_text(source)
    try:
        r = native.nvrtc_compile(path, "sm_90")
    except RuntimeError as e:
        pytest.skip(f"NVRTC not available here: {e}")
    assert r.ok, r.log
    return r


def grad_err(got, ref) -> float:
    """Normwise error of a cross-entropy gradient: the largest error against the largest gradient
    entry. An entry is a difference (p - onehot - smoothing / V) that can cancel to almost nothing,
    where an elementwise relative error measures the rounding of its terms, not the kernel
    (PyTorch's own fp32 gradient misses the elementwise float32 tolerance there too)."""
    ref = np.asarray(ref, dtype=np.float64)
    return float(np.abs(np.asarray(got, dtype=np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def hipcc() -> str:
    """The HIP compiler's path, or skip the test that needs it, saying how to get it."""
    path = shutil.which("hipcc")
    if not path:
        pytest.skip("hipcc not found: apt-get install hipcc (Debian's HIP compiler) to compile the HIP sources")
    return path


# Bad inputs every launcher must refuse before a launch: (what, the input, the error, and for each
# launcher the words its message must contain; None where the case does not apply to it).
BAD_INPUTS = [
    ("host array", lambda: np.zeros((2, 3), np.float32), TypeError, {"native": "host memory", "fast": "host memory"}),
    ("float64", lambda: FakeDeviceArray((2, 3), "float64"), TypeError, {"native": "float32 only", "fast": "float64"}),
    ("float16 in a lab kernel", lambda: FakeDeviceArray((2, 3), "float16"), TypeError,
     {"native": "float32 only", "fast": None}),
    ("int32", lambda: FakeDeviceArray((2, 3), "int32"), TypeError, {"native": "float32 only", "fast": "int32"}),
    ("1-D", lambda: FakeDeviceArray((6,)), ValueError, {"native": "2-D", "fast": "2-D"}),
    ("no rows", lambda: FakeDeviceArray((0, 3)), ValueError, {"native": "at least one row", "fast": "rows, cols >= 1"}),
    ("strided", lambda: FakeDeviceArray((2, 3), contiguous=False), ValueError,
     {"native": "not C-contiguous", "fast": "not C-contiguous"}),
    ("a list", lambda: [[1.0]], TypeError, {"native": "CuPy array or a torch tensor", "fast": "CuPy array or a torch tensor"}),
    ("2^28 rows", lambda: FakeDeviceArray((2**28, 4)), ValueError, {"native": None, "fast": "too large"}),
]


def bad_inputs(launcher: str):
    """pytest.param rows of BAD_INPUTS that apply to `launcher`."""
    return [pytest.param(make, err, words[launcher], id=what) for what, make, err, words in BAD_INPUTS
            if words[launcher] is not None]


def whole_range_cross_entropy_rows(rng, dtype: str, vocab: int):
    """(logits as float64 already rounded to dtype, targets, what each row is) over the dtype's whole
    finite range, for vocab >= 16: the rows where a cross-entropy formed as lse - x_t, or with the
    plain sum of the logits, goes wrong. The loss of the first row overflows float32 (a correct
    kernel returns inf there, never NaN); every other row's loss is a modest number."""
    from a07_softmax import contract

    big = contract.finfo(dtype)[0]
    rows = []
    x = rng.uniform(-big, big, size=(7, vocab))
    t = rng.integers(0, vocab, size=7)
    rows.append("uniform over +-largest, a random target (the loss overflows float32)")
    x[1] = rng.uniform(-big, big, size=vocab) / 2
    t[1] = int(np.argmax(x[1]))
    rows.append("uniform over +-largest/2, the target at the max (label smoothing's sum of the logits overflows)")
    x[2, :8] = big
    t[2] = 3
    rows.append("8 logits at the largest value, the target among them (loss log 8: lse - x_t rounds it to 0)")
    x[3] = big / 2
    t[3] = 0
    rows.append("every logit at largest/2 (loss log V; mean(x) must come out exact)")
    x[4] = -big / 2
    t[4] = vocab - 1
    rows.append("every logit at -largest/2")
    x[5] = rng.uniform(-4, 4, size=vocab) + big / 4
    t[5] = vocab // 2
    rows.append("largest/4 plus noise that the dtype rounds away in part")
    x[6] = rng.normal(0, 8, size=vocab)
    x[6, 0] = big
    t[6] = 0
    rows.append("one logit at the largest value, the target (loss 0)")
    return contract.round_to(x, dtype), t, rows
