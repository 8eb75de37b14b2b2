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

    Must run before the first `import triton`; returns True if the interpreter is on."""
    import sys

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
    if "triton" in sys.modules and _os.environ.get("TRITON_INTERPRET") == "1":
        # triton reads the variable at kernel-definition time; kernels defined before this call
        # would compile for a GPU. Fail loudly instead of half-working.
        import triton  # noqa: F401
    return _os.environ.get("TRITON_INTERPRET") == "1"
