"""a07 grade DIR (make grade DIR=submissions): run the exercise checker over every learner's folder.

DIR holds one folder per learner, each with any of the exercise files under their usual names
(01_safe_softmax.cu, 04_online_trace.py, ...). Every submission is checked in its own child process
(the checker's worker), so one learner's hanging or crashing kernel cannot affect another's.
Writes DIR/grades.md and DIR/grades.csv: learner, exercise, checks passed, first failure.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

from .check import EXERCISES, PASS, SKIP, run_check


def grade(folder: Path):
    rows = []
    learners = sorted(p for p in folder.iterdir() if p.is_dir())
    for learner in learners:
        for number, name in EXERCISES.items():
            f = learner / name
            if not f.exists():
                continue
            results = run_check(number, f)
            counted = [r for r in results if r[1] != SKIP]
            passed = sum(1 for r in counted if r[1] == PASS)
            first = next((f"{n}: {v}" + (f" ({d.splitlines()[0][:120]})" if d else "") for n, v, d in counted
                          if v != PASS), "")
            rows.append((learner.name, number, f"{passed}/{len(counted)}", first))
            print(f"{learner.name:<20} {number}  {passed}/{len(counted)}  {first}", flush=True)
    return rows


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: a07 grade DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    if not folder.is_dir():
        print(f"make grade: {folder} is not a folder (DIR=<folder with one sub-folder per learner>)", file=sys.stderr)
        return 2
    rows = grade(folder)
    with open(folder / "grades.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", "exercise", "checks passed", "first failure"])
        w.writerows(rows)
    with open(folder / "grades.md", "w") as fh:
        fh.write("| learner | exercise | checks passed | first failure |\n|---|---|---|---|\n")
        for r in rows:
            fh.write("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |\n")
    print(f"wrote {folder / 'grades.md'} and {folder / 'grades.csv'} ({len(rows)} submissions)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
