"""The one error measure and tolerance table (a07_softmax/accuracy.py), written against the mistakes
such a measure hides: NaN read as small, -inf mismatches, fp16 subnormals, absolute errors of
log-probabilities, a C++ twin that drifts."""
import math
import re

import numpy as np
import pytest

from a07_softmax import accuracy, constants
from a07_softmax.paths import ROOT


def test_exact_output_has_zero_error_and_a_nan_is_infinite():
    ref = np.array([[0.25, 0.75], [0.5, 0.5]])
    assert accuracy.max_rel_err(ref, ref) == 0.0
    for bad in (np.nan, np.inf, -np.inf):
        got = ref.copy()
        got[1, 0] = bad
        assert accuracy.max_rel_err(got, ref) == math.inf, bad
        assert accuracy.first_mismatch(got, ref, 1e-3)[:2] == (1, 0)


def test_relative_error_where_the_reference_is_large_absolute_below_the_floor():
    ref = np.array([[1.0, 1e-3, 1e-9]])
    assert accuracy.max_rel_err([[1.0, 1.01e-3, 1e-9]], ref) == pytest.approx(0.01)
    # 1e-9 is below 1e-6 x max|ref|: its error counts against 1e-6, not against itself
    assert accuracy.max_rel_err([[1.0, 1e-3, 2e-9]], ref) == pytest.approx(1e-3)
    assert accuracy.max_rel_err([[1.0, 1e-3, 0.0]], ref) == pytest.approx(1e-3)


def test_the_output_dtype_sets_a_floor_at_its_smallest_normal():
    ref = np.array([[0.999, 1e-6]])  # 1e-6 is a subnormal in fp16 (smallest normal 6.1e-5)
    got = np.array([[0.999, 0.0]])
    assert accuracy.max_rel_err(got, ref, dtype="float16") == pytest.approx(1e-6 / 2.0 ** -14)
    assert accuracy.max_rel_err(got, ref, dtype="float32") == pytest.approx(1.0)  # fp32 can hold it
    assert accuracy.smallest_normal("bfloat16") == accuracy.smallest_normal("float32") == 2.0 ** -126


def test_log_probabilities_are_absolute_near_zero_relative_far_from_it():
    ref = np.array([[-1e-7, -100.0, -np.inf]])
    assert accuracy.max_rel_err([[-2e-7, -100.0, -np.inf]], ref, log=True) == pytest.approx(1e-7)
    assert accuracy.max_rel_err([[-1e-7, -101.0, -np.inf]], ref, log=True) == pytest.approx(0.01)
    # the fully-masked row's -inf must be -inf: a large finite value is an infinite error
    assert accuracy.max_rel_err([[-1e-7, -100.0, -1e30]], ref, log=True) == math.inf
    assert accuracy.max_rel_err([[-1e-7, -100.0, np.inf]], ref, log=True) == math.inf


def test_nan_is_expected_only_where_the_reference_has_nan():
    ref = np.array([[np.nan, 0.5, 0.5]])
    assert accuracy.max_rel_err([[np.nan, 0.5, 0.5]], ref) == 0.0
    assert accuracy.max_rel_err([[0.0, 0.5, 0.5]], ref) == math.inf  # a NaN input must not be hidden


def test_shapes_must_match():
    with pytest.raises(ValueError, match="shape"):
        accuracy.max_rel_err(np.zeros((2, 3)), np.zeros((3, 2)))


def test_torch_tensors_are_measured_where_they_are():
    torch = pytest.importorskip("torch")
    ref = torch.tensor([[0.5, 0.5, 1e-6]], dtype=torch.float64)
    got = torch.tensor([[0.5, 0.51, 0.0]], dtype=torch.float16)
    assert accuracy.max_rel_err(got, ref) == pytest.approx(accuracy.max_rel_err(got.double().numpy(), ref.numpy(),
                                                                                dtype="float16"))
    assert accuracy.max_rel_err(got, ref) == pytest.approx(0.02, rel=0.03)  # 0.51 rounds in fp16
    assert accuracy.tolerance(torch.bfloat16) == constants.TOLERANCE["bfloat16"]


def test_tolerances_come_from_the_header_and_tighten_with_precision():
    tol = constants.TOLERANCE
    assert tol["float64"] < tol["float32"] < tol["float16"] < tol["bfloat16"]
    text = (ROOT / "common" / "course_constants.h").read_text()
    assert float(re.search(r"#define A07_TOL_FLOAT32 (\S+)", text).group(1)) == accuracy.tolerance("float32")
    with pytest.raises(KeyError, match="no tolerance"):
        accuracy.tolerance("int8")


def test_the_standalone_programs_measure_the_same_way():
    """lab::compare in common/lab_host.h mirrors accuracy.py for fp32 probabilities: the same floor
    (A07_RELATIVE_FLOOR of the largest |ref|, from the shared header) and the same tolerance."""
    text = (ROOT / "common" / "lab_host.h").read_text()
    body = text[text.index("inline Check compare("):]
    body = body[:body.index("\n}\n")]
    assert "std::max(A07_RELATIVE_FLOOR * largest, 1e-30)" in body and "std::max(std::fabs(r), floor)" in body
    assert "A07_TOL_FLOAT32" in text
