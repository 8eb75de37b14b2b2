"""The CUDA/HIP lab kernels, launched from Python through CuPy RawModule.

The very files in cuda/ (NVRTC on NVIDIA) and hip/ (hiprtc on ROCm) are compiled; nothing is
copied into strings here. Every launcher checks its arguments first and raises a clear Python error
(TypeError / ValueError) before anything reaches the GPU.

Without a GPU, `compile_report()` still compiles every source through NVRTC for sm_90 and reports
registers and spills per kernel: the labs are compile-only there.
"""
from __future__ import annotations

import contextlib
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
    device: int | None = None  # the GPU's ordinal, where known
    ptr: int = 0               # address of the first element (0 where unknown)
    nbytes: int = 0


def meta(x) -> Meta:
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        return Meta(tuple(x.shape), str(x.dtype).replace("torch.", ""), x.is_contiguous(), x.is_cuda, "torch",
                    x.device.index if x.is_cuda else None, x.data_ptr(), x.numel() * x.element_size())
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        contiguous = bool(x.flags["C_CONTIGUOUS"]) if hasattr(x, "flags") else False
        cai = getattr(x, "__cuda_array_interface__", None)
        dev = getattr(getattr(x, "device", None), "id", None)
        ptr = int((cai or {}).get("data", (0,))[0] or 0) if cai is not None else 0
        nbytes = int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
        return Meta(tuple(x.shape), str(np.dtype(x.dtype)), contiguous, cai is not None, mod, dev, ptr, nbytes)
    raise TypeError(f"expected a CuPy array or a torch tensor on the GPU, got {type(x).__name__}")


def check_out(out, x, dtype: str | None = None, shape: tuple | None = None, name: str = "out"):
    """Validate an output array against its input x before a launch: on the GPU, on x's device,
    C-contiguous, of `dtype` and `shape` (default: x's), and either x itself (in place) or not
    overlapping x at all (a partial overlap would read values the kernel already wrote)."""
    m, o = meta(x), meta(out)
    dtype, shape = dtype or m.dtype, tuple(shape or m.shape)
    want = f"a C-contiguous {dtype} GPU array of shape {shape}"
    if not o.on_device:
        raise ValueError(f"{name} must be {want}; got a {o.kind} array in host memory")
    if o.dtype != dtype or o.shape != shape or not o.contiguous:
        raise ValueError(f"{name} must be {want}; got {o.kind} {o.dtype} {o.shape}"
                         f"{'' if o.contiguous else ' (non-contiguous)'}")
    if m.device is not None and o.device is not None and m.device != o.device:
        raise ValueError(f"{name} is on GPU {o.device} and the input on GPU {m.device}: pass both on one device")
    if o.ptr and m.ptr and o.ptr != m.ptr and o.ptr < m.ptr + m.nbytes and m.ptr < o.ptr + o.nbytes:
        raise ValueError(f"{name} overlaps the input without being it: pass {name}=x to work in place, or a "
                         "separate buffer")


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

    key = (module, items, cupy.cuda.Device().id)  # a module is loaded per device
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
    # NVRTC writes into this buffer. It must be a fresh object: b" " * n is, for n = 1 (an empty
    # log), CPython's shared one-byte b" " itself, and writing its terminating NUL there breaks
    # every later b" " in the process.
    log = bytes(n + 1)
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
def _empty_like(x):
    if type(x).__module__.startswith("torch"):
        import torch

        return torch.empty_like(x)
    import cupy

    return cupy.empty_like(x)


def pointer(a) -> int:
    """The device address of a CuPy array or torch tensor, for a kernel argument. Passed as a number,
    not as the array: CuPy would otherwise import a torch tensor through __cuda_array_interface__,
    which synchronises the host with the tensor's stream on every launch."""
    return a.data_ptr() if type(a).__module__.startswith("torch") else a.data.ptr


def _cupy_stream_of(torch_stream, dev: int):
    """A CuPy view of a torch stream: Stream.from_external (the CUDA stream protocol, CuPy 14) where
    both sides speak it, else ExternalStream on the raw handle."""
    import cupy

    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(torch_stream, "__cuda_stream__"):
        return from_external(torch_stream)
    return cupy.cuda.ExternalStream(torch_stream.cuda_stream, dev)


@contextlib.contextmanager
def launch_context(x):
    """Make x's device current, and its stream CuPy's current stream, for the launches inside: a
    torch tensor runs on torch's current stream of its device (as torch's own kernels do, so work
    under `torch.cuda.stream(s)` stays ordered on s), a CuPy array on CuPy's current stream."""
    import cupy

    if type(x).__module__.startswith("torch"):
        import torch

        dev = x.device.index
        with cupy.cuda.Device(dev):
            with _cupy_stream_of(torch.cuda.current_stream(dev), dev):
                yield
    else:
        with x.device:
            yield


_SMS: dict = {}


def row_grid(rows: int) -> int:
    """Blocks for the row loop: ROW_GRID_WAVES device-fulls, never more than rows (as lab_host.h)."""
    import cupy

    dev = cupy.cuda.Device().id
    if dev not in _SMS:  # asked once per device: the attribute query is slow
        _SMS[dev] = cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, dev)
    return max(1, min(rows, _SMS[dev] * (constants.THREADS_PER_SM // BLOCK) * constants.ROW_GRID_WAVES))


def softmax(x, kernel: str = "softmax_online_1pass", out=None, items: int = DEFAULT_ITEMS):
    """Row softmax of a float32 (rows, cols) CuPy array or CUDA torch tensor with one Lab 1 kernel.
    `out` may be x itself (in place). Runs on x's device and stream (launch_context)."""
    if kernel not in LAB1_KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(LAB1_KERNELS)}")
    rows, cols = check_scores(x, kernel=kernel, items=items)
    if out is not None:
        check_out(out, x)
    with launch_context(x):
        out = _empty_like(x) if out is None else out
        fn = load("softmax", items).get_function(kernel)
        fn((row_grid(rows),), (BLOCK,), (np.uint64(pointer(x)), np.uint64(pointer(out)), np.int32(rows), np.int32(cols)))
    return out


def check_valid_len(valid_len, x, rows: int, cols: int):
    """valid_len: int32, shape (rows,), on x's device, every value in [0, cols]. Reading its range
    costs one device-to-host copy of two numbers (a synchronisation), paid for a clear error
    instead of a kernel that reads garbage lengths."""
    m = meta(valid_len)
    if not m.on_device or m.dtype != "int32" or m.shape != (rows,) or not m.contiguous:
        raise ValueError(f"valid_len must be a contiguous int32 GPU array of shape ({rows},) (one length per "
                         f"row), got {m.kind} {m.dtype} {m.shape}{'' if m.on_device else ' in host memory'}")
    xm = meta(x)
    if xm.device is not None and m.device is not None and xm.device != m.device:
        raise ValueError(f"valid_len is on GPU {m.device} and x on GPU {xm.device}")
    lo, hi = int(valid_len.min()), int(valid_len.max())
    if lo < 0 or hi > cols:
        raise ValueError(f"valid_len must lie in [0, cols = {cols}] (0 masks a whole row), got values from "
                         f"{lo} to {hi}")


def check_mask_args(rows: int, cols: int, scale, q_len, window, causal) -> int:
    """The index-generated mask's parameters; returns q_len (rows by default)."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)) or \
            not math.isfinite(float(scale)):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    q_len = rows if q_len is None else q_len
    if isinstance(q_len, bool) or not isinstance(q_len, (int, np.integer)) or q_len < 1 or rows % q_len:
        raise ValueError(f"q_len must be a positive integer dividing rows ({rows}): rows are (batch * heads * "
                         f"q_len) query rows; got {q_len!r}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 0:
        raise ValueError(f"window must be an integer >= 0 (0 = no window), got {window!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    return int(q_len)


def scale_mask_softmax(x, scale: float = 1.0, *, causal: bool = False, window: int = 0, valid_len=None,
                       q_len: int | None = None, fused: bool = True, out=None, items: int = DEFAULT_ITEMS):
    """softmax(x * scale + mask) through Lab 2's fused kernel or its three-kernel unfused path.

    The mask is generated from indices (causal, sliding window of `window` keys) and from per-row
    valid lengths (padding, int32 in [0, cols]). A row with no valid key comes back as zeros.
    `out` may be x itself (in place). Runs on x's device and stream (launch_context)."""
    rows, cols = check_scores(x, kernel="scale_mask_softmax_fused" if fused else "", items=items)
    q = check_mask_args(rows, cols, scale, q_len, window, causal)
    if valid_len is not None:
        check_valid_len(valid_len, x, rows, cols)
    if out is not None:
        check_out(out, x)
    import cupy

    with launch_context(x):
        out = _empty_like(x) if out is None else out
        vl = cupy.zeros(1, dtype=cupy.int32) if valid_len is None else None  # a pointer the kernel never reads
        mask = (np.int32(q), np.int32(causal), np.int32(window),
                np.uint64(pointer(vl if valid_len is None else valid_len)), np.int32(valid_len is not None))
        mod = load("fused_softmax", items)
        px, po = np.uint64(pointer(x)), np.uint64(pointer(out))
        grid = (row_grid(rows),)
        if fused:
            mod.get_function("scale_mask_softmax_fused")(
                grid, (BLOCK,), (px, po, np.int32(rows), np.int32(cols), np.float32(scale), *mask))
            return out
        t1, t2 = cupy.empty((rows, cols), cupy.float32), cupy.empty((rows, cols), cupy.float32)
        n = rows * cols
        mod.get_function("scale_kernel")((MAX_GRID,), (BLOCK,), (px, t1, np.int64(n), np.float32(scale)))
        mod.get_function("add_mask_kernel")((MAX_GRID,), (BLOCK,), (t1, t2, np.int32(rows), np.int32(cols), *mask))
        mod.get_function("softmax_online_2pass")(grid, (BLOCK,), (t2, po, np.int32(rows), np.int32(cols)))
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
