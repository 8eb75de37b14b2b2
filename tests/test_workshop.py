"""The workshop kit: slide decks build from the notebooks, and the Makefile offers every target."""
import re
import subprocess

import pytest

from a07_softmax.paths import ROOT


PROBE = """<script>
setTimeout(function () {
  var R = window.a07Reveal, bad = [], n = 0;
  R.getSlides().forEach(function (s, i) {
    var idx = R.getIndices(s);
    R.slide(idx.h, idx.v);
    var st = getComputedStyle(s);
    n += 1;
    if (s.scrollHeight > 724 && !(st.overflowY === "auto" || st.overflowY === "scroll")) bad.push(i);
  });
  document.body.setAttribute("data-a07-slides", n);
  document.body.setAttribute("data-a07-overflowing", bad.join(","));
  document.body.setAttribute("data-a07-katex", document.querySelectorAll(".katex").length);
  document.body.setAttribute("data-a07-raw-math", (document.body.innerText.match(/\\$\\$/g) || []).length);
}, 1500);
</script>"""


def _chromium():
    import shutil

    import pytest

    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not exe:
        pytest.skip("no headless Chromium here (apt-get install chromium): the decks were built but not rendered")
    return [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync", "--window-size=1280,720",
            "--virtual-time-budget=8000"]


@pytest.fixture(scope="module")
def decks(tmp_path_factory):
    pytest.importorskip("nbconvert", reason="nbconvert is not installed here (it comes with `make test`'s .venv)")
    from a07_softmax.slides import build

    out = tmp_path_factory.mktemp("slides")
    assert build(out) == 0
    return out


def test_every_notebook_has_a_deck_that_needs_no_network(decks):
    nbs = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in decks.glob("*.slides.html")) == [p.stem + ".slides.html" for p in nbs]
    for deck in decks.glob("*.slides.html"):
        html = deck.read_text()
        for tag in re.findall(r"<(?:script|link)[^>]+(?:src|href)=\"([^\"]+)\"", html):
            assert not re.match(r"https?://|//", tag), f"{deck.name} loads {tag} from the network"
            assert (decks / tag).is_file(), f"{deck.name} needs {tag}, which is not in the deck's folder"
        assert "require(" in html and "a07Reveal" in html


@pytest.mark.parametrize("name", ["02_max_trick", "03_online_recurrence", "09_fast_softmax"])
def test_decks_render_offline_fit_the_frame_and_typeset_the_maths(decks, name, tmp_path):
    """In a real headless browser with no network: every slide either fits 1280 x 720 or scrolls,
    the maths is typeset (KaTeX nodes, no raw $$), and the first slide's screenshot has content."""
    import matplotlib.image as mpimg
    import numpy as np

    html = (decks / f"{name}.slides.html").read_text().replace("</body>", PROBE + "</body>")
    probe = decks / f"probe-{name}.html"
    probe.write_text(html)
    dom = subprocess.run(_chromium() + ["--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120).stdout
    attrs = dict(re.findall(r'data-a07-([a-z-]+)="([^"]*)"', dom))
    assert int(attrs.get("slides", 0)) >= 3, "reveal.js did not start (no slides counted)"
    assert attrs["overflowing"] == "", f"slides {attrs['overflowing']} run off the 1280 x 720 frame"
    assert attrs["raw-math"] == "0"
    import json

    cells = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())["cells"]
    if any("$" in "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"):
        assert int(attrs["katex"]) > 0, "the notebook has maths but nothing was typeset"
    shot = tmp_path / "slide.png"
    subprocess.run(_chromium() + [f"--screenshot={shot}", (decks / f"{name}.slides.html").as_uri()],
                   capture_output=True, timeout=120)
    img = mpimg.imread(shot)
    assert img.shape[:2] == (720, 1280)
    ink = float(np.mean(img[..., :3].mean(axis=2) < 0.8))
    assert 0.005 < ink < 0.6, f"the first slide is {'blank' if ink <= 0.005 else 'mostly dark'} ({ink:.3f} ink)"


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
