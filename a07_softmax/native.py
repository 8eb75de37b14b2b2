"""The CUDA/HIP lab kernels, launched from Python through CuPy RawModule.

The very files in cuda/ (NVRTC on NVIDIA) and hip/ (hiprtc on ROCm) are compiled; nothing is
copied into strings here. Every launcher checks its arguments first and raises a clear Python error
(TypeError / ValueError) before anything reaches the GPU.

Without a GPU, `compile_report()` still compiles every source through NVRTC for sm_90 and reports
registers and spills per kernel: the labs are compile-only there.
"""
from __future__ import annotations

from dataclasses import dataclass
import math
from pathlib import Path
import re

import numpy as np

from .paths import PACKAGE, ROOT

from . import constants

INCLUDE_DIRS = (ROOT / "common", ROOT / "cuda")
BLOCK = constants.BLOCK
DEFAULT_ITEMS = constants.ITEMS
MAX_GRID = 65535  # elementwise kernels: a grid-stride loop covers any size with this many blocks

# module name -> (CUDA source, HIP source)
MODULES = {
    "softmax": ("cuda/softmax.cu", "hip/softmax.cpp"),
    "fused_softmax": ("cuda/fused_softmax.cu", "hip/fused_softmax.cpp"),
}
LAB1_KERNELS = constants.LAB1_KERNELS
ROW_IN_REGISTERS = ("softmax_online_1pass", "scale_mask_softmax_fused")


def items_for(cols: int) -> int | None:
    """The ITEMS a row-in-registers kernel needs for `cols` columns: the header's default, or the
    power of two that holds the row; None past ITEMS_MAX (use the 2-pass kernel there)."""
    need = -(-int(cols) // BLOCK)
    items = max(DEFAULT_ITEMS, 1 << max(0, math.ceil(math.log2(max(1, need)))))
    return items if items <= constants.ITEMS_MAX else None


def source_files():
    """Every course GPU source, relative to the repository root."""
    files = [p for pair in MODULES.values() for p in pair]
    files += [str(p.relative_to(ROOT)) for d in INCLUDE_DIRS[:1] for p in sorted(d.glob("*.h"))]
    return files


# ------------------------------------------------------------------------------------------------
# Argument checks: run before any launch, on any array-like (tests drive them with NumPy arrays).
# ------------------------------------------------------------------------------------------------
@dataclass
class Meta:
    shape: tuple
    dtype: str
    contiguous: bool
    on_device: bool
    kind: str  # "cupy", "torch", "numpy", ...


def meta(x) -> Meta:
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        return Meta(tuple(x.shape), str(x.dtype).replace("torch.", ""), x.is_contiguous(), x.is_cuda, "torch")
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        contiguous = bool(x.flags["C_CONTIGUOUS"]) if hasattr(x, "flags") else False
        return Meta(tuple(x.shape), str(np.dtype(x.dtype)), contiguous, hasattr(x, "__cuda_array_interface__"), mod)
    raise TypeError(f"expected a CuPy array or a torch tensor on the GPU, got {type(x).__name__}")


def check_scores(x, name: str = "x", *, kernel: str = "", items: int = DEFAULT_ITEMS, require_device: bool = True):
    """Validate a (rows, cols) float32 score matrix for `kernel`; return (rows, cols)."""
    m = meta(x)
    if require_device and not m.on_device:
        raise TypeError(f"{name} is a {m.kind} array in host memory; the lab kernels need it on the GPU "
                        f"(cupy.asarray({name}) or torch.as_tensor({name}, device='cuda'))")
    if m.dtype != "float32":
        raise TypeError(f"{name} has dtype {m.dtype}; the lab kernels take float32 only "
                        f"(the Triton kernels in a07_softmax.triton_softmax also take float16 and bfloat16)")
    if len(m.shape) != 2:
        raise ValueError(f"{name} must be 2-D (rows, cols), got shape {m.shape}")
    rows, cols = m.shape
    if rows < 1 or cols < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {m.shape}")
    if not m.contiguous:
        raise ValueError(f"{name} is not C-contiguous (a transpose or a strided slice?); pass {name}.copy() "
                         f"or .contiguous(): the kernels index rows as x + row * cols")
    if cols > 2**31 - 1 or rows > 2**31 - 1:
        raise ValueError(f"{name} has shape {m.shape}; rows and cols must each fit in int32")
    if kernel in ROW_IN_REGISTERS and cols > BLOCK * items:
        need = -(-cols // BLOCK)
        raise ValueError(f"{kernel} keeps the row in registers and needs cols <= BLOCK * ITEMS = "
                         f"{BLOCK} * {items} = {BLOCK * items}, got cols = {cols}; raise ITEMS "
                         f"(items={need}, i.e. -DITEMS={need}) or use softmax_online_2pass")
    return rows, cols


def check_out(out, rows: int, cols: int, require_device: bool = True):
    m = meta(out)
    if (require_device and not m.on_device) or m.dtype != "float32" or m.shape != (rows, cols) or not m.contiguous:
        raise ValueError(f"out must be a contiguous float32 GPU array of shape {(rows, cols)}, got "
                         f"{m.kind} {m.dtype} {m.shape}{'' if m.contiguous else ' (non-contiguous)'}")


# ------------------------------------------------------------------------------------------------
# Compilation
# ------------------------------------------------------------------------------------------------
def compile_options(items: int = DEFAULT_ITEMS, defines=()):
    """NVRTC/hiprtc options: the include folders, and ITEMS only where it differs from the header's
    default (course_constants.h is the one place the defaults are written)."""
    opts = ["-std=c++17"] + [f"-I{d}" for d in INCLUDE_DIRS]
    if int(items) != DEFAULT_ITEMS:
        opts.append(f"-DITEMS={int(items)}")
    return opts + [f"-D{d}" for d in defines]


def source_path(module: str, vendor: str = "CUDA") -> Path:
    cu, hip = MODULES[module]
    return ROOT / (hip if vendor == "HIP" else cu)


_MODULES: dict = {}


def load(module: str, items: int = DEFAULT_ITEMS):
    """CuPy RawModule of a course source, compiled once per (module, ITEMS)."""
    import cupy

    key = (module, items)
    if key not in _MODULES:
        vendor = "HIP" if cupy.cuda.runtime.is_hip else "CUDA"
        path = source_path(module, vendor)
        _MODULES[key] = cupy.RawModule(code=path.read_text(), options=tuple(compile_options(items)),
                                       backend="hiprtc" if vendor == "HIP" else "nvrtc")
    return _MODULES[key]


@dataclass
class KernelReport:
    name: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack_bytes: int


@dataclass
class CompileResult:
    source: str
    ok: bool
    log: str
    kernels: list


_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def parse_ptxas(log: str):
    """Per-kernel registers and spills from a ptxas -v log (NVRTC or nvcc)."""
    reports, cur = [], None
    for line in log.splitlines():
        if (e := _PTXAS_ENTRY.search(line)):
            cur = {"name": e.group(1)}
        elif cur is not None and (s := _PTXAS_STACK.search(line)):
            cur["stack"], cur["st"], cur["ld"] = (int(v) for v in s.groups())
        elif cur is not None and (r := _PTXAS_REGS.search(line)):
            reports.append(KernelReport(cur["name"], int(r.group(1)), cur.get("st", 0), cur.get("ld", 0),
                                        cur.get("stack", 0)))
            cur = None
    return reports


def nvrtc_compile(path, arch: str = "sm_90", items: int = DEFAULT_ITEMS, defines=(),
                  name_expressions=()) -> CompileResult:
    """Compile a CUDA source to a cubin with NVRTC (no GPU needed); return the log and per-kernel
    register use. `name_expressions` instantiates templates ("softmax_fast_block<float, 2, 128,
    true>"); the report then names them by their mangled names. Raises RuntimeError if NVRTC
    itself is unavailable."""
    try:
        from cuda.bindings import nvrtc
    except Exception as e:  # pragma: no cover - depends on the machine
        raise RuntimeError(f"NVRTC unavailable ({e}); pip install cuda-bindings nvidia-cuda-nvrtc") from e
    path = Path(path)
    src = path.read_bytes()
    err, prog = nvrtc.nvrtcCreateProgram(src, path.name.encode(), 0, [], [])
    for expr in name_expressions:
        nvrtc.nvrtcAddNameExpression(prog, expr.encode())
    opts = [o.encode() for o in compile_options(items, defines) + [f"--gpu-architecture={arch}", "-Xptxas=-v"]]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    _, n = nvrtc.nvrtcGetProgramLogSize(prog)
    log = b" " * n
    nvrtc.nvrtcGetProgramLog(prog, log)
    log = log.decode(errors="replace").rstrip("\x00 \n")
    ok = int(err) == 0
    expression_of = {}  # mangled name -> the name expression it was asked for
    if ok:
        for expr in name_expressions:
            lerr, lowered = nvrtc.nvrtcGetLoweredName(prog, expr.encode())
            if int(lerr) == 0:
                expression_of[lowered.decode()] = expr
    nvrtc.nvrtcDestroyProgram(prog)
    reports = parse_ptxas(log) if ok else []
    for r in reports:
        r.name = expression_of.get(r.name, r.name)
    return CompileResult(str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path), ok, log, reports)


def compile_report(arch: str = "sm_90", items: int = DEFAULT_ITEMS):
    """NVRTC-compile every CUDA lab source; a list of CompileResult."""
    return [nvrtc_compile(source_path(m), arch, items) for m in MODULES]


# ------------------------------------------------------------------------------------------------
# Launchers
# ------------------------------------------------------------------------------------------------
def _to_cupy(x):
    import cupy

    return x if isinstance(x, cupy.ndarray) else cupy.asarray(x)


def _empty_like(x):
    if type(x).__module__.startswith("torch"):
        import torch

        return torch.empty_like(x)
    import cupy

    return cupy.empty_like(x)


_SMS: dict = {}


def row_grid(rows: int) -> int:
    """Blocks for the row loop: ROW_GRID_WAVES device-fulls, never more than rows (as lab_host.h)."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _SMS:  # asked once per device: the attribute query is slow
        _SMS[dev] = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, dev)
    return max(1, min(rows, _SMS[dev] * (constants.THREADS_PER_SM // BLOCK) * constants.ROW_GRID_WAVES))


def softmax(x, kernel: str = "softmax_online_1pass", out=None, items: int = DEFAULT_ITEMS):
    """Row softmax of a float32 (rows, cols) CuPy array or CUDA torch tensor with one Lab 1 kernel."""
    if kernel not in LAB1_KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(LAB1_KERNELS)}")
    rows, cols = check_scores(x, kernel=kernel, items=items)
    out = _empty_like(x) if out is None else out
    check_out(out, rows, cols)
    fn = load("softmax", items).get_function(kernel)
    fn((row_grid(rows),), (BLOCK,), (_to_cupy(x), _to_cupy(out), np.int32(rows), np.int32(cols)))
    return out


def _mask_args(rows, q_len, valid_len):
    import cupy

    if q_len is None:
        q_len = rows
    if q_len < 1 or rows % q_len:
        raise ValueError(f"q_len must divide rows ({rows}); rows are (batch * heads * q_len) query rows, got {q_len}")
    if valid_len is None:
        return np.int32(q_len), cupy.zeros(1, dtype=cupy.int32), np.int32(0)
    vl = _to_cupy(valid_len)
    if vl.dtype != cupy.int32 or vl.shape != (rows,):
        raise ValueError(f"valid_len must be int32 of shape ({rows},), got {vl.dtype} {vl.shape}")
    return np.int32(q_len), vl, np.int32(1)


def scale_mask_softmax(x, scale: float = 1.0, *, causal: bool = False, window: int = 0, valid_len=None,
                       q_len: int | None = None, fused: bool = True, out=None, items: int = DEFAULT_ITEMS):
    """softmax(x * scale + mask) through Lab 2's fused kernel or its three-kernel unfused path.

    The mask is generated from indices (causal, sliding window of `window` keys) and from per-row
    valid lengths (padding). A row with no valid key comes back as zeros."""
    import cupy

    rows, cols = check_scores(x, kernel="scale_mask_softmax_fused" if fused else "", items=items)
    if window < 0:
        raise ValueError(f"window must be >= 0 (0 = no window), got {window}")
    q, vl, use_vl = _mask_args(rows, q_len, valid_len)
    out = _empty_like(x) if out is None else out
    check_out(out, rows, cols)
    mod = load("fused_softmax", items)
    xc, oc = _to_cupy(x), _to_cupy(out)
    grid = (row_grid(rows),)
    if fused:
        mod.get_function("scale_mask_softmax_fused")(
            grid, (BLOCK,), (xc, oc, np.int32(rows), np.int32(cols), np.float32(scale), q, np.int32(causal),
                             np.int32(window), vl, use_vl))
        return out
    t1, t2 = cupy.empty_like(xc), cupy.empty_like(xc)
    n = rows * cols
    mod.get_function("scale_kernel")((MAX_GRID,), (BLOCK,), (xc, t1, np.int64(n), np.float32(scale)))
    mod.get_function("add_mask_kernel")((MAX_GRID,), (BLOCK,), (t1, t2, np.int32(rows), np.int32(cols), q,
                                                                np.int32(causal), np.int32(window), vl, use_vl))
    mod.get_function("softmax_online_2pass")(grid, (BLOCK,), (t2, oc, np.int32(rows), np.int32(cols)))
    return out


def excerpt(path, name: str) -> str:
    """The comment block above kernel/function/struct `name` in a course source, and its body. A
    Python source (a07_softmax/triton_softmax.py) is read as text too, so a listing needs neither
    triton nor a GPU."""
    if str(path).endswith(".py"):
        import ast

        text = (PACKAGE.parent / path if str(path).startswith(PACKAGE.name + "/") else ROOT / path).read_text()
        node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                    and n.name == name)
        first = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        return "\n".join(text.splitlines()[first:node.end_lineno])
    lines = (ROOT / path).read_text().splitlines()
    is_struct = re.compile(rf"^(struct|class) {name}\b")
    start = next(i for i, line in enumerate(lines) if is_struct.search(line) or (
        re.search(rf"\b{name}\(", line) and not line.lstrip().startswith("//") and ";" not in line.split(name)[0]))
    closing = "};" if is_struct.search(lines[start]) else "}"
    while start > 0 and lines[start - 1].startswith(("//", "extern", "template", "__device__", "__global__", "#pragma")):
        start -= 1
    end = start
    while end < len(lines) and lines[end] != closing:
        end += 1
    return "\n".join(lines[start:end + 1])
