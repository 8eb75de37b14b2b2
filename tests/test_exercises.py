"""Exercise/solution pairs and the checker: pairs kept in sync mechanically, solutions pass,
untouched exercises say 'not implemented yet' (never a crash), and a library of the wrong answers
learners write, each of which must fail (never pass, never read as passed when a check could not
run) with a message naming the concept."""
import re

import numpy as np
import pytest

from a07_softmax import backend, check, cpu_target
from a07_softmax.paths import ROOT

NUMBERS = list(check.EXERCISES)


def test_regenerating_exercises_changes_nothing():
    assert check.generate(check_only=True) == [], "run: a07 check generate"


def test_pairs_differ_only_inside_marked_regions():
    for n, name in check.EXERCISES.items():
        sol = (ROOT / "solutions" / name).read_text()
        assert "BEGIN SOLUTION" in sol, f"{name} marks no solution region"
        ex = (ROOT / "exercises" / name).read_text()
        assert "BEGIN SOLUTION" not in ex and "END SOLUTION" not in ex
        assert ex == check.strip_solution(sol, (ROOT / "solutions" / name).suffix, n)


def test_strip_solution_placeholders():
    py = "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"
    assert check.strip_solution(py, ".py", "09") == 'def f():\n    raise NotImplementedError("exercise 09: your code here")\n'
    cu = "  x = 1;\n  // BEGIN SOLUTION\n  y = 2;\n  // END SOLUTION\n"
    assert check.strip_solution(cu, ".cu", "09") == "  x = 1;\n  " + check.TODO_CU + "\n"
    md = "a = <!-- BEGIN SOLUTION -->3<!-- END SOLUTION -->\n<!-- BEGIN SOLUTION -->\nproof\n<!-- END SOLUTION -->\n"
    assert check.strip_solution(md, ".md", "09") == "a = ?\n" + check.TODO_MD + "\n"
    with pytest.raises(ValueError):
        check.strip_solution("### BEGIN SOLUTION\nx\n", ".py", "09")


@pytest.mark.parametrize("number", NUMBERS)
def test_solution_passes_its_checks(number):
    results = check.run_check(number, check.find(number, solution=True))
    expected = "incomplete" if number in ("01", "02") and not backend.detect().native and cpu_target.compiler() is None \
        else "passed"
    assert check.status(results) == expected, [tuple(r) for r in results]
    got, most = check.points(results)
    assert most > 0 and (got == most) == (expected == "passed")


@pytest.mark.parametrize("number", ["04", "07"])
def test_solution_passes_the_hidden_checks_of_many_draws(number):
    """The grader's hidden inputs come from a fresh seed each time: no draw may fail a right answer.
    (error_stats once called a right answer's figures 'swapped' when max_abs and max_rel came out
    about equal, as they do for some seeds.)"""
    for seed in range(12):
        results = check.run_check(number, check.find(number, solution=True), hidden=True, seed=seed)
        assert check.status(results) == "passed", (seed, [tuple(r) for r in results if r.verdict != check.PASS])


@pytest.mark.parametrize("number", NUMBERS)
def test_untouched_exercise_is_not_implemented_yet(number):
    results = check.run_check(number, check.find(number, solution=False))
    verdicts = [r.verdict for r in results]
    assert check.TODO in verdicts, results
    assert check.ERROR not in verdicts and check.FAIL not in verdicts, results  # no crash, no traceback
    got, most = check.points(results)
    assert check.status(results) == "todo" and got < most


def test_a_check_that_did_not_run_never_reads_as_passed(capsys):
    results = [check.Result("compiles", check.PASS, "", 0, 0), check.Result("on the GPU", check.SKIP, "no GPU", 0, 1)]
    assert check.status(results) == "incomplete"
    assert check.report("01", ROOT / "x.cu", results) is False
    out = capsys.readouterr().out
    assert "incomplete" in out and "passed" not in out.splitlines()[-1]


# ------------------------------------------------------------------------------------------------
# The wrong answers: each is the solution with one mistake a learner makes, and the words the
# first failure must contain (the concept, or the input that exposes it).
# ------------------------------------------------------------------------------------------------
def _sol(number):
    return (ROOT / "solutions" / check.EXERCISES[number]).read_text()


def _edit(number, old, new, count=-1):
    src = _sol(number)
    assert old in src, (number, old)
    return src.replace(old, new, count)


# exercise 05 answered by PyTorch in the wrapper (what a learner who skips the kernel writes)
TORCH_05 = """import torch
import triton
import triton.language as tl


def scale_mask_softmax(x, scale, causal=True, q_len=None):
    rows, cols = x.shape
    s = x.float() * scale
    if causal:
        keep = torch.arange(cols)[None, :] <= (torch.arange(rows)[:, None] % (q_len or rows))
        s = s.masked_fill(~keep.to(x.device), float("-inf"))
    m = s.amax(1, keepdim=True)
    e = torch.exp(s - torch.where(torch.isinf(m), torch.zeros_like(m), m))
    d = e.sum(1, keepdim=True)
    return (e / torch.where(d == 0, torch.ones_like(d), d)).to(x.dtype)
"""

def _solution_block(number, index):
    """The index-th solution block of a solution file (the lines between BEGIN and END SOLUTION)."""
    blocks = re.findall(r"### BEGIN SOLUTION\n(.*?)^[ \t]*### END SOLUTION", _sol(number), re.S | re.M)
    return blocks[index]


_SCALAR_04 = _solution_block("04", 0)        # online_scalar's loop
# right answers written otherwise than the solution: each must pass exercise 04's checker
RIGHT_04 = {
    "an index loop, np.maximum": _SCALAR_04.replace("    for x in xs:\n", "    for i in range(len(xs)):\n        x = float(xs[i])\n")
    .replace("max(m, float(x))", "float(np.maximum(m, x))"),
    "max of a pair": _SCALAR_04.replace("max(m, float(x))", "max([m, float(x)])"),
    "sums and maxima of terms written out": _SCALAR_04.replace("max(m, float(x))", "float(np.array([m, x]).max())")
    .replace("s * np.exp(m - m_new) + np.exp(x - m_new)", "sum([s * np.exp(m - m_new), np.exp(x - m_new)])"),
    "a fold with itertools.accumulate": """    import itertools

    def step(state, x):
        m, s = state
        m_new = max(m, float(x))
        return m_new, s * np.exp(m - m_new) + np.exp(x - m_new)
    return [(m, float(s)) for m, s in itertools.accumulate(xs, step, initial=(-np.inf, 0.0))][1:]
""",
}
_VECTOR_04 = _solution_block("04", 1)       # online_vectorized's array operations
# right answers to online_vectorized written otherwise than the solution: none may be taken for a
# loop over the elements. The first three run through the whole checker (their clocks are the
# solution's); the scans walk log2(n) levels of array operations and are read by the source check
RIGHT_VECTOR_04 = {
    "a helper of its own": _VECTOR_04.replace(
        "    m = np.maximum.accumulate(xs)\n", "    return _running(xs)\n    m = np.maximum.accumulate(xs)\n", 1),
    "a generator over a literal tuple": _VECTOR_04.replace(
        "    return m, np.exp(np.logaddexp.accumulate(xs) - m)\n",
        "    s = np.exp(np.logaddexp.accumulate(xs) - m)\n"
        "    m, s = (np.ascontiguousarray(a, dtype=np.float64) for a in (m, s))\n    return m, s\n"),
    "the running max by itertools.accumulate(max)": _VECTOR_04.replace(
        "    m = np.maximum.accumulate(xs)\n",
        "    import itertools\n"
        "    m = np.fromiter(itertools.accumulate(xs.tolist(), max), dtype=np.float64, count=len(xs))\n"),
}
RIGHT_SCANS_04 = {
    "a doubling scan (while, step *= 2)": """    x = np.array(xs, dtype=np.float64)
    m = np.maximum.accumulate(x)
    lse, step = x.copy(), 1
    while step < len(lse):
        lse[step:] = np.logaddexp(lse[step:], lse[:-step].copy())
        step *= 2
    return m, np.exp(lse - m)
""",
    "a scan over range(ceil(log2(n))) levels": """    x = np.array(xs, dtype=np.float64)
    m = np.maximum.accumulate(x)
    lse = x.copy()
    for level in range(int(np.ceil(np.log2(max(len(x), 1))))):
        k = 1 << level
        lse[k:] = np.logaddexp(lse[k:], lse[:-k].copy())
    return m, np.exp(lse - m)
""",
}
# a tight loop over Python floats: about 0.4 s over the checker's two million elements on a fast
# machine, under the clock's limit; the source check is what fails it
_TIGHT_LOOP_04 = """    import math
    m, s, ms, ss = -math.inf, 0.0, [], []
    for x in np.asarray(xs, dtype=np.float64).tolist():
        if x > m:
            s, m = s * math.exp(m - x) + 1.0, x
        else:
            s += math.exp(x - m)
        ms.append(m)
        ss.append(s)
    return np.array(ms), np.array(ss)
"""
# loops over the elements in other clothes: each must fail online_vectorized, naming what it found
WRONG_VECTOR_04 = {
    "a tight for loop over Python floats": (_TIGHT_LOOP_04, "runs a Python for loop over `np.asarray(xs"),
    "a while loop over an index": ("""    xs = np.asarray(xs, dtype=np.float64)
    ms, ss, m, s, i = np.empty_like(xs), np.empty_like(xs), -np.inf, 0.0, 0
    while i < len(xs):
        m_new = max(m, xs[i])
        s, m = s * np.exp(m - m_new) + np.exp(xs[i] - m_new), m_new
        ms[i], ss[i] = m, s
        i += 1
    return ms, ss
""", "runs a Python while loop"),
    "a while loop with a counter doubled beside it": ("""    xs = np.asarray(xs, dtype=np.float64)
    ms, ss, m, s, i, k = np.empty_like(xs), np.empty_like(xs), -np.inf, 0.0, 0, 1
    while i < len(xs):
        m_new = max(m, xs[i])
        s, m = s * np.exp(m - m_new) + np.exp(xs[i] - m_new), m_new
        ms[i], ss[i] = m, s
        i += 1
        k *= 2
    return ms, ss
""", "runs a Python while loop"),
    "the running sum filled element by element": ("""    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)
    s, acc = np.empty_like(xs), 0.0
    for i, x in enumerate(xs):
        acc = acc * np.exp((m[i - 1] if i else x) - m[i]) + np.exp(x - m[i])
        s[i] = acc
    return m, s
""", "runs a Python for loop over `enumerate(xs)`"),
    "itertools.accumulate with a step of its own": ("""    import itertools

    def step(state, x):
        m, s = state
        m_new = max(m, x)
        return m_new, s * np.exp(m - m_new) + np.exp(x - m_new)
    a = np.asarray(list(itertools.accumulate(np.asarray(xs, dtype=np.float64), step, initial=(-np.inf, 0.0)))[1:])
    return a[:, 0], a[:, 1]
""", "hands a Python function to accumulate()"),
    "np.frompyfunc of a lambda": ("""    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)
    lse = np.frompyfunc(lambda a, b: np.logaddexp(a, b), 2, 1).accumulate(xs.astype(object)).astype(np.float64)
    return m, np.exp(lse - m)
""", "hands a Python function to frompyfunc()"),
    "functools.reduce of a lambda": ("""    import functools
    xs = np.asarray(xs, dtype=np.float64)
    m = np.array(functools.reduce(lambda acc, x: acc + [max(acc[-1], x)], xs[1:], [xs[0]]))
    return m, np.exp(np.logaddexp.accumulate(xs) - m)
""", "hands a Python function to reduce()"),
    "online_scalar through a module-level alias": ("""    ms, ss = zip(*_trace(xs))
    return np.array(ms), np.array(ss)
""", "reached as online_vectorized -> _trace -> online_scalar"),
    "a class whose __call__ loops": ("""    return _Tracer()(xs)
""", "reached as online_vectorized -> _Tracer"),
    "online_scalar fetched through globals()": ("""    trace = globals()["online_" + "scalar"](xs)
    return np.array([t[0] for t in trace]), np.array([t[1] for t in trace])
""", "reaches globals"),
}
_VECTOR_04_TAILS = {
    "online_scalar through a module-level alias": "\n\n_trace = online_scalar\n",
    "a class whose __call__ loops": """

class _Tracer:
    def __call__(self, xs):
        m, s, ms, ss = -np.inf, 0.0, [], []
        for x in xs:
            m_new = max(m, float(x))
            s, m = s * np.exp(m - m_new) + np.exp(x - m_new), m_new
            ms.append(m)
            ss.append(s)
        return np.array(ms), np.array(ss)
""",
}


def _vectorized_04(body: str, name: str = "") -> str:
    """Exercise 04's solution with online_vectorized's body replaced (and what that body needs
    appended to the module)."""
    return _edit("04", _VECTOR_04, body, 1) + _VECTOR_04_TAILS.get(name, "") + (
        "\n\ndef _running(x):\n    m = np.maximum.accumulate(x)\n    return m, np.exp(np.logaddexp.accumulate(x) - m)\n"
        if name == "a helper of its own" else "")


_UPDATE_07 = _solution_block("07", 1)        # attention_block's update of (m, l, o)
_KEEP_TILES_07 = """        vals = v[cols] if start == 0 else np.concatenate([vals, v[cols]])
        sc = s if start == 0 else np.concatenate([sc, s], axis=1)
        top = sc.max(axis=1)
        ref = np.where(np.isneginf(top), 0.0, top)
        e = np.exp(sc - ref[:, None])
        l, o, m = e.sum(axis=1), e @ vals, top
"""
_LIST_OF_TILES_07 = """        if start == 0:
            acc = []
        acc.append((s, v[cols]))
        big, vv = np.concatenate([a for a, _ in acc], axis=1), np.concatenate([b for _, b in acc])
        top = big.max(axis=1)
        e = np.exp(big - np.where(np.isneginf(top), 0.0, top)[:, None])
        l, o, m = e.sum(axis=1), e @ vv, top
"""
# right answers written otherwise than the solution: each must pass exercise 07's checker
RIGHT_07 = {
    "a temporary bound on both branches of an if": _UPDATE_07.replace(
        "        alpha = np.exp(m - m_ref)\n",
        "        if np.all(np.isneginf(m)):\n            alpha = np.zeros_like(m)\n        else:\n"
        "            alpha = np.exp(m - m_ref)\n"),
    "a loop over the rows inside the update": _UPDATE_07.replace(
        "        p = np.exp(s - m_ref[:, None])\n",
        "        p = np.empty_like(s)\n        for r in range(s.shape[0]):\n            row = s[r]\n"
        "            p[r] = np.exp(row - m_ref[r])\n"),
    "the guard by nan_to_num on the factor and the exponentials": _UPDATE_07.replace(
        "        m_ref = np.where(np.isneginf(m_new), 0.0, m_new)   # no visible key yet: never -inf - -inf\n"
        "        alpha = np.exp(m - m_ref)\n        p = np.exp(s - m_ref[:, None])\n",
        "        alpha = np.nan_to_num(np.exp(m - m_new), nan=1.0)\n        p = np.nan_to_num(np.exp(s - m_new[:, None]))\n"),
    "augmented assignments": _UPDATE_07.replace("        l = l * alpha + p.sum(axis=1)\n",
                                                "        l *= alpha\n        l += p.sum(axis=1)\n"),
}


WRONG = {
    "04": {
        "online_scalar recomputes every prefix": (_edit("04", _SCALAR_04, """    trace = []
    for i in range(len(xs)):
        seen = np.asarray(xs[:i + 1], dtype=np.float64)
        m = float(seen.max())
        trace.append((m, float(np.exp(seen - m).sum())))
    return trace
"""), "online_scalar slices the row inside its loop"),
        "online_scalar keeps the elements seen and sums them": (_edit("04", _SCALAR_04, """    trace, seen = [], []
    for x in xs:
        seen.append(float(x))
        m = max(seen)
        trace.append((m, sum(np.exp(v - m) for v in seen)))
    return trace
"""), "online_scalar takes a max over many elements"),
        "running max starts at 0": (_edit("04", "m, s, trace = -np.inf, 0.0, []\n    for x in xs:\n        m_new",
                                          "m, s, trace = 0.0, 0.0, []\n    for x in xs:\n        m_new", 1),
                                    "max starts negative"),
        "no rescale of the old sum": (_edit("04", "s = s * np.exp(m - m_new) + np.exp(x - m_new)",
                                            "s = s + np.exp(x - m_new)"), "online_scalar"),
        "rescale by the wrong factor": (_edit("04", "np.exp(m - m_new) + np.exp(x - m_new)",
                                              "np.exp(m_new - m) + np.exp(x - m_new)"), "online_scalar"),
        "vectorised without the running max": (_edit("04", "return m, np.exp(np.logaddexp.accumulate(xs) - m)",
                                                     "return m, np.exp(np.logaddexp.accumulate(xs) - xs.max())"),
                                               "online_vectorized"),
        "vectorised exp without a reference (overflows)": (
            _edit("04", "return m, np.exp(np.logaddexp.accumulate(xs) - m)",
                  "return m, np.cumsum(np.exp(xs)) * np.exp(-m)"), "near 1000"),
        # the row's max as the one reference: right while the row's range stays inside exp's
        "vectorised against one reference for the whole row": (
            _edit("04", "return m, np.exp(np.logaddexp.accumulate(xs) - m)",
                  "ref = xs.max()\n    return m, np.cumsum(np.exp(xs - ref)) * np.exp(ref - m)"),
            "one reference for the whole row"),
        "hard-coded error_stats": (_sol("04").split("def error_stats")[0] + (
            "def error_stats(n_rows=1000, seed=0):\n"
            "    return {'online': (1e-16, 1e-15), 'no_rescale': (0.9, 1e6)}\n"), "two different seeds"),
        # error_stats is judged against the rows its docstring's protocol draws (the no-rescale figures
        # are deterministic): numbers made up per seed, or measured on other rows, fail
        "error_stats made up per seed": (_sol("04").split("def error_stats")[0] + (
            "def error_stats(n_rows=1000, seed=0):\n"
            "    return {'online': (1e-16 * (1 + seed % 5), 1e-15), 'no_rescale': (0.5 + 0.01 * (seed % 7), 1e3)}\n"),
            "not the one the rows of the docstring give"),
        "error_stats without the large scores": (_edit("04", "        x[hot] = rng.uniform(50, 100, size=int(hot.sum()))\n",
                                                       ""), "not the one the rows of the docstring give"),
        "error_stats over the last row only": (_edit("04", "out[name][0] = max(out[name][0], float(d.max()))",
                                                     "out[name][0] = float(d.max())"), "every row"),
        "error_stats ignoring n_rows": (_edit("04", "for _ in range(n_rows):", "for _ in range(1000):"), "all n_rows"),
        "error_stats with abs and rel swapped": (_edit("04", "out[name][0] = max(out[name][0], float(d.max()))\n"
                                                             "            out[name][1] = max(out[name][1], float((d[big] / ref[big]).max()))",
                                                       "out[name][1] = max(out[name][1], float(d.max()))\n"
                                                       "            out[name][0] = max(out[name][0], float((d[big] / ref[big]).max()))"),
                                                 "swapped"),
        "vectorised function that loops": (_edit("04", """    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)""", """    out = [online_scalar(xs[:1])[-1]] if len(xs) else []
    trace = online_scalar(xs)
    return np.array([t[0] for t in trace]), np.array([t[1] for t in trace])
    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)"""), "loop"),
        # the same loop, with the clocks of the process that runs it stopped: time is the judge's to measure
        "vectorised function that loops and stops the clock": ("import time\ntime.monotonic = lambda: 0.0\n"
                                                               "time.perf_counter = lambda: 0.0\n" + _edit("04", """    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)""", """    trace = online_scalar(xs)
    return np.array([t[0] for t in trace]), np.array([t[1] for t in trace])
    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)"""), "loop"),
        # ... and one that answers at once, wrongly, when it sees it runs alone (the judge's timed
        # run), and rightly otherwise (no loop: the source check would name a loop first)
        "fakes the timed run": ("import json, time\ntime.monotonic = lambda: 0.0\n"
                                "ALONE = len(json.load(open('request.json'))['calls']) == 1\n"
                                + _edit("04", """    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)""", """    if ALONE:
        return np.zeros(len(xs)), np.ones(len(xs))
    xs = np.asarray(xs, dtype=np.float64)
    m = np.maximum.accumulate(xs)"""), "again"),
        "no_rescale that does rescale": (_edit("04", "        m = max(m, float(x))\n        s = s + np.exp(x - m)",
                                               "        m_new = max(m, float(x))\n        s = s * np.exp(m - m_new) + np.exp(x - m_new)\n        m = m_new"),
                                         "online_no_rescale"),
    },
    "05": {
        "no max subtraction": (_edit("05", '    e = tl.exp(x - tl.where(m == -float("inf"), 0.0, m))', "    e = tl.exp(x)"),
                               "large logits"),
        "fully-masked row without the guard": (_edit("05", 'tl.where(m == -float("inf"), 0.0, m)', "m").replace(
            "y = tl.where(s == 0.0, 0.0, e / s)", "y = e / s"), "fully-masked"),
        "the guard on the sum (a NaN sum reads as a masked row)": (_edit("05", "y = tl.where(s == 0.0, 0.0, e / s)",
                                                                         "y = e * tl.where(s > 0, 1.0 / s, 0.0)"),
                                                                   "a NaN is never hidden"),
        # fully masked told by the max: a GPU's max (and the interpreter's) drops NaN, so a row whose
        # only visible score is NaN has max -inf and would come out as zeros
        "fully masked told by the max (it drops NaN)": (_edit("05", "y = tl.where(s == 0.0, 0.0, e / s)",
                                                              'y = tl.where(m == -float("inf"), 0.0, e / s)'),
                                                        "a NaN is never hidden"),
        "NaN scrubbed from the outputs": (_edit("05", "    tl.store(out_ptr", "    y = tl.where(y != y, 0.0, y)\n"
                                                "    tl.store(out_ptr"), "a NaN is never hidden"),
        "the causal mask added to the score": (_edit("05", '    x = tl.where(keep, x, -float("inf"))',
                                                     '    x = x + tl.where(keep, 0.0, -float("inf"))'),
                                               "not added to"),
        "causal mask off by one": (_edit("05", "cols <= row % q_len", "cols < row % q_len"), "causal"),
        "scale applied after the softmax": (_edit("05", ".to(tl.float32) * scale", ".to(tl.float32)"), "scale"),
        "masked loads filled with 0 and kept": (_edit("05", "    keep = inside\n", "    keep = cols >= 0\n"), "tail"),
        "masked loads filled with -inf, then scaled (tail unmasked)": (_edit("05", "    keep = inside\n", "    keep = cols >= 0\n").replace(
            "mask=inside, other=0.0).to(tl.float32) * scale", 'mask=inside, other=-float("inf")).to(tl.float32) * scale'),
            "the lanes past n_cols: loaded as -inf, they become +inf times a scale of -2"),
        "fully masked told by a very negative max": (_edit("05", 'tl.where(m == -float("inf"), 0.0, m)', "tl.where(m < -1e30, 0.0, m)"),
                                                     "a row is masked only when its max is exactly -inf"),
        "an infinite max taken for a masked row (hides a +inf)": (_edit(
            "05", 'tl.where(m == -float("inf"), 0.0, m)', 'tl.where((m == -float("inf")) | (m == float("inf")), 0.0, m)'),
            "a guard that takes any infinite max for a masked row"),
        "rows read at row * n_cols (the stride ignored)": (_edit("05", "tl.load(in_ptr + row * stride + cols",
                                                                 "tl.load(in_ptr + row * n_cols + cols"),
                                                           "not at row * n_cols"),
        "exp2 without log2(e)": (_edit("05", 'e = tl.exp(x - tl.where(m == -float("inf"), 0.0, m))',
                                       'e = tl.exp2(x - tl.where(m == -float("inf"), 0.0, m))'), "powers of 2"),
        "divided by the max exp, not the sum": (_edit("05", "y = tl.where(s == 0.0, 0.0, e / s)",
                                                      "y = tl.where(s == 0.0, 0.0, e / tl.max(e, axis=0))"),
                                                "divided by their max"),
        "fp16 statistics": (_edit("05", ".to(tl.float32) * scale", ".to(tl.float16) * scale"), "precision"),
        "store without the tail mask": (_edit("05", "y.to(out_ptr.dtype.element_ty), mask=inside)",
                                              "y.to(out_ptr.dtype.element_ty))"), "wrote past the end of row"),
        "the kernel's signature changed": (_edit("05", "def scale_mask_softmax_kernel(out_ptr, in_ptr, n_cols, stride, scale, q_len,",
                                                 "def scale_mask_softmax_kernel(out_ptr, in_ptr, n_cols, stride, scale,").replace(
            "row % q_len", "row % n_cols").replace("scale, q_len or rows,", "scale,"), "keep the kernel's signature"),
        "a constexpr renamed": (_edit("05", "CAUSAL", "IS_CAUSAL"), "keep the kernel's signature"),
        # the scale folded into the exp after the max of the raw scores: right for scale > 0 only
        "scale folded into the exp after the raw max": (_edit("05", ".to(tl.float32) * scale", ".to(tl.float32)").replace(
            "    e = tl.exp(x - m)", "    e = tl.exp((x - m) * scale)"), "with scale 0 a masked score is still -inf"),
        "max of the raw scores times the scale": (_edit("05", ".to(tl.float32) * scale", ".to(tl.float32)").replace(
            "    m = tl.max(x, axis=0)", "    m = tl.max(x, axis=0) * scale\n    x = x * scale"),
            "with scale < 0 the max to subtract"),
        # a reference other than the row's max: exact in arithmetic, told only where exp's range ends
        "the row's first score subtracted, not its max": (_edit(
            "05", "    m = tl.max(x, axis=0)", "    m = tl.load(in_ptr + row * stride).to(tl.float32) * scale"),
            "exp overflowed or underflowed everywhere"),
        "the row's mean subtracted, not its max": (_edit(
            "05", "    m = tl.max(x, axis=0)",
            "    m = tl.sum(tl.where(keep, x, 0.0), axis=0) / tl.maximum(tl.sum(keep.to(tl.float32), axis=0), 1.0)"),
            "not the max of the row as the softmax sees it"),
        "rows found by n_cols, not the stride": (_edit("05", "row * stride", "row * n_cols"),
                                                 "a row starts at row * stride"),
        "causal query taken as the row index": (_edit("05", "cols <= row % q_len", "cols <= row"), "row % q_len"),
        "scale applied after the max (inside the exp)": (
            _edit("05", "other=0.0).to(tl.float32) * scale", "other=0.0).to(tl.float32)").replace(
                'e = tl.exp(x - tl.where(m == -float("inf"), 0.0, m))',
                'e = tl.exp((x - tl.where(m == -float("inf"), 0.0, m)) * scale)'), "with scale 0 a masked score"),
        # the answer computed by PyTorch in the wrapper, the kernel left empty or taken away
        "PyTorch in the wrapper, an empty kernel": (TORCH_05 + "\n\n@triton.jit\ndef scale_mask_softmax_kernel("
                                                    "out_ptr, in_ptr, n_cols, stride, scale, q_len, CAUSAL: tl.constexpr, "
                                                    "BLOCK: tl.constexpr):\n    pass\n", "the kernel wrote nothing"),
        "PyTorch in the wrapper, no kernel": (TORCH_05 + "\n\ndef scale_mask_softmax_kernel(*args, **kwargs):\n    pass\n",
                                              "must be one @triton.jit function"),
        "the kernel swapped at run time": (_sol("05") + "\n\nimport sys\nsetattr(sys.modules[__name__], 'scale_mask_' + "
                                           "'softmax_kernel', type('K', (), {'__getitem__': lambda self, g: "
                                           "(lambda *a, **k: None)})())\n", "not a @triton.jit kernel"),
        "the kernel rebound to a PyTorch function": (_sol("05") + "\n\nclass _K:\n    def __getitem__(self, grid):\n"
                                                     "        return lambda *a, **k: None\n\n\n"
                                                     "scale_mask_softmax_kernel = _K()\n", "bound again"),
    },
    "06": {
        # the target's logit read at the target itself: a row whose target is ignore_index (-100) then
        # reads 100 elements before its start, past the first row's (the value is thrown away, so only
        # the checker's protected memory shows it)
        "the target's logit loaded at the target, unmasked": (
            _edit("06", "    x_t = tl.sum(tl.where(cols == t, x, 0.0), axis=0)\n",
                  "    x_t = tl.load(in_ptr + row * stride + t).to(tl.float32)\n"),
            "touched memory outside its tensors"),
        # ignore_index is the kernel's argument: a case passes 3 (a padding token's id)
        "ignore_index hard-coded as -100": (_edit("06", "    ignored = t == ignore_index\n", "    ignored = t == -100\n"),
                                            "compare the target with ignore_index"),
        "ignored rows found by a negative target": (_edit("06", "    ignored = t == ignore_index\n",
                                                          "    ignored = t < 0\n"), "compare the target with ignore_index"),
        "no max subtraction": (_edit("06", '    z = x - tl.where(m == -float("inf"), 0.0, m)\n', "    z = x\n"), "60-100"),
        # a reference other than the max, in log_softmax and in the loss: exact in arithmetic, told only where
        # exp's range ends (a first logit 150 below the rest; a logit of 95)
        "log_softmax: the row's first logit subtracted, not its max": (_edit(
            "06", "    m = tl.max(x, axis=0)                # on a GPU it drops NaN: a row of NaN and -inf gets -inf\n",
            "    m = tl.load(in_ptr + row * stride).to(tl.float32)\n"), "what was subtracted before it was not the row's max"),
        "the loss: the target's logit subtracted before exp, not the max": (_edit(
            "06", "    m = tl.max(x, axis=0)\n    e = tl.exp(x - m)",
            "    m = tl.sum(tl.where(cols == t, x, 0.0), axis=0)\n    e = tl.exp(x - m)"), "because m was not the row's max"),
        "fully-masked row without the guard": (_edit("06", '    z = x - tl.where(m == -float("inf"), 0.0, m)\n', "    z = x - m\n").replace(
            'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s))', "y = z - tl.log(s)"), "fully masked"),
        "log of the sum forgotten": (_edit("06", 'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s))',
                                           'y = tl.where(s == 0.0, -float("inf"), z)'),
                                     "the log of the sum was not subtracted"),
        # exact in arithmetic; in float32 the row of the lowest finite value loses log s to lse's rounding
        "log_softmax as x - lse": (_edit("06", 'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s))',
                                         'y = tl.where(s == 0.0, -float("inf"), x - (tl.where(m == -float("inf"), 0.0, m) '
                                         '+ tl.log(s)))'), "rounds log(s) = 4.094 away"),
        "log of the sum without the max": (_edit("06", 'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s))',
                                                 'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s) - m)'), "not 1"),
        "log_softmax guarded on the sum (a NaN sum reads as a masked row)": (_edit(
            "06", 'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s))', "y = z - tl.where(s > 0, tl.log(s), 0.0)"),
            "a NaN is never hidden"),
        "log_softmax's fully masked told by the max (it drops NaN)": (_edit(
            "06", 'y = tl.where(s == 0.0, -float("inf"), z - tl.log(s))',
            'y = tl.where(m == -float("inf"), -float("inf"), z - tl.log(s))'), "a NaN is never hidden"),
        "log_softmax as the log of the softmax (underflows)": (_edit("06", 'z - tl.log(s))', "tl.log(tl.exp(z) / s))"),
                                                               "exp(x - m) underflows to 0 in float32 there"),
        "log_softmax's fully masked told by a very negative max": (_edit("06", 'z = x - tl.where(m == -float("inf"), 0.0, m)',
                                                                        "z = x - tl.where(m < -1e30, 0.0, m)"),
                                                                  "a row is masked only when its max is exactly -inf"),
        "log_softmax's infinite max taken for a masked row (hides a +inf)": (_edit(
            "06", 'z = x - tl.where(m == -float("inf"), 0.0, m)',
            'z = x - tl.where((m == -float("inf")) | (m == float("inf")), 0.0, m)'),
            "row 4 sees a score of +inf"),
        "NaN gradients zeroed": (_edit("06", "grad = tl.where(ignored, 0.0, grad)",
                                       "grad = tl.where(ignored | (grad != grad), 0.0, grad)"), "a NaN is never hidden"),
        "gradient without the one-hot": (_edit("06", "grad = e / s - tl.where(cols == t, 1.0, 0.0)", "grad = e / s"),
                                         "the -1 at the target is missing"),
        "gradient with the wrong sign": (_edit("06", "grad = e / s - tl.where(cols == t, 1.0, 0.0)",
                                               "grad = tl.where(cols == t, 1.0, 0.0) - e / s"), "wrong sign"),
        "one-hot one column off": (_edit("06", "tl.where(cols == t, 1.0, 0.0)", "tl.where(cols == t + 1, 1.0, 0.0)"),
                                   "one column after"),
        "softmax not normalised": (_edit("06", "grad = e / s - ", "grad = e - "), "not divided"),
        "ignored rows zeroed by a multiplication": (_edit("06", "grad = tl.where(ignored, 0.0, grad)",
                                                          "grad = grad * (1.0 - ignored.to(tl.float32))"), "ignore_index"),
        "ignored rows keep their loss": (_edit("06", "tl.where(ignored, 0.0, log_s + (m - x_t))", "log_s + (m - x_t)"),
                                         "row 2 has target ignore_index"),
        "no max in the loss and the gradient": (_edit("06", "    e = tl.exp(x - m)\n    s = tl.sum(e, axis=0)\n    log_s = tl.log(s)",
                                                      "    e = tl.exp(x)\n    s = tl.sum(e, axis=0)\n    log_s = tl.log(s) - m"),
                                                "max"),
        "loss as -log of the probability (underflows)": (
            _edit("06", "tl.store(loss_ptr + row, tl.where(ignored, 0.0, log_s + (m - x_t)))",
                  "tl.store(loss_ptr + row, tl.where(ignored, 0.0, -tl.log(tl.sum(tl.where(cols == t, e / s, 0.0), axis=0))))"),
            "underflows to 0 in float32"),
        "target logit read from row 0": (_edit("06", "x_t = tl.sum(tl.where(cols == t, x, 0.0), axis=0)",
                                               "x_t = tl.load(in_ptr + t).to(tl.float32)"), "read from row 0"),
        "logsumexp without the max added back": (_edit("06", "log_s + (m - x_t)", "log_s - x_t"),
                                                 "must be added back"),
        "gradient stored without the tail mask": (_edit("06", "grad.to(grad_ptr.dtype.element_ty), mask=inside)",
                                                        "grad.to(grad_ptr.dtype.element_ty))"), "wrote past the end of row"),
        # bf16 logits: the loss is float32 and the gradient is rounded once, from float32
        "loss rounded to the logits' dtype": (_edit("06", "tl.where(ignored, 0.0, log_s + (m - x_t))",
                                                    "tl.where(ignored, 0.0, (log_s + (m - x_t)).to(in_ptr.dtype.element_ty)"
                                                    ".to(tl.float32))"),
                                              "precision lost"),
        "exps rounded to the logits' dtype": (_edit("06", "e = tl.exp(x - m)",
                                                    "e = tl.exp(x - m).to(in_ptr.dtype.element_ty).to(tl.float32)"),
                                              "precision lost"),
        "p rounded to the logits' dtype before the one-hot": (_edit(
            "06", "grad = e / s - tl.where(cols == t, 1.0, 0.0)",
            "grad = (e / s).to(in_ptr.dtype.element_ty).to(tl.float32) - tl.where(cols == t, 1.0, 0.0)"), "p_t - 1 cancels"),
        "ignored rows' gradient never stored": (_edit(
            "06", "grad.to(grad_ptr.dtype.element_ty), mask=inside)",
            "grad.to(grad_ptr.dtype.element_ty), mask=inside & (cols * 0 + t != ignore_index))"), "ignore_index"),
        "target logit picked by a one-hot product (0 * -inf)": (
            _edit("06", "x_t = tl.sum(tl.where(cols == t, x, 0.0), axis=0)",
                  "x_t = tl.sum(x * (cols == t).to(tl.float32), axis=0)"), "times 0 is NaN"),
        "logsumexp with log2": (_edit("06", "log_s = tl.log(s)", "log_s = tl.log2(s)"), "not log2"),
        # exact in arithmetic, wrong in float32 where the logits reach its largest values (3e38 + 2 is 3e38)
        "the loss as lse - x_t (log s rounded away)": (_edit("06", "log_s + (m - x_t)", "(m + log_s) - x_t"),
                                                        "rounds log(s) away"),
        "p as exp(x - lse)": (_edit("06", "grad = e / s - ", "grad = tl.exp(x - (m + log_s)) - "),
                              "p was taken as exp(x - lse)"),
        "exp2 without log2(e)": (_edit("06", "e = tl.exp(x - m)", "e = tl.exp2(x - m)"), "scaled by log2(e)"),
        "lanes past the tail loaded as 0": (_edit("06", "other=-float(\"inf\")).to(tl.float32)\n    m = tl.max(x, axis=0)\n    e =",
                                                  "other=0.0).to(tl.float32)\n    m = tl.max(x, axis=0)\n    e ="), "loaded as 0 and counted"),
    },
    "07": {
        # judged from the source: the same numbers as the tiled loop, without walking the tiles
        "the whole row at once, keys sliced to the block's end": (_edit("07", "        m_new = np.maximum(m, s.max(axis=1))",
            "        if start == 0:\n"
            "            full = q @ k[:end].T * scale\n"
            "            full = np.where((np.arange(end)[None, :] <= rows[:, None]) | (not causal), full, -np.inf)\n"
            "            e = np.exp(full - full.max(axis=1, keepdims=True))\n"
            "            o, l = e @ v[:end], e.sum(axis=1)\n"
            "        continue\n"
            "        m_new = np.maximum(m, s.max(axis=1))"), "reads `q`"),
        "values sliced by position, not v[cols]": (_edit("07", "p @ v[cols]", "p @ v[start:start + p.shape[1]]"),
                                                   "v[cols]"),
        "the loop walks to n_keys, not causal_key_end": (_edit("07", "for start in range(0, end, tile):",
                                                               "for start in range(0, n_keys, tile):"),
                                                         "keep the scaffold of attention_block"),
        "a helper that reads the caller's frame": (_edit("07", "def attention_block(", "def _peek():\n"
                                                         "    import sys\n    return sys._getframe(2).f_locals['k']\n\n\n"
                                                         "def attention_block(").replace(
            "        m_new = np.maximum(m, s.max(axis=1))", "        _peek()\n        m_new = np.maximum(m, s.max(axis=1))"),
            "called by the update"),
        "o not rescaled": (_edit("07", "o = o * alpha[:, None] + p @ v[cols]", "o = o + p @ v[cols]"), "o was not rescaled"),
        "l not rescaled": (_edit("07", "l = l * alpha + p.sum(axis=1)", "l = l + p.sum(axis=1)"), "l was not rescaled"),
        "causal end skips the diagonal tile": (_edit("07", "return min(n_keys, q_end)", "return min(n_keys, q_start)"),
                                               "diagonal tile"),
        "causal end off by one": (_edit("07", "return min(n_keys, q_end)", "return min(n_keys, q_end - 1)"),
                                  "off by one"),
        "causal end ignores the block (visits every tile)": (_edit("07", "return min(n_keys, q_end)", "return n_keys"),
                                                              "causal saving"),
        "exp against the old max": (_edit("07", "p = np.exp(s - m_ref[:, None])",
                                          "p = np.exp(s - np.where(np.isneginf(m), 0.0, m)[:, None])"), "against the old max"),
        "m updated before the factor is formed": (_edit("07", "        m_new = np.maximum(m, s.max(axis=1))\n",
                                                        "        m_new = np.maximum(m, s.max(axis=1))\n        m = m_new\n"),
                                                  "neither l nor o was rescaled"),
        "rescaled by the inverse factor": (_edit("07", "alpha = np.exp(m - m_ref)",
                                                 "alpha = np.exp(m_ref - np.where(np.isneginf(m), 0.0, m))"),
                                           "multiplied by exp(m_new - m_old)"),
        "m never updated": (_edit("07", "        m = m_new\n", ""), "m was never updated"),
        "rescaled by the inverse factor, -inf included (inf * 0 on the first tile)": (
            _edit("07", "alpha = np.exp(m - m_ref)", "alpha = np.exp(m_ref - m)"), "although no key or value your loop should read holds NaN"),
        "no -inf guard (a tile of -inf scores before the first visible key)": (
            _edit("07", "m_ref = np.where(np.isneginf(m_new), 0.0, m_new)", "m_ref = m_new"), "(the guard)"),
        "the tile's max alone (the running max falls)": (_edit("07", "m_new = np.maximum(m, s.max(axis=1))",
                                                               "m_new = s.max(axis=1)"), "the running max fell"),
        "p rounded to float32": (_edit("07", "p = np.exp(s - m_ref[:, None])",
                                       "p = np.exp(s - m_ref[:, None]).astype(np.float32)"), "float64's tolerance"),
        "causal end past the valid keys": (_edit("07", "return min(n_keys, q_end)", "return q_end"),
                                           "min(n_keys, q_end)"),
        "a whole row of scores at once (no tiles)": (_edit("07", "    end = causal_key_end(",
            "    keep = (np.arange(len(k))[None, :] < n_keys) & ((np.arange(len(k))[None, :] <= rows[:, None]) if causal "
            "else True)\n    s = np.where(keep, q @ k.T * scale, -np.inf)\n    mx = s.max(axis=1, keepdims=True)\n"
            "    p = np.exp(s - np.where(np.isneginf(mx), 0.0, mx))\n    l = p.sum(axis=1, keepdims=True)\n"
            "    return (p @ v) / np.where(l == 0, 1.0, l)\n    end = causal_key_end("),
            "keep the scaffold of attention_block"),
        "the course's reference does the block": (_edit("07", "import numpy as np\n",
                                                        "import numpy as np\nfrom a07_softmax import reference as R\n").replace(
            "    end = causal_key_end(", "    return np.stack([R.attention_row_tiled(r, v, tile) for r in np.where("
            "(np.arange(len(k))[None, :] < n_keys) & ((np.arange(len(k))[None, :] <= rows[:, None]) if causal else True), "
            "q @ k.T * scale, -np.inf)])\n    end = causal_key_end("), "out of an exercise's reach"),
        "no visible key told by a very negative max": (_edit("07", "m_ref = np.where(np.isneginf(m_new), 0.0, m_new)",
                                                             "m_ref = np.where(m_new < -1e30, 0.0, m_new)"),
                                                       "a row is masked only when its max is exactly -inf"),
        # the scores and values of every tile so far kept and the softmax recomputed: right numbers,
        # O(keys) memory, not the online recurrence (judged from the source)
        "every tile kept, the softmax recomputed over them": (_edit("07", _UPDATE_07, _KEEP_TILES_07), "carries `vals`"),
        "a list of tiles filled tile by tile": (_edit("07", _UPDATE_07, _LIST_OF_TILES_07), "carries `acc`"),
        # exact in arithmetic for any shift: only rows far apart (underflow) and a max that rises twice
        # (overflow) tell them, and each must be named, not taken for another mistake
        "one max for the whole block (s.max())": (_edit("07", "m_new = np.maximum(m, s.max(axis=1))",
                                                        "m_new = np.maximum(m, s.max())"), "each row needs its own"),
        "the max set by the first tile and kept": (_edit("07", "m_new = np.maximum(m, s.max(axis=1))",
                                                         "m_new = np.where(np.isneginf(m), s.max(axis=1), m)"),
                                                   "never raised after"),
    },
    "01": {
        "no max subtraction": (_edit("01", "fast_exp(xr[c] - m)", "fast_exp(xr[c])"), "100.0"),
        "thread-local max": (_edit("01", "    m = block_max(m);\n", ""), "each thread used its own max"),
        "thread-local sum": (_edit("01", "    s = block_sum(s);\n", ""), "its own partial sum"),
        # a reference other than the row's max: right wherever exp stays in range
        "the row's first score as the max": (_edit("01", "    m = block_max(m);\n", "    m = xr[0];\n"),
                                             "exp overflowed or underflowed everywhere"),
        "the max clamped at 0": (_edit("01", "    m = block_max(m);\n", "    m = block_max(m);\n    m = m > 0.0f ? m : 0.0f;\n"),
                                 "exp overflowed or underflowed everywhere"),
        "includes the solution": ('#include "../solutions/01_safe_softmax.cu"\n', "course headers"),
        "includes it through a macro": ('#define S "../solutions/01_safe_softmax.cu"\n#include S\n', "course headers"),
        # on the CPU target these two are named (a deadlock, a write past the end); on a GPU they show
        # as wrong outputs, so only their failing is required there
        "barrier inside divergent code": (_edit("01", "    m = block_max(m);\n", "    if (threadIdx.x < 32) m = block_max(m);\n"),
                                          "deadlock" if not backend.detect().native else ""),
        "off-by-one bound on the output": (_edit("01", "for (int c = threadIdx.x; c < cols; c += BLOCK) yr[c]",
                                                 "for (int c = threadIdx.x; c <= cols; c += BLOCK) yr[c]"),
                                           "past the end" if not backend.detect().native else ""),
        "warp-only reductions": (_edit("01", "    m = block_max(m);\n", "    m = warp_allreduce(m, MaxOp());\n"),
                                 "reduced over one warp"),
        "never divided by the sum": (_edit("01", "    s = block_sum(s);\n", "    s = 1.0f;\n"),
                                     "never divided by the row's sum"),
        "partial sums combined with a max": (_edit("01", "    s = block_sum(s);\n", "    s = block_max(s);\n"),
                                             "combined with a max, not a sum"),
        "a loop that never ends": (_edit("01", "c < cols; c += BLOCK) yr[c]", "c < cols; c += 0) yr[c]"),
                                   "stopped after 8 s inside safe_softmax()", 8),
    },
    "02": {
        "no fully-masked guard": (_edit("02", "      if (st.m == A07_NEG_INF) out = 0.0f;\n", ""), "fully-masked"),
        "causal mask off by one": (_edit("02", "c > q", "c >= q"), "the causal mask is off by one"),
        "mask in one loop only": (_edit("02", "      // BEGIN SOLUTION\n      if ((causal && c > q) || c >= len) v = A07_NEG_INF;\n      // END SOLUTION\n      float out",
                                        "      float out", 1), "writes the outputs"),
        "padding ignored": (_edit("02", " || c >= len", ""), "padding"),
        "padding mask off by one": (_edit("02", "c >= len", "c > len"), "the padding mask is off by one"),
        "masked scores set to 0": (_edit("02", "v = A07_NEG_INF;", "v = 0.0f;"), "masked scores were set to 0"),
        "causal mask reversed": (_edit("02", "c > q", "q > c"), "the causal mask is reversed"),
        "causal mask by the row index": (_edit("02", "c > q", "c > row"), "compared the key with the row index"),
        "padding mask one key too many": (_edit("02", "c >= len", "c >= len - 1"), "the padding mask is off by one"),
        "NaN scrubbed from the outputs": (_edit("02", "if (st.m == A07_NEG_INF) out = 0.0f;",
                                                "if (out != out) out = 0.0f;"), "a NaN is never hidden"),
        "fully masked told by a very negative max": (_edit("02", "if (st.m == A07_NEG_INF) out = 0.0f;",
                                                           "if (st.m < -1e30f) out = 0.0f;"),
                                                     "a row is masked only when its max is exactly -inf"),
        "fully masked told by isinf (hides a +inf)": (_edit("02", "if (st.m == A07_NEG_INF) out = 0.0f;",
                                                            "if (isinf(st.m)) out = 0.0f;"),
                                                      "a guard that takes any infinite max for a masked row"),
        "isnan beside the right guard": (_edit("02", "if (st.m == A07_NEG_INF) out = 0.0f;",
                                               "if (st.m == A07_NEG_INF || isnan(out)) out = 0.0f;"),
                                         "a NaN is never hidden"),
        "NaN scores left out of the statistics": (_edit("02", "ms_of(v)", "ms_of(v != v ? A07_NEG_INF : v)"),
                                                  "a NaN is never hidden"),
        "the mask added to the score": (_edit("02", "v = A07_NEG_INF;", "v += A07_NEG_INF;"),
                                        "replaced by -inf (v = -inf) whatever it held, not added to"),
        "mask in the output loop only": (_edit("02", "      // BEGIN SOLUTION\n      if ((causal && c > q) || c >= len) v = A07_NEG_INF;\n      // END SOLUTION\n      st = combine",
                                               "      st = combine", 1), "the max and the sum included masked scores"),
        # the outputs' reference other than the max the sum was formed with: each row the softmax times a factor
        "outputs without the max": (_edit("02", "fast_exp(v - st.m)", "fast_exp(v)"), "the same m"),
        "outputs against the first score": (_edit("02", "fast_exp(v - st.m)", "fast_exp(v - xr[0])"), "the same m"),
        "outputs against the max clamped at 0": (_edit("02", "fast_exp(v - st.m)", "fast_exp(v - fmaxf(st.m, 0.0f))"),
                                                 "the same m"),
    },
}
WRONG["04"].update({f"online_vectorized: {name}": (_vectorized_04(body, name), words)
                    for name, (body, words) in WRONG_VECTOR_04.items()})
CASES = [(n, name) for n, wrongs in WRONG.items() for name in wrongs]


@pytest.fixture(scope="module")
def wrong_results(tmp_path_factory):
    """Every wrong answer checked once, in parallel (each check is a child process)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    files = {}
    for number, mistake in CASES:  # folders made here: pytest's tmp_path_factory is not thread-safe
        f = tmp_path_factory.mktemp("wrong") / check.EXERCISES[number]
        f.write_text(WRONG[number][mistake][0])
        files[(number, mistake)] = f

    def one(item):
        timeout = WRONG[item[0]][item[1]][2] if len(WRONG[item[0]][item[1]]) > 2 else 60
        return item, check.run_check(item[0], files[item], timeout=timeout, hip=False)  # hipcc: the solutions' test
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.parametrize("number, mistake", CASES, ids=[f"{n}-{m}" for n, m in CASES])
def test_a_wrong_answer_never_passes(number, mistake, wrong_results):
    words = WRONG[number][mistake][1]
    results = wrong_results[(number, mistake)]
    st = check.status(results)
    got, most = check.points(results)
    assert st != "passed" and got < most, (mistake, [tuple(r) for r in results])
    if number in ("01", "02") and not backend.detect().native and "include" not in mistake \
            and cpu_target.compiler() is None:
        assert st == "incomplete"  # compiled, not run: never "passed"
        return
    failing = [r for r in results if r.verdict in (check.FAIL, check.ERROR, check.TIMEOUT)]
    assert failing, (mistake, [tuple(r) for r in results])
    text = " ".join(f"{r.name} {r.detail}" for r in failing)
    assert words in text, (mistake, words, text[:500])


def test_a_wrong_answer_gets_the_first_mismatch(tmp_path):
    f = tmp_path / "04_online_trace.py"
    f.write_text(_edit("04", "s = s * np.exp(m - m_new) + np.exp(x - m_new)", "s = s * np.exp(m - m_new) + 2 * np.exp(x - m_new)"))
    results = {r.name: r for r in check.run_check("04", f)}
    r = results["online_scalar: the trace of [1, 2, -3, 12, 11, 4]"]
    assert r.verdict == check.FAIL and "after element 0 (1.0): got (m=1.0, s=2.00000000), expected (m=1.0, s=1.00000000)" in r.detail


def test_an_exception_names_the_learners_line(tmp_path):
    f = tmp_path / "04_online_trace.py"
    f.write_text("import numpy as np\n\n\ndef online_scalar(xs):\n    return [(x, 1.0) for x in xs][10]\n")
    r = next(r for r in check.run_check("04", f) if r.name.startswith("online_scalar"))
    assert r.verdict == check.FAIL and "IndexError" in r.detail and "04_online_trace.py:5" in r.detail


@pytest.mark.slow
def test_a_hanging_exercise_is_stopped_and_named(tmp_path):
    f = tmp_path / "04_online_trace.py"
    f.write_text("def online_scalar(xs):\n    while True:\n        pass\n")
    results = check.run_check("04", f, timeout=5)
    assert check.status(results) == "timeout"
    first = next(r for r in results if r.verdict == check.TIMEOUT)
    assert "stopped after 5 s inside online_scalar()" in first.detail


def test_a_crashing_exercise_is_reported(tmp_path):
    f = tmp_path / "04_online_trace.py"
    f.write_text("import os\nos._exit(7)\n")
    results = check.run_check("04", f, timeout=60)
    assert check.status(results) == "error" and "exit 7" in results[0].detail


def test_markdown_answers_get_hints_not_answers_and_accept_rounding(tmp_path):
    text = (ROOT / "exercises" / check.EXERCISES["03"]).read_text()
    for old, new in (("merged_sum = ?", "merged_sum = 3.1"), ("s_after_12 = ?", "s_after_12 = 1"),
                     ("rescale_factor = ?", "rescale_factor = 4.5e-5"), ("bytes_3pass = ?", "bytes_3pass = 134217728")):
        text = text.replace(old, new)
    f = tmp_path / "03.md"
    f.write_text(text)
    results = {r.name: r for r in check.run_check("03", f)}
    assert results["merged_sum"].verdict == check.FAIL and "common max" in results["merged_sum"].detail
    assert results["s_after_12"].verdict == check.FAIL and "do not vanish" in results["s_after_12"].detail
    assert results["rescale_factor"].verdict == check.PASS  # sensible rounding of 4.54e-5
    assert results["bytes_3pass"].verdict == check.FAIL and "4 bytes" in results["bytes_3pass"].detail
    for key, (expected, _, _) in check.MD_ANSWERS.items():  # a hint, never the answer
        for shown in (f"{expected:.6g}", f"{expected:.3g}", f"{expected:.0f}"):
            assert len(shown) < 3 or shown not in results[key].detail, (key, shown)
    assert results["bytes_1pass"].verdict == check.TODO
    assert sum(r.max_points for r in results.values()) == sum(
        r.max_points for r in check.run_check("03", check.find("03", solution=True)))


# The update formulas of exercise 03 that learners write, each with the words its verdict must carry:
# a wrong one fails naming the mistake, a right one in another notation passes.
WRONG_FORMULAS_03 = [
    ("s_new", "s + exp(x - m_new)", "not rescaled"),
    ("s_new", "s * exp(m_new - m) + exp(x - m_new)", "inverted"),
    ("s_new", "s * exp(m - m_new) + exp(x - m)", "against the old max"),
    ("s_new", "s + exp(x - m)", "neither"),
    ("s_new", "s * exp(m - x) + 1", "only when x is the new max"),
    ("s_new", "(s * exp(m) + exp(x)) / exp(m_new)", "overflows"),
    ("s_new", "(s + exp(x - m)) * exp(m - m_new)", "first element"),
    ("s_new", "s * exp(m - m_new) + 1", "m = 12, s = 1.1, x = 2"),
    ("s_new", "s*exp(m-m_new)+exp(x-m_new", "not a formula"),
    ("s_new", "__import__('os').system('true')", "not arithmetic"),
    ("m_new", "x", "running max never falls"),
    ("m_new", "m", "larger x"),
    ("m_new", "min(m, x)", "m = -inf"),
    # a finite stand-in for -inf is above float32's lowest scores, and above any score after a masked start
    ("m_new", "max(m, x, -1e30)", "finite stand-in"),
    ("m_new", "max(m, x) if max(m, x) > -1e30 else -1e30", "finite stand-in"),
    ("m_new", "x if x > m else m if m > -1e300 else 0", "nothing seen yet"),
    # a case split, right in one branch only
    ("s_new", "s * exp(m - x) + 1 if x > m else s + exp(m - x)", "exponent inverted"),
    ("s_new", "s * exp(m - m_new) + exp(x - m_new) if x > -1e30 else s", "very negative"),
]
RIGHT_FORMULAS_03 = [("m_new", "max(x, m)"), ("s_new", "s*e^(m - m') + e^(x - m')"),
                     ("s_new", "s \u00b7 exp(m \u2212 m_new) + exp(x \u2212 m_new)"),
                     ("s_new", "exp(log(s) + m - max(m, x)) + exp(x - max(m, x))"),
                     ("m_new", "x if x > m else m"), ("m_new", "x if x >= m else m"),
                     ("s_new", "s * exp(m - x) + 1 if x > m else s + exp(x - m)"),
                     ("s_new", "s * exp(min(m - m_new, 0)) + exp(x - m_new)")]


@pytest.mark.parametrize("key,formula,words", WRONG_FORMULAS_03)
def test_a_wrong_update_formula_fails_naming_the_mistake(tmp_path, key, formula, words):
    sol = (ROOT / "solutions" / check.EXERCISES["03"]).read_text()
    line = next(ln for ln in sol.splitlines() if ln.startswith(f"{key} = "))
    f = tmp_path / "03.md"
    f.write_text(sol.replace(line, f"{key} = {formula}"))
    results = {r.name.split(":")[0]: r for r in check.run_check("03", f)}
    assert results[key].verdict == check.FAIL and words in results[key].detail, results[key]
    assert check.status(list(results.values())) == "failed"


@pytest.mark.parametrize("key,formula", RIGHT_FORMULAS_03)
def test_a_right_update_formula_in_other_notation_passes(key, formula):
    assert check.check_formula(key, formula).verdict == check.PASS


def test_a_table_of_the_checkers_states_is_no_formula():
    """check.py is in the learner's hands: a conditional that returns the truth for every state it
    lists must still fail, on the states drawn afresh for each check."""
    fixed = check.MD_STATES + check.MD_LOWEST_STATES + check.MD_MASKED_STATES + check.MD_MASKED_MAX_STATES
    for key in ("m_new", "s_new"):
        truth = check.MD_FORMULAS[key][0]
        table = "0"
        for m, s, x in fixed:
            if key == "s_new" and m == x == -np.inf:
                continue
            value = truth(m, s, x, max(m, x))
            table = f"{value!r} if x == {x!r} and m == {m!r} and s == {s!r} else ({table})".replace("inf", "1e999")
        r = check.check_formula(key, table)
        assert r.verdict == check.FAIL, (key, r)
        assert check.check_formula(key, table, rng=np.random.default_rng(0)).verdict == check.FAIL


def test_the_formula_checks_hold_for_any_draw_of_states():
    """The drawn states never fail a right formula nor pass a wrong one, whatever the draw."""
    for seed in range(20):
        rng = np.random.default_rng(seed)
        for key, formula in RIGHT_FORMULAS_03:
            assert check.check_formula(key, formula, rng=rng).verdict == check.PASS, (seed, key, formula)
        for key, formula, _ in WRONG_FORMULAS_03:
            assert check.check_formula(key, formula, rng=rng).verdict == check.FAIL, (seed, key, formula)


def test_exercise_07_update_through_a_helper_of_its_own_passes(tmp_path):
    """The source check of exercise 07 judges what the update reads, not how it is written: a helper
    function that takes the tile's scores and values is an update like any other."""
    sol = _sol("07")
    start = sol.index("        ### BEGIN SOLUTION\n        m_new")
    end = sol.index("        ### END SOLUTION\n", start) + len("        ### END SOLUTION\n")
    helper = ("def step(m, l, o, s, vt):\n    m_new = np.maximum(m, s.max(axis=1))\n"
              "    m_ref = np.where(np.isneginf(m_new), 0.0, m_new)\n    alpha = np.exp(m - m_ref)\n"
              "    p = np.exp(s - m_ref[:, None])\n    return m_new, l * alpha + p.sum(axis=1), o * alpha[:, None] + p @ vt\n\n\n")
    text = (sol[:start].replace("def attention_block", helper + "def attention_block")
            + "        # this tile's values\n        vt = v[cols]\n        m, l, o = step(m, l, o, s, vt)\n" + sol[end:])
    f = tmp_path / check.EXERCISES["07"]
    f.write_text(text)
    results = check.run_check("07", f)
    assert check.status(results) == "passed", [tuple(r) for r in results if r.verdict != check.PASS]


def test_markdown_prose_is_for_a_person_never_passed_by_the_checker(tmp_path):
    """The explanation and the proof are written by the learner and read by a person: a keyword test
    passed the classic wrong update (s' = s + exp(x - m'), which names both max and exp) as stated.
    Written prose is marked for reading, worth no points and never PASS, and the classic mistake is
    caught where it can be: in the formula."""
    sol = (ROOT / "solutions" / check.EXERCISES["03"]).read_text()
    body = sol.split("## 1. Derive the update")[1].split("## 2.")[0]
    line = next(ln for ln in sol.splitlines() if ln.startswith("s_new = "))
    wrong = sol.replace(body, "\nm' = max(m, x) and s' = s + exp(x - m'): the new term is added.\n\n").replace(
        line, "s_new = s + exp(x - m_new)")
    f = tmp_path / "03.md"
    f.write_text(wrong)
    results = check.run_check("03", f)
    prose = [r for r in results if r.name.startswith("section ")]
    assert len(prose) == len(check.MD_DERIVATIONS) and all(r.verdict == check.READ and r.max_points == 0
                                                           for r in prose)
    assert check.status(results) == "failed" and "not rescaled" in next(r.detail for r in results
                                                                        if r.name.startswith("s_new"))
    f.write_text(sol.replace(body, "\n_(your answer here)_\n\n"))
    results = check.run_check("03", f)
    assert check.status(results) == "todo" and check.points(results)[0] == check.points(results)[1]
    out = __import__("io").StringIO()
    check.report("03", check.find("03", solution=True), check.run_check("03", check.find("03", solution=True)), file=out)
    assert "for a person to read" in out.getvalue() and "PASS] section" not in out.getvalue()


def test_each_check_is_announced_as_it_starts():
    seen = []
    results = check.run_check("04", check.find("04", solution=True), progress=seen.append)
    named = [r.name for r in results if r.max_points]
    assert seen and set(seen) <= set(named) and seen[0] == named[0]


def test_the_mistake_diagnoses_stay_quiet_on_right_answers(rng):
    """A right output is never 'recognised' as a mistake (and the hint only ever follows a mismatch)."""
    from a07_softmax import check
    from a07_softmax import reference as R

    x = rng.uniform(-4, 4, size=(5, 700)).astype(np.float32)
    x[0, 3] = 100.0
    assert check.diagnose_block_reduction(R.softmax(x), x, 256) is None
    lens = np.array([700, 0, 1, 350, 10])
    ref = R.scale_mask_softmax(x, 1.0, R.padding_mask(lens, 700))
    assert check.diagnose_mask(ref, ref, x) is None
    assert check.diagnose_mask_variant(ref, x, np.arange(5), lens, False, True) is None
    causal = R.scale_mask_softmax(x, 1.0, R.causal_mask(5, 700) + R.padding_mask(lens, 700))
    assert check.diagnose_mask_variant(causal, x, np.arange(5), lens, True, True) is None
    logits = rng.normal(0, 8, size=(6, 77))
    logits[3, 7] = 150.0
    t = np.array([0, 5, -100, 9, 40, 76])
    top = float(np.finfo(np.float32).max)
    logits[4, :8], t[4] = top, 3   # where lse - x_t and exp(x - lse) are wrong: the right answer is no mistake
    logits[5] = top / 2
    loss, grad = check.ce_reference(logits, t)
    assert check.diagnose_ce_loss(loss, logits, t) is None
    assert check.diagnose_ce_grad(grad, logits, t) is None
    lsm_in = logits.copy()
    lsm_in[1] = -np.inf
    assert check.diagnose_log_softmax(R.log_softmax(lsm_in), lsm_in) is None
    assert check._with_hint(None, lambda: "never asked") is None


def test_the_checkers_kernel_signatures_are_the_scaffolds_and_names_by_position_are_free():
    """check.TRITON_KERNELS is what the trusted launchers bind to: it must be the scaffolds' and the
    solutions' signatures, and renaming a parameter passed by position is no mistake."""
    for number, kernels in check.TRITON_KERNELS.items():
        for folder in ("exercises", "solutions"):
            text = (ROOT / folder / check.EXERCISES[number]).read_text()
            assert check._not_jit_kernels(text, kernels) is None, (folder, number)
    text = (ROOT / "solutions" / check.EXERCISES["05"]).read_text()
    assert check._not_jit_kernels(text.replace("in_ptr", "x_ptr"), check.TRITON_KERNELS["05"]) is None
    dropped = check._not_jit_kernels(text.replace("scale, q_len,\n", "scale,\n"), check.TRITON_KERNELS["05"])
    assert dropped and "keep the kernel's signature" in dropped and "6 by position" in dropped, dropped


@pytest.mark.parametrize("name", sorted(RIGHT_07))
def test_a_right_answer_written_otherwise_passes_exercise_07(tmp_path, name):
    assert RIGHT_07[name] != _UPDATE_07, "the variant's replace matched nothing: it would test the solution"
    f = tmp_path / check.EXERCISES["07"]
    f.write_text(_edit("07", _UPDATE_07, RIGHT_07[name]))
    results = check.run_check("07", f, timeout=120)
    assert check.status(results) == "passed", [tuple(r) for r in results if r.verdict != check.PASS]


@pytest.mark.parametrize("name", sorted(RIGHT_04))
def test_a_right_answer_written_otherwise_passes_exercise_04(tmp_path, name):
    f = tmp_path / check.EXERCISES["04"]
    f.write_text(_edit("04", _SCALAR_04, RIGHT_04[name], 1))
    results = check.run_check("04", f, timeout=120)
    assert check.status(results) == "passed", [tuple(r) for r in results if r.verdict != check.PASS]


@pytest.mark.parametrize("name", sorted(RIGHT_VECTOR_04))
def test_a_right_vectorized_answer_written_otherwise_passes_exercise_04(tmp_path, name):
    f = tmp_path / check.EXERCISES["04"]
    f.write_text(_vectorized_04(RIGHT_VECTOR_04[name], name))
    results = check.run_check("04", f, timeout=120)
    assert check.status(results) == "passed", [tuple(r) for r in results if r.verdict != check.PASS]


def test_the_source_check_of_online_vectorized_tells_loops_from_array_operations():
    """Every right answer (the scans included, whose loops walk log2(n) levels) reads as array
    operations; every wrong one is named with its line."""
    for name, body in {**RIGHT_VECTOR_04, **RIGHT_SCANS_04, "the solution": _VECTOR_04}.items():
        assert check._online_vectorized_problem(_vectorized_04(body, name)) is None, name
    for name, (body, words) in WRONG_VECTOR_04.items():
        why = check._online_vectorized_problem(_vectorized_04(body, name))
        assert why and words in why and re.search(r"line \d+", why), (name, why)
    # the stub, and a file that does not parse, are left to the child (it names them)
    assert check._online_vectorized_problem((ROOT / "exercises" / check.EXERCISES["04"]).read_text()) is None
    assert check._online_vectorized_problem("def online_vectorized(xs:\n") is None


# the target's logit read with one load at the target, made safe for ignored rows: both pass
RIGHT_06 = {
    "a load at the target, masked for ignored rows": "    x_t = tl.load(in_ptr + row * stride + t, mask=t != ignore_index, "
                                                      "other=0.0).to(tl.float32)\n",
    "a load at the target, the index clamped for ignored rows": "    x_t = tl.load(in_ptr + row * stride + "
                                                                 "tl.where(t == ignore_index, 0, t)).to(tl.float32)\n",
}


@pytest.mark.parametrize("name", sorted(RIGHT_06))
def test_a_right_answer_written_otherwise_passes_exercise_06(tmp_path, name):
    if not backend.detect().triton_installed:
        pytest.skip("triton is not installed here: exercise 06 runs in the Triton interpreter")
    f = tmp_path / check.EXERCISES["06"]
    f.write_text(_edit("06", "    x_t = tl.sum(tl.where(cols == t, x, 0.0), axis=0)\n", RIGHT_06[name]))
    results = check.run_check("06", f, timeout=300)
    assert check.status(results) == "passed", [tuple(r) for r in results if r.verdict != check.PASS]


def test_an_illegal_memory_access_on_a_gpu_is_named_like_the_interpreters_fault():
    """On a GPU, exercise 06's unmasked load at a target of -100 is CUDA's illegal address (seen on an
    H100), which the child reports as an error: the judge names what it most likely was, as it does
    for the interpreter's segmentation fault."""
    class Run:
        timed_out, returncode, running, stderr, timeout, box = False, 0, "", "", 10.0, None
        results = [{"id": "c0", "error": "AcceleratorError: CUDA error: an illegal memory access was encountered",
                    "where": ""}]
    case = check.Case("a case", {"fn": "cross_entropy", "launches": "cross_entropy_kernel", "args": []},
                      lambda got: None, {})
    (result,) = check._judge([case], Run(), False)
    assert result.verdict == check.FAIL and "outside its tensors" in result.detail \
        and "mask=t != ignore_index" in result.detail, result.detail


def test_the_clock_of_a_timed_check_allows_for_a_busy_machine(tmp_path):
    """online_vectorized's timed call: a right answer slowed by a busy machine passes, because the
    limit grows with a trusted twin timed beside it; a call far slower than the twin fails, naming a
    loop. The twin computes what the judge expects (else its time would measure other work)."""
    from types import SimpleNamespace

    case = next(c for c in check.cases_04(np.random.default_rng(0), False) if c.call.get("max_seconds"))
    x = next(iter(case.inputs.values()))
    ref = np.vstack([np.maximum.accumulate(x), case.twin(x)])
    assert case.judge(ref) is None, "the twin does not compute the expected s"
    assert check._twin_seconds(case) > 0
    (tmp_path / "outputs").mkdir()
    np.save(tmp_path / "outputs" / "c0.npy", ref)

    def verdict(took, twin):
        run = SimpleNamespace(results=[{"id": "c0", "ok": True, "seconds": took}], box=tmp_path, timed_out=False,
                              judge_clock={"c0": (took, [ref, ref])}, twin_clock={"c0": twin})
        (result,) = check._judge([case], run, todo=False)
        return result
    floor = case.call["max_seconds"]
    assert verdict(0.9 * floor, 0.05).verdict == check.PASS
    busy = verdict(1.5 * floor, 0.3)                  # CI's solution run: 1.1 s against the old 1 s limit
    assert busy.verdict == check.PASS, busy.detail
    slow = verdict(5 * check.TWIN_FACTOR * 0.3, 0.3)
    assert slow.verdict == check.FAIL and "loop" in slow.detail and "trusted array operations took 0.30 s" in slow.detail
    idle = verdict(1.5 * floor, 0.01)                 # the floor holds where the twin is quick
    assert idle.verdict == check.FAIL and f"over the {floor:.1f} s allowed" in idle.detail


def test_exercise_05s_normalisation_diagnoses_name_only_their_own_mistake():
    """check.diagnose_softmax_rows: each wrong output it knows gets its words, a right one none, and
    rows that overflow exp (no max subtracted) are never taken for rows read at the wrong stride."""
    rng = np.random.default_rng(3)
    z = rng.uniform(-20, 20, size=(6, 33))
    z[3, 10:] = -np.inf                                  # a masked tail
    right = np.exp(z - z.max(axis=1, keepdims=True))
    by_max = right.copy()
    right = right / right.sum(axis=1, keepdims=True)
    base2 = np.exp2(z - z.max(axis=1, keepdims=True))
    base2 /= base2.sum(axis=1, keepdims=True)
    assert check.diagnose_softmax_rows(right, z) is None
    assert "powers of 2" in check.diagnose_softmax_rows(base2, z)
    assert "divided by their max" in check.diagnose_softmax_rows(by_max, z)
    strided = right.copy()
    strided[2:] = np.nan                                 # rows past the first read across the gap
    assert "row * stride" in check.diagnose_softmax_rows(strided, z)
    big = z.copy()
    big[1:] += 70                                        # exp(x) overflows float32 above 88; row 0 does not
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(big.astype(np.float32))
        naive = naive / naive.sum(axis=1, keepdims=True)
    assert np.isnan(naive[1:]).any() and np.allclose(naive[0], right[0], rtol=1e-5)
    assert "stride" not in (check.diagnose_softmax_rows(naive, big) or "")
