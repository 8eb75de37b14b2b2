"""The exercise checker: `make check EX=01` (= python -m a07_softmax check 01).

Runs the learner's file from exercises/ (SOLUTION=1 or --solution: the one in solutions/) and prints
every check with a verdict and, on failure, the first mismatch (row, col, got, expected) or the
compiler's message. Each exercise runs in a child process under a timeout, so a kernel that hangs or
crashes is stopped with a message and never takes the terminal or a notebook kernel down with it.

Exercises are generated from solutions by `python -m a07_softmax.check generate` (strips the regions
between BEGIN SOLUTION and END SOLUTION markers); tests/test_exercises.py checks that regenerating
changes nothing.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from .native import BLOCK, INCLUDE_DIRS
from .paths import ROOT

EXERCISES = {
    "01": "01_safe_softmax.cu",
    "02": "02_masked_softmax.cu",
    "03": "03_online_softmax_math.md",
    "04": "04_online_trace.py",
    "05": "05_triton_fused_softmax.py",
    "06": "06_log_softmax_cross_entropy.py",
}
TODO_CU = "// (your code here)"
TODO_MD = "_(your answer here)_"
TIMEOUT_S = int(os.environ.get("A07_CHECK_TIMEOUT", "300"))  # a07 check --timeout overrides it
PASS, FAIL, TODO, SKIP, ERROR = "PASS", "FAIL", "NOT IMPLEMENTED YET", "SKIPPED", "ERROR"


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
# The worker: runs inside the child process and prints one JSON line per check.
# ------------------------------------------------------------------------------------------------
def emit(name: str, verdict: str, detail: str = ""):
    print(json.dumps({"check": name, "verdict": verdict, "detail": detail}), flush=True)


def mismatch(got, ref, dtype="float32", *, log: bool = False) -> str | None:
    """None when got is within the course's tolerance for `dtype` (accuracy.py), else where not."""
    from .accuracy import first_mismatch, tolerance

    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return f"output shape {got.shape}, expected {ref.shape}"
    m = first_mismatch(got, ref, tolerance(dtype), log=log, dtype=dtype)
    if m is None:
        return None
    return f"first mismatch at row {m[0]}, col {m[1]}: got {m[2]:.6g}, expected {m[3]:.6g} (relative error {m[4]:.3g})"


def seeded_rng(check: str):
    """The inputs of one check: the same on every run, so a verdict can be repeated; a different
    stream for each check."""
    import zlib

    return np.random.default_rng(zlib.crc32(check.encode()))


def has_gpu() -> bool:
    """The CUDA drills can launch here (backend.detect(): CuPy with a device)."""
    from .backend import detect

    return detect().native


def _todo_lines(path: Path, marker: str):
    return [i + 1 for i, line in enumerate(path.read_text().splitlines()) if marker in line]


def _verdict_for_failure(todo_lines, detail):
    if todo_lines:
        return TODO, f"{detail} (TODO still open at line {', '.join(map(str, todo_lines))})"
    return FAIL, detail


def check_cuda(number: str, path: Path):
    from . import native

    todo = _todo_lines(path, TODO_CU)
    try:
        res = native.nvrtc_compile(path, "sm_90")
        if res.ok:
            regs = ", ".join(f"{k.name}: {k.registers} registers, {k.spill_stores} B spilled" for k in res.kernels)
            emit("compiles for sm_90 (NVRTC)", PASS, regs)
        else:
            emit("compiles for sm_90 (NVRTC)", ERROR, res.log[-1500:])
            return
    except RuntimeError as e:
        emit("compiles for sm_90 (NVRTC)", SKIP, str(e))
    hipcc = shutil.which("hipcc")
    if hipcc:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [hipcc, "-x", "hip", "-O2", "-std=c++17", *[f"-I{d}" for d in INCLUDE_DIRS], "--offload-arch=gfx90a",
                   "-c", str(path), "-o", os.path.join(tmp, "k.o")]
            p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, HIP_PLATFORM="amd"))
        emit("compiles for gfx90a (hipcc)", PASS if p.returncode == 0 else ERROR, p.stderr[-1500:] if p.returncode else "")
    else:
        emit("compiles for gfx90a (hipcc)", SKIP, "hipcc not found (apt-get install hipcc)")
    emit("every TODO filled in", TODO if todo else PASS,
         f"'{TODO_CU}' at line {', '.join(map(str, todo))}" if todo else "")
    if not has_gpu():
        emit("results on the GPU against float64", SKIP,
             "no GPU here: the kernel compiled, but running it needs an NVIDIA or AMD GPU with CuPy")
        return
    import cupy

    mod = cupy.RawModule(code=path.read_text(), options=tuple(native.compile_options()))
    rng = seeded_rng("check_cuda")
    from . import reference as R

    if number == "01":
        fn = mod.get_function("safe_softmax")
        for rows, cols in ((3, 1), (5, 33), (70, 257), (4, 1024), (3, 3000)):
            hx = rng.uniform(-4, 4, size=(rows, cols)).astype(np.float32)
            hx[0, cols // 2] = 100.0  # exp(100) overflows fp32
            x, y = cupy.asarray(hx), cupy.full((rows, cols), cupy.nan, cupy.float32)
            fn((min(rows, 1024),), (BLOCK,), (x, y, np.int32(rows), np.int32(cols)))
            bad = mismatch(cupy.asnumpy(y), R.softmax(hx))
            name = f"{rows} x {cols}, row 0 holds 100.0"
            emit(name, PASS, "") if bad is None else emit(name, *_verdict_for_failure(todo, bad))
    else:
        fn = mod.get_function("masked_softmax")
        for seq in (1, 33, 257, 1024):
            rows = 3 * seq
            hx = rng.normal(0, 10, size=(rows, seq)).astype(np.float32)
            lens = rng.integers(1, seq + 1, size=rows).astype(np.int32)
            lens[min(1, rows - 1)] = 0  # a fully-masked row
            x, y = cupy.asarray(hx), cupy.full((rows, seq), cupy.nan, cupy.float32)
            fn((min(rows, 1024),), (BLOCK,), (x, y, np.int32(rows), np.int32(seq), np.int32(seq), np.int32(1),
                                             cupy.asarray(lens), np.int32(1)))
            got = cupy.asnumpy(y)
            mask = R.causal_mask(seq, seq)[np.arange(rows) % seq] + R.padding_mask(lens, seq)
            bad = mismatch(got, R.scale_mask_softmax(hx, 1.0, mask))
            name = f"causal + padding, {rows} x {seq}"
            emit(name, PASS, "") if bad is None else emit(name, *_verdict_for_failure(todo, bad))
            r = min(1, rows - 1)
            zeros = bool(np.all(got[r] == 0))
            detail = "" if zeros else f"row {r} is fully masked: expected zeros, got {got[r][:4]}..."
            emit(f"fully-masked row is zeros ({seq} cols)", PASS, "") if zeros else emit(
                f"fully-masked row is zeros ({seq} cols)", *_verdict_for_failure(todo, detail))


MD_EXPECTED = {
    "s_after_12": 1.0 + (np.exp(-11) + np.exp(-10) + np.exp(-15)),
    "rescale_factor": float(np.exp(-10.0)),
    "merged_sum": 1.8 * float(np.exp(-2.0)) + 1.3,
    "bytes_3pass": 4 * 4096 * 8192 * 4,
    "bytes_1pass": 2 * 4096 * 8192 * 4,
}


def check_markdown(path: Path):
    text = path.read_text()
    block = re.search(r"```answers\n(.*?)```", text, re.S)
    if not block:
        emit("answers block present", ERROR, "no ```answers block found: do not delete it")
        return
    answers = {}
    for line in block.group(1).splitlines():
        m = re.match(r"^\s*(\w+)\s*=\s*(.*?)\s*$", re.sub(r"<!--.*?-->", "", line))
        if m:
            answers[m.group(1)] = m.group(2)
    for key, expected in MD_EXPECTED.items():
        raw = answers.get(key)
        if raw is None:
            emit(key, ERROR, f"'{key} = ...' line missing from the answers block")
            continue
        if raw in ("", "?"):
            emit(key, TODO, "still '?'")
            continue
        try:
            val = float(raw.replace(",", "").replace("_", ""))
        except ValueError:
            emit(key, FAIL, f"'{raw}' is not a number")
            continue
        ok = abs(val - expected) <= 2e-3 * abs(expected)
        emit(key, PASS if ok else FAIL, "" if ok else f"got {val:.6g}, expected {expected:.6g} (within 0.2 %)")
    open_prose = text.count(TODO_MD)
    emit("derivations written", TODO if open_prose else PASS,
         f"{open_prose} section(s) still read {TODO_MD}" if open_prose else "")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"exercise_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(name, fn):
    """Run one check; NotImplementedError anywhere (also inside a Triton kernel) is 'not yet'."""
    try:
        detail = fn()
        emit(name, PASS if not detail else FAIL, detail or "")
    except NotImplementedError:
        emit(name, TODO, "raise NotImplementedError is still there")
    except Exception as e:  # a wrong answer must not become a traceback
        text = f"{type(e).__name__}: {e}"
        if "NotImplementedError" in text:
            emit(name, TODO, "raise NotImplementedError is still there")
        else:
            emit(name, FAIL, text[-800:])


def check_trace(path: Path):
    from . import reference as R

    mod = _load(path)
    row = [1.0, 2.0, -3.0, 12.0, 11.0, 4.0]
    expected = [(st.m, st.s) for st in R.online_trace(row)]

    def scalar():
        got = mod.online_scalar(row)
        for k, ((m, s), (em, es)) in enumerate(zip(got, expected)):
            if m != em or abs(s - es) > 1e-9 * es:
                return f"after element {k} ({row[k]}): got (m={m}, s={s:.8f}), expected (m={em}, s={es:.8f})"
        return None if len(got) == len(row) else f"{len(got)} states for {len(row)} elements"

    def vectorized():
        m, s = mod.online_vectorized(row)
        em, es = np.array([e[0] for e in expected]), np.array([e[1] for e in expected])
        return mismatch(np.vstack([m, s]), np.vstack([em, es]), "float64")

    def no_rescale():
        got = mod.online_no_rescale(row)
        _, s = got[3]
        expected_wrong = sum(np.exp(np.array(row[:3]) - np.maximum.accumulate(row[:3]))) + 1.0
        if abs(s - expected_wrong) > 1e-9:
            return f"after 12.0 the un-rescaled sum should be {expected_wrong:.8f}, got {s:.8f}"
        if abs(got[-1][1] - expected[-1][1]) < 1e-3:
            return "the final sum equals the correct one: the rescale is not missing"
        return None

    def stats():
        st = mod.error_stats(1000, seed=3)
        on_abs, on_rel = st["online"]
        nr_abs, _ = st["no_rescale"]
        if not (on_abs < 1e-12 and on_rel < 1e-9):
            return f"online errors should be at float64 rounding, got max abs {on_abs:.3g}, max rel {on_rel:.3g}"
        if nr_abs < 0.1:
            return f"the no-rescale version should be badly wrong somewhere, max abs error only {nr_abs:.3g}"
        return None

    for name, fn in (("online_scalar trace of [1, 2, -3, 12, 11, 4]", scalar), ("online_vectorized", vectorized),
                     ("online_no_rescale", no_rescale), ("error_stats over 1000 rows", stats)):
        _run(name, fn)


def _triton_setup():
    from .backend import detect, use_interpreter

    use_interpreter()
    import torch

    return detect().triton_device or "cpu", torch


def check_triton_softmax(path: Path):
    dev, torch = _triton_setup()
    emit("backend", PASS, "GPU" if dev == "cuda" else "Triton interpreter on the CPU (no GPU)")
    mod = _load(path)
    from . import reference as R

    rng = seeded_rng("check_triton_softmax")
    for seq in (1, 3, 33, 100):
        def one(seq=seq):
            hx = rng.normal(0, 20, size=(seq, seq)).astype(np.float32)
            y = mod.scale_mask_softmax(torch.tensor(hx, device=dev), 0.25, causal=True, q_len=seq)
            return mismatch(y.cpu().numpy(), R.scale_mask_softmax(hx, 0.25, R.causal_mask(seq, seq)))
        _run(f"causal, {seq} x {seq}", one)

    def masked_row():
        hx = rng.normal(size=(2, 8)).astype(np.float32)
        y = mod.scale_mask_softmax(torch.tensor(hx, device=dev), 1.0, causal=True, q_len=1)  # only col 0 kept
        got = y.cpu().numpy()
        return mismatch(got, np.tile([1.0] + [0.0] * 7, (2, 1)))
    _run("only key 0 visible: one-hot rows", masked_row)

    def fp16():
        hx = rng.uniform(11.1, 60, size=(4, 40)).astype(np.float32)
        y = mod.scale_mask_softmax(torch.tensor(hx, device=dev, dtype=torch.float16), 1.0, causal=False)
        if y.dtype != torch.float16:
            return f"output dtype {y.dtype}, expected torch.float16"
        return mismatch(y.float().cpu().numpy(), R.softmax(hx.astype(np.float16).astype(np.float64)), "float16")
    _run("fp16 logits above 11.1 (statistics in fp32)", fp16)


def check_log_softmax(path: Path):
    dev, torch = _triton_setup()
    emit("backend", PASS, "GPU" if dev == "cuda" else "Triton interpreter on the CPU (no GPU)")
    mod = _load(path)
    from . import reference as R

    rng = seeded_rng("check_log_softmax")

    def lsm():
        hx = rng.normal(0, 30, size=(5, 77)).astype(np.float32)
        hx[2] = -np.inf
        got = mod.log_softmax(torch.tensor(hx, device=dev)).cpu().numpy()
        ref = R.log_softmax(hx)
        if not np.all(np.isneginf(got[2])):
            return f"row 2 is fully masked: expected -inf everywhere, got {got[2][:4]}..."
        return mismatch(got, ref, log=True)
    _run("log_softmax against float64", lsm)

    def ce():
        hx = rng.normal(0, 8, size=(16, 1000)).astype(np.float32)
        hx[3, 7] = 95.0
        t = rng.integers(0, 1000, size=16)
        got = mod.cross_entropy(torch.tensor(hx, device=dev), torch.tensor(t, device=dev)).cpu().numpy()
        return mismatch(got[None, :], R.cross_entropy(hx, t)[None, :], log=True)
    _run("cross_entropy against float64", ce)


def worker(number: str, path: Path):
    if path.suffix == ".cu":
        check_cuda(number, path)
    elif path.suffix == ".md":
        check_markdown(path)
    elif number == "04":
        check_trace(path)
    elif number == "05":
        check_triton_softmax(path)
    else:
        check_log_softmax(path)


# ------------------------------------------------------------------------------------------------
# The parent: finds the file, runs the worker under a timeout, prints the verdicts.
# ------------------------------------------------------------------------------------------------
def run_check(number: str, path: Path, timeout: int = TIMEOUT_S):
    """[(check, verdict, detail)] for one exercise file, run in a child process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "a07_softmax.check", "--worker", number, str(path)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        results = _parse(out)
        results.append(("finishes in time", ERROR, f"stopped after {timeout} s: a kernel that never finishes "
                                                   "(a loop that never ends, a barrier not every thread reaches?)"))
        return results
    results = _parse(p.stdout)
    if p.returncode != 0:
        tail = "\n".join(p.stderr.strip().splitlines()[-8:])
        results.append(("runs to the end", ERROR, f"the check process died (exit {p.returncode}): {tail}"))
    return results


def _parse(out: str):
    res = []
    for line in out.splitlines():
        try:
            d = json.loads(line)
            res.append((d["check"], d["verdict"], d["detail"]))
        except (json.JSONDecodeError, KeyError):
            continue
    return res


def find(number: str, solution: bool, folder: Path | None = None) -> Path:
    number = number.zfill(2)
    if number not in EXERCISES:
        raise SystemExit(f"no exercise {number}; choose one of {', '.join(EXERCISES)}")
    base = folder or ROOT / ("solutions" if solution else "exercises")
    return base / EXERCISES[number]


def report(number: str, path: Path, results, file=sys.stdout) -> bool:
    print(f"Exercise {number}: {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", file=file)
    for name, verdict, detail in results:
        print(f"  [{verdict}] {name}" + (f"\n      {detail}" if detail and verdict != PASS else
                                         (f"  ({detail})" if detail else "")), file=file)
    bad = [v for _, v, _ in results if v in (FAIL, ERROR, TODO)]
    skipped = [n for n, v, _ in results if v == SKIP]
    if not results:
        print("  no checks ran", file=file)
        return False
    summary = ("all checks passed" if not bad else
               "not implemented yet: fill in the TODOs" if set(bad) == {TODO} else "some checks failed")
    print(f"  => {summary}" + (f"; {len(skipped)} could not run here (see SKIPPED)" if skipped else ""), file=file)
    return not bad


def main(argv=None) -> int:
    """The checker's child process (`python -m a07_softmax.check --worker NN FILE`); learners and
    instructors use `a07 check NN` (cli.py)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 3 and argv[0] == "--worker":
        worker(argv[1], Path(argv[2]))
        return 0
    print("usage: a07 check NN [--solution]  (this module runs only as the checker's worker)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
