"""make results: regenerate every committed GPU artefact on the GPU at hand.

  results/<gpu>/bench.json + plots   (python -m kernels.bench)
  results/<gpu>/run-cuda.txt         the output of `make run-cuda`, headed with provenance
  results/<gpu>/notebooks.txt        every notebook executed under nbval on this GPU: passed/failed

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
from .native import ROOT


def run_cuda(out: Path) -> int:
    p = subprocess.run(["make", "-s", "run-cuda"], cwd=ROOT, capture_output=True, text=True)
    body = "\n".join(line for line in p.stdout.splitlines() if not line.startswith(("ptxas", "    0 bytes")))
    out.write_text(provenance.header("make run-cuda (Lab 1 and Lab 2 standalone programs)") + "\n" + body + "\n")
    print(out.read_text())
    if p.returncode:
        print(p.stderr[-3000:], file=sys.stderr)
    return p.returncode


def notebooks(out: Path) -> int:
    nbs = sorted((ROOT / "notebooks").glob("*.ipynb"))
    lines, status = [], 0
    for nb in nbs:
        p = subprocess.run([sys.executable, "-m", "pytest", str(nb), "--nbval", "--nbval-sanitize-with",
                            str(ROOT / "notebooks" / "sanitize.cfg"), "--nbval-current-env", "-q", "-p",
                            "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
        tail = [line for line in p.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
        verdict = "passed" if p.returncode == 0 else "FAILED"
        status |= p.returncode
        lines.append(f"{nb.name:<40} {verdict:<7} {tail[-1].strip('= ') if tail else ''}")
        if p.returncode:
            lines.append("    " + "\n    ".join(p.stdout.splitlines()[-25:]))
    text = provenance.header("every notebook executed under nbval on this GPU") + "\n" + "\n".join(lines) + "\n"
    out.write_text(text)
    print(text)
    return status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("what", nargs="*", default=["bench", "run-cuda", "notebooks"])
    args = ap.parse_args(argv)
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
    if "notebooks" in args.what:
        status |= notebooks(out / "notebooks.txt")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
