"""The CPU target of the CUDA/HIP teaching kernels (common/cpu_target.h): compile a kernel source
with the system C++ compiler and run it on the CPU, each block's threads concurrently, blocks one
after another. Correctness only, at small sizes: it is how Lab 1, Lab 2 and exercises 01/02 run on
a machine without a GPU, and how CI checks the lab kernels' logic against float64.

A kernel is driven by a generated main() that reads its inputs from raw files, launches it with
a07cpu::launch, and writes its output. Argument kinds, in the kernel's parameter order:
  ("in", dtype)   a const input array (float32 or int32), read from a file
  ("out", shape)  a float32 output array, poisoned with NaN before the launch
  ("i32", v), ("f32", v)   scalars
Kernels that need what a CPU cannot give (inline PTX: thread-block clusters, L2 hints, the fast
softmax) do not compile here; build() raises CpuTargetError with the compiler's message.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from .paths import ROOT

HEADER = ROOT / "common" / "cpu_target.h"
CTYPES = {"float32": "float", "int32": "int"}


class CpuTargetError(RuntimeError):
    pass


def compiler() -> str | None:
    """The C++20 compiler used for the CPU target ($CXX, g++ or clang++), or None."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def driver_source(source_name: str, kernel: str, kinds) -> str:
    """The C++ main() that runs `kernel` from `source_name` with arguments of `kinds`."""
    lines = [f'#include "{source_name}"', "int main(int argc, char** argv) {", "  int a = 3;",
             "  const unsigned grid = std::strtoul(argv[1], nullptr, 10), block = std::strtoul(argv[2], nullptr, 10);"]
    call, outs = [], []
    for i, (kind, what) in enumerate(kinds):  # one pass, in parameter order: each reads its argv
        if kind == "in":
            ctype = CTYPES[what]
            lines.append(f"  const char* p{i} = argv[a++]; size_t n{i} = std::strtoull(argv[a++], nullptr, 10);")
            lines.append(f"  auto v{i} = a07cpu::read<{ctype}>(p{i}, n{i});")
            call.append(f"(const {ctype}*)v{i}.data()")
        elif kind == "out":
            lines.append(f"  const char* p{i} = argv[a++]; size_t n{i} = std::strtoull(argv[a++], nullptr, 10);")
            lines.append(f"  std::vector<float> v{i}(n{i} + a07cpu::GUARD, NAN);  // poisoned, with a guard past the end")
            call.append(f"v{i}.data()")
            outs.append(i)
        elif kind == "i32":
            lines.append(f"  const int s{i} = int(std::strtol(argv[a++], nullptr, 10));")
            call.append(f"s{i}")
        elif kind == "f32":
            lines.append(f"  const float s{i} = float(std::strtod(argv[a++], nullptr));")
            call.append(f"s{i}")
        else:
            raise ValueError(f"unknown argument kind {kind!r}")
    locals_ = call
    lines.append(f"  a07cpu::launch({kernel}, grid, block, {', '.join(locals_)});")
    for i in outs:
        lines.append(f"  a07cpu::check_guard(v{i}, n{i});")
        lines.append(f"  v{i}.resize(n{i});")
        lines.append(f"  a07cpu::write(p{i}, v{i});")
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def build(source: Path, kernel: str, kinds, out_dir: Path, *, warp: int = 32, defines=(), timeout: float = 120) -> Path:
    """Compile `kernel` of `source` for the CPU into out_dir; the executable's path."""
    if kernel.startswith("softmax_fast"):
        raise CpuTargetError(f"{kernel} needs what a CPU cannot give (inline PTX: thread-block clusters, L2 cache "
                             "hints, the .ftz exp2): it runs only on an NVIDIA GPU (fast.plan() runs anywhere)")
    cxx = compiler()
    if cxx is None:
        raise CpuTargetError("no C++ compiler found (g++ or clang++; set CXX): the CPU target cannot build")
    out_dir = Path(out_dir)
    drv = out_dir / f"drive_{kernel}.cpp"
    drv.write_text(driver_source(Path(source).name, kernel, kinds))
    exe = out_dir / f"run_{kernel}"
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
    for i, ((kind, what), v) in enumerate(zip(kinds, values)):
        if kind == "in":
            path = work / f"in{i}.bin"
            np.ascontiguousarray(v, dtype=np.dtype(what)).tofile(path)
            cmd += [str(path), str(int(np.size(v)))]
        elif kind == "out":
            path = work / f"out{i}.bin"
            cmd += [str(path), str(int(np.prod(v)))]
            outs.append((i, path, tuple(v)))
        else:
            cmd.append(repr(float(v)) if kind == "f32" else str(int(v)))
    return cmd, outs


def run(exe: Path, grid: int, block: int, kinds, values, work: Path, timeout: float = 60):
    """Run a built kernel (trusted callers: labs and tests); {argument index: output array}."""
    cmd, outs = argv(exe, grid, block, kinds, values, Path(work))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode:
        raise CpuTargetError(f"{Path(exe).name} exited {p.returncode}: {p.stderr[-1000:]}")
    return {i: np.fromfile(path, dtype=np.float32).reshape(shape) for i, path, shape in outs}
