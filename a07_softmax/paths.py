"""Where the course's non-Python files live: device sources, committed results, exercises.

In a checkout (and an editable install) they are the folders beside the package: cuda/, hip/,
common/, results/, exercises/, solutions/, notebooks/. A wheel carries a copy of them inside the
package, under a07_softmax/_data/ (setup.py's build step puts it there), so that an installed
course compiles and reads exactly the files it was built from. Every module asks root() instead of
walking up from its own location.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

# The folders a wheel carries (setup.py reads this tuple; keep it the one list).
DATA_DIRS = ("common", "cuda", "hip", "results", "exercises", "solutions", "notebooks")
PACKAGE = Path(__file__).resolve().parent
_MARKER = Path("common") / "portability.h"


def root() -> Path:
    """The folder that holds common/, cuda/, hip/, results/... (the checkout, or the wheel's copy)."""
    checkout = PACKAGE.parent
    if (checkout / _MARKER).is_file():
        return checkout
    bundled = Path(str(resources.files(__package__) / "_data"))
    if (bundled / _MARKER).is_file():
        return bundled
    raise FileNotFoundError(
        f"the course's device sources are neither beside the package ({checkout}) nor inside it "
        f"({bundled}); reinstall with `pip install a07-softmax-fused-kernels` or work from a checkout")


def is_checkout() -> bool:
    """True when the package runs from a source tree (so results/ and exercises/ are writable)."""
    return root() == PACKAGE.parent


ROOT = root()
