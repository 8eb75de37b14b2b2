"""The constants Python shares with the device code, read from common/course_constants.h.

The header is the one place each value is written; this module parses its `#define A07_NAME value`
lines and the X(name, reads, writes) rows of its tables, so the launchers, the traffic model and
the checks use exactly what the kernels were compiled with.
"""
from __future__ import annotations

import re

from .paths import ROOT

HEADER = ROOT / "common" / "course_constants.h"


def _parse(text: str):
    scalars, tables, current = {}, {}, None
    for line in text.splitlines():
        line = line.split("//")[0].rstrip()
        if (t := re.match(r"#define (A07_\w+)\(X\)", line)):
            current = tables.setdefault(t.group(1), [])
            continue
        if current is not None and (row := re.match(r"\s*X\((\w+),\s*(\d+),\s*(\d+)\)", line)):
            current.append((row.group(1), int(row.group(2)), int(row.group(3))))
            if not line.endswith("\\"):
                current = None
            continue
        current = None
        if (d := re.match(r"#define (A07_\w+)\s+(\S+)$", line)):
            value = d.group(2)
            scalars[d.group(1)] = float(value) if re.search(r"[.eE]", value) else int(value)
    return scalars, tables


_SCALARS, _TABLES = _parse(HEADER.read_text())

BLOCK: int = _SCALARS["A07_BLOCK"]
ITEMS: int = _SCALARS["A07_ITEMS"]
ITEMS_MAX: int = _SCALARS["A07_ITEMS_MAX"]
THREADS_PER_SM: int = _SCALARS["A07_THREADS_PER_SM"]
ROW_GRID_WAVES: int = _SCALARS["A07_ROW_GRID_WAVES"]
FAST_WARP_THREADS: int = _SCALARS["A07_FAST_WARP_THREADS"]
FAST_TWOPASS_THREADS: int = _SCALARS["A07_FAST_TWOPASS_THREADS"]
RELATIVE_FLOOR: float = _SCALARS["A07_RELATIVE_FLOOR"]
TOLERANCE: dict = {dt: _SCALARS[f"A07_TOL_{dt.upper()}"] for dt in ("float64", "float32", "float16", "bfloat16")}
# (name, reads, writes) rows, in teaching order
LAB1_KERNELS_TRAFFIC: tuple = tuple(_TABLES["A07_LAB1_KERNELS"])
LAB2_PATHS_TRAFFIC: tuple = tuple(_TABLES["A07_LAB2_PATHS"])
LAB1_KERNELS: tuple = tuple(name for name, _, _ in LAB1_KERNELS_TRAFFIC)
