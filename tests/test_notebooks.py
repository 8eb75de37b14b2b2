"""What every notebook owes a learner (issue 22): objectives and prerequisites up front, a "predict,
then run" prompt, an inline exercise with an instant check, links to its exercises and the next
notebook, no exercise solution printed before the exercise, and self-check answers that
INSTRUCTOR.md repeats. Notebook 09 stays a lesson, not a lab log."""
import ast
import json
import re

import pytest

from a07_softmax.paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _cells(nb):
    return json.loads(nb.read_text())["cells"]


def _text(cell):
    return "".join(cell["source"])


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_opens_with_objectives_and_prerequisites(nb):
    head = " ".join(_text(c) for c in _cells(nb)[:2])
    assert "**You will**" in head and "**You need**" in head and "minutes" in head


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_asks_for_a_prediction_and_checks_an_inline_exercise(nb):
    cells = _cells(nb)
    assert any(c["cell_type"] == "markdown" and "Predict, then run" in _text(c) or
               ("**Predict" in _text(c) and "then run" in _text(c)) for c in cells), "no 'predict, then run' cell"
    checks = [c for c in cells if c["cell_type"] == "code" and re.search(r"from a07_softmax.inline import check_\w+",
                                                                        _text(c))]
    assert checks, "no inline exercise with an instant check"
    for c in checks:  # the committed notebook holds the stub: the check says "not attempted", never passes
        out = "".join("".join(o.get("text", "")) for o in c.get("outputs", []))
        assert "not attempted yet" in out or "[v]" not in out, out


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_links_its_exercises_and_the_next_one(nb):
    last = _text(_cells(nb)[-1])
    assert last.startswith("## Practice and next")
    for target in re.findall(r"\]\(([^)]+)\)", last):
        assert (nb.parent / target).exists(), f"{nb.name} links {target}, which does not exist"
    for ex in re.findall(r"exercises/(\d\d)_", last):
        assert f"make check EX={ex}" in last
    i = NOTEBOOKS.index(nb)
    if i + 1 < len(NOTEBOOKS):
        assert f"({NOTEBOOKS[i + 1].name})" in last, "no link to the next notebook"


def test_no_notebook_defines_or_prints_an_exercise_solution():
    solved = set()
    for sol in (ROOT / "solutions").glob("*.py"):
        solved |= {n.name for n in ast.parse(sol.read_text()).body if isinstance(n, ast.FunctionDef)}
    solved -= {"softmax_from_state"}  # given in the exercise itself
    for nb in NOTEBOOKS:
        for c in _cells(nb):
            if c["cell_type"] != "code":
                continue
            src = _text(c)
            for name in solved:
                assert not re.search(rf"^\s*def {name}\(", src, re.M), f"{nb.name} defines {name}, an exercise's solution"
                assert not re.search(rf'excerpt\([^)]*"{name}"\)', src), f"{nb.name} prints {name}, an exercise's solution"
            assert not re.search(r'excerpt\([^)]*"_normalise"\)', src), f"{nb.name} prints _normalise, what exercise 05 asks for"


def test_exercise_03_answers_are_not_printed_in_notebook_03():
    """Exercise 03 asks for the state after [1, 2, -3, 12], the rescale factor e^-10 and the merge of
    (10, 1.8) with (12, 1.3): notebook 03 teaches on other numbers."""
    text = (ROOT / "notebooks" / "03_online_recurrence.ipynb").read_text()
    for answer in ("1.0000624", "4.54e-05", "4.540e-05", "1.5436", "1.544"):
        assert answer not in text, answer
    assert "OnlineState(10.0, 1.8)" not in text


def _questions(nb):
    cell = next(_text(c) for c in _cells(nb) if _text(c).startswith("## Check yourself"))
    return re.findall(r"\*\*(\d+)\. (.+?)\*\*\s*<details><summary>Answer</summary>\s*(.+?)\s*</details>", cell, re.S)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_instructor_md_answers_the_notebooks_questions(nb):
    guide = " ".join((ROOT / "INSTRUCTOR.md").read_text().split())
    qs = _questions(nb)
    assert qs, "no self-check questions"
    assert [int(n) for n, _, _ in qs] == list(range(1, len(qs) + 1)), "questions are not numbered 1, 2, ..."
    for n, q, a in qs:
        assert f"**{n}. {' '.join(q.split())}**" in guide, f"INSTRUCTOR.md lacks {nb.stem} question {n}"
        assert " ".join(a.split())[:120] in guide, f"INSTRUCTOR.md's answer to {nb.stem} question {n} differs"


def test_notebook_09_is_a_lesson_not_a_log():
    words = sum(len(re.findall(r"\S+", _text(c))) for c in _cells(ROOT / "notebooks" / "09_fast_softmax.ipynb")
                if c["cell_type"] == "markdown")
    assert words <= 1500, f"notebook 09 has {words} words of prose; the evidence belongs in docs/performance.md"
    headings = re.findall(r"^## (\d+)\.", " \n".join(_text(c) for c in _cells(ROOT / "notebooks" / "09_fast_softmax.ipynb")
                                                   if c["cell_type"] == "markdown"), re.M)
    assert headings == sorted(set(headings), key=int), f"section numbers repeat or jump: {headings}"
