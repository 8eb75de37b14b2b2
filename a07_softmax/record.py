"""make results: regenerate every committed GPU artefact on the GPU at hand.

  results/<gpu>/bench.json + plots   (python -m a07_softmax.bench)
  results/<gpu>/run-cuda.txt         the output of `make run-cuda`, headed with provenance
  results/<gpu>/sweeps.txt           bench/sweeps/fast_configs.py --all (the strategy table's evidence)
  results/<gpu>/sweeps_row_grid.txt  bench/sweeps/lab_row_grid.py
  results/<gpu>/sweeps_attention.txt bench/sweeps/attention_configs.py (Lab 4's tiles, order and exp form)
  results/<gpu>/causal_ceiling.txt   bench/sweeps/causal_ceiling.py (causal bytes alone against a copy)
  results/<gpu>/sanitizer.txt        bench/sanitize.py (compute-sanitizer over every kernel)
  results/<gpu>/traffic.txt          bench/traffic.py (DRAM bytes under Nsight Compute)
  results/<gpu>/attention.json       bench/attention.py (Lab 4 against SDPA)
  results/<gpu>/cross_entropy.json   bench/cross_entropy.py (against eager, torch.compile, Liger)
  results/<gpu>/scale_mask.json      bench/scale_mask.py (fused scale + mask + softmax against its peers)
  results/<gpu>/backward.json        bench/backward.py (softmax / log_softmax backward against their peers)
  notebooks/*.ipynb                  re-executed on the CPU (the GPU hidden), as `make notebooks` does
  results/<gpu>/notebooks.txt        every notebook executed under nbval on this GPU: passed/failed

Steps can be named to run only some (`a07 results traffic attention`); they always run in the order
above. Set A07_COMMIT to the commit being measured where git cannot say it (a copy of the tree).

The order matters: notebooks 05, 07 and 09 print figures from bench.json, so after a new benchmark their
stored outputs must be recomputed on the CPU before nbval compares them on the GPU (otherwise they
fail on the old figures). Commit the rewritten notebooks with the results.

Each text file starts with provenance.header(): GPU, date, versions and the sha256 of the sources,
so tests/test_results.py can tell when a result has gone stale.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from . import provenance
from .paths import ROOT


def run_cuda(out: Path) -> int:
    p = subprocess.run(["make", "-s", "run-cuda"], cwd=ROOT, capture_output=True, text=True)
    body = "\n".join(line for line in p.stdout.splitlines() if not line.startswith(("ptxas", "    0 bytes")))
    out.write_text(provenance.header("make run-cuda (Lab 1 and Lab 2 standalone programs)") + "\n" + body + "\n")
    print(out.read_text())
    if p.returncode:
        print(p.stderr[-3000:], file=sys.stderr)
    return p.returncode


def refresh_notebooks() -> int:
    """Re-execute every notebook on the CPU, with the GPU hidden and Triton in its interpreter (what
    `make notebooks` does), so the stored outputs are the ones a GPU-less CI machine computes from the
    results now on disk."""
    nbs = [str(nb) for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                        "--ExecutePreprocessor.timeout=600", "--ExecutePreprocessor.record_timing=False", *nbs],
                       cwd=ROOT, capture_output=True, text=True, env=env)
    print(f"re-executed {len(nbs)} notebooks on the CPU: " + ("done" if p.returncode == 0 else "FAILED"))
    if p.returncode:
        print(p.stderr[-3000:], file=sys.stderr)
    return p.returncode


def notebooks(out: Path) -> int:
    """Each notebook under nbval in its own pytest process, all at once: they share the GPU, which only
    slows the timing cells (their outputs are not compared), and the step takes as long as the
    slowest notebook instead of their sum."""
    from concurrent.futures import ThreadPoolExecutor

    nbs = sorted((ROOT / "notebooks").glob("*.ipynb"))

    def run(nb):
        return subprocess.run([sys.executable, "-m", "pytest", str(nb), "--nbval", "--nbval-sanitize-with",
                               str(ROOT / "notebooks" / "sanitize.cfg"), "--nbval-current-env", "-q", "-p",
                               "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
    with ThreadPoolExecutor(len(nbs) or 1) as pool:
        procs = list(pool.map(run, nbs))
    lines, status = [], 0
    for nb, p in zip(nbs, procs):
        tail = [line for line in p.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        verdict = "passed" if p.returncode == 0 else "FAILED"
        status |= p.returncode
        lines.append(f"{nb.name:<40} {verdict:<7} {tail[-1].strip('= ') if tail else ''}")
        if p.returncode:
            lines.append("    " + "\n    ".join(p.stdout.splitlines()[-25:]))
    text = provenance.header("every notebook executed under nbval on this GPU",
                             provenance.ATTENTION_SOURCES + provenance.CROSS_ENTROPY_SOURCES
                             + provenance.BACKWARD_SOURCES, provenance.notebook_files()) \
        + "\n" + "\n".join(lines) + "\n"
    out.write_text(text)
    print(text)
    return status


# step -> (the file it writes under results/<gpu>/, the script and its arguments before --out)
SCRIPTS = {
    "sweeps": ("sweeps.txt", ["bench/sweeps/fast_configs.py", "--all"]),
    "row-grid": ("sweeps_row_grid.txt", ["bench/sweeps/lab_row_grid.py"]),
    "attention-configs": ("sweeps_attention.txt", ["bench/sweeps/attention_configs.py"]),
    "causal-ceiling": ("causal_ceiling.txt", ["bench/sweeps/causal_ceiling.py"]),
    "sanitizer": ("sanitizer.txt", ["bench/sanitize.py"]),
    "traffic": ("traffic.txt", ["bench/traffic.py"]),
    "attention": ("attention.json", ["bench/attention.py"]),
    "cross-entropy": ("cross_entropy.json", ["bench/cross_entropy.py"]),
    "scale-mask": ("scale_mask.json", ["bench/scale_mask.py"]),
    "backward": ("backward.json", ["bench/backward.py"]),
}
STEPS = ("bench", "run-cuda", *SCRIPTS, "refresh", "notebooks")
# every committed result file, and the step that writes it (tests/test_results.py holds the folder to it)
RESULT_FILES = {"bench.json": "bench", "run-cuda.txt": "run-cuda", "notebooks.txt": "notebooks",
                **{name: step for step, (name, _) in SCRIPTS.items()}}


def run_script(step: str, out_dir: Path) -> int:
    name, cmd = SCRIPTS[step]
    print(f"== {step}: {' '.join(cmd)}", flush=True)
    return subprocess.run([sys.executable, *cmd, "--out", str(out_dir / name)], cwd=ROOT).returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("what", nargs="*", default=list(STEPS),
                    help="steps to run (always in this order): " + ", ".join(STEPS))
    args = ap.parse_args(argv)
    unknown = sorted(set(args.what) - set(STEPS))
    if unknown:
        ap.error(f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(STEPS)}")
    if args.what == ["refresh"]:  # `make notebooks`: the CPU step alone needs no GPU
        return refresh_notebooks()
    name = provenance.gpu_name()
    if name == "no GPU":
        print("make results: no GPU here; the committed results stay as they are.")
        return 1
    out = args.out or ROOT / "results" / provenance.slug(name)
    out.mkdir(parents=True, exist_ok=True)
    status = 0
    if "bench" in args.what:
        from . import bench

        status |= bench.main(["--out", str(out)])
    if "run-cuda" in args.what:
        status |= run_cuda(out / "run-cuda.txt")
    for step in SCRIPTS:
        if step in args.what:
            status |= run_script(step, out)
    if "refresh" in args.what:
        status |= refresh_notebooks()
    if "notebooks" in args.what:
        status |= notebooks(out / "notebooks.txt")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
