"""Where a number came from: GPU, date, versions, and the sha256 of the sources that produced it.

A result whose recorded hashes no longer match the sources is stale (tests/test_results.py fails
on it): re-run it on the GPU it names.
"""
from __future__ import annotations

import datetime
import hashlib
import platform
import re

from .paths import PACKAGE, ROOT

# Everything whose change can change a measured number: the device sources (under root()) and the
# Python that compiles, launches, times and judges them (in the package). Keys are paths relative
# to a checkout's root, in a checkout and in an installed wheel alike.
DEVICE_GLOBS = ("common/*.h", "cuda/*.cu", "hip/*.cpp")
PYTHON_SOURCES = ("accuracy.py", "bench.py", "constants.py", "fast.py", "labs.py", "native.py", "triton_softmax.py")
# The kernels of Lab 4, of the fused cross-entropy and of the Triton backward passes: recorded by the
# results that run them (their benchmarks, the notebooks), so that changing them leaves the softmax
# results fresh.
ATTENTION_SOURCES = ("attention.py", "attention_cuda.py", "attention_kernels.py")
CROSS_ENTROPY_SOURCES = ("cross_entropy.py", "cross_entropy_kernels.py")
BACKWARD_SOURCES = ("triton_backward.py",)


def sources_sha256(extra=()) -> dict:
    """{path: sha256} of the softmax sources, plus the package modules named in `extra`."""
    files = {str(p.relative_to(ROOT)): p for g in DEVICE_GLOBS for p in ROOT.glob(g)}
    files.update({f"{PACKAGE.name}/{name}": PACKAGE / name for name in PYTHON_SOURCES + tuple(extra)})
    return {key: hashlib.sha256(files[key].read_bytes()).hexdigest() for key in sorted(files)}


# Results measured from part of the sources, as patterns over the keys they record: a result named
# here is stale only when one of these changed. The attention and backward runs: their own modules,
# the Triton softmax (naive attention; the backward's forward), the timing and checking code, and
# (attention) Lab 4's CUDA/HIP source, the headers it includes on a GPU, and its launcher. The labs'
# runs (make run-cuda, the row-grid sweep): Lab 1 and Lab 2's sources and headers and their
# launcher. None of them launches the fast family. Every other result (the softmax, scale-mask and
# cross-entropy benchmarks, the notebooks, the sanitizer, the traffic) runs the fast family or
# everything, and depends on every source it recorded.
_TIMING = ("a07_softmax/accuracy.py", "a07_softmax/bench.py", "a07_softmax/constants.py")
_HEADERS = ("common/online_softmax.h", "common/portability.h", "common/course_constants.h")
DEPENDS = {
    "attention": _TIMING + _HEADERS + ("a07_softmax/triton_softmax.py", "cuda/attention.cu", "hip/attention.cpp",
                                       "a07_softmax/native.py") + tuple(f"a07_softmax/{m}" for m in ATTENTION_SOURCES),
    "backward": _TIMING + ("a07_softmax/triton_softmax.py",) + tuple(f"a07_softmax/{m}" for m in BACKWARD_SOURCES),
    "labs": _TIMING + _HEADERS + ("common/lab_host.h", "cuda/softmax.cu", "cuda/fused_softmax.cu", "hip/softmax.cpp",
                                  "hip/fused_softmax.cpp", "a07_softmax/native.py", "a07_softmax/labs.py"),
}


def notebook_files() -> dict:
    """{path: file} of what the notebooks' record (results/<gpu>/notebooks.txt) is about beyond the
    sources above: every notebook as committed (nbval compares its stored outputs), nbval's
    sanitize file, and every course module the notebooks import, directly or through one another
    (inline.py's checks, the plots, the readers of results/), found by reading their import
    statements. A change to any of them means the notebooks that passed on the GPU are not the ones
    in the checkout."""
    import ast
    import json

    nb_dir = ROOT / "notebooks"
    files = {str(p.relative_to(ROOT)): p for p in sorted(nb_dir.glob("*.ipynb"))}
    cfg = nb_dir / "sanitize.cfg"
    if cfg.exists():
        files[str(cfg.relative_to(ROOT))] = cfg

    def imported(tree, here: str | None) -> set:
        """Course modules named by the imports of one parsed file (`here`: its module, for `from .`)."""
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[1] for a in node.names if a.name.startswith(PACKAGE.name + ".")}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level and here:          # from . import x / from .x import y
                    names |= {base.split(".")[0]} if base else {a.name for a in node.names}
                elif base == PACKAGE.name:       # from a07_softmax import x
                    names |= {a.name for a in node.names}
                elif base.startswith(PACKAGE.name + "."):
                    names.add(base.split(".")[1])
        return {n for n in names if (PACKAGE / f"{n}.py").exists()}

    todo = set()
    for nb in (p for p in files.values() if p.suffix == ".ipynb"):
        for cell in json.loads(nb.read_text()).get("cells", []):
            if cell.get("cell_type") != "code":
                continue
            src = "".join(cell.get("source", []))
            src = "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))
            try:
                todo |= imported(ast.parse(src), None)
            except SyntaxError:
                continue
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo |= imported(ast.parse((PACKAGE / f"{name}.py").read_text()), name)
    files.update({f"{PACKAGE.name}/{n}.py": PACKAGE / f"{n}.py" for n in sorted(seen)})
    return files


def files_sha256(files: dict) -> dict:
    return {key: hashlib.sha256(path.read_bytes()).hexdigest() for key, path in sorted(files.items())}


def stale_sources(recorded: dict, depends: str | None = None) -> list:
    """Paths whose current sha256 differs from the recorded one (or that vanished); with `depends`
    (a key of DEPENDS), only among the paths that result depends on."""
    import fnmatch

    now = {**files_sha256(notebook_files()), **sources_sha256(ATTENTION_SOURCES + CROSS_ENTROPY_SOURCES
                                                              + BACKWARD_SOURCES)}
    keys = [p for p in recorded if depends is None or any(fnmatch.fnmatch(p, pat) for pat in DEPENDS[depends])]
    return [p for p in keys if now.get(p) != recorded[p]]


def dram_peak_gbps() -> float | None:
    """The DRAM's theoretical peak, GB/s: 2 transfers a clock x memory clock x bus width (CUDA's
    device attributes, read through CuPy; an H200 reports 3201 MHz and 6016 bits: 4814 GB/s).
    None where they cannot be read."""
    try:
        import cupy

        if cupy.cuda.runtime.is_hip:  # HIP numbers its attributes differently
            return None
        clock_khz = cupy.cuda.runtime.deviceGetAttribute(36, 0)   # cudaDevAttrMemoryClockRate
        bus_bits = cupy.cuda.runtime.deviceGetAttribute(37, 0)    # cudaDevAttrGlobalMemoryBusWidth
    except Exception:
        return None
    return 2 * clock_khz * 1e3 * bus_bits / 8 / 1e9 if clock_khz and bus_bits else None


def versions() -> dict:
    v = {"python": platform.python_version()}
    for mod in ("numpy", "torch", "triton", "cupy"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:
            v[mod] = None
    try:
        import torch

        v["cuda"] = torch.version.cuda
        v["hip"] = getattr(torch.version, "hip", None)
    except Exception:
        v["cuda"] = None
    return v


def gpu_name() -> str:
    """The GPU's name as torch reports it (backend.detect() decides whether there is one)."""
    from .backend import detect

    if not detect().torch_gpu:
        return "no GPU"
    import torch

    return torch.cuda.get_device_name()


def slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'"""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def today() -> str:
    return datetime.date.today().isoformat()


def header(title: str, extra=(), files=None) -> str:
    """A text header naming GPU, date, versions and source hashes (`extra`: see sources_sha256;
    `files`: {path: file} hashed as well, such as notebook_files())."""
    lines = [f"# {title}", f"# gpu: {gpu_name()}", f"# date: {today()}",
             "# versions: " + ", ".join(f"{k} {v}" for k, v in versions().items() if v)]
    lines += [f"# sha256 {h}  {p}" for p, h in {**files_sha256(files or {}), **sources_sha256(extra)}.items()]
    return "\n".join(lines) + "\n"


def commit() -> str:
    """The commit being measured: A07_COMMIT where set (a copy of the tree, as on the GPU machine,
    where git cannot say it), else git's short HEAD, else "unknown"."""
    import os
    import subprocess

    return os.environ.get("A07_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip() or "unknown"


def report(title: str, lines, extra=()) -> str:
    """A sweep's text record: header(title, extra), the commit, then its lines."""
    return header(title, extra) + f"# commit: {commit()}\n" + "\n".join(lines) + "\n"


def parse_header(text: str) -> dict:
    """The source hashes recorded in a header() block."""
    return {m.group(2): m.group(1) for m in re.finditer(r"^# sha256 ([0-9a-f]{64})  (\S+)$", text, re.M)}

