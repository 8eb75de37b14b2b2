"""The exercise checker (`a07 check NN`, `make check EX=NN`) and the grader's judge.

Untrusted code computes; trusted code judges. The learner's file never runs in this process: for
each exercise the checker builds inputs (the public ones a learner sees with `a07 check`, plus, when
grading, hidden ones drawn fresh from a random seed), runs the learner's functions on them in a
sandboxed child (a07_softmax/sandbox.py, exercise_child.py) that only returns arrays, and compares
those arrays here with float64 references (accuracy.py). Nothing the child prints is a verdict.

A check that could not run here (a CUDA drill on a machine without a GPU) is NOT RUN, and the
exercise's status is then "incomplete", never "passed". Each check is worth points; the maximum of an
exercise does not depend on how far a submission got, so scores compare.

Exercises are generated from solutions by `a07 check generate` (strips the regions between BEGIN
SOLUTION and END SOLUTION markers); tests/test_exercises.py checks that regenerating changes nothing.
"""
from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from .native import BLOCK
from .paths import ROOT

EXERCISES = {
    "01": "01_safe_softmax.cu",
    "02": "02_masked_softmax.cu",
    "03": "03_online_softmax_math.md",
    "04": "04_online_trace.py",
    "05": "05_triton_fused_softmax.py",
    "06": "06_log_softmax_cross_entropy.py",
    "07": "07_flash_attention.py",
}
TODO_CU = "// (your code here)"
TODO_MD = "_(your answer here)_"
# seconds one exercise's checks may take together (a07 check --timeout, A07_CHECK_TIMEOUT)
TIMEOUT_S = int(os.environ.get("A07_CHECK_TIMEOUT", "45"))
PASS, FAIL, TODO, SKIP, ERROR, TIMEOUT = "PASS", "FAIL", "NOT IMPLEMENTED YET", "NOT RUN", "ERROR", "TIMEOUT"
# written prose (an explanation, a proof) that no program can judge: for a person to read, worth no
# points of its own, and never reported as passed
READ = "FOR A PERSON TO READ"
# the headers a CUDA drill may include: the course's own device code, nothing else
ALLOWED_INCLUDES = {"online_softmax.h", "portability.h", "course_constants.h"}


@dataclass
class Result:
    name: str           # the concept and the input, e.g. "large logits (exp overflows without the max)"
    verdict: str
    detail: str = ""
    points: int = 0
    max_points: int = 1
    hidden: bool = False

    def __iter__(self):  # (name, verdict, detail), as the report prints it
        return iter((self.name, self.verdict, self.detail))


# ------------------------------------------------------------------------------------------------
# Generating exercises from solutions
# ------------------------------------------------------------------------------------------------
def strip_solution(text: str, suffix: str, number: str) -> str:
    """The exercise version of a solution file: every marked region replaced by a placeholder."""
    if suffix == ".md":
        text = re.sub(r"<!-- BEGIN SOLUTION -->[^\n]*?<!-- END SOLUTION -->", "?", text)
        return re.sub(r"<!-- BEGIN SOLUTION -->\n.*?<!-- END SOLUTION -->", TODO_MD, text, flags=re.S)
    begin, end = ("### BEGIN SOLUTION", "### END SOLUTION") if suffix == ".py" else ("// BEGIN SOLUTION", "// END SOLUTION")
    out, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == begin:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + (f'raise NotImplementedError("exercise {number}: your code here")'
                                 if suffix == ".py" else TODO_CU))
            inside = True
        elif stripped == end:
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"unterminated {begin} region")
    return "\n".join(out) + "\n"


def generate(check_only: bool = False) -> list:
    """Write exercises/ from solutions/; return the files that changed (or would change)."""
    changed = []
    for number, name in EXERCISES.items():
        sol = ROOT / "solutions" / name
        ex = ROOT / "exercises" / name
        new = strip_solution(sol.read_text(), sol.suffix, number)
        if not ex.exists() or ex.read_text() != new:
            changed.append(str(ex.relative_to(ROOT)))
            if not check_only:
                ex.write_text(new)
    return changed


# ------------------------------------------------------------------------------------------------
# Judging
# ------------------------------------------------------------------------------------------------
def mismatch(got, ref, dtype="float32", *, log: bool = False) -> str | None:
    """None when got is within the course's tolerance for `dtype` (accuracy.py), else where not."""
    from .accuracy import first_mismatch, tolerance

    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return f"output shape {got.shape}, expected {ref.shape}"
    m = first_mismatch(got, ref, tolerance(dtype), log=log, dtype=dtype)
    if m is None:
        return None
    text = f"first mismatch at row {m[0]}, col {m[1]}: got {m[2]:.6g}, expected {m[3]:.6g} (relative error {m[4]:.3g})"
    from .accuracy import max_rel_err

    worst = max_rel_err(got, ref, log=log, dtype=dtype)
    if np.isfinite(got).all() and worst < 5e-2 and dtype == "float32":
        text += (f"; every output is within {worst:.1e}, close but not within float32's tolerance: precision "
                 "lost somewhere (statistics or arithmetic in float16/bfloat16? keep them in float32)")
    if np.isfinite(got).all() and worst < 1e-4 and dtype == "float64":
        text += (f"; every output is within {worst:.1e}, close but not within float64's tolerance: precision "
                 "lost somewhere (a value rounded to float32? keep the arithmetic in float64)")
    return text


def diagnose_block_reduction(got, x, block: int) -> str | None:
    """Exercise 01's reduction mistakes, recognised by what they compute: the output of a safe
    softmax whose max or sum was reduced over one thread's columns, or over one warp's, instead of
    the block's (thread t of a row owns columns t, t + block, ...). None if none of them matches."""
    got = np.asarray(got, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    rows, cols = x.shape
    t = np.arange(cols) % block
    r = np.repeat(np.arange(rows)[:, None], cols, axis=1)

    def group_max(groups, n):
        m = np.full((rows, n), -np.inf)
        np.maximum.at(m, (r, np.broadcast_to(groups, x.shape)), x)
        return m[:, groups]

    def group_sum(v, groups, n):
        s = np.zeros((rows, n))
        np.add.at(s, (r, np.broadcast_to(groups, x.shape)), v)
        return s[:, groups]

    with np.errstate(all="ignore"):
        whole_max = x.max(axis=1, keepdims=True)
        signatures = []
        e = np.exp(x - group_max(t, block))
        signatures.append((e / e.sum(axis=1, keepdims=True),
                           "each thread used its own max: reduce the max across the block (block_max) before the "
                           "exponentials, so that every term is measured against the same max"))
        e = np.exp(x - whole_max)
        signatures.append((e / group_sum(e, t, block),
                           "each thread divided by its own partial sum: reduce the sum across the block (block_sum)"))
        for warp in (32, 64):
            if block % warp or block == warp:
                continue
            w = t // warp
            e = np.exp(x - group_max(w, block // warp))
            signatures.append((e / e.sum(axis=1, keepdims=True),
                               f"the max was reduced over one warp ({warp} lanes) only: a block of {block} threads has "
                               f"{block // warp} warps, so combine the warps' results too (block_max)"))
            e = np.exp(x - whole_max)
            signatures.append((e / group_sum(e, w, block // warp),
                               f"the sum was reduced over one warp ({warp} lanes) only: combine the {block // warp} "
                               "warps' partial sums too (block_sum)"))
        e = np.exp(x - whole_max)
        signatures.append((e, "the exponentials were never divided by the row's sum (each output is exp(x - max); "
                              "the sum must be reduced with block_sum and divided out)"))
        partial = group_sum(e, t, block)
        signatures.append((e / partial.max(axis=1, keepdims=True),
                           "the partial sums were combined with a max, not a sum: reduce them with block_sum"))
        return _one_or_all([words for sig, words in signatures
                            if np.allclose(got, sig, rtol=1e-4, atol=1e-7, equal_nan=True)])


def diagnose_mask_variant(got, x, q, lens, causal: bool, padded: bool) -> str | None:
    """Exercise 02's mask mistakes, recognised by what they compute: the float64 masked softmax of a
    mask written wrongly (query q[i] is row i's position, lens[i] its valid keys). None if none of
    them matches."""
    from . import reference as R

    got, x = np.asarray(got, dtype=np.float64), np.asarray(x, dtype=np.float64)
    c = np.arange(x.shape[1])[None, :]
    row = np.arange(x.shape[0])[:, None]
    q, lens = np.asarray(q)[:, None], np.asarray(lens)[:, None]

    def softmax_keeping(keep, masked=-np.inf):
        s = np.where(keep, x, masked)
        out = np.zeros_like(s)
        live = np.isfinite(s).any(axis=1)
        out[live] = R.softmax(s[live], axis=1)
        return out
    pad = (c < lens) if padded else True
    cau = (c <= q) if causal else True
    signatures = []
    if padded:
        off_by_one = "the padding mask is off by one: keys 0 .. len - 1 are valid, key len is padding (mask c >= len)"
        signatures.append((softmax_keeping(cau & (c <= lens)), off_by_one))      # key len kept
        signatures.append((softmax_keeping(cau & (c < lens - 1)), off_by_one))   # key len - 1 masked
    if causal and (q != row).any():   # rows past the first q_len: only there do row and q differ
        signatures.append((softmax_keeping(pad & (c <= row)),
                           "the causal mask compared the key with the row index: a row's query position is "
                           "q = row % q_len (the rows hold batch x heads x queries), so mask c > q"))
    if causal:
        signatures.append((softmax_keeping(pad & (c >= q)),
                           "the causal mask is reversed: query q sees keys 0 .. q (mask c > q), not keys q and after"))
        signatures.append((softmax_keeping(pad & (c < q)),
                           "the causal mask is off by one: query q sees its own key q too (mask c > q, not c >= q)"))
    signatures.append((softmax_keeping(pad & cau, masked=0.0),
                       "masked scores were set to 0, which exp still counts (exp(0 - m) > 0): set them to -inf"))
    with np.errstate(all="ignore"):
        return _one_or_all([words for sig, words in signatures
                            if got.shape == sig.shape and np.allclose(got, sig, rtol=1e-4, atol=1e-7, equal_nan=True)])


def _one_or_all(matches: list) -> str | None:
    """The mistake an output matches; where an input is too small to tell several apart (a row
    shorter than the block, one column), each of them, said so."""
    matches = list(dict.fromkeys(matches))   # two signatures may name one mistake
    if len(matches) <= 1:
        return matches[0] if matches else None
    return "this input cannot tell apart: " + "; or ".join(matches)


def diagnose_nan_under_mask(got, x, visible=None) -> str | None:
    """NaN scores (docs/contract.md): a NaN that a row sees makes every output of the row NaN; a NaN
    where the row is masked (visible False) is replaced by -inf with the rest and changes nothing.
    `got` has x's rows (any width: a loss is one column)."""
    got, x = np.asarray(got, dtype=np.float64), np.asarray(x, dtype=np.float64)
    got = got.reshape(len(x), -1)
    nan = np.isnan(x)
    visible = np.ones(x.shape, dtype=bool) if visible is None else visible
    seen = (nan & visible).any(axis=1)
    for r in np.flatnonzero(seen):
        if not np.isnan(got[r]).all():
            j = int(np.flatnonzero(nan[r] & visible[r])[0])
            return (f"row {r} reads a NaN (col {j}{', not masked' if not visible.all() else ''}), so every output "
                    "of the row must be NaN (a NaN is never hidden, docs/contract.md), and some of yours are numbers: "
                    "a test on the output (y != y, isnan) or a max that drops NaN hides it; tell a fully-masked row "
                    "by its max (m == -inf) instead")
    for r in np.flatnonzero(~seen & nan.any(axis=1)):
        if np.isnan(got[r]).any():
            j = int(np.flatnonzero(nan[r])[0])
            return (f"row {r} holds a NaN only where it is masked (col {j}), yet came out NaN: a masked score is "
                    "replaced by -inf (v = -inf) whatever it held, not added to (NaN + -inf is NaN)")
    return None


# the guard's mistake the lowest-finite cases expose, said the same way in every exercise
FINITE_IS_NOT_MASKED = ("a row is masked only when its max is exactly -inf, and a guard on \"very negative\" "
                        "(m < -1e30) takes such a row for a masked one")


def diagnose_inf_seen(got, x, visible=None) -> str | None:
    """A +inf score that a row sees makes the row NaN (inf - inf, as torch.softmax; docs/contract.md)."""
    got, x = np.asarray(got, dtype=np.float64), np.asarray(x, dtype=np.float64)
    got = got.reshape(len(x), -1)
    seen = np.isposinf(x) & (np.ones(x.shape, dtype=bool) if visible is None else visible)
    for r in np.flatnonzero(seen.any(axis=1)):
        if np.isnan(got[r]).any() and not np.isnan(got[r]).all():
            # the +inf made a NaN where it stood and nowhere else: exp(inf - c) / inf with c finite
            return (f"row {r} sees a score of +inf (col {int(np.flatnonzero(seen[r])[0])}) and came out NaN there "
                    "alone: the number subtracted before exp was not the row's max, which is +inf (inf - inf makes "
                    "every output NaN, as torch.softmax's). Either a guard that takes any infinite max for a masked "
                    "row (isinf) put 0 in its place (test m == -inf alone), or what was subtracted was not max(x)")
        if not np.isnan(got[r]).any():
            return (f"row {r} sees a score of +inf (col {int(np.flatnonzero(seen[r])[0])}): every output of the row "
                    "is NaN (inf - inf), as torch.softmax's, and yours are numbers: a guard that takes any "
                    "infinite max for a masked row (isinf), or a test on the output, hides it; test m == -inf alone")
    return None


def diagnose_mask(got, ref, x) -> str | None:
    """Exercise 02's masking mistakes: a masked score that got probability, or a row whose unmasked
    probabilities do not sum to 1: the statistics saw masked scores (recognised as the softmax over
    every key of x, masked ones included), or the outputs subtract another number than the max their
    sum was formed with (each row the right answer times one factor). None for any other sum."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    masked = ref == 0.0
    leaked = masked & (np.abs(got) > 0) & ~np.all(masked, axis=1, keepdims=True)
    if leaked.any():
        i, j = (int(v) for v in np.argwhere(leaked)[0])
        return (f"row {i}, col {j} is masked but got probability {got[i, j]:.3g}: a masked score must come out as "
                "exactly 0, so apply the mask in the loop that writes the outputs too")
    rows = np.flatnonzero(~np.all(masked, axis=1))
    sums = got[rows].sum(axis=1)
    off = np.flatnonzero(np.abs(sums - 1) > 1e-3)
    if not np.isfinite(sums).all() or not off.size:
        return None
    from . import reference as R

    k = int(off[0])
    with np.errstate(all="ignore"):
        over_all_keys = np.where(masked[rows], 0.0, R.softmax(np.asarray(x)[rows], axis=1))
        ratio = np.where(masked[rows], np.nan, got[rows] / ref[rows])
        lo, hi = np.nanmin(ratio[k]), np.nanmax(ratio[k])
    if np.allclose(got[rows], over_all_keys, rtol=1e-4, atol=1e-7):
        return (f"row {int(rows[k])} sums to {sums[k]:.4g}, not 1: the max and the sum included masked scores; "
                "mask them in the statistics loop too")
    if np.isfinite(hi) and hi > 0 and hi - lo <= 1e-3 * hi:   # exp(x - c) / sum exp(x - m): one factor a row
        return (f"row {int(rows[k])} is the softmax times {hi:.4g} (it sums to {sums[k]:.4g}): the outputs "
                "subtract something other than the max the sum was formed with (exp(x - c) / sum exp(x - m) is the "
                "softmax times exp(m - c)); subtract the row's max, the same m, in the loop that writes the outputs")
    return None


def diagnose_softmax_rows(got, z) -> str | None:
    """Exercise 05's wrong normalisations and row addressing, recognised from the answer (z: the
    scores its softmax sees, after the scale, masked ones -inf; float64)."""
    got, z = np.asarray(got, dtype=np.float64), np.asarray(z, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = z.max(axis=1, keepdims=True)
        live = (np.isfinite(m) & np.isfinite(z).any(axis=1, keepdims=True)).ravel() & ~np.isnan(z).any(axis=1)
        e = np.exp(z - m)
        right = e / e.sum(axis=1, keepdims=True)
        base2 = np.exp2(z - m)
        base2 = base2 / base2.sum(axis=1, keepdims=True)
    if live.any():
        g, r = got[live], right[live]

        def looks_like(wrong):
            return not np.allclose(wrong[live], r, rtol=1e-3, atol=1e-6) and \
                np.allclose(g, wrong[live], rtol=1e-3, atol=1e-6, equal_nan=True)
        if looks_like(base2):
            return ("these are powers of 2, not of e: tl.exp2 needs its argument scaled by log2(e) "
                    "(exp(z) = exp2(z * 1.4427)), or use tl.exp")
        if looks_like(e):
            return ("each row's largest probability came out 1: the exps were divided by their max (exp(0) = 1), "
                    "not by their sum")
    # the checker's rows are `stride` apart with NaN in between: a row addressed at row * n_cols reads
    # (or writes) across that gap from row 1 on, while row 0 is right. Only rows whose scores stay
    # below exp's overflow (88 in float32) count: there a missing max subtraction gives NaN too
    first_ok = np.allclose(got[0], right[0], rtol=1e-3, atol=1e-6, equal_nan=True)
    with np.errstate(invalid="ignore"):   # no reference among the row's own scores can overflow exp there
        finite_z = np.isfinite(z)
        tame = (np.where(finite_z, np.abs(z), 0.0).max(axis=1) < 40) & \
            (np.where(finite_z, z, -np.inf).max(axis=1) - np.where(finite_z, z, np.inf).min(axis=1) < 80)
    later = np.flatnonzero((np.isnan(got[1:]).any(axis=1) & ~np.isnan(right[1:]).any(axis=1)) & tame[1:]) + 1
    if first_ok and later.size:
        return (f"row 0 is right and row {int(later[0])} came out NaN: a row starts at row * stride, not at "
                "row * n_cols (the checker's rows are stride apart, with NaN between them)")
    return diagnose_exp_range(got, z)


def diagnose_exp_range(got, z) -> str | None:
    """A reference other than the row's max (none, the first score, the mean, the max before the
    scale), recognised where it shows: a row whose scores the softmax sees (z, float64, masked ones
    -inf) are finite, with at least one visible, never comes out NaN or all zeros, since exp(z - max z)
    has its largest term exp(0) = 1. Any other reference makes the terms overflow to inf (inf / inf)
    or underflow to 0 (0 / 0) once the row's scores spread wider than float32's exp range."""
    got, z = np.asarray(got, dtype=np.float64), np.asarray(z, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        m = z.max(axis=1)
        finite_row = np.isfinite(m) & ~np.isnan(z).any(axis=1) & ~np.isposinf(z).any(axis=1)
    lost = np.flatnonzero(finite_row & (np.isnan(got).any(axis=1) | ~got.any(axis=1)))
    if lost.size:
        r = int(lost[0])
        seen = z[r][np.isfinite(z[r])]
        return (f"row {r} came out {'NaN' if np.isnan(got[r]).any() else 'zeros'} though its scores are finite "
                f"(from {seen.min():.4g} to {seen.max():.4g} as the softmax sees them): exp overflowed or "
                "underflowed everywhere. Subtract the max of the row's scores as the softmax sees them (after any "
                "scale and mask): every exponent is then at most 0 and one of them is exactly 0")
    return None


def ce_reference(x, t, ignore_index=-100):
    """Exercise 06's answers in float64: per-row loss and d sum(loss) / d x, ignored rows 0."""
    from .reference import cross_entropy_with_grad

    with np.errstate(invalid="ignore"):  # padding rows (all -inf, ignored) are zeroed by the reference
        return cross_entropy_with_grad(x, t, ignore_index=ignore_index, reduction="none")


def ce_grad_mismatch(got, ref, dtype: str = "float32") -> str | None:
    """A gradient entry is a difference (p - onehot) that can cancel to nothing, so it is judged
    normwise: float32, the largest error against 1 (a row's largest entry, at most); a 16-bit
    gradient, each row's largest error against that row's largest entry, within the dtype's
    tolerance (a row whose target is nearly certain has entries of 1e-3: rounding p_t to the dtype
    before subtracting 1 loses them)."""
    from .accuracy import tolerance

    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return f"output shape {got.shape}, expected {ref.shape}"
    err = np.abs(got - ref)
    err[~np.isfinite(got)] = np.inf
    err[np.isnan(got) & np.isnan(ref)] = 0.0   # a row that reads a NaN logit is NaN (docs/contract.md)
    if dtype != "float32":
        with np.errstate(invalid="ignore"):
            scale = np.nanmax(np.abs(np.where(np.isfinite(ref), ref, 0.0)), axis=1, keepdims=True)
        err = err / np.maximum(scale, 1e-30)
    if err.max() <= (1e-5 if dtype == "float32" else tolerance(dtype)):
        return None
    i, j = (int(v) for v in np.unravel_index(np.argmax(err), err.shape))
    text = f"first large error at row {i}, col {j}: got {got[i, j]:.6g}, expected {ref[i, j]:.6g}"
    return text if dtype == "float32" else text + f" (error {err[i, j]:.3g} of the row's largest entry)"


def diagnose_log_softmax(got, x) -> str | None:
    """Recognise a log_softmax whose rows are not log-probabilities: exp of a correct row sums to 1."""
    got, x = np.asarray(got, dtype=np.float64), np.asarray(x, dtype=np.float64)
    if got.shape != x.shape:
        return None
    with np.errstate(all="ignore"):
        m = x.max(axis=1)
        # -inf where the answer is finite and far below 0: the log of a probability that underflowed
        # (log(exp(z) / s) is log(0) once z = x - m < -104 in float32)
        taken = np.isfinite(x).all(axis=1) & np.isneginf(got).all(axis=1) & (m < -1e30)
        if taken.any():
            r = int(np.flatnonzero(taken)[0])
            return (f"row {r} came out -inf everywhere, as a masked row would, but its scores are finite (down to "
                    f"{x[r].min():.3g}): {FINITE_IS_NOT_MASKED}")
        # a row of finite scores never comes out NaN, +inf or -inf everywhere: with z = x - max(x) every
        # exp lies in [0, 1], one of them 1, and their sum in [1, cols]. Any other reference lets the sum
        # overflow (inf - inf) or underflow (log 0)
        lost = np.isfinite(x).all(axis=1) & ((np.isnan(got) | np.isposinf(got)).any(axis=1) |
                                             np.isneginf(got).all(axis=1))
        if lost.any():
            r = int(np.flatnonzero(lost)[0])
            came = "NaN" if np.isnan(got[r]).any() else "+inf" if np.isposinf(got[r]).any() else "-inf everywhere"
            return (f"row {r} came out {came} though its logits are finite "
                    f"(from {x[r].min():.4g} to {x[r].max():.4g}): exp over- or underflowed (a sum of inf or 0), so "
                    "what was subtracted before it was not the row's max; with z = x - max(x) every exp(z) is at "
                    "most 1 and one of them is 1")
        gone = np.isneginf(got) & np.isfinite(x) & (x - m[:, None] < -80)
        if gone.any():
            r, c = (int(v) for v in np.argwhere(gone)[0])
            return (f"row {r}, col {c} came out -inf where log_softmax is {x[r, c] - m[r]:.0f} or so: exp(x - m) "
                    "underflows to 0 in float32 there, and its log is -inf; take (x - m) - log(s) from the "
                    "logits, never the log of the softmax")
        for r in np.flatnonzero(np.isfinite(m) & np.isfinite(got).any(axis=1)):
            total = float(np.exp(got[r]).sum())
            if abs(total - 1.0) <= 1e-3:
                continue
            if np.allclose(got[r], x[r] - m[r], rtol=1e-5, atol=1e-5, equal_nan=True):
                log_s = np.log(np.exp(x[r] - m[r]).sum())
                if np.float32(m[r]) + np.float32(log_s) == np.float32(m[r]):  # lse is m itself in float32
                    return (f"row {r} came out x - max(x): its max is {m[r]:.4g}, where lse = m + log(s) rounds "
                            f"log(s) = {log_s:.4g} away in float32 (3e38 + 2 is 3e38), so x - lse is x - m. Take "
                            "(x - m) - log(s): subtract the max first, then log(s)")
                return (f"row {r} is x - max(x): the log of the sum was not subtracted; log_softmax is "
                        "(x - m) - log(sum(exp(x - m)))")
            return (f"exp of row {r} sums to {total:.4g}, not 1: these are not log-probabilities; the normaliser "
                    "log(sum(exp(x - m))) is missing or wrong")
    return None


def diagnose_ce_loss(got, x, t) -> str | None:
    """Recognise the usual wrong losses of the cross-entropy (x: the logits the answer saw)."""
    got, x, t = np.asarray(got, dtype=np.float64).reshape(-1), np.asarray(x, dtype=np.float64), np.asarray(t)
    ignored = np.flatnonzero(t == -100)
    bad = [int(r) for r in ignored if got[r] != 0.0]
    if bad:
        return (f"row {bad[0]} has target ignore_index (-100): its loss must be exactly 0 (select it with "
                "tl.where; a multiplication by 0 keeps a NaN)")
    keep = t != -100
    if not np.isfinite(got[keep]).all():
        r = int(np.flatnonzero(keep & ~np.isfinite(got))[0])
        if np.isfinite(x[r]).all() and np.isposinf(got[r]) and x[r].max() - x[r, t[r]] > 87:
            return (f"row {r}'s loss came out inf where it is {x[r].max() - x[r, t[r]]:.0f} or so. Either its "
                    "target's probability underflows to 0 in float32, so -log(softmax[t]) is inf: take the loss as "
                    "logsumexp - x[t], from the logits; or exp(x - m) overflowed in logsumexp because m was not "
                    "the row's max (tl.max over the row, the lanes past its end loaded as -inf)")
        if np.isnan(got[r]) and np.isfinite(x[r, t[r]]):
            # exp without the max overflows to inf, and inf - x_t is inf: a NaN with a finite target
            # logit comes from 0 * -inf, the lanes past the row's end (loaded as -inf) or a masked
            # logit multiplied by the one-hot's zeros
            return (f"row {r}'s loss came out NaN although its target's logit is finite: a -inf (a lane past the "
                    "row's end, loaded as -inf, or a masked logit) times 0 is NaN, as in x * onehot to pick the "
                    "target's logit; select it with tl.where(cols == t, x, 0.0)")
        return "a loss came out inf or NaN: logsumexp needs the row's max subtracted before exp"
    rows = np.flatnonzero(keep & np.isfinite(x).all(axis=1))
    if rows.size:
        xr, tr = x[rows], t[rows]
        x_t = xr[np.arange(len(rows)), tr]
        m = xr.max(axis=1)
        log_sum = np.log(np.exp(xr - m[:, None]).sum(axis=1))
        right = log_sum + (m - x_t)  # not lse - x_t: see the first candidate below
        # lse = m + log s rounded to float32, then x_t subtracted: exact in arithmetic, but near the
        # largest logits log s is below lse's rounding step (3e38 + 2 is 3e38) and vanishes
        lse32 = (m.astype(np.float32) + log_sum.astype(np.float32)).astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            rounded = (lse32 - x_t).astype(np.float32).astype(np.float64)
        lost = ~np.isclose(rounded, right, rtol=1e-4, atol=1e-4)
        if lost.any() and np.allclose(got[rows], rounded, rtol=1e-4, atol=1e-4):
            i = int(np.flatnonzero(lost)[0])
            r = int(rows[i])
            return (f"row {r}'s loss came out {got[r]:.6g} where it is {right[i]:.6g}: its logits reach {m[i]:.4g}, "
                    "where lse = m + log(s) rounds log(s) away in float32 (3e38 + 2 is 3e38), so lse - x_t loses it. "
                    "Form the loss as log(s) + (m - x_t), as log_softmax forms log p")
        for wrong, words in ((m + log_sum - x[0, tr], "the target's logit was read from row 0 (in_ptr + t): read it "
                                                     "from the row's own start, row * stride + t"),
                             (log_sum - x_t, "logsumexp is m + log(sum exp(x - m)): the max subtracted before the "
                                             "exp must be added back"),
                             (m + log_sum / np.log(2) - x_t, "logsumexp takes the natural log of the sum (tl.log), "
                                                             "not log2"),
                             (m + np.log(np.exp2(xr - m[:, None]).sum(axis=1)) - x_t,
                              "the sum is of exp(x - m), base e: tl.exp2 needs its argument scaled by log2(e) "
                              "(exp(z) = exp2(z * 1.4427))")):
            if not np.allclose(wrong, right) and np.allclose(got[rows], wrong, rtol=1e-4, atol=1e-4):
                return words
    # the lanes between the row's end and the next power of two loaded as 0 and summed with the row
    block = 1 << max(0, int(np.ceil(np.log2(x.shape[1]))))
    if block > x.shape[1] and np.isfinite(x[keep]).all():
        padded = np.concatenate([x[keep], np.zeros((int(keep.sum()), block - x.shape[1]))], axis=1)
        m = padded.max(axis=1)
        wrong = m + np.log(np.exp(padded - m[:, None]).sum(axis=1)) - x[keep, t[keep]]
        xk = x[keep]
        mk = xk.max(axis=1)
        right = mk + np.log(np.exp(xk - mk[:, None]).sum(axis=1)) - xk[np.arange(len(xk)), t[keep]]
        # only where the zeros change the answer: rows far above 0 hide them, and a right answer must
        # never be taken for this mistake
        if not np.allclose(wrong, right, rtol=1e-4, atol=1e-4) and np.allclose(got[keep], wrong, rtol=1e-4, atol=1e-4):
            return ("the lanes past the row's end were loaded as 0 and counted in the max and the sum: load them "
                    "as -inf (other=-float(\"inf\")) so they add nothing")
    return None


def diagnose_target_rounded(got, ref, t, dtype) -> str | None:
    """A 16-bit gradient wrong at the target's column alone, where p_t - 1 cancels: p_t was rounded
    to the dtype before the 1 was subtracted."""
    from .accuracy import tolerance

    if dtype == "float32":
        return None
    got, ref, t = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64), np.asarray(t)
    for r in np.flatnonzero((t >= 0) & (t < ref.shape[1])):
        scale = np.abs(ref[r]).max()
        err = np.abs(got[r] - ref[r]) / max(scale, 1e-30)
        if np.isfinite(err).all() and err[t[r]] > tolerance(dtype) and np.delete(err, t[r]).max() <= tolerance(dtype):
            return (f"row {r}'s gradient is wrong at its target alone, where p_t - 1 cancels (p_t = "
                    f"{1 + ref[r, t[r]]:.6f}): form p_t - 1 in float32 and round once when storing; p_t rounded to "
                    f"{dtype} first leaves 1 - p_t a multiple of the dtype's spacing near 1")
    return None


def diagnose_ce_grad(got, x, t) -> str | None:
    """Recognise the usual wrong gradients of the cross-entropy."""
    got, x, t = np.asarray(got, dtype=np.float64), np.asarray(x, dtype=np.float64), np.asarray(t)
    keep = t != -100
    bad = [int(r) for r in np.flatnonzero(~keep) if np.any(got[r] != 0.0)]
    if bad:
        return (f"row {bad[0]} has target ignore_index (-100): its gradient must be all zeros (select with tl.where; "
                "0 * NaN is NaN)")
    if not np.isfinite(got[keep]).all():
        return "the gradient holds inf or NaN: exp(x) overflowed, subtract the row's max first"
    from . import reference as R

    with np.errstate(all="ignore"):
        p = R.softmax(x[keep])
    rows = np.arange(len(t))[keep]
    onehot = np.zeros_like(p)
    onehot[np.arange(len(rows)), t[keep]] = 1.0
    shifted = np.zeros_like(p)  # the -1 one column late (none at all for a target in the last column)
    nxt = t[keep] + 1
    inside = nxt < x.shape[1]
    shifted[np.arange(len(rows))[inside], nxt[inside]] = 1.0
    g = got[keep]
    near = lambda a: np.abs(g - a).max() < 1e-4  # noqa: E731
    if near(p):
        return "the gradient is softmax(x) alone: d loss / d x = softmax(x) - onehot(target), the -1 at the target is missing"
    if near(onehot - p):
        return "the gradient has the wrong sign: d loss / d x = softmax(x) - onehot(target)"
    if near(p - shifted):
        return "the -1 sits one column after the target: compare cols == t"
    e = np.exp(x[keep] - x[keep].max(axis=1, keepdims=True))
    if near(e - onehot):
        return "softmax(x) was not divided by the row's sum of exps"
    # p as exp(x - lse) with lse = m + log s in float32: near the largest logits lse is m itself, so
    # every logit at the max gets p = 1 (a right answer never matches this where it differs from p)
    m = x[keep].max(axis=1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        lse32 = (m.astype(np.float32) + np.log(e.sum(axis=1, keepdims=True)).astype(np.float32)).astype(np.float64)
        p_lse = np.exp(x[keep] - lse32)
    if np.isfinite(p_lse).all() and np.abs(p_lse - p).max() > 1e-3 and near(p_lse - onehot):
        return ("p was taken as exp(x - lse): where the logits reach float32's largest values lse = m + log(s) "
                "rounds to m, so every logit at the max gets p = 1; take p as exp(x - m) / s")
    return None


@dataclass
class Case:
    """One check: a call the child makes on inputs only the parent knows the answer to, and the
    parent's judgement of what comes back (None: right; else what is wrong, in words)."""
    name: str
    call: dict
    judge: Callable
    inputs: dict = field(default_factory=dict)
    points: int = 1
    hidden: bool = False
    # a timed call (call["max_seconds"]): the same work done by trusted array operations on the same
    # inputs, timed in the judge's process beside the child's runs (_time_limit)
    twin: Callable | None = None


def _arr(name: str, **extra) -> dict:
    return {"array": name, **extra}


# ------------------------------------------------------------------------------------------------
# The exercises' checks
# ------------------------------------------------------------------------------------------------
def cases_04(rng, hidden: bool):
    from . import reference as R

    def trace(row):
        return np.array([(st.m, st.s) for st in R.online_trace(row)])

    def no_rescale(row):
        m, s, out = -np.inf, 0.0, []
        for x in row:
            m_new = max(m, x)
            s = s + np.exp(x - m_new)
            m = m_new
            out.append((m, s))
        return np.array(out)

    def judge_trace(row, expected):
        def judge(got):
            got = np.asarray(got, dtype=np.float64)
            if got.shape != expected.shape:
                return f"{got.shape[0] if got.ndim else 0} states for {len(row)} elements (expected one (m, s) per element)"
            for k, ((m, s), (em, es)) in enumerate(zip(got, expected)):
                if not (m == em and abs(s - es) <= 1e-9 * es):
                    return f"after element {k} ({row[k]}): got (m={m}, s={s:.8f}), expected (m={em}, s={es:.8f})"
            return None
        return judge

    def judge_vector(expected, row):
        def judge(got):
            got = np.asarray(got, dtype=np.float64)
            if got.shape != (2, len(expected)):
                return f"returned shape {got.shape}; expected two arrays (m, s) of length {len(expected)}"
            bad = mismatch(got, expected.T, "float64")
            lost = np.flatnonzero(~(got[1] >= 1.0) & (expected[:, 1] >= 1.0))   # s >= 1 always: NaN or 0 lost it
            if bad and lost.size and len(expected) > 1:
                k = int(lost[0])
                bad = (f"s after element {k} came out {got[1, k]:.3g} (s is at least 1: the max itself counts 1): "
                       f"measured against one reference for the whole row ({max(row):.0f}), "
                       f"exp(x - reference) underflows for an element {max(row) - row[k]:.0f} "
                       "below it and exp(reference - m) overflows; move each prefix onto its own max instead "
                       f"(np.logaddexp.accumulate gives every prefix's log(sum exp x)) ({bad})")
            return bad
        return judge

    def judge_stats(got):
        got = np.asarray(got, dtype=np.float64)
        if got.shape != (2, 2):
            return "error_stats must return {'online': (max_abs, max_rel), 'no_rescale': (max_abs, max_rel)}"
        (on_abs, on_rel), (nr_abs, _) = got
        if not (on_abs < 1e-12 and on_rel < 1e-9):
            return f"online errors should be at float64 rounding, got max abs {on_abs:.3g}, max rel {on_rel:.3g}"
        if nr_abs < 0.1:
            return f"the no-rescale version should be badly wrong somewhere, max abs error only {nr_abs:.3g}"
        return None

    fixed = [1.0, 2.0, -3.0, 12.0, 11.0, 4.0]
    negative = [-5.0, -7.0, -2.5, -9.0, -1.0, -30.0]          # a running max that starts below 0
    big = [1000.0, 999.0, 997.0, 1003.0, -1000.0]              # exp(x) alone overflows float64 here
    climb = [0.0, 1.0, 500.0, 501.0, 1000.0]                   # each prefix's max far above the one before
    rows = [("the trace of [1, 2, -3, 12, 11, 4]", fixed), ("a row whose max starts negative", negative),
            ("scores near 1000 (exp overflows without the max)", big),
            ("a row that climbs from 0 to 1000 (one reference for the whole row underflows)", climb)]
    if hidden:
        for k in range(3):
            n = int(rng.integers(2, 60))
            r = rng.normal(0, 3, n)
            r[rng.random(n) < 0.1] = rng.uniform(-200, 200)
            rows.append((f"hidden random row {k + 1} ({n} elements)", [float(v) for v in r]))
    cases = []
    for i, (what, row) in enumerate(rows):
        cases.append(Case(f"online_scalar: {what}", {"fn": "online_scalar", "args": [_arr(f"r{i}", **{"as": "list"})]},
                          judge_trace(row, trace(row)), {f"r{i}": np.array(row)}, hidden=what.startswith("hidden")))
        cases.append(Case(f"online_vectorized: {what}", {"fn": "online_vectorized", "args": [_arr(f"r{i}", **{"as": "list"})]},
                          judge_vector(trace(row), row), {f"r{i}": np.array(row)}, hidden=what.startswith("hidden")))
    cases.append(Case("online_no_rescale: the trace of [1, 2, -3, 12, 11, 4] without the rescale",
                      {"fn": "online_no_rescale", "args": [_arr("r0", **{"as": "list"})]},
                      lambda got: mismatch(got, no_rescale(fixed), "float64"), {"r0": np.array(fixed)}))
    seeds = [int(v) for v in rng.integers(1 << 30, size=2)] if hidden else [3, 4]

    def no_rescale_stats(n_rows, seed):
        """(max_abs, max_rel) of the no-rescale trace over the rows the docstring's protocol draws: a
        deterministic figure, so an answer's own (drawn, compared and reduced as asked) must match it.
        The online figures are rounding noise, judged by bound (judge_stats)."""
        g = np.random.default_rng(seed)
        worst_abs = worst_rel = 0.0
        for _ in range(n_rows):
            n = int(g.integers(1, 201))
            x = g.normal(0, 3, size=n)
            hot = g.random(n) < 0.05
            x[hot] = g.uniform(50, 100, size=int(hot.sum()))
            e = np.exp(x - x.max())
            ref = e / e.sum()
            m, s = no_rescale(x)[-1]
            d = np.abs(np.exp(x - m) / s - ref)
            big = ref > 1e-12
            worst_abs, worst_rel = max(worst_abs, float(d.max())), max(worst_rel, float((d[big] / ref[big]).max()))
        return worst_abs, worst_rel

    def judge_two_stats(got):
        got = np.asarray(got, dtype=np.float64)
        if got.shape != (2, 2, 2):
            return "error_stats must return {'online': (max_abs, max_rel), 'no_rescale': (max_abs, max_rel)}"
        bad = judge_stats(got[0]) or judge_stats(got[1])
        if bad:
            return bad
        if np.array_equal(got[0], got[1]):
            return "the same numbers for two different seeds: error_stats must measure the rows it draws"
        for seed, (_, (nr_abs, nr_rel)) in zip(seeds, got):
            want_abs, want_rel = no_rescale_stats(300, seed)
            if np.isclose(nr_abs, want_abs, rtol=1e-6) and np.isclose(nr_rel, want_rel, rtol=1e-6):
                continue  # (the two can be about equal, both near 1: a right answer is never called swapped)
            if np.isclose(nr_abs, want_rel, rtol=1e-6) and np.isclose(nr_rel, want_abs, rtol=1e-6):
                return "no_rescale's max_abs and max_rel are swapped: the tuple is (max_abs, max_rel)"
            if not np.isclose(nr_abs, want_abs, rtol=1e-6):
                return (f"no_rescale's max_abs for seed {seed} is not the one the rows of the docstring give (off by "
                        f"{abs(nr_abs / want_abs - 1):.1%}): draw each row in the docstring's order from "
                        "default_rng(seed), all n_rows of them, and take the largest error over every row")
            if not np.isclose(nr_rel, want_rel, rtol=1e-6):
                return (f"no_rescale's max_rel for seed {seed} is not the one the rows of the docstring give (off by "
                        f"{abs(nr_rel / want_rel - 1):.1%}): |p - ref| / ref, over the entries whose reference "
                        "probability exceeds 1e-12 only")
        return None
    cases.append(Case(f"error_stats over 300 rows, two seeds ({'hidden' if hidden else ', '.join(map(str, seeds))})",
                      {"fn": "error_stats", "args": [300], "repeat": [{"seed": s} for s in seeds], "convert": "stats"},
                      judge_two_stats, hidden=hidden))
    # two million elements: NumPy array operations take a few tens of ms, a Python loop seconds
    n = 2_000_000
    long_row = rng.normal(0, 3, n)
    m = np.maximum.accumulate(long_row)
    s = np.cumsum(np.exp(long_row - long_row.max())) * np.exp(long_row.max() - m)  # fine here: a range of ~30
    cases.append(Case("online_vectorized on 2,000,000 elements (array operations, no loop over the elements)",
                      {"fn": "online_vectorized", "args": [_arr("long", **{"as": "numpy"})], "max_seconds": 2.0},
                      lambda got, ref=np.vstack([m, s]): mismatch(got, ref, "float64"), {"long": long_row},
                      twin=lambda x: np.exp(np.logaddexp.accumulate(x) - np.maximum.accumulate(x))))
    return cases


def cases_05(rng, hidden: bool):
    from . import reference as R

    out = []

    def causal(seq, scale, lo, hi, name, dtype=None, hint=None):
        hx = rng.uniform(lo, hi, size=(seq, seq)).astype(np.float32)
        if scale > 0:  # a fully-masked row (its scores all -inf): zeros, not NaN (-inf * scale is -inf)
            hx[seq // 2] = -np.inf
        seen = (hx.astype(np.float16) if dtype == "float16" else hx).astype(np.float64)  # what the kernel reads
        ref = R.scale_mask_softmax(seen, scale, R.causal_mask(seq, seq))
        z = seen * scale + R.causal_mask(seq, seq)   # the scores its softmax sees, for the diagnoses
        key = f"x{len(out)}"

        def judge(got, ref=ref, z=z):
            bad = mismatch(got, ref, dtype or "float32")
            if bad and hint:
                return f"{hint} ({bad})"
            return _with_hint(bad, lambda: diagnose_softmax_rows(got, z))
        out.append((name, "scale_mask_softmax", {key: hx},
                    [_arr(key, **{"as": "torch", **({"dtype": dtype} if dtype else {})}), scale,
                     {"kw": {"causal": True, "q_len": seq}}], judge))

    causal(1, 0.25, -20, 20, "causal, 1 x 1")
    causal(33, 0.25, -20, 20, "causal, 33 x 33 (a tail past the power of two), one fully-masked row")
    causal(100, 1.0, 50, 100, "large logits, 100 x 100 (exp overflows fp32 without the max)")
    causal(64, 1.0, -300, -200, "logits all below -200 (exp underflows to 0 without the max)")
    causal(40, 1.0, 11.1, 60, "fp16 logits above 11.1 (exp overflows fp16 without the max)", "float16")
    out[-1][3].append({"expect_dtype": "float16"})
    # the scale is any number: the max to subtract is that of x * scale, and a masked score is -inf
    # whatever the scale (a scale folded into the exp after the max of the raw scores is right only
    # for scale > 0: -inf * 0 is NaN, and for scale < 0 the max of x * scale is (min x) * scale)
    causal(24, 0.0, -20, 20, "scale 0, causal: every visible key equally likely",
           hint="with scale 0 a masked score is still -inf (mask after scaling: -inf * 0 is NaN) and each of a "
                "row's visible keys gets 1 / (keys visible)")
    causal(48, -3.0, -30, 30, "a negative scale (-3), causal, logits in [-30, 30]",
           hint="with scale < 0 the max to subtract is that of x * scale, (min x) * scale: scale first, then take "
                "the max (exp((x - max x) * scale) overflows here); if a case with a positive scale fails too, what "
                "is subtracted is not the max of the row as the softmax sees it (scaled, masked) at all")
    hx = rng.normal(size=(2, 8)).astype(np.float32)
    by_row = R.softmax(np.where(np.arange(8)[None, :] <= np.arange(2)[:, None], hx.astype(np.float64), -np.inf))
    out.append(("only key 0 visible (q_len 1): one-hot rows", "scale_mask_softmax", {"k1": hx},
                [_arr("k1", **{"as": "torch"}), 1.0, {"kw": {"causal": True, "q_len": 1}}],
                lambda got, by_row=by_row: _with_hint(
                    mismatch(got, np.tile([1.0] + [0.0] * 7, (2, 1))),
                    lambda: "row 1 saw keys 0 and 1: a row's query is row % q_len (rows are batches of q_len queries "
                            "flattened), not the row index" if mismatch(got, by_row) is None else None)))
    hx = rng.uniform(-12, -4, size=(3, 50)).astype(np.float32)
    out.append(("no mask, 3 x 50, every logit below 0 (the lanes past the tail must not count)", "scale_mask_softmax",
                {"k3": hx}, [_arr("k3", **{"as": "torch"}), 1.0, {"kw": {"causal": False}}],
                lambda got, hx=hx: mismatch(got, R.softmax(hx.astype(np.float64)))))
    # the lanes past n_cols without the causal mask to hide them: a lane loaded as -inf becomes +inf
    # times a negative scale (NaN times 0), so "other=-inf" alone does not mask the tail
    hx = rng.uniform(-20, 20, size=(4, 45)).astype(np.float32)
    for i, scale in enumerate((-2.0, 0.0)):
        key = f"kt{i}"
        out.append((f"no mask, 4 x 45 (a tail of 19 lanes), scale {scale:g}", "scale_mask_softmax", {key: hx},
                    [_arr(key, **{"as": "torch"}), scale, {"kw": {"causal": False}}],
                    lambda got, hx=hx, scale=scale: _with_hint(
                        mismatch(got, R.softmax(hx.astype(np.float64) * scale)),
                        lambda: f"the lanes past n_cols: loaded as -inf, they become {'+inf' if scale else 'NaN'} "
                                f"times a scale of {scale:g}, and with no causal mask to hide them they spoil the "
                                "row's max and sum; mask them after scaling (tl.where(cols < n_cols, x * scale, "
                                "-inf))" if np.isnan(got).all(axis=1).any() else None)))
    # finite scores are never a masked row, however low: a row of the lowest finite float32 is uniform
    hx = rng.uniform(-20, 20, size=(2, 50)).astype(np.float32)
    hx[1] = np.finfo(np.float32).min
    out.append(("no mask, 2 x 50, row 1 all the lowest finite float32 (uniform: finite scores are not masked)",
                "scale_mask_softmax", {"kl": hx}, [_arr("kl", **{"as": "torch"}), 1.0, {"kw": {"causal": False}}],
                lambda got, hx=hx: _with_hint(
                    mismatch(got, R.softmax(hx.astype(np.float64))),
                    lambda: "row 1 came out zeros, as a masked row would, but its scores are finite (all "
                            f"{hx[1, 0]:.3g}): {FINITE_IS_NOT_MASKED}; or what is subtracted is not the row's max "
                            "(their sum or mean overflows float32 to -inf here, and the guard then reads -inf)"
                            if np.all(np.asarray(got)[1] == 0) else diagnose_exp_range(got, hx.astype(np.float64)))))
    hx = rng.uniform(-30, 30, size=(5, 77)).astype(np.float32)
    out.append(("no mask, 5 x 77, scale 0.5", "scale_mask_softmax", {"k2": hx},
                [_arr("k2", **{"as": "torch"}), 0.5, {"kw": {"causal": False}}],
                lambda got, hx=hx: _with_hint(mismatch(got, R.softmax(hx.astype(np.float64) * 0.5)),
                                              lambda: diagnose_softmax_rows(got, hx.astype(np.float64) * 0.5))))
    # NaN scores (docs/contract.md): the causal mask replaces what lies above the diagonal, NaN
    # included; a NaN a row sees makes the row NaN
    seq = 40
    hx = rng.uniform(-20, 20, size=(seq, seq)).astype(np.float32)
    visible = np.arange(seq)[None, :] <= np.arange(seq)[:, None]
    for r in range(0, seq - 1, 2):
        hx[r, rng.integers(r + 1, seq)] = np.nan
    hx[9, 3] = hx[30, 30] = np.nan
    hx[0, 0] = np.nan   # row 0's only visible score: a max that drops NaN (fmax, as tl.max on a GPU) sees -inf
    hx[11, 4] = hx[13, 20] = np.inf   # +inf seen (row 11: NaN, inf - inf) and above the diagonal (ignored)
    ref = R.softmax(np.where(visible, hx.astype(np.float64) * 0.5, -np.inf))
    out.append(("causal, 40 x 40, NaN and +inf scores: a row that reads one is NaN (row 0 sees nothing else), one "
                "above the diagonal is ignored",
                "scale_mask_softmax", {"kn": hx}, [_arr("kn", **{"as": "torch"}), 0.5,
                                                  {"kw": {"causal": True, "q_len": seq}}],
                lambda got, ref=ref, hx=hx, visible=visible: _with_hint(
                    mismatch(got, ref), lambda: diagnose_nan_under_mask(got, hx, visible)
                    or diagnose_inf_seen(got, hx, visible))))
    if hidden:
        seq = int(rng.integers(70, 200))
        causal(seq, float(rng.uniform(0.1, 2)), -60, 120, f"hidden causal {seq} x {seq}, wide logits")
    return _calls_with_kwargs(out)


# The Triton exercises' calls -> the kernel the checker launches for each (exercise_child's
# trusted_launchers), and whether its output is a row of the input's width (checked for writes past it)
LAUNCHES = {"scale_mask_softmax": ("scale_mask_softmax_kernel", True), "log_softmax": ("log_softmax_kernel", True),
            "cross_entropy": ("cross_entropy_kernel", False), "cross_entropy_grad": ("cross_entropy_kernel", True)}


def _calls_with_kwargs(items):
    cases = []
    for name, fn, inputs, args, judge in items:
        kwargs = next((a["kw"] for a in args if isinstance(a, dict) and "kw" in a), {})
        extra = next((a for a in args if isinstance(a, dict) and "expect_dtype" in a), {})
        args = [a for a in args if not (isinstance(a, dict) and ("kw" in a or "expect_dtype" in a))]
        kernel, rows_out = LAUNCHES[fn]
        extra = {**extra, "launches": kernel, **({"row_cols": int(inputs[args[0]["array"]].shape[1])} if rows_out else {})}
        cases.append(Case(name, {"fn": fn, "args": args, "kwargs": kwargs, **extra}, judge, inputs,
                          hidden=name.startswith("hidden")))
    return cases


# how a child stopped by a segmentation fault or a bus error exits: killed by the signal (-11, -7),
# or, under bubblewrap, with 128 + the signal
_MEMORY_FAULTS = {-11, -7, 139, 135}


def _outside_hint(fn: str) -> str:
    """What a load or store outside the tensors most likely was, for the exercise function `fn`."""
    if (fn or "").startswith("cross_entropy"):
        return (", such as a target equal to ignore_index (-100) used as a column: mask that load "
                "(mask=t != ignore_index), or gather the target's logit with tl.where over the row")
    return ": every offset a kernel loads or stores must lie in its row, or be masked"


def cases_06(rng, hidden: bool):
    from . import reference as R

    items = []

    def lsm(rows, cols, lo, hi, name):
        hx = rng.uniform(lo, hi, size=(rows, cols)).astype(np.float32)
        hx[min(1, rows - 1)] = -np.inf  # fully masked: -inf everywhere
        ref = R.log_softmax(hx)
        items.append((name, "log_softmax", {f"l{len(items)}": hx}, [_arr(f"l{len(items)}", **{"as": "torch"})],
                      lambda got, ref=ref, hx=hx: _with_hint(mismatch(got, ref, log=True),
                                                             lambda: diagnose_log_softmax(got, hx))))

    lsm(5, 77, -30, 30, "log_softmax, 5 x 77, row 1 fully masked (-inf everywhere)")
    lsm(3, 1000, 60, 100, "log_softmax of logits 60-100 (exp overflows fp32 without the max)")
    lsm(3, 3, -300, -200, "log_softmax of logits below -200 (log(0) without the max)")
    # any number subtracted before exp is exact in arithmetic; only the max keeps every exp in range. A
    # reference other than the max (the first logit, the mean) overflows where the row's first logit lies
    # 150 below its max, a lead the other cases leave to chance
    hx = rng.uniform(-20, 20, size=(4, 70)).astype(np.float32)
    hx[:, 0] -= 150
    items.append(("log_softmax, 4 x 70, each row's first logit 150 below the rest", "log_softmax", {"lf": hx},
                  [_arr("lf", **{"as": "torch"})],
                  lambda got, ref=R.log_softmax(hx.astype(np.float64)), hx=hx: _with_hint(
                      mismatch(got, ref, log=True), lambda: diagnose_log_softmax(got, hx))))
    # a row spread over 300: exp(x - m) underflows to 0 where x - m < -104, where log_softmax is
    # still finite; and a padding row of the lowest finite float32, which is uniform (-log cols), not
    # a masked row (a guard that takes "very negative" for -inf turns it into one)
    hx = rng.uniform(-250, 50, size=(3, 60)).astype(np.float32)
    hx[1] = -np.inf
    hx[2] = np.finfo(np.float32).min
    ref = R.log_softmax(hx.astype(np.float64))
    items.append(("log_softmax, 3 x 60, logits over [-250, 50] (exp(x - m) underflows), row 1 masked, row 2 all "
                  "the lowest finite float32 (uniform)", "log_softmax", {"lw": hx}, [_arr("lw", **{"as": "torch"})],
                  lambda got, ref=ref, hx=hx: _with_hint(mismatch(got, ref, log=True),
                                                         lambda: diagnose_log_softmax(got, hx))))
    hx = rng.uniform(-30, 30, size=(5, 90)).astype(np.float32)
    hx[2, 17] = np.nan                                   # a NaN logit: its row is NaN (docs/contract.md)
    hx[3] = -np.inf
    hx[3, 40] = np.nan   # the row's only other value: a max that drops NaN (tl.max on a GPU) says -inf
    hx[4, 50] = np.inf   # +inf: NaN too (inf - inf), as torch.log_softmax
    ref = R.log_softmax(hx)
    items.append(("log_softmax, 5 x 90, rows 2 and 3 hold a NaN, row 3 beside -inf alone, row 4 a +inf (all three "
                  "must come out NaN)",
                  "log_softmax", {"ln": hx},
                  [_arr("ln", **{"as": "torch"})],
                  lambda got, ref=ref, hx=hx: _with_hint(mismatch(got, ref, log=True),
                                                         lambda: diagnose_nan_under_mask(got, hx)
                                                         or diagnose_inf_seen(got, hx)
                                                         or diagnose_log_softmax(got, hx))))

    def ce(rows, vocab, name, big=None, ignore=(), masked_ignored=False, what="both", low=False, ignore_index=-100,
           nan_rows=(), dtype="float32", certain=None, largest=False):
        hx = (rng.uniform(-30, -20, size=(rows, vocab)) if low else rng.normal(0, 8, size=(rows, vocab))).astype(np.float32)
        t = rng.integers(0, vocab, size=rows)
        t[0], t[-1] = 0, vocab - 1          # targets at both ends of the vocabulary
        if largest:  # float32's whole range: where lse - x_t and exp(x - lse) lose log s
            top = np.finfo(np.float32).max
            hx[0, :8], t[0] = top, 3
            hx[1], hx[2] = top / 2, -top / 2
            hx[3] = rng.uniform(-top / 4, top / 4, size=vocab)
            hx[4, 0], t[4] = top, 0
        if certain is not None:  # this row's target nearly certain: 1 - p_t about 1e-3, which float32 forms
            others = np.delete(hx[certain].astype(np.float64), t[certain])  # to 1e-4 of itself, bf16 not at all
            hx[certain, t[certain]] = np.logaddexp.reduce(others) + np.log(1e3)
        if dtype == "bfloat16":  # values the logits' dtype holds: the reference sees what the kernel reads
            from .contract import round_to

            hx = round_to(hx, "bfloat16").astype(np.float32)
        if big:
            hx[min(3, rows - 1), 7] = big
            if t[min(3, rows - 1)] == 7:  # the big logit must not be the target: its row's p[t] is then tiny
                t[min(3, rows - 1)] = 8 % vocab
        t[t == ignore_index] = (ignore_index + 1) % vocab   # only the rows below are ignored
        for r in ignore:
            t[r] = ignore_index
        if masked_ignored:  # a padding row: every logit -inf, target ignored (must give 0, not NaN)
            hx[ignore[0]] = -np.inf
        for r in nan_rows:  # a NaN logit: NaN loss and gradient for its row, 0 and 0 where the row is ignored
            hx[r, (t[r] + 1) % vocab] = np.nan
        # the NaN a non-ignored row reads; an ignored row's NaN is never read into its loss or gradient
        nan_seen = np.where((t != ignore_index)[:, None], hx, 0.0)
        ref_loss, ref_grad = ce_reference(hx, t, ignore_index)
        k = len(items)
        args = [_arr(f"c{k}", **{"as": "torch", **({} if dtype == "float32" else {"dtype": dtype})}),
                _arr(f"t{k}", **{"as": "torch"})]
        if ignore_index != -100:
            args.append({"kw": {"ignore_index": ignore_index}})
        # the loss is float32 whatever the logits' dtype; the gradient has the logits' dtype
        loss_args = args + ([{"expect_dtype": "float32"}] if dtype != "float32" else [])
        grad_args = args + ([{"expect_dtype": dtype}] if dtype != "float32" else [])
        def ignored_only(got, ref, diagnose, t=t, hx=hx):
            """The ignore_index mistake where only the ignored rows are wrong; else `diagnose`."""
            got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
            with np.errstate(invalid="ignore"):
                wrong = ~np.isclose(got, ref, rtol=1e-4, atol=1e-5).reshape(len(t), -1).all(axis=1)
            if ignore_index != -100 and wrong.any() and np.all(t[wrong] == ignore_index):
                return (f"row {int(np.flatnonzero(wrong)[0])}'s target is ignore_index ({ignore_index} here, the "
                        "kernel's argument) and must give loss 0 and gradient 0: compare the target with "
                        "ignore_index, not with -100 or its sign")
            return diagnose()
        if what in ("both", "loss"):
            items.append((f"{name}: the loss", "cross_entropy", {f"c{k}": hx, f"t{k}": t}, loss_args,
                          lambda got, ref=ref_loss, t=t, hx=hx, hint=ignored_only: _with_hint(
                              # one loss per row, judged as a column so that a mismatch names its row
                              mismatch(np.asarray(got).reshape(-1, 1), ref[:, None], log=True),
                              lambda: hint(got, ref, lambda: diagnose_nan_under_mask(got, nan_seen)
                                           or diagnose_ce_loss(got, hx, t)))))
        if what in ("both", "grad"):
            items.append((f"{name}: the gradient", "cross_entropy_grad", {f"c{k}": hx, f"t{k}": t}, grad_args,
                          lambda got, ref=ref_grad, t=t, hx=hx, hint=ignored_only: _with_hint(
                              ce_grad_mismatch(got, ref, dtype), lambda: diagnose_target_rounded(got, ref, t, dtype)
                              or hint(got, ref, lambda: diagnose_nan_under_mask(
                                  got, nan_seen) or diagnose_ce_grad(got, hx, t)))))

    ce(16, 1000, "16 x 1000, targets at both ends, one logit of 95", big=95.0)
    ce(6, 77, "6 x 77 (not a power of two), rows 2 and 4 ignored (target -100)", ignore=(2, 4))
    ce(4, 50, "4 x 50, row 1 is padding (every logit -inf, target ignored)", ignore=(1,), masked_ignored=True)
    ce(3, 50, "3 x 50, every logit below -20 (the lanes past the tail must not count)", low=True)
    # a padding token's id as ignore_index, as a tokenizer's may be: a valid column, and not negative
    ce(6, 40, "6 x 40, ignore_index 3 (the kernel's argument: a padding token's id), rows 1 and 4 ignored",
       ignore=(1, 4), ignore_index=3)
    ce(8, 300, "8 x 300, row 3 holds a logit of 150 (its target's probability underflows float32)", big=150.0,
       what="loss")
    ce(6, 64, "6 x 64, logits up to float32's largest (3.4e38): 8 logits at the largest, the target among them "
              "(loss log 8), a row of equal logits at 1.7e38 (loss log 64)", largest=True)
    ce(6, 60, "6 x 60, NaN logits in rows 2 and 4, row 4 ignored (row 2 must come out NaN, row 4 as 0)", ignore=(4,),
       nan_rows=(2, 4))
    # bf16 logits: a float32 loss and a bf16 gradient, each formed in float32 and rounded once
    ce(7, 300, "bf16 logits, 7 x 300, row 3 ignored, row 1's target nearly certain (1 - p_t about 1e-3: p_t - 1 "
               "must be formed in float32, then rounded)", ignore=(3,), dtype="bfloat16", certain=1)
    if hidden:
        ce(int(rng.integers(5, 20)), int(rng.integers(100, 3000)), "hidden, random shape, one row ignored", big=120.0,
           ignore=(2,))
        ce(int(rng.integers(6, 12)), int(rng.integers(16, 2000)), "hidden, logits up to float32's largest, random shape",
           largest=True)
        lsm(int(rng.integers(2, 9)), int(rng.integers(2, 2000)), -90, 90, "hidden log_softmax, random shape")
    return _calls_with_kwargs(items)


def cases_cuda(number: str, rng, hidden: bool):
    from . import reference as R

    cases = []
    if number == "01":
        shapes = [(3, 1, "100.0"), (5, 33, "100.0"), (70, 257, "100.0"), (4, 1024, "100.0"), (3, 3000, "100.0"),
                  (4, 300, "-300")]
        if hidden:
            shapes += [(int(rng.integers(2, 40)), int(rng.integers(2, 5000)), "100.0")]
        for k, (rows, cols, kind) in enumerate(shapes):
            if kind == "100.0":
                hx = rng.uniform(-4, 4, size=(rows, cols)).astype(np.float32)
                hx[0, cols // 2] = 100.0
                what = f"{rows} x {cols}, row 0 holds 100.0 (exp overflows without the max)"
            else:
                hx = rng.uniform(-310, -300, size=(rows, cols)).astype(np.float32)
                what = f"{rows} x {cols}, every score below -300 (exp underflows to 0 without the max)"
            ref = R.softmax(hx)
            cases.append(Case(("hidden " if k >= 6 else "") + what,
                              {"kernel": "safe_softmax", "grid": [min(rows, 1024)], "block": [BLOCK],
                               "args": [_arr(f"x{k}", **{"as": "cupy"}), {"out": [rows, cols]}, {"int32": rows},
                                        {"int32": cols}], "out_index": 1},
                              lambda got, ref=ref, hx=hx: _with_hint(
                                  mismatch(got, ref),
                                  lambda: diagnose_block_reduction(got, hx, BLOCK) or diagnose_exp_range(got, hx)),
                              {f"x{k}": hx}, hidden=k >= 6))
        return cases

    def masked_call(x, lens, rows, seq, causal, padded):
        """masked_softmax on the rows of array x, q_len = seq, lens as the valid lengths."""
        return {"kernel": "masked_softmax", "grid": [min(rows, 1024)], "block": [BLOCK],
                "args": [_arr(x, **{"as": "cupy"}), {"out": [rows, seq]}, {"int32": rows}, {"int32": seq},
                         {"int32": seq}, {"int32": int(causal)}, _arr(lens, **{"as": "cupy"}), {"int32": int(padded)}],
                "out_index": 1}

    seqs = [(1, True, True), (33, True, True), (257, True, True), (1024, True, True), (100, False, True),
            (64, True, False)]
    if hidden:
        seqs.append((int(rng.integers(2, 700)), True, True))
    for k, (seq, causal, padded) in enumerate(seqs):
        rows = min(3 * seq, 160)  # the first query rows of each shape: enough for every mask, quick on a CPU
        hx = rng.normal(0, 10, size=(rows, seq)).astype(np.float32)
        lens = rng.integers(1, seq + 1, size=rows).astype(np.int32)
        lens[min(1, rows - 1)] = 0                       # a fully-masked row
        lens[min(2, rows - 1)] = 1                       # a single valid key
        mask = (R.causal_mask(seq, seq)[np.arange(rows) % seq] if causal else 0.0) + \
            (R.padding_mask(lens, seq) if padded else 0.0)
        ref = R.scale_mask_softmax(hx, 1.0, mask)
        what = ("causal + padding" if causal and padded else "padding only" if padded else "causal only")
        name = f"{'hidden ' if k >= 6 else ''}{what}, {rows} x {seq}" + (", a fully-masked row gives zeros" if padded else "")
        cases.append(Case(name, masked_call(f"x{k}", f"n{k}", rows, seq, causal, padded),
                          lambda got, ref=ref, hx=hx, lens=lens, causal=causal, padded=padded, seq=seq: _with_hint(
                              mismatch(got, ref),
                              lambda: diagnose_mask_variant(got, hx, np.arange(len(hx)) % seq, lens, causal, padded)
                              or diagnose_mask(got, ref, hx)),
                          {f"x{k}": hx, f"n{k}": lens}, hidden=k >= 6))
    # NaN scores (docs/contract.md): a mask from indices replaces what a masked position holds, so a
    # NaN there (padding memory may hold anything) changes nothing; a NaN a row sees makes it NaN.
    # Rows past the first q_len, a fully-masked row holding NaN, and NaN both above the diagonal and
    # in the padding.
    seq, rows = 33, 99
    hx = rng.normal(0, 10, size=(rows, seq)).astype(np.float32)
    lens = rng.integers(1, seq + 1, size=rows).astype(np.int32)
    lens[1] = 0
    lens[[4, 40]] = seq
    visible = (np.arange(seq)[None, :] <= (np.arange(rows) % seq)[:, None]) & (np.arange(seq)[None, :] < lens[:, None])
    for r in range(1, rows, 3):   # a NaN under the mask wherever the row has a masked key
        hidden_cols = np.flatnonzero(~visible[r])
        if hidden_cols.size:
            hx[r, hidden_cols[rng.integers(hidden_cols.size)]] = np.nan
    hx[4, 2] = hx[40, 7] = np.nan   # seen: row 4 is query 4, row 40 query 7, every key valid
    ref = R.softmax(np.where(visible, hx, -np.inf))
    cases.append(Case(f"causal + padding, {rows} x {seq}, NaN scores: a row that sees one is NaN, one under the mask "
                      "is ignored",
                      masked_call("xnan", "nnan", rows, seq, True, True),
                      lambda got, ref=ref, hx=hx, lens=lens, visible=visible: _with_hint(
                          mismatch(got, ref),
                          lambda: diagnose_nan_under_mask(got, hx, visible)
                          or diagnose_mask_variant(got, hx, np.arange(rows) % seq, lens, True, True)
                          or diagnose_mask(got, ref, hx)),
                      {"xnan": hx, "nnan": lens}))
    # The guard's own mistakes: only a max of exactly -inf marks a row with nothing visible. Rows of
    # the lowest finite float32 (all valid, then 7 valid) are uniform; a visible +inf makes its row
    # NaN (inf - inf, as torch.softmax), one in the padding changes nothing; a fully-masked row
    # holding +inf stays zeros.
    seq = 40
    hx = rng.normal(0, 10, size=(6, seq)).astype(np.float32)
    hx[[0, 1]] = np.finfo(np.float32).min
    hx[2, 3] = hx[3, 30] = hx[4, 5] = np.inf
    lens = np.array([seq, 7, seq, 10, 0, seq], np.int32)
    visible = np.arange(seq)[None, :] < lens[:, None]
    ref = R.softmax(np.where(visible, hx.astype(np.float64), -np.inf))

    def guard_hint(got):
        got = np.asarray(got)
        if got.shape != ref.shape:
            return None
        if not got[:2].any():
            return ("rows 0 and 1 came out zeros, as fully-masked rows would, but every score they see is finite "
                    f"(the lowest finite float32, {hx[0, 0]:.3g}): {FINITE_IS_NOT_MASKED}; or the outputs subtract "
                    "something other than the row's max (exp of these scores alone underflows to 0)")
        return diagnose_inf_seen(got, hx, visible)
    cases.append(Case(f"padding only, 6 x {seq}: rows of the lowest finite float32 (uniform), +inf seen (a NaN row) "
                      "and in the padding (ignored), a fully-masked row holding +inf (zeros)",
                      masked_call("xg", "ng", 6, seq, False, True),
                      lambda got: _with_hint(mismatch(got, ref), lambda: guard_hint(got) or diagnose_mask(got, ref, hx)),
                      {"xg": hx, "ng": lens}))
    return cases


def _with_hint(problem, hint):
    """A mismatch, with the mistake it looks like where one is recognised."""
    if problem is None:
        return None
    words = hint()
    return f"{words} ({problem})" if words else problem


def _attention_rows(q, k, v, q_start, causal, n_keys, *, mistake=None, tile=None):
    """float64 attention of query rows q (rows q_start, ...) against k, v; with `mistake` (one of
    reference.ATTENTION_MISTAKES) and a tile, the tiled loop making it, to recognise it in an answer."""
    from . import reference as R

    rows = q_start + np.arange(q.shape[0])
    cols = np.arange(k.shape[0])
    keep = (cols[None, :] < n_keys) & ((cols[None, :] <= rows[:, None]) if causal else True)
    keep = np.broadcast_to(keep, (q.shape[0], k.shape[0]))
    s = np.where(keep, q @ k.T / np.sqrt(q.shape[1]), -np.inf)
    if mistake is not None:  # the tiles the exercise's loop visits: keys [0, end)
        end = min(n_keys, q_start + q.shape[0]) if causal else n_keys
        def tiled(row):
            try:
                return R.attention_row_tiled(row[:end], v[:end], tile, mistake=mistake)
            except OverflowError:   # the mistake's factor overflowed (math.exp): NumPy's loop would give inf
                return np.full(v.shape[1], np.inf)
        return np.stack([tiled(row) for row in s])
    out = np.zeros((q.shape[0], v.shape[1]))
    live = keep.any(axis=1)
    if live.any():
        out[live] = R.softmax(s[live], axis=1) @ v
    return out


# Two mistakes in the max that the per-row signatures (reference.attention_row_tiled) cannot make:
# each is exact in arithmetic for any shift, and shows only where exp under- or overflows.
BLOCK_MAX_MISTAKES = {
    "one max for the block": (
        "one max was taken over the whole block (s.max()) where each row needs its own (s.max(axis=1)); "
        "a row whose scores lie far below that max sees every exp underflow to 0"),
    "the first tile's max kept": (
        "the max was set by the first tile that shows a key and never raised after: a later tile's score far above "
        "it overflows exp(s - m) to inf (inf / inf is NaN); the new max is max(m, the tile's max) on every tile"),
}


def _attention_loop(q, k, v, q_start, causal, n_keys, tile, mistake):
    """The tiled loop over a block of rows making `mistake` (a key of BLOCK_MAX_MISTAKES) on purpose:
    its output, to recognise the mistake in an answer."""
    rows = q_start + np.arange(q.shape[0])
    end = min(n_keys, q_start + q.shape[0]) if causal else n_keys
    m, l, o = np.full(q.shape[0], -np.inf), np.zeros(q.shape[0]), np.zeros((q.shape[0], v.shape[1]))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for start in range(0, end, tile):
            cols = np.arange(start, min(start + tile, end))
            keep = (cols[None, :] < n_keys) & ((cols[None, :] <= rows[:, None]) if causal else True)
            s = np.where(keep, q @ k[cols].T / np.sqrt(q.shape[1]), -np.inf)
            if mistake == "one max for the block":
                m_new = np.maximum(m, s.max())
            else:
                m_new = np.where(np.isneginf(m), s.max(axis=1), m)
            ref = np.where(np.isneginf(m_new), 0.0, m_new)
            a = np.exp(m - ref)
            p = np.exp(s - ref[:, None])
            l, o, m = l * a + p.sum(axis=1), o * a[:, None] + p @ v[cols], m_new
        return o / np.where(l == 0, 1.0, l)[:, None]


def cases_07(rng, hidden: bool):
    cases = []
    ends = [((0, 16, 100), "the first block of queries"), ((32, 48, 100), "a block in the middle"),
            ((32, 48, 40), "a block past the last valid key (key padding)"), ((0, 16, 0), "no valid key at all")]
    if hidden:
        a = int(rng.integers(1, 50)) * 16
        ends.append(((a, a + 16, int(rng.integers(0, a + 40))), "hidden random block"))
    for i, ((q0, q1, n), what) in enumerate(ends):
        def judge(got, q0=q0, q1=q1, n=n):
            from .inline import causal_key_end_mistake

            return causal_key_end_mistake(int(np.asarray(got).reshape(-1)[0]), q0, q1, n)
        cases.append(Case(f"causal_key_end: {what} (q {q0}..{q1}, {n} keys)",
                          {"fn": "causal_key_end", "args": [q0, q1, n]}, judge, hidden=what.startswith("hidden")))
    blocks = [("causal, a middle block of 16 rows, tiles of 16", 48, 16, 8, 16, True, 48, 16, False),
              ("causal, scores rising from tile to tile (the max moves every tile)", 64, 16, 8, 48, True, 64, 16, True),
              ("not causal, 37 keys in tiles of 16 (a short last tile)", 37, 12, 8, 0, False, 37, 16, False),
              ("key padding: 5 valid keys of 40", 40, 16, 8, 16, True, 5, 8, False),
              ("causal, the first block: query 0 sees key 0 only", 40, 16, 8, 0, True, 40, 8, False),
              ("key padding: one valid key", 40, 16, 8, 16, True, 1, 16, False),
              ("causal, key 5 scoring 700 and every other key near -100 (the running max must not fall)",
               64, 16, 8, 48, True, 64, 16, "falling"),
              ("not causal, a first tile whose scores are all -inf (as an additive mask makes them)",
               40, 16, 8, 0, False, 40, 8, "hidden first"),
              ("causal, the middle block again, keys past its end finite (any NaN is the update's)",
               48, 16, 8, 16, True, 48, 16, "clean"),
              ("key padding: 5 valid keys, every score about -1e34 (finite, so not masked: each row averages "
               "their values)", 40, 16, 8, 0, False, 5, 8, "very negative"),
              ("causal, every other row's scores about 900 below its neighbours' (each row has its own max)",
               48, 16, 8, 16, True, 48, 16, "rows apart"),
              ("causal, keys 24 and 56 scoring 400 and 800 over keys near 0 in odd rows, half that in even ones "
               "(the max rises on later tiles)",
               64, 16, 8, 48, True, 64, 16, "rising late")]
    if hidden:
        s_len = int(rng.integers(20, 200))
        blocks.append(("hidden random block", s_len, 16, 16, int(rng.integers(0, s_len // 16)) * 16, True,
                       int(rng.integers(0, s_len + 1)), int(rng.choice([8, 16, 32])), False))
    for i, (what, s_len, m_rows, d, q0, causal, n, tile, rising) in enumerate(blocks):
        k = rng.normal(size=(s_len, d))
        v = rng.normal(size=(s_len, d))
        q = rng.normal(size=(m_rows, d))
        if rising == "falling":  # the max is set in the first tile; every later tile's lies 800 below it
            q = 1.0 + 0.01 * q
            k = (-100.0 + 0.1 * k) * np.sqrt(d) / d
            k[5] = 700.0 * np.sqrt(d) / d
        elif rising == "hidden first":  # every row's first tile of scores is -inf: q > 0, those keys -inf
            q = np.abs(q) + 0.1
            k[:tile] = -np.inf
        elif rising is True:
            k = q.mean(axis=0)[None, :] * np.linspace(0, 4, s_len)[:, None] + 0.01 * k
        elif rising == "very negative":  # equal keys: every row's scores equal, finite and far below -1e30
            q = np.abs(q) + 0.1
            k[:] = -1e34
        elif rising == "rising late":  # scores near 0, then a key at 400 in the second tile and one at 800 in
            q = 1.0 + 0.01 * q             # the last: only a max left behind by two rises overflows exp, and
            q[::2] *= 0.5                  # only in the odd rows (the even ones see half the scores)
            k = 0.1 * k * np.sqrt(d) / d
            k[24] = 400.0 * np.sqrt(d) / d
            k[56] = 800.0 * np.sqrt(d) / d
        elif rising == "rows apart":  # a column of k that is constant lifts or lowers a row by q[:, 0]
            k[:, 0] = np.sqrt(d)
            q[:, 0] = np.where(np.arange(m_rows) % 2 == 1, -900.0, 0.0)
        want = _attention_rows(q, k, v, q0, causal, n)
        loops = [(_attention_loop(q, k, v, q0, causal, n, tile, mistake), words)
                 for mistake, words in BLOCK_MAX_MISTAKES.items()]
        sigs = [(_attention_rows(q, k, v, q0, causal, n, mistake=mistake, tile=tile), words) for mistake, words in (
            ("o not rescaled", "o was not rescaled when the max moved: multiply o by exp(m_old - m_new), as l is"),
            ("l not rescaled", "l was not rescaled when the max moved: multiply it by exp(m_old - m_new)"),
            ("exp against the old max", "the tile's exponentials were taken against the old max: take them "
                                        "against m_new, after the max is updated"),
            ("neither rescaled", "neither l nor o was rescaled when the max moved (the factor came out as 1: "
                                 "was m updated before exp(m_old - m_new) was formed?)"),
            ("rescaled by the inverse", "l and o were multiplied by exp(m_new - m_old): the factor that brings "
                                        "them onto the new max is exp(m_old - m_new), at most 1"),
            ("max of the tile alone", "the running max fell to a later tile's smaller max, and exp(m_old - m_new) "
                                      "overflowed: the new max is max(m, the tile's max)"),
            ("m never updated", "m was never updated, so each tile threw away the tiles before it: "
                                "set m = m_new at the end of the update"),
            ("no -inf guard", "a tile in which a row sees no key yet (every score -inf) made exp(-inf - -inf) = "
                              "NaN: while m_new is -inf, measure the exponentials against 0 instead (the guard)"))]

        # Keys from the block's end on (padding, or above the causal diagonal) are never visited by the
        # tiled loop: they hold NaN here, as padding memory may. An answer that reads them (a whole
        # row of scores at once, tiles past causal_key_end) comes out NaN; the references above were
        # formed from the clean keys.
        # The "clean" twin of the first case keeps them finite, so that a NaN the update makes by itself
        # (inf * 0 from exp(m_new - m_old) on the first tile, -inf - -inf) is told apart from one read.
        end = min(n, q0 + m_rows) if causal else n
        k, v = k.copy(), v.copy()
        if rising != "clean":
            k[end:], v[end:] = np.nan, np.nan

        def judge(got, want=want, sigs=sigs, end=end, s_len=s_len, clean=rising == "clean",
                  very_negative=rising == "very negative", loops=loops):
            got = np.asarray(got, dtype=np.float64)
            if got.shape != want.shape:
                return f"output shape {got.shape}, expected {want.shape}"
            if np.isnan(got).any():
                r = int(np.argwhere(np.isnan(got))[0][0])
                # the mistake whose output the answer is, else one whose own NaN lands where the answer's does
                for sig, words in [*sigs, *loops]:
                    if np.allclose(got, sig, rtol=1e-6, atol=1e-9, equal_nan=True):
                        return f"{words} (row {r} came out NaN)"
                for sig, words in [*sigs, *loops]:
                    if np.isnan(sig).any() and np.array_equal(np.isnan(sig), np.isnan(got)):
                        return f"{words} (row {r} came out NaN)"
                if clean or end >= s_len:
                    return (f"row {r} came out NaN although no key or value your loop should read holds NaN: the update formed "
                            "inf * 0 or -inf - -inf. On a row's first visible tile m_old is -inf, so the factor "
                            "exp(m_old - m_new) must come out 0 (not exp(m_new - m_old) = inf), and while m_new is "
                            "still -inf the exponentials are measured against 0")
                return (f"row {r} came out NaN: keys {end}..{s_len - 1} lie past this block's end (key padding, or "
                        "above the causal diagonal) and hold NaN here, as padding memory may. The tiled loop never "
                        "reads them; yours did (scores for the whole row at once, or p @ v over keys the mask had "
                        "zeroed: 0 * NaN is NaN). If the case with those keys finite came out NaN too, the NaN is "
                        "your update's: see that case")
            dead = ~want.any(axis=1)
            if dead.any() and not np.all(got[dead] == 0):
                return ("a row that sees no key must be exactly zeros (got NaN or values): guard the -inf max "
                        "before forming exp(m - m_new), and divide by l only where l > 0")
            bad = mismatch(got, want, "float64")
            if bad is None:
                return None
            zeroed = ~dead & ~got.any(axis=1)
            for sig, words in loops:
                if np.allclose(got, sig, rtol=1e-6, atol=1e-9) and not np.allclose(sig, want, rtol=1e-6, atol=1e-9):
                    return f"{words} ({bad})"
            if zeroed.any() and very_negative:
                return (f"row {int(np.flatnonzero(zeroed)[0])} came out zeros, as a row that sees no key would, but "
                        f"it sees keys (their scores are finite, about -1e34): {FINITE_IS_NOT_MASKED} ({bad})")
            for sig, words in sigs:
                if np.allclose(got, sig, rtol=1e-6, atol=1e-9, equal_nan=True) and not np.allclose(sig, want,
                                                                                                 equal_nan=True):
                    return f"{words} ({bad})"
            return bad
        cases.append(Case(f"attention_block: {what}",
                          {"fn": "attention_block", "args": [_arr(f"q{i}"), _arr(f"k{i}"), _arr(f"v{i}"), q0, causal, n,
                                                             tile]},
                          judge, {f"q{i}": q, f"k{i}": k, f"v{i}": v}, hidden=what.startswith("hidden")))
    return cases


CASES = {"01": lambda r, h: cases_cuda("01", r, h), "02": lambda r, h: cases_cuda("02", r, h),
         "04": cases_04, "05": cases_05, "06": cases_06, "07": cases_07}


# ------------------------------------------------------------------------------------------------
# Running the child and judging what it returns
# ------------------------------------------------------------------------------------------------
def _todo_lines(text: str, marker: str):
    return [i + 1 for i, line in enumerate(text.splitlines()) if marker in line]


def _includes_allowed(text: str):
    """None, or the first #include that is not one of the course headers by its literal name (a
    solution file, a path, or a macro that expands to one)."""
    for line in text.splitlines():
        if not re.match(r"\s*#\s*include", line):
            continue
        m = re.match(r'\s*#\s*include\s*"([^"/\\]+)"\s*(//.*)?$', line)
        if not m or m.group(1) not in ALLOWED_INCLUDES:
            return re.sub(r"\s*#\s*include\s*", "", line).strip().strip('"<>') if m is None else m.group(1)
    return None


def _course_headers_into(folder: Path) -> None:
    """The only headers a drill may include (ALLOWED_INCLUDES), copied beside it."""
    for h in ALLOWED_INCLUDES:
        shutil.copy(ROOT / "common" / h, Path(folder) / h)


def _compile_checks(number: str, text: str, path: Path, hip: bool = True):
    """Parent-side (no learner code runs): NVRTC and (for a learner's own check) hipcc compiles of
    the drill. The grader skips hipcc: it scores nothing and is the slowest step of a submission."""
    results = []
    with tempfile.TemporaryDirectory(prefix="a07-compile-") as tmp:
        src = Path(tmp) / path.name
        src.write_text(text)
        _course_headers_into(tmp)
        # NVRTC runs in a process of its own: a learner's source that crashes or hangs the compiler
        # takes that process down, not the checker (or the grader's other submissions)
        probe = ("import json, sys\nfrom a07_softmax import native\n"
                 "try:\n    r = native.nvrtc_compile(sys.argv[1], 'sm_90')\n"
                 "    print(json.dumps({'ok': r.ok, 'log': r.log, 'kernels': [[k.name, k.registers, k.spill_stores] "
                 "for k in r.kernels]}))\n"
                 "except RuntimeError as e:\n    print(json.dumps({'missing': str(e)}))\n")
        p = subprocess.run([sys.executable, "-c", probe, str(src)], capture_output=True, text=True, timeout=300,
                           cwd=tmp)
        try:
            res = json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            res = {"ok": False, "log": (p.stderr or p.stdout)[-1500:], "kernels": []}
        if "missing" in res:
            results.append(Result("compiles for sm_90 (NVRTC)", SKIP, res["missing"], 0, 0))
        else:
            detail = res["log"][-1500:] if not res["ok"] else ", ".join(
                f"{name}: {regs} registers, {spill} B spilled" for name, regs, spill in res["kernels"])
            results.append(Result("compiles for sm_90 (NVRTC)", PASS if res["ok"] else ERROR, detail, 0, 0))
        hipcc = shutil.which("hipcc") if hip else None
        if hipcc:
            p = subprocess.run([hipcc, "-x", "hip", "-O2", "-std=c++17", f"-I{tmp}", "--offload-arch=gfx90a", "-c",
                                str(src), "-o", str(Path(tmp) / "k.o")], capture_output=True, text=True,
                               env=dict(os.environ, HIP_PLATFORM="amd"), timeout=300)
            results.append(Result("compiles for gfx90a (hipcc)", PASS if p.returncode == 0 else ERROR,
                                  p.stderr[-1500:] if p.returncode else "", 0, 0))
        elif hip:
            results.append(Result("compiles for gfx90a (hipcc)", SKIP, "hipcc not found (apt-get install hipcc)", 0, 0))
    return results


def _judge(cases, run, todo: bool, where_hint: str = ""):
    """Results of `cases` from the child's run: outputs read and judged here."""
    by_id = {r.get("id"): r for r in run.results}
    out = []
    failure_of_import = by_id.get("import") or by_id.get("compile")
    for i, case in enumerate(cases):
        cid = f"c{i}"
        rep = by_id.get(cid)
        if failure_of_import is not None:
            if failure_of_import.get("not_implemented"):
                out.append(Result(case.name, TODO, "raise NotImplementedError is still there", 0, case.points, case.hidden))
            else:
                out.append(Result(case.name, ERROR, f"{failure_of_import.get('error', '')} "
                                  f"({failure_of_import.get('where', '')})".strip(), 0, case.points, case.hidden))
            continue
        if rep is None:
            if run.timed_out and run.running == cid:
                detail = (f"stopped after {run.timeout:.0f} s inside {case.call.get('fn') or case.call.get('kernel')}(): "
                          "a loop that never ends, or a barrier not every thread reaches? (a07 check --timeout S)")
                out.append(Result(case.name, TIMEOUT, detail, 0, case.points, case.hidden))
            elif run.timed_out:
                out.append(Result(case.name, TIMEOUT, "not reached: an earlier check used up the time", 0,
                                  case.points, case.hidden))
            elif run.returncode in _MEMORY_FAULTS and case.call.get("launches"):
                fn = case.call.get("fn")
                out.append(Result(case.name, ERROR, (
                    f"{fn}() touched memory outside its tensors and stopped the process (a segmentation fault, exit "
                    f"{run.returncode}): the checker lays every tensor right after memory no kernel may read or "
                    f"write, so a load or store before a row's start fails here{_outside_hint(fn)}")
                    if run.running == cid else "not run: the process stopped on a segmentation fault at an earlier check",
                    0, case.points, case.hidden))
            else:
                tail = "\n".join(run.stderr.strip().splitlines()[-6:])
                out.append(Result(case.name, ERROR, f"the process running your code died (exit {run.returncode})"
                                  + (f" while in {case.call.get('fn') or case.call.get('kernel')}()" if run.running == cid else "")
                                  + (f": {tail}" if tail else ""), 0, case.points, case.hidden))
            continue
        if not rep.get("ok"):
            if rep.get("not_implemented") and todo:
                out.append(Result(case.name, TODO, "raise NotImplementedError is still there", 0, case.points, case.hidden))
            else:
                detail = f"{rep.get('error', '')} ({rep.get('where', '')})".replace(" ()", "")
                kernel = case.call.get("launches")
                if kernel and rep.get("error", "").startswith("TypeError") and kernel in rep.get("error", ""):
                    detail += (f": the checker launches {kernel} with the scaffold's arguments, as its wrapper "
                               "does; keep the kernel's signature")
                elif kernel and "illegal memory access" in rep.get("error", ""):
                    # on a GPU the same read past a tensor's start is CUDA's illegal address, which also
                    # leaves the device unusable for the checks after it
                    detail = ("the kernel read or wrote memory outside its tensors (CUDA: an illegal memory access; "
                              f"the checks after it fail with the same error){_outside_hint(case.call.get('fn'))}. "
                              f"{detail[:160]}")
                out.append(Result(case.name, FAIL, detail, 0, case.points, case.hidden))
            continue
        # the child's own clock, and the judge's (a submission can stop the clocks of its own process)
        clock = getattr(run, "judge_clock", {}).get(cid, (0, []))
        took = max(rep.get("seconds", 0) if isinstance(rep.get("seconds"), (int, float)) else 0, clock[0])
        if case.call.get("max_seconds"):
            twin = getattr(run, "twin_clock", {}).get(cid)
            limit = _time_limit(case, twin)
            if took > limit:
                beside = f"; trusted array operations took {twin:.2f} s beside it" if twin else ""
                out.append(Result(case.name, FAIL, f"took {took:.1f} s, over the {limit:.1f} s allowed{beside}: a "
                                  "Python loop over the elements?", 0, case.points, case.hidden))
                continue
        try:
            from . import sandbox

            # read as the judge reads anything the child wrote: no links followed, no FIFO waited on
            got = sandbox.load_output(run.box, f"outputs/{cid}.npy") if run.box else None
            if got is None:
                raise ValueError("reported a result but left no output file (outputs/ tampered with?)")
            if got.dtype.kind not in "fiub":
                raise ValueError(f"returned {got.dtype} values, not numbers")
            if case.call.get("expect_dtype") and rep.get("dtype") != case.call["expect_dtype"]:
                raise ValueError(f"output dtype {rep.get('dtype')}, expected {case.call['expect_dtype']}")
            gap = None
            if case.call.get("row_cols") and got.ndim == 2 and got.shape[1] > case.call["row_cols"]:
                got, gap = got[:, :case.call["row_cols"]], got[:, case.call["row_cols"]:]   # see trusted_launchers
            bad = case.judge(got)
            if gap is not None and not np.isnan(gap).all():
                r, c = np.argwhere(~np.isnan(gap))[0]
                bad = (f"the kernel wrote past the end of row {r}: column {case.call['row_cols'] + c} of a row of "
                       f"{case.call['row_cols']} (the lanes from n_cols to BLOCK must not be stored: mask= on the "
                       "tl.store; and a row starts at row * stride, which the checker makes larger than n_cols)"
                       + (f"; and {bad}" if bad else ""))
            if bad and case.call.get("launches") and got.size and np.isnan(got).all():
                bad = (f"every output is NaN, the value the checker filled it with before launching "
                       f"{case.call['launches']}: the kernel wrote nothing (the checker launches it itself, as the "
                       f"scaffold's wrapper does: the answer must be the kernel's tl.store), or it wrote NaN "
                       f"everywhere ({bad})")
            if not bad and any(o is None or o.shape != got.shape or not np.array_equal(o, got, equal_nan=True)
                               for o in clock[1]):
                fn = case.call.get("fn")
                bad = (f"{fn}() returned other values when the checker ran it again alone, to time it: it must "
                       "compute its answer the same way every time it is called")
        except Exception as e:  # an output the judge cannot read is a wrong answer, said so
            bad = f"could not read the returned value: {type(e).__name__}: {e}"
        if bad:
            out.append(Result(case.name, TODO if todo else FAIL,
                              bad + (f" (TODO still open at line {where_hint})" if todo and where_hint else ""),
                              0, case.points, case.hidden))
        else:
            out.append(Result(case.name, PASS, "", case.points, case.points, case.hidden))
    return out


def _cpu_arguments(case):
    """(kinds, values) of a drill case for cpu_target: the case's arguments in kernel order."""
    kinds, values = [], []
    for a in case.call["args"]:
        if "array" in a:
            arr = case.inputs[a["array"]]
            kinds.append(("in", "int32" if arr.dtype.kind == "i" else "float32"))
            values.append(arr)
        elif "out" in a:
            kinds.append(("out", None))
            values.append(a["out"])
        elif "int32" in a:
            kinds.append(("i32", None))
            values.append(a["int32"])
        else:
            kinds.append(("f32", None))
            values.append(a["float32"])
    return kinds, values


def _run_on_cpu(number: str, text: str, path: Path, cases, box: Path, timeout: float, hide, todo, progress=None):
    """No GPU: the drill compiled for the CPU target (cpu_target.h) here, in the parent, and run
    by the sandboxed child. Public cases with 32-lane warps; hidden ones with 64 (AMD's width)."""
    from . import cpu_target, sandbox

    if cpu_target.compiler() is None:
        why = ("no GPU and no C++ compiler here: the kernel compiled for sm_90 only; install g++ for the CPU "
               f"target, or run `a07 check {number}` on a GPU machine")
        return [Result(c.name, SKIP, why, 0, c.points, c.hidden) for c in cases]
    src = box / path.name
    src.write_text(text)
    kernel = cases[0].call["kernel"]
    results, exes = [], {}
    for warp in sorted({64 if c.hidden else 32 for c in cases}):
        sub = box / f"w{warp}"
        sub.mkdir()
        shutil.copy(src, sub / path.name)
        _course_headers_into(sub)
        kinds = _cpu_arguments(cases[0])[0]
        try:
            exes[warp] = cpu_target.build(sub / path.name, kernel, kinds, sub, warp=warp)
        except cpu_target.CpuTargetError as e:
            results.append(Result(f"compiles for the CPU target (warpSize {warp})", ERROR, str(e)[-1500:], 0, 0))
            return results + [Result(c.name, ERROR, "does not compile for the CPU target (above)", 0, c.points, c.hidden)
                              for c in cases]
    results.append(Result("runs on the CPU target (no GPU here: correctness only)", PASS,
                          "each block's threads run concurrently on the CPU; " + ", ".join(f"warpSize {w}" for w in exes), 0, 0))
    calls = []
    for i, case in enumerate(cases):
        kinds, values = _cpu_arguments(case)
        work = box / f"c{i}"
        work.mkdir()
        rows = next(v for (k, _), v in zip(kinds, values) if k == "i32")
        cmd, outs = cpu_target.argv(exes[64 if case.hidden else 32], max(1, min(int(rows), 3)), BLOCK, kinds, values, work)
        calls.append({"id": f"c{i}", "argv": cmd, "out": str(outs[0][1]), "shape": list(outs[0][2]),
                      "kernel": case.call["kernel"]})
    run = sandbox.run_child(box, {"kind": "cpu", "calls": calls}, timeout, gpu=False, hide=hide, on_progress=progress)
    run.box, run.timeout = box, timeout
    return results + _judge(cases, run, bool(todo), ", ".join(map(str, todo)))


# A timed call may take max_seconds, or this many times its trusted twin's time where that is more: a
# machine busy with other work slows the learner's call and the twin alike, and a right answer must
# not fail for it (CI's run of the solution once took 1.1 s against a 1 s limit). The clock is the
# backstop for loops the source check cannot see; a tight loop over Python floats (about 0.4 s over
# two million elements on a fast machine) is the source check's to catch.
TWIN_FACTOR = 10


def _twin_seconds(case) -> float | None:
    """The fastest of three runs of case.twin on the case's inputs, in this (the judge's) process."""
    if case.twin is None:
        return None
    arrays = [case.inputs[a["array"]] for a in case.call.get("args", []) if isinstance(a, dict) and "array" in a]
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        case.twin(*arrays)
        best = min(best, time.perf_counter() - start)
    return best


def _time_limit(case, twin: float | None) -> float:
    """The seconds a timed call may take, given its twin's seconds (None: no twin was timed)."""
    return max(case.call["max_seconds"], TWIN_FACTOR * twin if twin else 0.0)


def _judge_clock(case, module_name: str, text: str, timeout: float, hide):
    """(seconds, outputs) of a timed call on this process's clock: the call alone in a fresh child
    (twice), minus a trusted twin that does everything else such a run does (exercise_child's
    "baseline"). The child's own report of the time is not enough: code in that process can stop its
    clocks. `outputs` are what the two timed runs returned (None where a run left none): _judge
    holds them to the judged output, so a submission cannot answer the timed run differently."""
    from . import sandbox

    def run(kind: str):
        box = sandbox.new_box()
        try:
            (box / module_name).write_text(text)
            calls = _stage([case], box)
            seconds = sandbox.run_child(box, {"kind": kind, "module": module_name, "calls": calls}, timeout,
                                        gpu=False, hide=hide).seconds
            try:
                out = sandbox.load_output(box, "outputs/c0.npy")
            except (OSError, ValueError):
                out = None
            return seconds, out
        finally:
            sandbox.remove_box(box)
    timed = [run("python") for _ in range(2)]
    # the faster of two runs on each side: a cold start (caches, the first bwrap) only ever adds time
    baseline = min(run("baseline")[0] for _ in range(2))
    return max(0.0, min(s for s, _ in timed) - baseline), [out for _, out in timed]


def _stage(cases, box: Path):
    arrays, calls = {}, []
    for i, case in enumerate(cases):
        arrays.update(case.inputs)
        calls.append({"id": f"c{i}", **case.call})
    (box / "inputs").mkdir(exist_ok=True)
    for name, arr in arrays.items():  # one .npy per input (plain files: nothing to unpack in the child)
        np.save(box / "inputs" / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    return calls


# exercise -> the @triton.jit kernels it asks for, each with the parameters the checker launches it
# with. The checker launches them itself (exercise_child.trusted_launchers: the scaffold's launch), so
# each must be a kernel the file defines, not rebound to anything else, taking the leading parameters
# by position (a learner may rename them) and the constexprs after them by name.
class KernelSignature(NamedTuple):
    positional: tuple
    by_name: tuple


TRITON_KERNELS = {
    "05": {"scale_mask_softmax_kernel": KernelSignature(
        ("out_ptr", "in_ptr", "n_cols", "stride", "scale", "q_len"), ("CAUSAL", "BLOCK"))},
    "06": {"log_softmax_kernel": KernelSignature(("out_ptr", "in_ptr", "n_cols", "stride"), ("BLOCK",)),
           "cross_entropy_kernel": KernelSignature(
               ("loss_ptr", "grad_ptr", "in_ptr", "target_ptr", "n_cols", "stride", "ignore_index"), ("BLOCK",))},
}


def _signature_problem(name: str, fn, want: KernelSignature) -> str | None:
    """What keeps the checker's launch from binding to this def (ast), or None. Judged here from the
    source, so the message is the same in the interpreter and on a GPU (whose launcher words a
    mismatch as "dynamic_func() got multiple values for argument ...")."""
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args]
    ok = (not a.vararg and not a.kwarg and not a.kwonlyargs and len(names) == len(want.positional) + len(want.by_name)
          and sorted(names[len(want.positional):]) == sorted(want.by_name))
    if ok:
        return None
    theirs = ", ".join(names + ([f"*{a.vararg.arg}"] if a.vararg else []) + [p.arg for p in a.kwonlyargs]
                       + ([f"**{a.kwarg.arg}"] if a.kwarg else []))
    return (f"{name} takes ({theirs}) here, the scaffold's ({', '.join(want.positional + want.by_name)}): the "
            f"checker launches it with the scaffold's arguments ({len(want.positional)} by position, then "
            f"{', '.join(want.by_name)} by name), as its wrapper does; keep the kernel's signature")


# Exercise 07's loop, judged from the source: the scaffold of attention_block (the tile loop, the
# scores and the mask of each tile, the final division) stays as it is, and the learner's update of
# (m, l, o) reads only the tile in hand. An answer that forms the whole row of scores at once, or
# slices the keys to the block's end itself, computes the same numbers and could not be told apart
# by its outputs.
_TILE_NAMES = {"q", "k", "end", "n_keys", "rows", "causal", "causal_key_end", "q_start", "tile"}
_TILE_FORBIDDEN = {"globals", "locals", "vars", "eval", "exec", "getattr", "setattr", "__import__", "sys", "inspect",
                   "compile", "open", "_getframe", "currentframe", "f_locals", "f_back", "f_globals"}


# a reduction over many elements inside online_scalar's loop: the prefix recomputed, not folded
# (not reduce or accumulate: functools.reduce and itertools.accumulate are how a fold is written)
_REDUCTIONS = {"sum", "fsum", "amax", "amin", "nanmax", "nanmin", "nansum", "logsumexp", "cumsum", "prod", "mean"}


def _online_scalar_problem(text: str) -> str | None:
    """Why exercise 04's online_scalar is not the online update (one element folded into (m, s) per
    step), judged from its source: inside its loop, a slice, or a max, min or sum over many elements,
    recomputes the prefix (the two-pass softmax, once per element). None when it folds, or when the
    file does not parse (the child names the syntax error) or the function is still the stub."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "online_scalar"), None)
    if fn is None or any(isinstance(n, ast.Raise) for n in fn.body):
        return None
    def literal(args):   # max([m, x]), np.sum((a, b)): a few terms written out, not a prefix
        return bool(args) and isinstance(args[0], (ast.List, ast.Tuple)) \
            and not any(isinstance(e, ast.Starred) for e in args[0].elts)
    why = ("each step must fold the one new element into (m, s): m_new = max(m, x), s rescaled by "
           "exp(m - m_new) plus exp(x - m_new); recomputing over the elements seen so far is the two-pass "
           "softmax once per element, not the online update")
    for loop in (n for n in ast.walk(fn) if isinstance(n, (ast.For, ast.While, ast.ListComp, ast.GeneratorExp))):
        for node in ast.walk(loop):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
                return f"online_scalar slices the row inside its loop (line {node.lineno}): {why}"
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if literal(node.args) or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call)
                                          and literal(f.value.args)):
                    continue
                many = name in ("max", "min") and len(node.args) == 1 and not node.keywords \
                    if isinstance(f, ast.Name) else name in ("max", "min") and not node.args
                if many or name in _REDUCTIONS or (isinstance(f, ast.Attribute) and name in ("max", "min")
                                                   and isinstance(f.value, ast.Name) and f.value.id in ("np", "numpy")):
                    return f"online_scalar takes a {name} over many elements inside its loop (line {node.lineno}): {why}"
    return None


# calls that run a Python function once per element when handed one (np.vectorize and np.frompyfunc
# whatever they are handed): a loop over the elements written as a call
_PER_ELEMENT_CALLS = {"vectorize", "frompyfunc", "map", "filter", "reduce", "accumulate", "starmap",
                      "apply_along_axis", "fromfunction"}
# names through which code runs that the source does not show
_UNREADABLE = {"exec", "eval", "compile", "globals", "locals", "vars", "__import__", "importlib", "getattr",
               "setattr", "__dict__", "_getframe", "modules"}
# a loop over the levels of a scan (log2 of the length of them) is not a loop over the elements
_LEVEL_CALLS = {"log", "log2", "log10", "bit_length", "frexp"}


def _online_vectorized_problem(text: str) -> str | None:
    """Why exercise 04's online_vectorized is not array operations, judged from its source (the clock
    alone cannot tell: a tight Python loop over two million floats runs in about 0.4 s on a fast
    machine, the solution in 0.1). Read: online_vectorized and every function, class or module-level
    name it reaches (calling online_scalar is looping). Found: a while loop (unless it doubles or
    halves its counter: the levels of a scan), a for loop or comprehension over anything but a
    literal tuple or list, a short range(constant) or the levels of a scan (a log2 in its bound), a
    Python function handed to np.vectorize, np.frompyfunc, map, functools.reduce,
    itertools.accumulate and the like (one Python call per element), and exec, eval, globals(),
    getattr and the like (code the source does not show). None when the function is array
    operations, is still the stub, or the file does not parse (the child names the syntax error)."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "online_vectorized"), None)
    if fn is None or any(isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n) for n in fn.body):
        return None
    bound = {}   # module-level name -> the nodes that bind it
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.setdefault(node.name, []).append(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for name in (n.id for n in ast.walk(t) if isinstance(n, ast.Name)):
                    bound.setdefault(name, []).append(node)
    via = {id(fn): "online_vectorized"}
    todo, reached = [fn], []
    while todo:
        node = todo.pop()
        reached.append(node)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                for b in bound.get(n.id, []):
                    if id(b) not in via:
                        via[id(b)] = f"{via[id(node)]} -> {n.id}"
                        todo.append(b)
    functions = {n.name for r in reached for n in ast.walk(r) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    functions |= {t.id for r in reached for n in ast.walk(r) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Lambda)
                  for t in n.targets if isinstance(t, ast.Name)}
    functions |= {name for name, nodes in bound.items() if any(isinstance(b, (ast.FunctionDef, ast.ClassDef)) for b in nodes)}

    def few(it):   # a literal handful, range(small constant), or range over the levels of a scan
        if isinstance(it, (ast.Tuple, ast.List, ast.Set)):
            return not any(isinstance(e, ast.Starred) for e in it.elts)
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args):
            return False
        if all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in it.args):
            return max(a.value for a in it.args) <= 64
        return any(isinstance(c, ast.Call) and _called(c) in _LEVEL_CALLS for a in it.args for c in ast.walk(a))

    def doubles(loop):   # the loop's own counter multiplied, shifted or halved: the levels of a scan
        tested = {n.id for n in ast.walk(loop.test) if isinstance(n, ast.Name)}
        return any(isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and n.target.id in tested
                   and isinstance(n.op, (ast.Mult, ast.LShift, ast.RShift, ast.FloorDiv, ast.Pow))
                   and not (isinstance(n.value, ast.Constant) and n.value.value in (0, 1)) for n in ast.walk(loop))

    def where(node, r):
        path = via[id(r)]
        return f"line {node.lineno}" + ("" if path == "online_vectorized" else f", reached as {path}")

    ask = ("the exercise asks for array operations over the whole row, such as np.maximum.accumulate for m and "
           "np.logaddexp.accumulate for log s, with no Python loop over the elements")
    problems = []
    for r in reached:
        for n in ast.walk(r):
            if isinstance(n, ast.While) and not doubles(n):
                problems.append((n.lineno, f"online_vectorized runs a Python while loop ({where(n, r)}): {ask}"))
            elif isinstance(n, (ast.For, ast.AsyncFor)) and not few(n.iter):
                problems.append((n.lineno, f"online_vectorized runs a Python for loop over "
                                 f"`{ast.unparse(n.iter)[:60]}` ({where(n, r)}): {ask}"))
            elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) \
                    and not all(few(g.iter) for g in n.generators):
                problems.append((n.lineno, f"online_vectorized loops in a comprehension over "
                                 f"`{ast.unparse(n.generators[0].iter)[:60]}` ({where(n, r)}): {ask}"))
            elif isinstance(n, ast.Call) and _called(n) in _PER_ELEMENT_CALLS and (
                    _called(n) in ("vectorize", "frompyfunc") or any(
                        isinstance(a, ast.Lambda) or (isinstance(a, ast.Name) and a.id in functions)
                        for a in [*n.args, *(k.value for k in n.keywords)])):
                problems.append((n.lineno, f"online_vectorized hands a Python function to {_called(n)}() "
                                 f"({where(n, r)}), which calls it once per element: a loop over the elements "
                                 f"written as a call; {ask}"))
            elif (isinstance(n, ast.Name) and n.id in _UNREADABLE) or (isinstance(n, ast.Attribute)
                                                                         and n.attr in _UNREADABLE):
                problems.append((n.lineno, f"online_vectorized reaches {n.id if isinstance(n, ast.Name) else n.attr} "
                                 f"({where(n, r)}), which runs code its source does not show: the checker reads "
                                 f"the source to see that there is no loop over the elements; {ask}"))
    return min(problems)[1] if problems else None


def _called(call) -> str | None:
    """The name a call is made through: f(...) -> "f", np.lib.f(...) -> "f"."""
    import ast

    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _tile_loop_parts(text: str):
    """(statements before the loop, the loop's header, its first `n` statements, the rest of its body,
    statements after it) of attention_block, as ast nodes; None where there is no such loop."""
    import ast

    tree = ast.parse(text)
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "attention_block"), None)
    if fn is None:
        return None
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)
                                       and isinstance(s.value.value, str))]  # the docstring
    loops = [i for i, s in enumerate(body) if isinstance(s, ast.For)]
    if len(loops) != 1:
        return None
    i = loops[0]
    return body[:i], body[i], body[i + 1:]


def _tile_loop_problem(text: str) -> str | None:
    """Why exercise 07's attention_block is not the scaffold's tile loop with an update that reads only
    its tile; None when it is (or while the update is still the stub)."""
    import ast

    keep = ("keep the scaffold of attention_block as it is (the tile loop, each tile's scores and mask, the "
            "final division) and write only the update of (m, l, o) at the end of the loop body")
    try:
        got = _tile_loop_parts(text)
        want = _tile_loop_parts((ROOT / "exercises" / EXERCISES["07"]).read_text())
    except SyntaxError:
        return None  # the child reports it, with its line
    if want is None:
        raise RuntimeError("exercise 07's scaffold has no single tile loop in attention_block")
    if got is None:
        return f"attention_block has no single loop over the key tiles: {keep}"
    (pre, loop, post), (w_pre, w_loop, w_post) = got, want
    given = w_loop.body[:-1]  # the scaffold's statements; its last one is the stub
    dump = ast.dump
    same = (len(pre) == len(w_pre) and all(dump(a) == dump(b) for a, b in zip(pre, w_pre))
            and len(post) == len(w_post) and all(dump(a) == dump(b) for a, b in zip(post, w_post))
            and dump(loop.target) == dump(w_loop.target) and dump(loop.iter) == dump(w_loop.iter)
            and not loop.orelse and len(loop.body) >= len(given)
            and all(dump(a) == dump(b) for a, b in zip(loop.body, given)))
    if not same:
        return keep
    update = loop.body[len(given):]
    if len(update) == 1 and isinstance(update[0], ast.Raise):
        return None  # still the stub: not implemented yet
    # the module's own functions that the update calls (and those they call) are part of the update:
    # none of them may reach outside its arguments (a frame's locals hold the whole of k)
    module = {n.name: n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
    seen, todo = set(), [s for s in update]
    while todo:
        for node in ast.walk(todo.pop()):
            if isinstance(node, ast.Name) and node.id in module and node.id not in seen:
                seen.add(node.id)
                todo.append(module[node.id])
    for helper in seen:
        for node in ast.walk(module[helper]):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if isinstance(node, (ast.Global, ast.Nonlocal)) or name in _TILE_FORBIDDEN:
                return f"{helper}(), called by the update, uses {name or 'global'}: the update is arithmetic on the tile"
    parents = {id(c): n for s in update for n in ast.walk(s) for c in ast.iter_child_nodes(n)}
    for s in update:
        for node in ast.walk(s):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if isinstance(node, (ast.Global, ast.Nonlocal)) or name in _TILE_FORBIDDEN:
                return f"the update of a tile is arithmetic on the tile (it uses {name or 'global'}): {keep}"
            if name in _TILE_NAMES:
                return (f"the update of a tile reads `{name}` (line {node.lineno}): it must use only this tile, its "
                        "scores s and values v[cols], and the running (m, l, o); walking the keys is the loop's job")
            if name == "v":
                up = parents.get(id(node))
                if not (isinstance(up, ast.Subscript) and up.value is node and isinstance(up.slice, ast.Name)
                        and up.slice.id == "cols"):
                    return (f"the update reads v other than as v[cols] (line {node.lineno}): a tile's values are "
                            "v[cols], the keys of this tile only")
    carried = _carried_state(update, fn_args=_tile_fn_args(text), outside=pre + [loop.target] + given)
    if carried:
        name, line = carried
        return (f"the update carries `{name}` from one tile to the next (line {line}: read before this tile "
                "assigns it): the only state between tiles is (m, l, o); a tile's scores and values are used "
                "and forgotten, which is what keeps the memory of a row O(1) instead of O(keys)")
    return None


_CARRIED_STATE = {"m", "l", "o"}


def _bound_names(node):
    """Names a statement binds (assignments, loop targets, :=), not those of its comprehensions."""
    import ast

    out, todo = set(), [node]
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        todo.extend(ast.iter_child_nodes(n))
    return out


def _read_names(node):
    import ast

    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    names |= {n.target.id for n in ast.walk(node) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    return names


def _tile_fn_args(text: str):
    import ast

    fn = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "attention_block")
    return {a.arg for a in fn.args.args}


def _carried_state(update, fn_args, outside):
    """(name, line) of the first name the update binds that it reads before this tile has bound it
    on every path (so a value from an earlier tile, or a container filled tile by tile), other than
    m, l and o; None if there is none."""
    import ast

    known = set(fn_args) | {n for s in outside for n in _bound_names(s)}
    local = {n for s in update for n in _bound_names(s)} - known - _CARRIED_STATE

    def scan(stmts, bound):
        """(problem, the names bound on every path through stmts)"""
        bound = set(bound)
        for stmt in stmts:
            if isinstance(stmt, ast.If):
                early = (_read_names(stmt.test) & local) - bound
                if early:
                    return (sorted(early)[0], stmt.lineno), bound
                (p1, b1), (p2, b2) = scan(stmt.body, bound), scan(stmt.orelse, bound)
                if p1 or p2:
                    return p1 or p2, bound
                bound |= b1 & b2
                continue
            if isinstance(stmt, (ast.For, ast.While)):  # a loop inside the update (over rows, say)
                head = stmt.iter if isinstance(stmt, ast.For) else stmt.test
                early = (_read_names(head) & local) - bound
                if early:
                    return (sorted(early)[0], stmt.lineno), bound
                inner = bound | (_bound_names(stmt.target) if isinstance(stmt, ast.For) else set())
                problem, _ = scan(stmt.body + stmt.orelse, inner)
                if problem:
                    return problem, bound
                continue   # it may run no time at all: what it binds is not bound after it
            early = (_read_names(stmt) & local) - bound
            if early:
                return (sorted(early)[0], stmt.lineno), bound
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                bound |= _bound_names(stmt)
        return None, bound
    return scan(update, set())[0]


def _not_jit_kernels(text: str, names) -> str | None:
    """Parent-side, from the source alone (no learner code runs): None if every name is a module-level
    function decorated with triton.jit and bound once, else what is wrong. A file that does not parse
    is left to the child, which names the syntax error."""
    import ast

    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None

    def is_jit(dec):
        dec = dec.func if isinstance(dec, ast.Call) else dec
        return (isinstance(dec, ast.Attribute) and dec.attr == "jit" and isinstance(dec.value, ast.Name)
                and dec.value.id == "triton") or (isinstance(dec, ast.Name) and dec.id == "jit")
    problems = []
    for name in names:
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        rebinds = [n for n in ast.walk(tree) if (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store))
                   or (isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names)
                   or (isinstance(n, ast.Constant) and n.value == name)]
        if len(defs) != 1 or not any(is_jit(d) for d in defs[0].decorator_list):
            problems.append(f"{name} must be one @triton.jit function of the file: the exercise is the kernel "
                            "(the checker launches it itself, as the scaffold's wrapper does)")
        elif rebinds:
            problems.append(f"{name} is bound again after its @triton.jit definition (line {rebinds[0].lineno}): "
                            "the checker launches the kernel the file defines")
        elif isinstance(names, dict) and (wrong := _signature_problem(name, defs[0], names[name])):
            problems.append(wrong)
    return "; ".join(problems) or None


# exercise -> (function, the check's title, the reader of the source that says what is wrong with it)
SOURCE_CHECKS = {
    "04": (("online_scalar", "online_scalar folds one element at a time", _online_scalar_problem),
           ("online_vectorized", "online_vectorized is array operations", _online_vectorized_problem)),
    "07": (("attention_block", "attention_block walks the key tiles", _tile_loop_problem),),
}


def run_check(number: str, path: Path, timeout: float = TIMEOUT_S, hidden: bool = False, hide=(), seed=None,
              hip: bool | None = None, progress=None):
    """[Result] for one exercise file. hidden=True (the grader) adds checks on inputs drawn from a
    fresh random seed that the submission cannot predict. hip: also compile a drill with hipcc
    (default: for a learner's own check, not when grading)."""
    hip = (not hidden) if hip is None else hip
    names = {}

    def on_progress(call_id):  # a learner sees each check start: a slow or stuck one is visible at once
        if progress and call_id in names:
            progress(names[call_id])
    from . import sandbox
    from .backend import detect

    number = number.zfill(2)
    text = Path(path).read_text(errors="replace")
    if number == "03":
        return check_markdown(text)
    rng = np.random.default_rng(seed if seed is not None else (secrets.randbits(64) if hidden else zlib.crc32(number.encode())))
    cases = CASES[number](rng, hidden)
    names.update({f"c{i}": c.name for i, c in enumerate(cases)})
    box = sandbox.new_box()
    try:
        results = []
        if Path(path).suffix == ".cu":
            todo = _todo_lines(text, TODO_CU)
            bad_include = _includes_allowed(text)
            if bad_include:
                err = f"#include \"{bad_include}\": a drill may include only the course headers ({', '.join(sorted(ALLOWED_INCLUDES))})"
                return [Result("includes", ERROR, err, 0, 0)] + [
                    Result(c.name, ERROR, "not compiled: see includes", 0, c.points, c.hidden) for c in cases]
            results += _compile_checks(number, text, Path(path), hip=hip)
            results.append(Result("every TODO filled in", TODO if todo else PASS,
                                  f"'{TODO_CU}' at line {', '.join(map(str, todo))}" if todo else "", 0, 0))
            if any(r.verdict == ERROR for r in results):
                return results + [Result(c.name, ERROR, "does not compile (above)", 0, c.points, c.hidden) for c in cases]
            if not detect().native:
                return results + _run_on_cpu(number, text, Path(path), cases, box, timeout, hide, todo, on_progress)
            (box / "submission.cu").write_text(text)
            (box / "include").mkdir()
            _course_headers_into(box / "include")
            request = {"kind": "cuda", "source": "submission.cu", "options": ["-std=c++17", f"-I{box / 'include'}"],
                       "calls": _stage(cases, box)}
            run = sandbox.run_child(box, request, timeout, gpu=True, hide=hide, on_progress=on_progress)
            run.box, run.timeout = box, timeout
            return results + _judge(cases, run, bool(todo), ", ".join(map(str, todo)))
        (box / Path(path).name).write_text(text)
        dev = detect()
        uses_torch = number in ("05", "06")
        if uses_torch and not dev.triton_installed:
            return [Result(c.name, SKIP, "triton is not installed here (Linux only): run it on Linux or in the "
                           "workshop's Linux machines", 0, c.points, c.hidden) for c in cases]
        not_kernels = _not_jit_kernels(text, TRITON_KERNELS.get(number, {}))
        if not_kernels:
            return [Result("the kernels", FAIL, not_kernels, 0, 0)] + [
                Result(c.name, FAIL, "not run: see the kernels", 0, c.points, c.hidden) for c in cases]
        # what the source shows, judged before anything runs: a function found wrong there fails
        # with the reason, and its cases are not run
        for fn_name, title, problem_of in SOURCE_CHECKS.get(number, ()):
            problem = problem_of(text)
            if problem:
                results.append(Result(title, FAIL, problem, 0, 0))
                results += [Result(c.name, FAIL, f"not run: see '{title}'", 0, c.points, c.hidden)
                            for c in cases if c.call["fn"] == fn_name]
                cases = [c for c in cases if c.call["fn"] != fn_name]
                names.clear()
                names.update({f"c{i}": c.name for i, c in enumerate(cases)})
        gpu = bool(uses_torch and dev.torch_gpu and os.environ.get("TRITON_INTERPRET") != "1")
        request = {"kind": "python", "module": Path(path).name, "torch": uses_torch,
                   "device": "cuda" if gpu else "cpu", "interpret": uses_torch and not gpu, "calls": _stage(cases, box),
                   "trusted_launch": number in TRITON_KERNELS, "kernels": list(TRITON_KERNELS.get(number, {}))}
        run = sandbox.run_child(box, request, timeout, gpu=gpu, hide=hide, on_progress=on_progress)
        run.box, run.timeout = box, timeout
        run.judge_clock = {f"c{i}": _judge_clock(case, Path(path).name, text, timeout, hide)
                           for i, case in enumerate(cases) if case.call.get("max_seconds") and not uses_torch
                           and any(r.get("id") == f"c{i}" and r.get("ok") for r in run.results)}
        # timed right after the child's runs, under the same load
        run.twin_clock = {cid: _twin_seconds(cases[int(cid[1:])]) for cid in run.judge_clock}
        if uses_torch:
            results.append(Result("backend", PASS, "GPU" if gpu else "Triton interpreter on the CPU (no GPU)", 0, 0))
        return results + _judge(cases, run, "NotImplementedError" in text)
    finally:
        sandbox.remove_box(box)


E = float(np.e)
# key -> (expected, how close is close enough, [(a wrong value learners give, the hint it earns)])
MD_ANSWERS = {
    # after [1, 2, -3, 12]: the first three terms shrink by e^(2-12) but do not vanish
    "s_after_12": (1.0 + (np.exp(-11) + np.exp(-10) + np.exp(-15)), 5e-6,
                   [(1.0, "the first three terms do not vanish when the max jumps to 12: they are rescaled by "
                          "e^(m_old - 12), small but not zero (keep 5 or more decimals)"),
                    (1.0 + np.exp(-2) + np.exp(-1) + np.exp(-6), "that is the sum against the old max 2: rescale "
                                                                 "it to the new max 12")]),
    "rescale_factor": (float(np.exp(-10.0)), 0.02 * float(np.exp(-10.0)),
                       [(float(np.exp(10.0)), "inverted: when the max grows the old sum shrinks, by e^(m_old - m_new)"),
                        (-10.0, "that is the exponent; the factor is e to that power")]),
    "merged_sum": (1.8 * float(np.exp(-2.0)) + 1.3, 0.005,
                   [(3.1, "the two sums were added as they are: first move both onto the common max (12)"),
                    (1.8 + 1.3 * float(np.exp(-2.0)), "the block with the smaller max (10) is the one to rescale")]),
    "bytes_3pass": (4 * 4096 * 8192 * 4, 0.005 * 4 * 4096 * 8192 * 4,
                    [(4 * 4096 * 8192, "bytes, not elements: an fp32 value is 4 bytes"),
                     (3 * 4096 * 8192 * 4, "the 3-pass kernel reads three times and writes once: 4 traversals")]),
    "bytes_1pass": (2 * 4096 * 8192 * 4, 0.005 * 2 * 4096 * 8192 * 4,
                    [(2 * 4096 * 8192, "bytes, not elements: an fp32 value is 4 bytes"),
                     (4096 * 8192 * 4, "one read and one write: 2 traversals")]),
}
MD_EXPECTED = {k: v[0] for k, v in MD_ANSWERS.items()}
# The update of section 1 as formulas over the state (m, s) and the new element x, evaluated on the
# states below: every ordering of x against m, the first element (the empty state -inf, 0), a jump
# of 700 (exp of a raw score overflows there), scores near 800. s_new is evaluated with the true
# m_new, so that a mistake in one formula is not counted against the other.
MD_STATES = [(-np.inf, 0.0, 3.0), (-np.inf, 0.0, -2.5), (2.0, 1.5, 12.0), (12.0, 1.1, 2.0), (4.0, 2.0, 4.0),
             (-3.0, 1.0, -1.0), (0.0, 3.7, 700.0), (800.0, 1.2, 805.0), (805.0, 2.5, 800.0), (-7.0, 1.9, -9.0)]
# Scores near float32's lowest finite value (-3.4e38) are scores like any other: a finite stand-in
# for -inf (max(m, x, -1e30)) is larger than they are, and only these states tell it from -inf.
MD_LOWEST_STATES = [(-np.inf, 0.0, -3.4e38), (-3.0e38, 1.0, -3.4e38), (-3.4e38, 2.0, -3.0e38)]
# A masked element (-inf) arriving: it changes nothing. Before any finite element the max stays -inf
# (a stand-in such as 0 would then sit above the scores that follow); the sum's update has no
# value there (-inf - -inf), so that state judges m_new alone.
MD_MASKED_STATES = [(2.0, 1.5, -np.inf)]
MD_MASKED_MAX_STATES = [(-np.inf, 0.0, -np.inf)]


def md_states(rng=None, key: str = "s_new") -> list:
    """The states a formula is evaluated on: the fixed ones (their hints name them), the lowest
    finite ones, and a dozen drawn afresh on every check, so that no answer can be a table of the
    fixed states (a conditional expression could otherwise return the truth state by state)."""
    rng = np.random.default_rng() if rng is None else rng
    drawn = [(float(rng.uniform(-60, 60)), float(rng.uniform(0.05, 8)), float(rng.uniform(-60, 60))) for _ in range(10)]
    drawn += [(-np.inf, 0.0, float(rng.uniform(-60, 60))) for _ in range(2)]
    return MD_STATES + MD_LOWEST_STATES + MD_MASKED_STATES + (MD_MASKED_MAX_STATES if key == "m_new" else []) + drawn


def _update_truth(m, s, x):
    m_new = max(m, x)
    return m_new, s * float(np.exp(m - m_new)) + float(np.exp(x - m_new))


# formula -> (the truth, [(a wrong formula learners write, the hint it earns)]); a wrong formula is
# recognised by what it computes on MD_STATES, whatever way it is written
MD_FORMULAS = {
    "m_new": (lambda m, s, x, m_new: max(m, x), [
        ("x", "m_new = x forgets the old max when x is smaller than it: the running max never falls"),
        ("m", "m_new = m never takes a larger x as the new max"),
        ("m + x", "the new max is the larger of m and x, max(m, x)")]),
    "s_new": (lambda m, s, x, m_new: _update_truth(m, s, x)[1], [
        ("s + exp(x - m_new)", "the old sum was not rescaled when the max moved: its terms were exp(x_k - m), "
                               "and against m_new each is multiplied by exp(m - m_new)"),
        ("s * exp(m_new - m) + exp(x - m_new)", "the rescale factor is inverted: the old sum shrinks when the "
                                                "max grows, by exp(m - m_new), which is at most 1"),
        ("s * exp(m - m_new) + exp(x - m)", "the new term was taken against the old max: it is exp(x - m_new)"),
        ("s + exp(x - m)", "neither the old sum rescaled nor the new term taken against the new max"),
        ("s * exp(m - x) + 1", "right only when x is the new max: when x <= m the update is "
                               "s + exp(x - m), so write it with m_new"),
        ("s * exp(m - m_new) + exp(x - m_new) - 1", "off by the new element: its term is exp(x - m_new)"),
        ("s * exp(m - x) + 1 if x > m else s + exp(m - x)", "the branch for x <= m has its exponent inverted: the "
                                                            "new term is exp(x - m), at most 1, since m stays the max")]),
}
# What the prose sections ask for: written by the learner and read by a person (READ), never judged
# by a program (a keyword test passed the classic wrong update, s' = s + exp(x - m'), as "stated").
MD_DERIVATIONS = {
    "1. Derive the update": "the update explained: why the old sum is multiplied by exp(m - m')",
    "2. Prove it equals the 3-pass result": "the induction: an invariant that holds after every element",
}

_FORMULA_FUNCS = {"exp": np.exp, "log": np.log, "max": max, "min": min, "abs": abs}


def _formula(text: str, names):
    """A learner's formula as a function of `names`, or a reason it is not one. Only arithmetic,
    numbers, the names, _FORMULA_FUNCS and conditionals over comparisons of those are accepted (the
    text is parsed, never executed as Python): math notation is read as Python (^ as a power, the prime of m' as m_new, · and − as *
    and -), and e alone is Euler's number."""
    import ast
    import operator

    src = (text.replace("^", "**").replace("\u00b7", "*").replace("\u00d7", "*").replace("\u2212", "-")
           .replace("m'", "m_new").replace("`", ""))
    try:
        tree = ast.parse(src, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, f"'{_clip(text)}' is not a formula I can read (write it in Python syntax, e.g. exp(a - b) * c)"
    binops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow}
    compares = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
                ast.Eq: operator.eq, ast.NotEq: operator.ne}
    allowed = set(names) | {"e"}

    def build(node):
        if isinstance(node, ast.Expression):
            return build(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return lambda env, v=float(node.value): v
        if isinstance(node, ast.Name):
            if node.id not in allowed:
                raise ValueError(f"'{node.id}' is not one of {', '.join(sorted(allowed))}")
            return (lambda env: float(np.e)) if node.id == "e" and "e" not in names else (lambda env, k=node.id: env[k])
        if isinstance(node, ast.BinOp) and type(node.op) in binops:
            f, a, b = binops[type(node.op)], build(node.left), build(node.right)
            return lambda env: f(a(env), b(env))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            a, sign = build(node.operand), -1.0 if isinstance(node.op, ast.USub) else 1.0
            return lambda env: sign * a(env)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FORMULA_FUNCS
                and node.args and not node.keywords):
            f, args = _FORMULA_FUNCS[node.func.id], [build(a) for a in node.args]
            return lambda env: f(*(a(env) for a in args))
        # a case split (s * exp(m - x) + 1 if x > m else s + exp(x - m)) is how the update is often
        # written: a conditional over comparisons of the same arithmetic
        if isinstance(node, ast.IfExp):
            test, yes, no = build(node.test), build(node.body), build(node.orelse)
            return lambda env: yes(env) if test(env) else no(env)
        if isinstance(node, ast.Compare) and all(type(op) in compares for op in node.ops):
            terms, ops = [build(node.left)] + [build(c) for c in node.comparators], [compares[type(o)] for o in node.ops]

            def chain(env):
                vals = [f(env) for f in terms]
                return all(op(a, b) for op, a, b in zip(ops, vals, vals[1:]))
            return chain
        if isinstance(node, ast.BoolOp):
            parts, both = [build(v) for v in node.values], isinstance(node.op, ast.And)
            return lambda env: (all if both else any)(bool(p(env)) for p in parts)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            a = build(node.operand)
            return lambda env: not a(env)
        raise ValueError(f"'{_clip(ast.unparse(node))}' is not arithmetic over {', '.join(sorted(allowed))} and "
                         f"{', '.join(_FORMULA_FUNCS)}")
    try:
        fn = build(tree)
    except (ValueError, RecursionError) as e:
        return None, str(e)

    def call(**env):
        with np.errstate(all="ignore"):
            try:
                return float(fn({k: np.float64(v) for k, v in env.items()}))
            except (OverflowError, ZeroDivisionError, ValueError, TypeError):
                return float("nan")
    return call, None


def _clip(text: str, n: int = 60) -> str:
    return text if len(text) <= n else text[:n] + "..."


def _formula_values(fn, states):
    """fn on each (m, s, x) state, s_new formulas given the true m_new."""
    return np.array([fn(m=m, s=s, x=x, m_new=max(m, x)) for m, s, x in states])


def _close(got, want):
    return np.allclose(got, want, rtol=1e-9, atol=0.0, equal_nan=True)  # the truth is never NaN


def check_formula(key: str, text: str, rng=None) -> Result:
    truth, wrongs = MD_FORMULAS[key]
    name = f"{key}: the update of section 1 as a formula"
    names = ("m", "s", "x") + (("m_new",) if key == "s_new" else ())
    fn, problem = _formula(text, names)
    if fn is None:
        return Result(name, FAIL, problem)
    states = md_states(rng, key)
    got, want = _formula_values(fn, states), _formula_values(truth, states)
    if _close(got, want):
        return Result(name, PASS, "", 1)
    for wrong, hint in wrongs:
        sig, _ = _formula(wrong, names)
        if _close(got, _formula_values(sig, states)):
            return Result(name, FAIL, hint)
    bad = [i for i, (g, w) in enumerate(zip(got, want)) if not np.isclose(g, w, rtol=1e-9, atol=0.0)]
    lowest = [i for i, (mm, _, xx) in enumerate(states) if -np.inf < max(mm, xx) < -1e37]
    nothing = [i for i in bad if max(states[i][0], states[i][2]) == -np.inf]
    if key == "m_new" and nothing:
        return Result(name, FAIL, f"m_new comes out {got[nothing[0]]:.6g} at m = -inf, x = -inf (a masked element "
                                  "before any score): the max of nothing seen yet is still -inf; any finite stand-in "
                                  "would sit above a score that follows, and stay the max")
    if key == "m_new" and set(bad) <= set(lowest):
        k = bad[0]
        m, _, x = states[k]
        above = np.isfinite(got[k]) and got[k] > max(m, x)
        return Result(name, FAIL, f"m_new comes out {got[k]:.6g} at m = {m:g}, x = {x:g}, scores near float32's lowest "
                                  "finite value (-3.4e38), which are scores like any other: the max is the larger of "
                                  "them" + ("; a finite stand-in for -inf (-1e30) is larger than such scores, and only "
                                            "-inf is below every score" if above else ""))
    if key == "s_new" and set(bad) <= set(lowest):
        k = bad[0]
        m, s, x = states[k]
        return Result(name, FAIL, f"s_new comes out {got[k]:.6g} at m = {m:g}, s = {s:g}, x = {x:g}, scores near "
                                  "float32's lowest finite value (-3.4e38), where it should be "
                                  f"{want[k]:.6g}: such scores are scores like any other and take the same update; a "
                                  "guard on \"very negative\" (or a finite stand-in for -inf) treats them as masked")
    first = [i for i in bad if states[i][0] == -np.inf]
    # x - m is +inf for the empty state and overflows wherever x is far above m: one mistake
    far = [i for i in bad if i not in first and key == "s_new" and not np.isfinite(got[i])
           and states[i][2] - states[i][0] > 700]
    if first and len(first) + len(far) == len(bad):
        why = ("an exponent such as x - m is +inf there; write each exponent against m_new (at most 0)"
               if key == "s_new" else "max(-inf, x) is x there")
        k = first[0]
        head = (f"wrong for the first element{'' if far else ' only'} ({got[k]:.6g} where it should be "
                f"{want[k]:.6g}: it starts from the empty state m = -inf, s = 0)")
        if not far:
            return Result(name, FAIL, f"{head}; {why}")
        m, _, x = states[far[0]]
        return Result(name, FAIL, f"{head} and where x is far above m ({got[far[0]]:.6g} at m = {m:g}, x = {x:g}): "
                                  f"{why}")
    k = bad[0]
    m, s, x = states[k]
    where = f"at m = {m:g}, s = {s:g}, x = {x:g}"
    if key == "s_new" and not np.isfinite(got[k]):
        fine = [i for i, (mm, _, xx) in enumerate(states) if abs(max(mm, xx)) < 50]
        if _close(got[fine], want[fine]):
            return Result(name, FAIL, f"right for small scores, {got[k]:g} {where}: exp of a raw score overflows "
                                      "(exp(800) is inf); keep every exponent a difference that is at most 0")
    return Result(name, FAIL, f"{key} comes out {got[k]:.6g} {where}; work it through for that state")


def _section(text: str, title: str) -> str:
    m = re.search(rf"## {re.escape(title)}\n(.*?)(?=\n## |\Z)", text, re.S)
    return m.group(1) if m else ""


def check_markdown(text: str):
    """Exercise 03 is data, read here; no learner code runs. A wrong number earns a hint, never the
    answer; sensible rounding passes."""
    block = re.search(r"```answers\n(.*?)```", text, re.S)
    if not block:
        return [Result("answers block present", ERROR, "no ```answers block found: do not delete it", 0,
                       len(MD_ANSWERS))]
    answers, results = {}, []
    for line in block.group(1).splitlines():
        m = re.match(r"^\s*(\w+)\s*=\s*(.*?)\s*$", re.sub(r"<!--.*?-->", "", line))
        if m:
            answers[m.group(1)] = m.group(2)
    for key, (expected, close, wrongs) in MD_ANSWERS.items():
        raw = answers.get(key)
        if raw is None:
            results.append(Result(key, ERROR, f"'{key} = ...' line missing from the answers block"))
            continue
        if raw in ("", "?"):
            results.append(Result(key, TODO, "still '?'"))
            continue
        try:
            val = float(raw.replace(",", "").replace("_", "").replace("×10^", "e").replace("x10^", "e"))
        except ValueError:
            results.append(Result(key, FAIL, f"'{raw}' is not a number (write e.g. 4.5e-5)"))
            continue
        if abs(val - expected) <= close:
            results.append(Result(key, PASS, "", 1))
            continue
        hint = next((h for w, h in wrongs if abs(val - w) <= max(close, 1e-9 * abs(w))), None)
        if hint is None:
            side = "too large" if val > expected else "too small"
            hint = f"{raw} is {side}; recompute it step by step (the notebook 03 trace shows the method)"
        results.append(Result(key, FAIL, hint))
    for key in MD_FORMULAS:
        raw = answers.get(key)
        if raw is None:
            results.append(Result(f"{key}: the update of section 1 as a formula", ERROR,
                                  f"'{key} = ...' line missing from the answers block"))
        elif raw in ("", "?"):
            results.append(Result(f"{key}: the update of section 1 as a formula", TODO, "still '?'"))
        else:
            results.append(check_formula(key, raw))
    for title, what in MD_DERIVATIONS.items():
        body = _section(text, title)
        name = f"section {title[:2].strip('.')}: {what}"
        if TODO_MD in body or not body.strip():
            results.append(Result(name, TODO, f"section '{title}' still reads {TODO_MD}", 0, 0))
        else:
            results.append(Result(name, READ, "written; the checker does not judge it: your instructor reads it",
                                  0, 0))
    return results


# ------------------------------------------------------------------------------------------------
# Reporting
# ------------------------------------------------------------------------------------------------
def status(results) -> str:
    """passed, failed, error, timeout, incomplete (a check could not run here) or todo."""
    verdicts = [r.verdict for r in results]
    if not results:
        return "error"
    if TIMEOUT in verdicts:
        return "timeout"
    if ERROR in verdicts:
        return "error"
    if FAIL in verdicts:
        return "failed"
    if TODO in verdicts:
        return "todo"
    if any(r.verdict == SKIP and r.max_points for r in results):  # a scored check did not run
        return "incomplete"
    return "passed"


def points(results):
    return sum(r.points for r in results), sum(r.max_points for r in results)


def find(number: str, solution: bool, folder: Path | None = None) -> Path:
    number = number.zfill(2)
    if number not in EXERCISES:
        raise SystemExit(f"no exercise {number}; choose one of {', '.join(EXERCISES)}")
    base = folder or ROOT / ("solutions" if solution else "exercises")
    return base / EXERCISES[number]


def report(number: str, path: Path, results, file=None) -> bool:
    """Print every check and the verdict; True only when every check ran and passed."""
    file = file or sys.stdout
    print(f"Exercise {number}: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=file)
    for r in results:
        pts = f" [{r.points}/{r.max_points}]" if r.max_points else ""
        print(f"  [{r.verdict}] {r.name}{pts}" + (f"\n      {r.detail}" if r.detail and r.verdict != PASS else
                                                  (f"  ({r.detail})" if r.detail else "")), file=file)
    st = status(results)
    got, most = points(results)
    not_run = [r for r in results if r.verdict == SKIP]
    summary = {"passed": "all checks passed", "todo": "not implemented yet: fill in the TODOs",
               "failed": "some checks failed", "error": "errors (above): the code did not run to the end",
               "timeout": "stopped: out of time (above)",
               "incomplete": f"incomplete: {len(not_run)} check(s) could not run here; {not_run[0].detail if not_run else ''}"}[st]
    to_read = sum(r.verdict == READ for r in results)
    if to_read:
        summary += f"; {to_read} written answer(s) for a person to read"
    print(f"  => {summary} ({got}/{most} points)", file=file)
    return st == "passed"
