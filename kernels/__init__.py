"""A07 Softmax & Fused Kernels: the course's Python package.

  kernels.reference       float64 references, the online (m, s) state, the traffic model
  kernels.backend         what this machine can run (python -m kernels doctor)
  kernels.native          the CUDA/HIP lab kernels through CuPy RawModule (NVRTC / hiprtc)
  kernels.triton_softmax  Lab 3 in Triton (GPU or the CPU interpreter)
  kernels.bench           the benchmark (make bench)
  kernels.check           the exercise checker (make check EX=NN)

Note: a different package on PyPI is also called `kernels`. Keep this course in its own
environment (make creates .venv) so that `import kernels` finds this one.
"""
import os as _os

__version__ = "0.1.0"


def use_interpreter(force: bool = False) -> bool:
    """Select the Triton interpreter when there is no GPU (or when forced).

    Call it before the course's Triton kernels are imported (kernels.triton_softmax): triton reads
    TRITON_INTERPRET when a kernel is defined. Returns True if the interpreter is on."""
    if force:
        _os.environ["TRITON_INTERPRET"] = "1"
    elif "TRITON_INTERPRET" not in _os.environ:
        try:
            import torch

            gpu = torch.cuda.is_available()
        except Exception:
            gpu = False
        if not gpu:
            _os.environ["TRITON_INTERPRET"] = "1"
    return _os.environ.get("TRITON_INTERPRET") == "1"
