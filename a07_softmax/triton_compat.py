"""Compatibility of Triton's interpreter with the NumPy it runs on.

Standalone (NumPy, inspect and triton only): the exercise checker's sandboxed child loads this file
by its path, where the course package is out of reach.
"""
from __future__ import annotations


def fix_interpreter_for_numpy() -> bool:
    """Make an older Triton interpreter work under NumPy >= 2.4; True if it needed the change.

    Triton's interpreter holds every scalar as a one-element array and, before the fix of
    triton-lang/triton#9171 (in triton 3.8; torch 2.11's CUDA build pins 3.6), turns one into a
    Python int with int(array), which NumPy 2.4 refuses for arrays of one dimension. Every loop
    whose bound is a kernel argument (tl.range(0, n_cols, TILE)) then fails with "only
    0-dimensional arrays can be converted to Python scalars". The change is triton's own fix,
    applied the same way: the interpreter's patch of tl.tensor gets an __index__ that squeezes the
    array first. A no-op where triton is missing, already fixed, or NumPy still converts."""
    import inspect
    import warnings

    import numpy as np

    try:
        with warnings.catch_warnings():   # NumPy 1.25-2.3 warn (deprecated) and convert
            warnings.simplefilter("ignore")
            int(np.zeros(1, np.int32))
        return False            # this NumPy still converts one-element arrays
    except TypeError:
        pass
    try:
        from triton.runtime import interpreter
    except Exception:
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_a07_fixed", False):
        return False
    try:
        if "int(self.handle.data))" not in inspect.getsource(original):
            return False        # fixed upstream (or written otherwise): leave it alone
    except (OSError, TypeError):
        return False

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        # set through the scope, so that the interpreter's restore undoes it with the rest
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
    patch_lang_tensor._a07_fixed = True
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True
