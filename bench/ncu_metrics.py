"""One Nsight Compute run over a script's launches, read back as {(launch index, metric): value}.

The per-launch counter scripts (attention_cuda_ncu.py, scale_mask_ncu.py) share it: ncu's CSV
(one row per launch and metric, after ncu's own log lines) with each value in base units (bytes,
nanoseconds; counts and percentages as printed).
"""
from __future__ import annotations

import csv
import io
import subprocess
import sys

# ncu's unit -> the factor to base units (bytes, nanoseconds)
UNITS = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1, "usecond": 1e3, "msecond": 1e6}


def parse(stdout: str) -> dict:
    """{(ID, metric name): value} from ncu --csv output (its log lines before the header skipped)."""
    lines = stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise RuntimeError(f"ncu printed no metrics table:\n{stdout[-3000:]}")
    out = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        value = float(row["Metric Value"].replace(",", ""))
        out[(int(row["ID"]), row["Metric Name"])] = value * UNITS.get(row.get("Metric Unit", ""), 1)
    return out


def profile(script: str, kernel: str, metrics, ncu: str = "ncu", extra=()) -> dict:
    """ncu over `python script --launch`, the launches whose kernel name matches `kernel`."""
    cmd = [ncu, *extra, "--kernel-name", kernel, "--csv", "--metrics", ",".join(metrics),
           sys.executable, script, "--launch"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"ncu failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return parse(p.stdout)


def run(argv, doc: str, launch, measure, launches: int):
    """The scripts' command line: with --launch, the launches alone (what ncu profiles; returns
    None); otherwise one ncu run, {(launch index, metric): value}, checked to hold `launches`
    launches (ncu's filter missing one is an error, not a shorter table)."""
    import argparse

    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launch", action="store_true")
    ap.add_argument("--ncu", default="ncu")
    a = ap.parse_args(argv)
    if a.launch:
        launch()
        return None
    values = measure(a.ncu)
    seen = sorted({i for i, _ in values})
    if len(seen) != launches:
        raise RuntimeError(f"expected {launches} profiled launches, got {seen}")
    return values
