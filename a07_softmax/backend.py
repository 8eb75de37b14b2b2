"""Which of the course's backends this machine can run, and why.

Detection order (the first that works is the "best" backend):
  1. NVIDIA  - CuPy imports and the driver reports a device (name, compute capability, SM count)
  2. AMD     - a ROCm build of CuPy, or torch.version.hip with a visible device
  3. Triton on a GPU (torch sees a CUDA/ROCm device and triton imports)
  4. Triton interpreter on the CPU (TRITON_INTERPRET=1 with CPU torch tensors)
  5. plain CPU (NumPy references only)

Nothing here raises: every probe catches its own failure and records the reason, because the
doctor's job is to explain a broken machine, not to crash on it.

This is the course's one probe of the machine: the package, the labs, the checker, the benchmark,
the tests and the notebooks all ask detect() (or use_interpreter(), which reads it), never torch
or CuPy directly, so they cannot disagree about what runs where.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import importlib
import importlib.metadata
import os
import shutil


@dataclass
class Device:
    vendor: str  # "NVIDIA" or "AMD"
    name: str
    arch: str  # "sm_90", "gfx942", ...
    sm_count: int
    warp_size: int


@dataclass
class Backends:
    nvidia: Device | None = None
    amd: Device | None = None
    torch_gpu: bool = False   # torch sees a CUDA or ROCm device
    triton_installed: bool = False
    torch_version: str | None = None
    triton_version: str | None = None
    cupy_version: str | None = None
    nvrtc: str | None = None  # NVRTC version if CUDA sources can be compiled without a GPU
    nvcc: str | None = None
    hipcc: str | None = None
    cxx: str | None = None      # the C++ compiler of the CPU target (common/cpu_target.h)
    reasons: dict = field(default_factory=dict)

    @property
    def gpu(self) -> Device | None:
        return self.nvidia or self.amd

    @property
    def native(self) -> bool:
        """The CUDA/HIP lab kernels can be launched here (CuPy with a device)."""
        return self.gpu is not None and self.cupy_version is not None

    @property
    def triton_gpu(self) -> bool:
        """Triton kernels run compiled on a GPU (read at call time: use_interpreter() may switch)."""
        return self.triton_installed and self.torch_gpu and os.environ.get("TRITON_INTERPRET") != "1"

    @property
    def triton_interpreter(self) -> bool:
        """Triton kernels can run in the CPU interpreter (needs only triton and CPU torch)."""
        return self.triton_installed and self.torch_version is not None

    @property
    def triton_device(self) -> str | None:
        """Where the course's Triton kernels take their tensors: "cuda", "cpu" (interpreter) or None."""
        if self.triton_gpu:
            return "cuda"
        return "cpu" if self.triton_interpreter and os.environ.get("TRITON_INTERPRET") == "1" else None

    @property
    def best(self) -> str:
        if self.nvidia:
            return "cuda"
        if self.amd:
            return "hip"
        if self.triton_gpu:
            return "triton"
        if self.triton_interpreter:
            return "triton-interpreter"
        return "cpu"


def _version(mod: str) -> str | None:
    try:
        return importlib.import_module(mod).__version__
    except Exception:
        return None


def _probe_cupy(b: Backends) -> None:
    try:
        import cupy
    except Exception as e:  # not installed, or a broken install
        b.reasons["cupy"] = f"CuPy not importable ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
        return
    b.cupy_version = cupy.__version__
    try:
        n = cupy.cuda.runtime.getDeviceCount()
        if n < 1:
            raise RuntimeError("no device")
        p = cupy.cuda.runtime.getDeviceProperties(0)
    except Exception as e:
        b.reasons["cupy"] = f"CuPy {cupy.__version__} found no GPU ({type(e).__name__})"
        return
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    if cupy.cuda.runtime.is_hip:
        arch = p.get("gcnArchName", b"gfx?")
        arch = arch.decode() if isinstance(arch, bytes) else str(arch)
        b.amd = Device("AMD", name, arch.split(":")[0], p["multiProcessorCount"], p["warpSize"])
    else:
        b.nvidia = Device("NVIDIA", name, f"sm_{p['major']}{p['minor']}", p["multiProcessorCount"], p["warpSize"])


def _probe_torch(b: Backends) -> None:
    try:
        import torch
    except Exception as e:
        b.reasons["torch"] = f"torch not importable ({type(e).__name__})"
        return
    b.torch_version = torch.__version__
    gpu = False
    try:
        gpu = bool(torch.cuda.is_available())
    except Exception:
        pass
    b.torch_gpu = gpu
    if gpu and getattr(torch.version, "hip", None) and b.amd is None:
        p = torch.cuda.get_device_properties(0)
        b.amd = Device("AMD", p.name, getattr(p, "gcnArchName", "gfx?").split(":")[0], p.multi_processor_count,
                       getattr(p, "warp_size", 64))
        b.reasons.setdefault("amd", "found through torch.version.hip (no ROCm CuPy: RawModule labs unavailable)")
    # The installed version, read without importing triton: importing it before use_interpreter()
    # has set TRITON_INTERPRET would fix the kernels' mode for the whole process.
    try:
        b.triton_version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        b.triton_version = None
    if b.triton_version is None:
        b.reasons["triton"] = "triton not installed (pip install triton; Linux only)"
        return
    b.triton_installed = True


def _probe_compilers(b: Backends) -> None:
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        if int(err) == 0:
            b.nvrtc = f"{major}.{minor}"
    except Exception as e:
        b.reasons["nvrtc"] = f"NVRTC not available ({type(e).__name__}); pip install cuda-bindings nvidia-cuda-nvrtc"
    from .cpu_target import compiler

    b.cxx = compiler()
    for tool, attr in (("nvcc", "nvcc"), ("hipcc", "hipcc")):
        path = shutil.which(tool)
        if path:
            setattr(b, attr, path)


_CACHE: Backends | None = None


def detect(refresh: bool = False) -> Backends:
    """Probe the machine once (cached)."""
    global _CACHE
    if _CACHE is None or refresh:
        b = Backends()
        _probe_cupy(b)
        _probe_torch(b)
        _probe_compilers(b)
        _CACHE = b
    return _CACHE


def has_gpu() -> bool:
    return detect().gpu is not None


def use_interpreter(force: bool = False) -> bool:
    """Select the Triton interpreter where Triton cannot use a GPU (or when forced); True if on.

    Call it before the course's Triton kernels are defined (importing a07_softmax.triton_softmax):
    triton reads TRITON_INTERPRET when a kernel is decorated. An explicit TRITON_INTERPRET in the
    environment is respected. The decision is detect()'s: torch must see a GPU for Triton to use
    it, whatever CuPy says (a GPU without CuPy still runs Triton compiled)."""
    if force:
        os.environ["TRITON_INTERPRET"] = "1"
    elif "TRITON_INTERPRET" not in os.environ and not detect().torch_gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    on = os.environ.get("TRITON_INTERPRET") == "1"
    if on:
        from .triton_compat import fix_interpreter_for_numpy
        fix_interpreter_for_numpy()
    return on


TRITON_MISSING = ("triton is not installed here (it ships for Linux only): the cells that launch Triton kernels "
                  "skip, and the committed notebook shows what they print")


def triton_kernels():
    """The Triton lab's module (a07_softmax.triton_softmax) where triton and torch are installed,
    in the interpreter where no GPU is usable; None where they are not (macOS, Windows), after
    saying so. Notebooks import the Triton kernels through this, so every notebook runs anywhere."""
    b = detect()
    if not (b.triton_installed and b.torch_version):
        print(TRITON_MISSING)
        return None
    use_interpreter()
    from . import triton_softmax

    return triton_softmax


def labs(b: Backends | None = None):
    """(lab, how it runs here, why) for every lab in the course."""
    b = b or detect()
    rows = []
    native = "Lab 1 + Lab 2 (CUDA/HIP via CuPy RawModule)"
    if b.nvidia:
        rows.append((native, "native (CUDA)", f"{b.nvidia.name}, {b.nvidia.arch}, {b.nvidia.sm_count} SMs"))
    elif b.amd and b.cupy_version:
        rows.append((native, "native (HIP)", f"{b.amd.name}, {b.amd.arch}, warpSize {b.amd.warp_size}"))
    elif b.nvrtc:
        rows.append((native, "compile-only", f"no GPU: NVRTC {b.nvrtc} compiles the CUDA sources for sm_90; "
                     "results shown from results/nvidia-h200"))
    else:
        rows.append((native, "unavailable", b.reasons.get("nvrtc", "no GPU and no NVRTC")))
    if not b.native:
        rows.append(("Lab 1/2 and drills 01/02 on the CPU target", "CPU target" if b.cxx else "unavailable",
                     f"{b.cxx}: the same CUDA sources, threads as fibers; correctness only" if b.cxx
                     else "no C++ compiler (g++ or clang++)"))
    standalone = []
    if b.nvcc:
        standalone.append("nvcc (make cuda" + ("; make run-cuda" if b.nvidia else "; no GPU to run them") + ")")
    if b.hipcc:
        standalone.append("hipcc (make hip" + ("; make run-hip" if b.amd else "; no AMD GPU to run them") + ")")
    rows.append(("Lab 1/2 standalone programs", "build" if standalone else "unavailable",
                 ", ".join(standalone) or "neither nvcc nor hipcc on PATH"))
    if b.triton_gpu:
        rows.append(("Lab 3 (Triton)", "native (GPU)", f"triton {b.triton_version}, torch {b.torch_version}"))
    elif b.triton_interpreter:
        rows.append(("Lab 3 (Triton)", "interpreter", f"no GPU: TRITON_INTERPRET=1 runs the kernels on CPU "
                     f"tensors (triton {b.triton_version}); correctness only, no timings"))
    else:
        rows.append(("Lab 3 (Triton)", "unavailable", b.reasons.get("triton", b.reasons.get("torch", "?"))))
    bench = ("native" if b.gpu and b.torch_version else "committed results",
             "make bench measures this GPU" if b.gpu else "no GPU: notebooks plot results/nvidia-h200")
    rows.append(("Benchmark (make bench)",) + bench)
    rows.append(("References, online recurrence, traffic model", "native (CPU)", "NumPy float64"))
    return rows


def verdict(b: Backends | None = None) -> str:
    b = b or detect()
    parts = []
    if b.nvidia:
        parts.append("CUDA")
    if b.amd:
        parts.append("HIP")
    if b.triton_gpu:
        parts.append("Triton")
    if parts:
        return "ready: " + " + ".join(parts)
    if b.triton_interpreter:
        return "ready: interpreter only" + (" (+ CUDA compile-only)" if b.nvrtc else "")
    return "ready: CPU references only"


def doctor(file=None, b: Backends | None = None) -> int:
    """Print the preflight: one line per check, then the labs table, then one verdict line."""
    import platform
    import sys

    out = file or sys.stdout
    b = b or detect()

    def line(ok, what, detail):
        print(f"[{'ok' if ok else '--'}] {what:<22} {detail}", file=out)

    print("A07 Softmax & Fused Kernels: preflight", file=out)
    line(True, "python", f"{platform.python_version()} ({sys.executable})")
    line(b.torch_version is not None, "torch", b.torch_version or b.reasons.get("torch", "missing"))
    line(b.triton_version is not None, "triton", b.triton_version or b.reasons.get("triton", "missing"))
    line(b.cupy_version is not None, "cupy", b.cupy_version or b.reasons.get("cupy", "missing"))
    g = b.gpu
    gname = (g.name if g.name.upper().startswith(g.vendor) else f"{g.vendor} {g.name}") if g else ""
    line(g is not None, "gpu", f"{gname}, {g.arch}, {g.sm_count} SMs, warpSize {g.warp_size}" if g
         else "none found: " + b.reasons.get("cupy", "no CuPy device and torch sees no GPU"))
    line(b.nvrtc is not None, "nvrtc", b.nvrtc or b.reasons.get("nvrtc", "missing"))
    line(b.nvcc is not None, "nvcc", b.nvcc or "not on PATH: make cuda unavailable (install the CUDA toolkit)")
    line(b.hipcc is not None, "hipcc", b.hipcc or "not on PATH: make hip unavailable (apt-get install hipcc, or ROCm)")
    line(b.cxx is not None, "c++ (cpu target)", b.cxx or "no g++/clang++: the CUDA drills cannot run without a GPU")
    print("", file=out)
    print(f"{'lab':<46} {'runs as':<18} why", file=out)
    for lab, how, why in labs(b):
        print(f"{lab:<46} {how:<18} {why}", file=out)
    print("", file=out)
    print(f"best backend: {b.best}", file=out)
    print(verdict(b), file=out)
    return 0
