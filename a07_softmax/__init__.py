"""A07 Softmax & Fused Kernels: the course's Python package.

  a07_softmax.reference       float64 references, the online (m, s) state, the traffic model
  a07_softmax.accuracy        the one error measure and tolerance table
  a07_softmax.backend         the one probe of what this machine can run (a07 doctor)
  a07_softmax.native          the CUDA/HIP lab kernels through CuPy RawModule (NVRTC / hiprtc)
  a07_softmax.fast            the fast softmax: a strategy per row length
  a07_softmax.triton_softmax  Lab 3 in Triton (GPU or the CPU interpreter)
  a07_softmax.bench           the benchmark (a07 bench)
  a07_softmax.check           the exercise checker (a07 check NN)
  a07_softmax.cli             the `a07` command

Device sources and committed results are found through a07_softmax.paths (a checkout, or the copy
a wheel carries).
"""
__version__ = "0.2.0"


def use_interpreter(force: bool = False) -> bool:
    """backend.use_interpreter(): the Triton interpreter where Triton cannot use a GPU."""
    from .backend import use_interpreter as _use

    return _use(force)
