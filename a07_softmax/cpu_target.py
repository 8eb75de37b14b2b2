"""The CPU target of the CUDA/HIP teaching kernels (common/cpu_target.h): compile a kernel source
with the system C++ compiler and run it on the CPU, each block's threads concurrently, blocks one
after another. Correctness only, at small sizes: it is how Lab 1, Lab 2 and exercises 01/02 run on
a machine without a GPU, and how CI checks the lab kernels' logic against float64.

A kernel is driven by a generated main() that reads its inputs from raw files, launches it with
a07cpu::launch, and writes its output. Argument kinds, in the kernel's parameter order:
  ("in", dtype)   a const input array (float32 or int32), read from a file
  ("out", shape)  a float32 output array, poisoned with NaN before the launch
  ("inout", dtype) an array the kernel updates in place, read from a file and written back
("in" and "out" take an element offset as a third item: the array then starts that many elements into
its buffer, as a view at an odd offset does; the elements before it are poison, and must stay so.)
  ("i32", v), ("i64", v), ("f32", v)   scalars
  ("null", ctype)  a null pointer of that C type (an optional input left out)
("in"/"out" take float32, int32, int64, float16 or bfloat16; 16-bit values travel as their raw bits.)
The fast softmax's warp, block and two-pass strategies run here too (portability.h's plain-C++
helpers stand in for its PTX); its cluster strategy needs what a CPU cannot give (distributed shared
memory, mbarriers), and build() refuses it with that reason.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .paths import ROOT

HEADER = ROOT / "common" / "cpu_target.h"
# dtype -> (the kernel's element type, the storage type the driver reads and writes)
CTYPES = {"float32": ("float", "float"), "int32": ("int", "int"), "int64": ("long long", "long long"),
          "float16": ("f16_t", "unsigned short"), "bfloat16": ("bf16_t", "unsigned short")}
STORAGE = {"float32": np.float32, "int32": np.int32, "int64": np.int64, "float16": np.float16, "bfloat16": np.uint16}


class CpuTargetError(RuntimeError):
    pass


_SCRATCH = []


def scratch() -> Path:
    """A folder for builds kept for the life of the process (removed at exit)."""
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="a07-cpu-target-"))
    d = Path(_SCRATCH[0].name)
    return Path(tempfile.mkdtemp(dir=d))


def compiler() -> str | None:
    """The C++20 compiler used for the CPU target ($CXX, g++ or clang++), or None."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def driver_source(source_name: str, kernel: str, kinds) -> str:
    """The C++ main() that runs `kernel` from `source_name` with arguments of `kinds`."""
    lines = [f'#include "{source_name}"',
             "int main(int argc, char** argv) {", "  int a = 3;",
             "  const unsigned grid = std::strtoul(argv[1], nullptr, 10), block = std::strtoul(argv[2], nullptr, 10);"]
    call, outs = [], []
    offsets = {}
    for i, (kind, what, *rest) in enumerate(kinds):  # one pass, in parameter order: each reads its argv
        off = offsets[i] = int(rest[0]) if rest else 0   # elements before the array's start (a view's offset)
        if kind == "in":
            ctype, store = CTYPES[what]
            lines.append(f"  const char* p{i} = argv[a++]; size_t n{i} = std::strtoull(argv[a++], nullptr, 10);")
            lines.append(f"  auto v{i} = a07cpu::read<{store}>(p{i}, n{i});")
            if off:  # the array starts `off` elements into its buffer, after poison the kernel may read but not use
                lines.append(f"  v{i}.insert(v{i}.begin(), {off}, a07cpu::poison<{store}>());")
            call.append(f"(const {ctype}*)(v{i}.data() + {off})")
        elif kind == "inout":  # read like "in", passed writable, written back like "out"
            ctype, store = CTYPES[what]
            lines.append(f"  const char* p{i} = argv[a++]; size_t n{i} = std::strtoull(argv[a++], nullptr, 10);")
            lines.append(f"  auto v{i} = a07cpu::read<{store}>(p{i}, n{i});")
            lines.append(f"  v{i}.resize(n{i} + a07cpu::GUARD, a07cpu::poison<{store}>());  // a guard past the end")
            call.append(f"({ctype}*)v{i}.data()")
            outs.append(i)
        elif kind == "out":  # what: the dtype (None: float32)
            ctype, store = CTYPES[what or "float32"]
            lines.append(f"  const char* p{i} = argv[a++]; size_t n{i} = std::strtoull(argv[a++], nullptr, 10);")
            lines.append(f"  std::vector<{store}> v{i}({off} + n{i} + a07cpu::GUARD, a07cpu::poison<{store}>());"
                         "  // poisoned, with guards before (an offset) and past the end")
            call.append(f"({ctype}*)(v{i}.data() + {off})")
            outs.append(i)
        elif kind == "i32":
            lines.append(f"  const int s{i} = int(std::strtol(argv[a++], nullptr, 10));")
            call.append(f"s{i}")
        elif kind == "i64":
            lines.append(f"  const long long s{i} = std::strtoll(argv[a++], nullptr, 10);")
            call.append(f"s{i}")
        elif kind == "f32":
            lines.append(f"  const float s{i} = float(std::strtod(argv[a++], nullptr));")
            call.append(f"s{i}")
        elif kind == "null":
            call.append(f"({what}*)nullptr")
        else:
            raise ValueError(f"unknown argument kind {kind!r}")
    locals_ = call
    lines.append(f"  a07cpu::launch({kernel}, grid, block, {', '.join(locals_)});")
    for i in outs:
        if offsets[i]:  # nothing written before the array's start either; then the array alone
            lines.append(f"  for (size_t k = 0; k < {offsets[i]}; ++k)")
            lines.append(f"    if (const auto q = a07cpu::poison<decltype(v{i})::value_type>(); std::memcmp(&v{i}[k], &q, "
                         f"sizeof q) != 0) {{ std::fprintf(stderr, \"the kernel wrote before the start of its output: "
                         f"element %zu of the {offsets[i]} before it\\n\", k); return 4; }}")
            lines.append(f"  v{i}.erase(v{i}.begin(), v{i}.begin() + {offsets[i]});")
        lines.append(f"  a07cpu::check_guard(v{i}, n{i});")
        lines.append(f"  v{i}.resize(n{i});")
        lines.append(f"  a07cpu::write(p{i}, v{i});")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def build(source: Path, kernel: str, kinds, out_dir: Path, *, warp: int = 32, defines=(), timeout: float = 120) -> Path:
    """Compile `kernel` of `source` (a function name, or a template instance such as
    "softmax_fast_warp<float, 2, 16, 1, true>") for the CPU into out_dir; the executable's path."""
    if "_cluster<" in kernel:
        raise CpuTargetError(f"{kernel} needs what a CPU cannot give (thread-block clusters: distributed shared "
                             "memory, mbarriers): it runs only on an NVIDIA sm_90 GPU (fast.plan() runs anywhere; "
                             "plan with clusters=0 for a strategy the CPU target runs)")
    cxx = compiler()
    if cxx is None:
        raise CpuTargetError("no C++ compiler found (g++ or clang++; set CXX): the CPU target cannot build")
    out_dir = Path(out_dir)
    stem = re.sub(r"\W+", "_", kernel).strip("_")  # a template instance as a file name
    drv = out_dir / f"drive_{stem}.cpp"
    drv.write_text(driver_source(Path(source).name, kernel, kinds))
    exe = out_dir / f"run_{stem}"
    cmd = [cxx, "-std=c++20", "-O1", "-pthread", "-w", "-include", str(HEADER), f"-DA07_CPU_WARP={int(warp)}",
           f"-I{Path(source).parent}", f"-I{ROOT / 'common'}", f"-I{ROOT / 'cuda'}", *[f"-D{d}" for d in defines],
           str(drv), "-o", str(exe)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise CpuTargetError(f"the C++ compiler did not finish in {timeout} s") from e
    if p.returncode:
        hint = ("\n(inline PTX cannot run on the CPU target: this kernel needs an NVIDIA GPU)"
                if "asm" in p.stderr or "PTX" in p.stderr else "")
        raise CpuTargetError(p.stderr[-3000:] + hint)
    return exe


def argv(exe: Path, grid: int, block: int, kinds, values, work: Path):
    """The command line for `exe` and the output files it will write: values[i] is an array for
    "in", a shape for "out", a number for scalars."""
    cmd, outs = [str(exe), str(grid), str(block)], []
    for i, ((kind, what, *_), v) in enumerate(zip(kinds, values)):
        if kind == "in":
            path = work / f"in{i}.bin"
            as_stored(v, what).tofile(path)
            cmd += [str(path), str(int(np.size(v)))]
        elif kind == "out":
            path = work / f"out{i}.bin"
            cmd += [str(path), str(int(np.prod(v)))]
            outs.append((i, path, tuple(v), what or "float32"))
        elif kind == "inout":  # the array goes in and its new values come back in the same file
            path = work / f"inout{i}.bin"
            as_stored(v, what).tofile(path)
            cmd += [str(path), str(int(np.size(v)))]
            outs.append((i, path, tuple(np.shape(v)), what))
        elif kind != "null":
            cmd.append(repr(float(v)) if kind == "f32" else str(int(v)))
    return cmd, outs


def run(exe: Path, grid: int, block: int, kinds, values, work: Path, timeout: float = 60):
    """Run a built kernel (trusted callers: labs and tests); {argument index: output array}."""
    cmd, outs = argv(exe, grid, block, kinds, values, Path(work))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode:
        raise CpuTargetError(f"{Path(exe).name} exited {p.returncode}: {p.stderr[-1000:]}")
    return {i: from_stored(np.fromfile(path, dtype=STORAGE[dt]), dt).reshape(shape) for i, path, shape, dt in outs}


def as_stored(a, dtype: str) -> np.ndarray:
    """`a` in the bytes a kernel of `dtype` reads; bfloat16 (which NumPy lacks) as the top 16 bits
    of float32, rounded to nearest even: torch's and the GPU's conversion."""
    if dtype != "bfloat16":
        return np.ascontiguousarray(a, dtype=STORAGE[dtype])
    if type(a).__module__.startswith("torch"):
        import torch

        return a.contiguous().view(torch.int16).numpy().view(np.uint16)
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, 0x7FC0, (u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_stored(a: np.ndarray, dtype: str) -> np.ndarray:
    """A kernel's output as float32 (bfloat16: its bits widened)."""
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32, copy=False) if dtype == "float16" else a
