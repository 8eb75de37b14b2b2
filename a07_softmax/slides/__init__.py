"""`a07 slides`: every notebook as a reveal.js deck that works with no network.

The decks use the template in a07_reveal/ (nbconvert's reveal template, with its scripts pointed
at a local assets/ folder and KaTeX for the maths) and the vendored assets in assets/: reveal.js
4.6.0, KaTeX 0.16.47 (with its auto-render extension and woff2 fonts), require.js 2.3.7 and jQuery
3.7.1, each under its MIT licence. The output folder is self-contained: copy it to a USB stick and
open any deck in a browser.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ASSETS = HERE / "assets"


def build(out: Path, notebooks=None) -> int:
    """Write <notebook>.slides.html for every notebook (or those given) and out/assets/."""
    from ..paths import ROOT

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ASSETS, out / "assets", dirs_exist_ok=True)
    nbs = [str(p) for p in (notebooks or sorted((ROOT / "notebooks").glob("*.ipynb")))]
    cmd = [sys.executable, "-m", "jupyter", "nbconvert", "--to", "slides", "--template", "a07_reveal",
           f"--TemplateExporter.extra_template_basedirs={HERE}", "--SlidesExporter.reveal_url_prefix=assets/reveal.js",
           "--SlidesExporter.reveal_theme=white", "--output-dir", str(out), *nbs]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        print(p.stderr[-3000:], file=sys.stderr)
    else:
        print(f"wrote {len(nbs)} decks to {out}/ (open <notebook>.slides.html in a browser; no network needed)")
    return p.returncode
