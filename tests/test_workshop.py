"""The workshop kit: slide decks build from the notebooks, and the Makefile offers every target."""
import re
import subprocess
import sys

from a07_softmax.paths import ROOT


def test_slides_build_for_every_notebook(tmp_path):
    import pytest

    pytest.importorskip("nbconvert", reason="nbconvert is not installed here (it comes with `make test`'s .venv)")
    nbs = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert len(nbs) >= 9
    p = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "slides", "--output-dir", str(tmp_path),
                        *map(str, nbs)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    decks = sorted(tmp_path.glob("*.slides.html"))
    assert len(decks) == len(nbs)
    html = decks[3].read_text()
    assert html.count("<section") > 5 and "reveal" in html


def test_notebook_cells_are_tagged_for_slides():
    import json

    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        kinds = [c.get("metadata", {}).get("slideshow", {}).get("slide_type") for c in cells]
        assert kinds[0] == "slide" and kinds.count("slide") >= 3 and None not in kinds, nb.name


def test_makefile_has_every_target():
    text = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z-]+):", text, re.M))
    for t in ("run", "test", "lab", "doctor", "cuda", "run-cuda", "hip", "run-hip", "triton", "bench", "check",
              "grade", "slides", "notebooks", "clean"):
        assert t in targets, t


def test_missing_tool_says_so_and_fails():
    p = subprocess.run(["make", "-s", "cuda", "NVCC=/nonexistent/nvcc"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode != 0 and "nvcc not found" in p.stdout + p.stderr
    p = subprocess.run(["make", "-s", "hip", "HIPCC=/nonexistent/hipcc"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode != 0 and "hipcc not found" in p.stdout + p.stderr
