"""Exercise/solution pairs: kept in sync mechanically, solutions pass, untouched exercises say
'not implemented yet' (never a crash), and the checker survives hangs and crashes."""
import pytest

from a07_softmax import check
from a07_softmax.paths import ROOT
from a07_softmax import backend

NUMBERS = list(check.EXERCISES)


def test_regenerating_exercises_changes_nothing():
    assert check.generate(check_only=True) == [], "run: python -m a07_softmax.check generate"


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
    verdicts = {v for _, v, _ in results}
    assert results and verdicts <= {check.PASS, check.SKIP}, results
    if backend.detect().native:
        assert check.SKIP not in {v for n, v, _ in results if "GPU" in n}, results


@pytest.mark.parametrize("number", NUMBERS)
def test_untouched_exercise_is_not_implemented_yet(number):
    results = check.run_check(number, check.find(number, solution=False))
    verdicts = [v for _, v, _ in results]
    assert check.TODO in verdicts, results
    assert check.ERROR not in verdicts and check.FAIL not in verdicts, results  # no crash, no traceback


def test_a_wrong_answer_gets_the_first_mismatch(tmp_path):
    src = (ROOT / "solutions" / check.EXERCISES["04"]).read_text()
    wrong = src.replace("s = s * np.exp(m - m_new) + np.exp(x - m_new)", "s = s * np.exp(m - m_new) + 2 * np.exp(x - m_new)")
    assert wrong != src
    f = tmp_path / "04_online_trace.py"
    f.write_text(wrong)
    results = dict((n, (v, d)) for n, v, d in check.run_check("04", f))
    v, detail = results["online_scalar trace of [1, 2, -3, 12, 11, 4]"]
    assert v == check.FAIL and "after element 0 (1.0): got (m=1.0, s=2.00000000), expected (m=1.0, s=1.00000000)" in detail


@pytest.mark.slow
def test_a_hanging_exercise_is_stopped(tmp_path):
    f = tmp_path / "04_online_trace.py"
    f.write_text("def online_scalar(xs):\n    while True:\n        pass\n")
    results = check.run_check("04", f, timeout=10)
    assert results[-1][1] == check.ERROR and "stopped after 10 s" in results[-1][2]


def test_a_crashing_exercise_is_reported(tmp_path):
    f = tmp_path / "04_online_trace.py"
    f.write_text("import os\nos._exit(7)\n")
    results = check.run_check("04", f, timeout=60)
    assert results and results[-1][1] == check.ERROR and "exit 7" in results[-1][2]


def test_markdown_answers_are_machine_checked(tmp_path):
    text = (ROOT / "exercises" / check.EXERCISES["03"]).read_text()
    text = text.replace("merged_sum = ?", "merged_sum = 3.1")  # the classic mistake
    f = tmp_path / "03.md"
    f.write_text(text)
    results = dict((n, (v, d)) for n, v, d in check.run_check("03", f))
    assert results["merged_sum"][0] == check.FAIL and "expected 1.54" in results["merged_sum"][1]
    assert results["bytes_1pass"][0] == check.TODO


def test_grade_writes_a_table_and_isolates_learners(tmp_path):
    from a07_softmax import grade

    (tmp_path / "alice").mkdir()
    (tmp_path / "bob").mkdir()
    (tmp_path / "alice" / "04_online_trace.py").write_text((ROOT / "solutions" / "04_online_trace.py").read_text())
    (tmp_path / "bob" / "04_online_trace.py").write_text("import os\nos._exit(3)\n")  # crashes: only bob's row fails
    assert grade.main([str(tmp_path)]) == 0
    table = (tmp_path / "grades.md").read_text()
    assert "| alice | 04 | 4/4 |  |" in table
    assert "| bob | 04 | 0/1 | runs to the end: ERROR" in table
