"""a07 grade DIR (make grade DIR=...): grade a folder of submissions.

The layout is DIR/<learner>/<NN_name.ext>, the exercise files under their usual names
(01_safe_softmax.cu, 04_online_trace.py, ...). Everything else (files loose in DIR, nested folders,
misnamed files, hidden folders such as .ipynb_checkpoints) is listed as "not graded", never dropped
silently. A submission must be the file itself: a symbolic link (an upload's archive can carry one,
pointing at the course's solutions/), a FIFO or a device, or a file larger than any exercise is
graded 0 with the reason, and a learner's folder that is a link is not graded.

Every file is read once, before anything runs, and each submission is then checked by the trusted
checker (check.run_check with hidden=True): the learner's code runs in its own sandboxed child
(sandbox.py) on the public inputs and on hidden ones drawn from a fresh random seed, and only
returns arrays; the verdicts are computed here. Submissions run in parallel, one per core.

Writes, into DIR:
  grades.csv    learner,exercise,points,max_points,status,first_failure (one row per learner and
                exercise; status: passed, failed (a TODO left open counts as failed), error, timeout,
                incomplete (a check could not run on this machine), missing)
  totals.csv    learner,points,max_points
  grades.md     the same tables for reading, the not-graded files, and how the code was isolated
  feedback/<learner>.txt   what `a07 check` would have shown the learner, hidden checks included
"""
from __future__ import annotations

import csv
import io
import os
import re
import stat
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import check, sandbox

OUTPUTS = {"grades.csv", "totals.csv", "grades.md", "feedback"}
MAX_BYTES = 1 << 20  # an exercise file is a few KB; anything larger is not one


class Refused(Exception):
    """A submission the grader will not read, and why (graded 0, status error)."""


def read_submission(path: Path) -> bytes:
    """The bytes of a regular file, read without following a symbolic link (O_NOFOLLOW: also when the
    file is swapped for one after it was listed) and without waiting on a FIFO (O_NONBLOCK)."""
    if path.is_symlink():
        raise Refused(f"a symbolic link (to {os.readlink(path)}): a submission must be the file itself")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise Refused(f"cannot be opened as a file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not a regular file (a FIFO, socket or device): a submission must be the file itself")
        if st.st_size > MAX_BYTES:
            raise Refused(f"{st.st_size} bytes: larger than any exercise file ({MAX_BYTES} bytes at most)")
        return fh.read(MAX_BYTES + 1)


@dataclass
class Row:
    learner: str
    exercise: str
    points: int
    max_points: int
    status: str
    first_failure: str = ""
    feedback: str = field(default="", repr=False)


def max_points(number: str) -> int:
    """The most an exercise can score when graded (public and hidden checks): the same for every
    submission, whatever it got to."""
    if number == "03":
        return len(check.MD_ANSWERS) + len(check.MD_FORMULAS)  # the prose is read by a person: no points
    return sum(c.points for c in check.CASES[number](np.random.default_rng(0), True))


def collect(folder: Path):
    """(submissions {(learner, number): bytes, or the Refused reason}, not_graded [(path, why)], learners)."""
    names = {name: number for number, name in check.EXERCISES.items()}
    subs, skipped, learners = {}, [], []
    for entry in sorted(folder.iterdir()):
        rel = entry.name
        if entry.name in OUTPUTS:
            # the grader's own output from an earlier run, unless it holds exercise files: then a
            # learner's folder that happens to carry that name, which is reported, not dropped
            if entry.is_dir() and not entry.is_symlink() and any(f.name in names for f in entry.iterdir()):
                skipped.append((rel, f"holds exercise files, but {entry.name}/ is where the grader writes its "
                                     "feedback: rename this learner's folder and grade again"))
            continue
        if entry.name.startswith("."):
            skipped.append((rel, "hidden file or folder (not a learner)"))
            continue
        if entry.is_symlink():
            skipped.append((rel, f"a symbolic link (to {os.readlink(entry)}): each learner's folder must be a real folder"))
            continue
        if not entry.is_dir():
            skipped.append((rel, "a file directly in DIR: each learner's files go in DIR/<learner>/"))
            continue
        learners.append(entry.name)
        for f in sorted(entry.iterdir()):
            frel = f"{entry.name}/{f.name}"
            if f.name.startswith("."):
                skipped.append((frel, "hidden file or folder"))
            elif f.is_dir() and not f.is_symlink():
                skipped.append((frel, "a nested folder: exercise files must sit directly in DIR/<learner>/"))
            elif f.name in names:
                try:
                    subs[(entry.name, names[f.name])] = read_submission(f)
                except Refused as e:
                    subs[(entry.name, names[f.name])] = e
            elif (m := re.match(r"(\d\d)[_-]", f.name)) and m.group(1) in check.EXERCISES:
                skipped.append((frel, f"misnamed: exercise {m.group(1)} must be called {check.EXERCISES[m.group(1)]}"))
            else:
                skipped.append((frel, "not an exercise file (expected one of " + ", ".join(check.EXERCISES.values()) + ")"))
    return subs, skipped, learners


def grade_one(learner: str, number: str, content, staging: Path, hide, timeout: float) -> Row:
    if isinstance(content, Refused):
        return Row(learner, number, 0, max_points(number), "error", f"not graded: {content}",
                   f"Exercise {number}: not graded: {content}")
    folder = staging / f"{len(learner)}-{abs(hash((learner, number)))}"
    folder.mkdir()
    path = folder / check.EXERCISES[number]
    path.write_bytes(content)
    try:
        results = check.run_check(number, path, timeout=timeout, hidden=True, hide=hide)
    except Exception as e:  # the grader's own failure on one submission must not stop the others
        return Row(learner, number, 0, max_points(number), "error", f"grader error: {type(e).__name__}: {e}")
    got, most = check.points(results)
    most = max(most, max_points(number))
    first = next((f"{r.name}: {r.verdict}" + (f" ({r.detail.splitlines()[0][:160]})" if r.detail else "")
                  for r in results if r.verdict not in (check.PASS, check.READ)), "")
    text = io.StringIO()
    check.report(number, Path(learner) / check.EXERCISES[number], results, file=text)
    st = check.status(results)
    return Row(learner, number, got, most, "failed" if st == "todo" else st, first, text.getvalue())


def grade(folder: Path, timeout: float = check.TIMEOUT_S, workers: int | None = None):
    subs, skipped, learners = collect(folder)
    rows = []
    with tempfile.TemporaryDirectory(prefix="a07-grade-") as tmp:
        staging = Path(tmp)
        hide = [folder.resolve(), staging]
        jobs = [(learner, number, content) for (learner, number), content in sorted(subs.items())]
        with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2) as pool:
            futures = [pool.submit(grade_one, learner, number, content, staging, hide, timeout)
                       for learner, number, content in jobs]
            for fut in futures:
                row = fut.result()
                rows.append(row)
                print(f"{row.learner:<20} {row.exercise}  {row.points}/{row.max_points}  {row.status}", flush=True)
    for learner in learners:
        for number in check.EXERCISES:
            if (learner, number) not in subs:
                rows.append(Row(learner, number, 0, max_points(number), "missing", "no file"))
    rows.sort(key=lambda r: (r.learner, r.exercise))
    return rows, skipped


def spreadsheet_text(s) -> str:
    """A text cell as a spreadsheet must show it, not run it: a learner's folder name or an error
    message of their code that starts with =, +, -, @ (or a tab / carriage return) would be taken
    for a formula by Excel or LibreOffice opening grades.csv; a leading apostrophe keeps it text."""
    s = str(s)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def write(folder: Path, rows, skipped, sandboxed: bool):
    with open(folder / "grades.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", "exercise", "points", "max_points", "status", "first_failure"])
        for r in rows:
            w.writerow([spreadsheet_text(r.learner), r.exercise, r.points, r.max_points, r.status,
                        spreadsheet_text(r.first_failure)])
    totals = {}
    for r in rows:
        p, m = totals.get(r.learner, (0, 0))
        totals[r.learner] = (p + r.points, m + r.max_points)
    with open(folder / "totals.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["learner", "points", "max_points"])
        for learner, (p, m) in sorted(totals.items()):
            w.writerow([spreadsheet_text(learner), p, m])
    fb = folder / "feedback"
    fb.mkdir(exist_ok=True)
    for learner in totals:
        (fb / f"{learner}.txt").write_text("\n".join(r.feedback or f"Exercise {r.exercise}: {r.status}"
                                                      for r in rows if r.learner == learner))

    def cell(s):
        return str(s).replace("|", "\\|").replace("\n", " ")
    md = ["# Grades", "",
          "Isolation: " + ("each submission ran in a bubblewrap sandbox (read-only file system except its own "
                           "folder, solutions/ and this folder hidden, no network)" if sandboxed else
                           "**bubblewrap is not available here**: each submission ran in its own process and "
                           "folder with time and resource limits, but could read and write what your user can "
                           "(install bubblewrap on Linux for full isolation)"), "",
          "| learner | exercise | points | status | first failure |", "|---|---|---|---|---|"]
    md += [f"| {cell(r.learner)} | {r.exercise} | {r.points}/{r.max_points} | {r.status} | {cell(r.first_failure)} |"
           for r in rows]
    if any(r.exercise == "03" and r.status not in ("missing", "error") for r in rows):
        md += ["", "Exercise 03's explanation and proof are not graded by the checker (no program judges "
                   "prose): read them in each learner's submission; feedback/<learner>.txt says which were written."]
    md += ["", "## Totals", "", "| learner | points |", "|---|---|"]
    md += [f"| {cell(learner)} | {p}/{m} |" for learner, (p, m) in sorted(totals.items())]
    md += ["", "## Not graded", ""]
    md += (["| path | why |", "|---|---|"] + [f"| {cell(p)} | {cell(why)} |" for p, why in skipped]) if skipped \
        else ["(nothing: every file in the folder was graded)"]
    (folder / "grades.md").write_text("\n".join(md) + "\n")


def main(argv=None, timeout: float = check.TIMEOUT_S) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print("usage: a07 grade DIR", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    if not folder.is_dir():
        print(f"a07 grade: {folder} is not a folder (DIR=<folder with one sub-folder per learner>)", file=sys.stderr)
        return 2
    rows, skipped = grade(folder, timeout=timeout)
    write(folder, rows, skipped, sandbox.bwrap_works())
    print(f"wrote {folder / 'grades.md'}, grades.csv, totals.csv and feedback/ ({len(rows)} rows, "
          f"{len(skipped)} not graded)")
    return 0
