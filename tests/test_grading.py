"""The grader against submissions that try to win without the right answer, and against the
folder layouts instructors actually collect. Every attack must score below full marks, leave the
course checkout and the other learners' files unchanged, and leave no process behind."""
import csv
import faulthandler
import hashlib
import os
import subprocess
import time

import pytest

from a07_softmax import check, grade, sandbox
from a07_softmax.paths import ROOT

SOLUTION_04 = (ROOT / "solutions" / "04_online_trace.py").read_text()
MARK = "a07attackmarker"

ATTACKS_04 = {
    "reads_solutions": f"exec(open({str(ROOT / 'solutions' / '04_online_trace.py')!r}).read())\n",
    "reads_solutions_via_package": "from a07_softmax.paths import ROOT\nexec((ROOT / 'solutions' / '04_online_trace.py').read_text())\n",
    "writes_into_the_course": f"open({str(ROOT / 'PWNED.txt')!r}, 'w').write('x')\n" + SOLUTION_04.replace(
        "def online_scalar", "def _unused").replace("def online_vectorized", "def online_scalar_unused"),
    "patches_the_checker": (
        "import a07_softmax.check as c, a07_softmax.accuracy as a\n"
        "c.mismatch = lambda *x, **k: None\na.first_mismatch = lambda *x, **k: None\n"
        f"open({str(ROOT / 'a07_softmax' / 'accuracy.py')!r}, 'a').write('# pwned')\n"
        "import numpy as np\n"
        "def online_scalar(xs): return [(0.0, 0.0)] * len(xs)\n"
        "def online_vectorized(xs): return np.zeros(len(xs)), np.zeros(len(xs))\n"
        "def online_no_rescale(xs): return [(0.0, 0.0)] * len(xs)\n"
        "def error_stats(n_rows=1000, seed=0): return {'online': (0.0, 0.0), 'no_rescale': (1.0, 1.0)}\n"),
    "forges_pass_lines": (
        "import json, os, sys\n"
        "for name in ['online_scalar', 'online_vectorized', 'online_no_rescale', 'error_stats']:\n"
        "    print(json.dumps({'check': name, 'verdict': 'PASS', 'detail': ''}))\n"
        "print('all checks passed (14/14 points)')\nsys.stdout.flush()\nos._exit(0)\n"),
    "leaves_orphans": (
        "import subprocess, sys\n"
        f"subprocess.Popen(['sh', '-c', 'sleep 600 # {MARK}'], start_new_session=True)\n"
        f"subprocess.Popen('sleep 601 # {MARK}', shell=True, stdout=sys.stdout, stderr=sys.stderr)\n"
        "def online_scalar(xs): return [(0.0, 1.0)] * len(xs)\n"),
    "hangs": "def online_scalar(xs):\n    while True:\n        pass\n",
    # the files the judge reads back, left as FIFOs with no writer: a judge that opened them plainly
    # would wait for good (the timeout guards the child, not the judge's own reads)
    "leaves_fifos_for_the_judge": (
        "import os\n"
        "def online_scalar(xs):\n"
        "    box = os.environ['A07_BOX']\n"
        "    for name in ('results.jsonl', 'stdout.txt', 'stderr.txt', 'progress.txt', 'outputs/c0.npy'):\n"
        "        p = os.path.join(box, name)\n"
        "        try:\n            os.remove(p)\n        except OSError:\n            pass\n"
        "        os.mkfifo(p)\n"
        "    os._exit(0)\n"),
    "overwrites_alice": (
        "import glob\n"
        "for f in glob.glob('/**/alice/04_online_trace.py', recursive=True) + glob.glob('/tmp/**/04_online_trace.py', recursive=True):\n"
        "    try:\n        open(f, 'w').write('raise SystemExit')\n    except OSError:\n        pass\n"
        "def online_scalar(xs): return [(0.0, 1.0)] * len(xs)\n"),
    # the course's own reference does the work: refused by the child's import hook everywhere ...
    "imports_the_course_reference": (
        "import numpy as np\nfrom a07_softmax import reference as R\n"
        "def online_scalar(xs): return [(st.m, st.s) for st in R.online_trace(xs)]\n"
        "def online_vectorized(xs):\n    t = R.online_trace(xs)\n"
        "    return np.array([st.m for st in t]), np.array([st.s for st in t])\n"
        "def online_no_rescale(xs): return [(float(m), float(s)) for m, s in R.online_trace_no_rescale(xs)]\n"),
    # ... and, where a submission takes the hook out and reads the file, hidden by the sandbox
    "escapes_the_import_hook": (
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'Refuse' not in type(f).__name__]\n"
        f"src = open({str(ROOT / 'a07_softmax' / 'reference.py')!r}).read()\n"
        "ns = {}\nexec(src.replace('from . import accuracy, constants', ''), ns)\n"
        "def online_scalar(xs): return [(st.m, st.s) for st in ns['online_trace'](xs)]\n"),
    "hard_coded_fixed_row": (
        "import numpy as np\n"
        "def online_scalar(xs):\n"
        "    return [(1.0, 1.0), (2.0, 1.3678794411714423), (2.0, 1.3746173670188197), (12.0, 1.0000623740134766),"
        " (12.0, 1.3679418151849188), (12.0, 1.3680330099580426)]\n"),
}


# what only the sandbox stops (reading and writing where the learner's user may); without
# bubblewrap these would really write into the checkout, so they are not run there
NEEDS_SANDBOX = {"reads_solutions", "reads_solutions_via_package", "writes_into_the_course", "patches_the_checker",
                 "overwrites_alice", "escapes_the_import_hook"}
SANDBOX = sandbox.bwrap_works()
RUN = sorted(a for a in ATTACKS_04 if SANDBOX or a not in NEEDS_SANDBOX)


def _tree_digest():
    h = hashlib.sha256()
    skip = {".venv", ".git", "__pycache__", ".pytest_cache", ".triton", "slides", ".whl"}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.endswith(".egg-info"))
        for f in sorted(filenames):
            p = os.path.join(dirpath, f)
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def _leftovers():
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if MARK in line and "ps -eo" not in line]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("submissions")
    (folder / "alice").mkdir()
    (folder / "alice" / "04_online_trace.py").write_text(SOLUTION_04)
    # exercise 03: a right one, and one whose prose and formula make the classic no-rescale slip
    sol_03 = (ROOT / "solutions" / check.EXERCISES["03"]).read_text()
    (folder / "alice" / check.EXERCISES["03"]).write_text(sol_03)
    (folder / "no_rescale").mkdir()
    (folder / "no_rescale" / check.EXERCISES["03"]).write_text("\n".join(
        "s_new = s + exp(x - m_new)" if ln.startswith("s_new = ") else ln for ln in sol_03.splitlines()))
    for name in RUN:
        text = ATTACKS_04[name]
        (folder / name).mkdir()
        (folder / name / "04_online_trace.py").write_text(text)
    (folder / "cheater_cuda").mkdir()
    (folder / "cheater_cuda" / "01_safe_softmax.cu").write_text(
        '#include "../solutions/01_safe_softmax.cu"\n')
    # not the file itself: a link to the solution (an archive can carry one), a learner's folder that
    # is a link to solutions/ (whose files carry the exercises' names), a FIFO, a huge file
    for name in LINKS:
        (folder / name).mkdir()
        link, target = folder / name / "04_online_trace.py", ROOT / "solutions" / "04_online_trace.py"
        link.symlink_to(target if name == "links_to_the_solution" else os.path.relpath(target, link.parent))
    (folder / "folder_link").symlink_to(ROOT / "solutions", target_is_directory=True)
    (folder / "fifo").mkdir()
    os.mkfifo(folder / "fifo" / "04_online_trace.py")
    (folder / "huge").mkdir()
    (folder / "huge" / "04_online_trace.py").write_text(SOLUTION_04 + "#" * (2 << 20) + "\n")
    # layouts that must be reported, not dropped
    (folder / "loose.py").write_text("x = 1\n")
    (folder / "feedback").mkdir()   # a learner's folder under the name of the grader's output
    (folder / "feedback" / "04_online_trace.py").write_text(SOLUTION_04)
    (folder / ".ipynb_checkpoints").mkdir()
    (folder / "carol" / "exercises").mkdir(parents=True)
    (folder / "carol" / "exercises" / "04_online_trace.py").write_text(SOLUTION_04)
    (folder / "carol" / "04_trace.py").write_text(SOLUTION_04)
    before = _tree_digest()
    start = time.monotonic()
    # a judge that waits on something a submission left behind fails here with its stack, not by
    # holding CI until its limit
    faulthandler.dump_traceback_later(900, exit=True)
    try:
        rows, skipped = grade.grade(folder, timeout=15)
        grade.write(folder, rows, skipped, sandbox.bwrap_works())
    finally:
        faulthandler.cancel_dump_traceback_later()
    time.sleep(0.5)
    return dict(folder=folder, rows={(r.learner, r.exercise): r for r in rows}, skipped=skipped,
                before=before, after=_tree_digest(), seconds=time.monotonic() - start, leftovers=_leftovers())


def test_the_solution_scores_full_marks(graded):
    r = graded["rows"][("alice", "04")]
    assert r.status == "passed" and r.points == r.max_points > 0


@pytest.mark.parametrize("attack", RUN)
def test_every_attack_scores_below_full_marks(graded, attack):
    r = graded["rows"][(attack, "04")]
    assert r.points < r.max_points and r.status != "passed", (attack, r)


LINKS = ("links_to_the_solution", "links_relative")
REFUSED = {**{name: "symbolic link" for name in LINKS}, "fifo": "not a regular file", "huge": "larger than any exercise"}


@pytest.mark.parametrize("learner", sorted(REFUSED))
def test_a_submission_that_is_not_the_file_itself_is_refused_not_read(graded, learner):
    """The grader reads a submission itself, with the course's rights: a link must not make it read the
    solution on the learner's behalf, a FIFO must not hang it. Refused with the reason, 0 points."""
    r = graded["rows"][(learner, "04")]
    assert r.points == 0 and r.status == "error" and REFUSED[learner] in r.first_failure, r
    assert "not graded" in r.feedback


def test_a_learner_folder_that_is_a_link_is_not_graded(graded):
    assert not [k for k in graded["rows"] if k[0] == "folder_link"]
    assert any(p == "folder_link" and "symbolic link" in why for p, why in graded["skipped"])


def test_a_solution_file_cannot_be_included(graded):
    r = graded["rows"][("cheater_cuda", "01")]
    assert r.points == 0 and r.status == "error" and "may include only the course headers" in r.first_failure


def test_the_checkout_and_the_other_learners_are_unchanged(graded):
    if not SANDBOX:
        pytest.skip("bubblewrap cannot create namespaces here: the attacks that read or write the checkout were "
                    "not run (install bubblewrap on Linux; grades.md says which isolation was used)")
    assert graded["after"] == graded["before"]
    assert not (ROOT / "PWNED.txt").exists()
    assert (graded["folder"] / "alice" / "04_online_trace.py").read_text() == SOLUTION_04


def test_no_process_is_left_behind(graded):
    assert graded["leftovers"] == []


def test_a_hang_is_a_timeout_that_names_the_function(graded):
    r = graded["rows"][("hangs", "04")]
    assert r.status == "timeout" and "online_scalar()" in r.first_failure


def test_every_file_is_graded_or_reported(graded):
    skipped = dict(graded["skipped"])
    assert "loose.py" in skipped and ".ipynb_checkpoints" in skipped
    assert "nested folder" in skipped["carol/exercises"] and "misnamed" in skipped["carol/04_trace.py"]
    assert graded["rows"][("carol", "04")].status == "missing"
    assert ("ipynb_checkpoints", "04") not in graded["rows"]
    assert "where the grader writes its feedback" in skipped["feedback"]   # reported, never dropped


def test_tables_have_one_row_per_learner_and_exercise(graded):
    folder = graded["folder"]
    with open(folder / "grades.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["learner", "exercise", "points", "max_points", "status", "first_failure"]
    learners = {r["learner"] for r in rows}
    assert len(rows) == len(learners) * len(check.EXERCISES)
    assert {r["max_points"] for r in rows if r["exercise"] == "04"} == {str(grade.max_points("04"))}
    assert {r["status"] for r in rows} <= {"passed", "failed", "error", "timeout", "incomplete", "missing"}
    with open(folder / "totals.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(learners)
    md = (folder / "grades.md").read_text()
    assert "## Not graded" in md and "loose.py" in md
    assert (folder / "feedback" / "alice.txt").read_text().count("[PASS]") >= 8


def test_exercise_03_prose_is_left_to_the_instructor_and_its_formula_is_graded(graded):
    right, wrong = graded["rows"][("alice", "03")], graded["rows"][("no_rescale", "03")]
    assert right.status == "passed" and right.points == right.max_points == grade.max_points("03")
    assert right.first_failure == "" and "for a person to read" in right.feedback
    assert wrong.status == "failed" and "s_new" in wrong.first_failure and "not rescaled" in wrong.first_failure
    assert "not graded by the checker" in (graded["folder"] / "grades.md").read_text()


def test_hidden_inputs_differ_between_gradings():
    import numpy as np

    a = check.CASES["05"](np.random.default_rng(1), True)
    b = check.CASES["05"](np.random.default_rng(2), True)
    assert len(a) == len(b) and sum(c.points for c in a) == grade.max_points("05")
    assert any(not np.array_equal(x, y) for ca, cb in zip(a, b) for x, y in zip(ca.inputs.values(), cb.inputs.values()))


def test_csv_cells_a_spreadsheet_would_run_are_kept_as_text(tmp_path):
    """A learner folder named like a formula (its files are the learner's) must not become one in
    grades.csv or totals.csv; everything else is written as it is."""
    rows = [grade.Row("=HYPERLINK(\"x\")", "04", 0, 17, "failed", "@SUM(A1)"),
            grade.Row("bob", "04", 17, 17, "passed", "")]
    grade.write(tmp_path, rows, [], False)
    with open(tmp_path / "grades.csv", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[1][0] == "'=HYPERLINK(\"x\")" and table[1][5] == "'@SUM(A1)" and table[2][0] == "bob"
    with open(tmp_path / "totals.csv", newline="") as fh:
        assert [r[0] for r in csv.reader(fh)][1:] == ["'=HYPERLINK(\"x\")", "bob"]


def test_the_judge_reads_what_the_child_wrote_without_following_links_or_waiting(tmp_path):
    """sandbox.read_box_file is how the judge reads every file a child could have replaced."""
    import numpy as np

    box = tmp_path / "box"
    (box / "outputs").mkdir(parents=True)
    np.save(box / "outputs" / "c0.npy", np.arange(5.0))
    assert sandbox.load_output(box, "outputs/c0.npy").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    (box / "log.txt").write_bytes(b"a" * 100 + b"tail")
    assert sandbox.read_box_file(box, "log.txt", 4) == b"tail"
    with pytest.raises(ValueError, match="more than"):
        sandbox.read_box_file(box, "log.txt", 4, whole=True)
    secret = tmp_path / "secret"
    secret.mkdir()
    np.save(secret / "c0.npy", np.ones(3))
    os.symlink(secret / "c0.npy", box / "outputs" / "c1.npy")      # a link as the file
    os.symlink(secret, box / "linked")                              # a link as a folder on the way
    os.mkfifo(box / "outputs" / "c2.npy")                           # a FIFO nobody writes
    start = time.monotonic()
    for rel in ("outputs/c1.npy", "linked/c0.npy", "outputs/c2.npy", "outputs/none.npy"):
        assert sandbox.read_box_file(box, rel, 1 << 20) == b"", rel
        assert sandbox.load_output(box, rel) is None, rel
    assert time.monotonic() - start < 5
    with pytest.raises(ValueError, match="inside the box"):
        sandbox.read_box_file(box, "../secret/c0.npy", 1 << 20)
    (box / "outputs" / "c3.npy").write_bytes(b"not an array")
    with pytest.raises(ValueError):
        sandbox.load_output(box, "outputs/c3.npy")
