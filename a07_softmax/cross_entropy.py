"""Cross-entropy with its gradient in the same kernel: the fast family's CUDA/HIP kernel
(cuda/softmax_fast.cu, CrossEntropy row operation) on a GPU, and its Triton twin for reading (and
for the CPU, through the Triton interpreter).

    loss = a07_softmax.cross_entropy.cross_entropy(logits, target)    # like F.cross_entropy

Eager PyTorch computes the loss by writing the (rows, vocab) log-probabilities, and the gradient in
a backward pass that reads them again. Here one kernel computes, per row, the log-sum-exp (the
online (m, s) of notebook 03), the loss, and the gradient softmax(x) - onehot(t), already scaled
for the reduction; the backward pass only multiplies that stored gradient by the upstream gradient.
Options as F.cross_entropy: ignore_index, reduction ("mean", "sum", "none"), label_smoothing; plus
z_loss, the coefficient of lse^2 added to each row's loss (as in PaLM). The gradient may overwrite
the logits (inplace=True): then no (rows, vocab) tensor is allocated at all.
"""
from __future__ import annotations

import math
import threading

import numpy as np

from . import reference as R

REDUCTIONS = ("mean", "sum", "none")


def reference(logits, target, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
              z_loss: float = 0.0):
    """(loss, dloss/dlogits) in float64 with F.cross_entropy's conventions (plus z_loss); the mean of
    an all-ignored batch is NaN, its gradient zeros, as in PyTorch."""
    x = np.asarray(logits, dtype=np.float64)
    t = np.asarray(target, dtype=np.int64)
    rows, v = x.shape
    keep = t != ignore_index
    tt = np.where(keep, t, 0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = x.max(axis=1)
        m_ref = np.where(np.isneginf(m), 0.0, m)
        lse = m_ref + np.log(np.exp(x - m_ref[:, None]).sum(axis=1))
        target_term = (1 - label_smoothing) * x[np.arange(rows), tt] if label_smoothing < 1 else 0.0
        smooth_term = label_smoothing * x.mean(axis=1) if label_smoothing > 0 else 0.0   # 0 * -inf is NaN
        loss = lse - target_term - smooth_term + z_loss * lse ** 2
        p = np.exp(x - lse[:, None])
    onehot = np.zeros_like(x)
    onehot[np.arange(rows), tt] = 1.0
    g = (p - onehot) + 2 * z_loss * lse[:, None] * p + label_smoothing * (onehot - 1.0 / v)
    loss = np.where(keep, loss, 0.0)
    g[~keep] = 0.0
    if reduction == "mean":
        n = keep.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            return loss.sum() / n, g / max(n, 1)
    if reduction == "sum":
        return loss.sum(), g
    return loss, g


def _check(logits, target, ignore_index, reduction, label_smoothing, z_loss):
    import torch

    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("logits and target must be torch tensors")
    if logits.dim() != 2 or logits.shape[0] < 1 or logits.shape[1] < 1:
        raise ValueError(f"logits must be (rows, vocab) with rows, vocab >= 1, got shape {tuple(logits.shape)}")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"logits have dtype {logits.dtype}; supported: float32, float16, bfloat16")
    if target.shape != (logits.shape[0],) or target.dtype not in (torch.int32, torch.int64) \
            or target.device != logits.device:
        raise ValueError(f"target must be an integer tensor of shape ({logits.shape[0]},) on {logits.device}, "
                         f"got {target.dtype} {tuple(target.shape)} on {target.device}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not (0.0 <= label_smoothing <= 1.0):
        raise ValueError(f"label_smoothing must lie in [0, 1], got {label_smoothing}")
    if not (math.isfinite(z_loss) and z_loss >= 0):
        raise ValueError(f"z_loss must be a finite number >= 0, got {z_loss}")
    if not logits.is_contiguous():
        raise ValueError("logits are not contiguous; pass logits.contiguous()")


def _targets_checked(target, vocab, ignore_index):
    """The Triton twin's test of every target against [0, vocab) (the CPU, through the interpreter,
    and GPUs without CuPy; the CUDA backend launches _targets_on_device instead); returns what
    _raise_bad_targets() waits for. One kernel (targets_outside_vocab_kernel) that on a GPU writes
    its verdict straight into pinned host memory, behind an event: the host waits for this test
    alone, not for the launches queued after it (bool(bad.any()) would drain the stream on every
    call and leave the GPU idle while Python prepares the next launch)."""
    import torch
    import triton

    from .cross_entropy_kernels import targets_outside_vocab_kernel

    n = target.numel()
    interp = not target.is_cuda
    # one program: 4096 targets a step on a GPU; a small step in the interpreter, so the CPU tests
    # walk several
    block = min(triton.next_power_of_2(max(n, 1)), 16 if interp else 4096)
    flag = torch.empty((), dtype=torch.uint8, pin_memory=not interp)
    if interp:
        targets_outside_vocab_kernel[(1,)](target, n, vocab, ignore_index, flag, BLOCK=block)
        return flag, None
    with torch.cuda.device(target.device):
        targets_outside_vocab_kernel[(1,)](target, n, vocab, ignore_index, flag, BLOCK=block, num_warps=4)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(target.device))
    return flag, done


# The CUDA backend's test and count of the targets: cuda/cross_entropy_targets.cu, one block.
TARGETS_SOURCE = {"CUDA": "cuda/cross_entropy_targets.cu", "HIP": "hip/cross_entropy_targets.cpp"}
TARGETS_THREADS = 1024   # the kernel reads its width from blockDim: any block size is correct
_TARGET_KERNELS: dict = {}


class _VerdictSlots(threading.local):
    """Per host thread and device: one pinned int the test writes its verdict into, a NumPy view of
    it for the host to read, and one event behind the test. Reused by every call on that thread:
    cross_entropy() reads the verdict before it returns (or raises), so one call's verdict is never
    written over while a caller still needs it; threads do not share a slot."""

    def __init__(self):
        self.by_device = {}


_SLOTS = _VerdictSlots()


def _targets_kernel(vendor):
    import cupy

    from . import native

    dev = cupy.cuda.Device().id   # a module is loaded per device
    fn = _TARGET_KERNELS.get(dev)
    if fn is None:
        mod = cupy.RawModule(code=(native.ROOT / TARGETS_SOURCE[vendor]).read_text(),
                             options=tuple(native.compile_options()),
                             backend="hiprtc" if vendor == "HIP" else "nvrtc")
        fn = _TARGET_KERNELS[dev] = mod.get_function("cross_entropy_targets")
    return fn


def _targets_on_device(target, vocab, ignore_index, check: bool, count: bool):
    """The CUDA backend's one launch for what the call needs of its (64-bit, contiguous) targets:
    with `check`, the verdict on [0, vocab) (what _raise_bad_targets() waits for, else None); with
    `count`, a device tensor {counted rows, 1 / counted rows} for the mean (else None), never read
    by the host. Launched through CuPy, with the verdict's pinned int and event reused: a Triton
    launch, a pinned allocation, a torch event and the two tensor operations of the mean's divisor
    cost the host more than the kernel of a 1 GiB loss + gradient leaves it on an H200
    (docs/performance.md, the cross-entropy call's host time)."""
    if not (check or count):
        return None, None
    import torch

    from . import fast, native

    dev = target.device.index
    slot = _SLOTS.by_device.get(dev)
    if slot is None and check:
        import cupy

        verdict = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        with cupy.cuda.Device(dev):
            done = cupy.cuda.Event(block=False, disable_timing=True)
        slot = _SLOTS.by_device[dev] = (verdict, verdict.numpy(), done)
    counted = torch.empty(2, dtype=torch.float32, device=target.device) if count else None
    with fast._launch_context(target):
        import cupy

        _targets_kernel(fast.device_info()[0])(
            (1,), (TARGETS_THREADS,),
            (np.uint64(native.pointer(target)), np.int64(target.numel()), np.int64(vocab), np.int64(ignore_index),
             np.uint64(slot[0].data_ptr() if check else 0), np.uint64(native.pointer(counted) if count else 0)))
        if check:
            slot[2].record(cupy.cuda.get_current_stream())
    return ((slot[1], slot[2]) if check else None), counted


def _raise_bad_targets(checked, target, vocab, ignore_index):
    """ValueError naming the first target outside [0, vocab) that is not ignore_index. The kernels
    never read past a row for such a target (its loss and gradient row are NaN), so waiting for
    the verdict after the launch is safe; in place it is asked for before (cross_entropy())."""
    flag, done = checked
    if done is not None:
        done.synchronize()
    if bool(flag):
        bad = (target != ignore_index) & ((target < 0) | (target >= vocab))
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"target[{i}] = {int(target[i])} is outside [0, vocab = {vocab}) and is not "
                         f"ignore_index ({ignore_index})")


BACKENDS = ("cuda", "triton")


def _backend(logits, backend):
    """The kernel that runs: "cuda" (the fast family, through CuPy) on a GPU where CuPy is installed,
    else "triton" (the twin; on a CPU tensor, the Triton interpreter). Refused here, before any
    launch, where the chosen kernel cannot take these logits."""
    if backend is None:
        backend = "triton"
        if logits.is_cuda:
            try:
                import cupy  # noqa: F401
                backend = "cuda"
            except ImportError:
                pass
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)} or None, got {backend!r}")
    if backend == "cuda" and not logits.is_cuda:
        raise ValueError("backend='cuda' needs the logits on the GPU; on the CPU the Triton twin runs (backend=None)")
    if backend == "triton":
        # triton fixes a kernel's mode when the kernel is defined (TRITON_INTERPRET read at import),
        # so the tensor has to match the mode the twin was defined in: a CPU tensor only runs in the
        # interpreter, and the interpreter only takes CPU tensors (else triton's "0 active drivers")
        try:
            from . import cross_entropy_kernels
        except ImportError as e:
            raise RuntimeError(f"the Triton twin needs triton, which is not installed here ({e}); triton runs on "
                               "Linux (on a CPU through its interpreter)") from None
        interpreting = type(cross_entropy_kernels.cross_entropy_fwd_bwd_kernel).__name__ == "InterpretedFunction"
        if not logits.is_cuda and not interpreting:
            raise ValueError("the logits are on the CPU, where the Triton twin runs only in Triton's interpreter: "
                             "call a07_softmax.use_interpreter() before the first cross_entropy call (or set "
                             "TRITON_INTERPRET=1 before starting Python), or move the logits to the GPU")
        if logits.is_cuda and interpreting:
            raise ValueError("the Triton twin was defined under TRITON_INTERPRET=1, which runs it on the CPU: pass "
                             "CPU tensors, or backend='cuda' for the GPU's kernel")
    return backend


def _launch_cuda(logits, target, ignore_index, reduction, label_smoothing, z_loss, grad_out, override=None,
                 counted=None):
    """The fast family's kernel: per-row losses, and the gradient (already scaled by 1 / the number of
    counted rows for a mean) into grad_out, which may be the logits themselves. The kernel always
    writes a gradient; without grad_out its loss-only twin runs, which reads the logits once and
    writes one float a row. `counted`: _targets_on_device's count for a mean, where the caller
    launched it already (with its test of the targets); else it is launched here."""
    import torch

    from . import fast, native

    rows, vocab = logits.shape
    losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
    tgt = target if target.dtype == torch.int64 and target.is_contiguous() else target.long().contiguous()
    if reduction == "mean" and counted is None:
        counted = _targets_on_device(tgt, vocab, ignore_index, False, True)[1]
    # {counted rows, their reciprocal} on the device: the gradient's scale is the second float
    grad_scale = native.pointer(counted) + 4 if reduction == "mean" and grad_out is not None else 0
    grad = grad_out if grad_out is not None else logits  # the loss-only kernel never writes it
    dtype = str(logits.dtype).replace("torch.", "")
    with fast._launch_context(logits):
        extra = (np.uint64(native.pointer(tgt)), np.uint64(native.pointer(losses)), np.uint64(grad_scale),
                 np.int64(ignore_index), np.float32(label_smoothing), np.float32(z_loss))
        fast._launch("cross_entropy" if grad_out is not None else "cross_entropy_loss", logits, grad, rows, vocab,
                     dtype, extra, (), dict(override or {}))  # override: plan()'s, for tests and the sanitizer
    if reduction == "none":
        return losses
    total = losses.sum()
    return total / counted[0] if reduction == "mean" else total


def _launch(logits, target, ignore_index, reduction, label_smoothing, z_loss, grad_out, backend=None, counted=None):
    """Per-row losses and, into grad_out, the gradient of the reduced loss (upstream gradient 1)."""
    if _backend(logits, backend) == "cuda":
        return _launch_cuda(logits, target, ignore_index, reduction, label_smoothing, z_loss, grad_out,
                            counted=counted)
    import contextlib

    import torch
    import triton

    from .cross_entropy_kernels import cross_entropy_fwd_bwd_kernel

    rows, vocab = logits.shape
    losses = torch.empty(rows, dtype=torch.float32, device=logits.device)
    n_valid = (target != ignore_index).sum().to(torch.float32).reshape(1)   # on the device: no sync
    interp = not logits.is_cuda
    tile = min(triton.next_power_of_2(vocab), 64 if interp else 8192)
    ctx = torch.cuda.device(logits.device) if logits.is_cuda else contextlib.nullcontext()
    with ctx, np.errstate(all="ignore"):
        cross_entropy_fwd_bwd_kernel[(rows,)](
            logits, target, losses, grad_out if grad_out is not None else logits, n_valid, vocab, logits.stride(0),
            grad_out.stride(0) if grad_out is not None else 0, ignore_index, float(label_smoothing), float(z_loss),
            TILE=tile, REDUCE_MEAN=reduction == "mean", WRITE_GRAD=grad_out is not None,
            **({} if interp else {"num_warps": 16 if tile >= 4096 else 4}))
    if reduction == "none":
        return losses
    total = losses.sum()
    return total / n_valid[0] if reduction == "mean" else total


def _scale_rows(grad, grad_loss):
    """grad *= grad_loss in place, grad_loss a scalar or (reduction="none") one value per row; rows
    whose factor is 1 are skipped on the device, without the host asking what the factor is."""
    import contextlib

    import torch
    import triton

    from .cross_entropy_kernels import scale_rows_kernel

    rows, vocab = grad.shape
    factor = grad_loss.to(device=grad.device, dtype=torch.float32).reshape(-1)
    interp = not grad.is_cuda
    tile = min(triton.next_power_of_2(vocab), 64 if interp else 8192)
    ctx = torch.cuda.device(grad.device) if grad.is_cuda else contextlib.nullcontext()
    with ctx, np.errstate(all="ignore"):
        scale_rows_kernel[(rows,)](grad, factor, vocab, grad.stride(0), 0 if factor.numel() == 1 else factor.stride(0),
                                   TILE=tile, **({} if interp else {"num_warps": 16 if tile >= 4096 else 4}))


def _scale_rows_cuda(grad, grad_loss):
    """_scale_rows with the fast family's kernel (scale_rows_fast in cuda/softmax_fast.cu), launched
    through CuPy: a fraction of a Triton launch's host time, and nothing moves for a factor of 1."""
    import torch

    from . import fast, native

    rows, vocab = grad.shape
    factor = grad_loss.to(device=grad.device, dtype=torch.float32).reshape(-1).contiguous()
    ctype = fast.DTYPES[str(grad.dtype).replace("torch.", "")][0]
    with fast._launch_context(grad):
        fn = fast.kernel(f"scale_rows_fast<{ctype}>")
        # blocks of 256 threads walk the rows (grid-stride); 4096 of them fill an H200 many times over
        fn((max(1, min(rows, 4096)),), (256,), (np.uint64(native.pointer(grad)), np.int32(rows), np.int32(vocab),
                                                 np.uint64(native.pointer(factor)), np.int32(factor.numel() > 1)))


def _function():
    import torch

    class CrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, ignore_index, reduction, label_smoothing, z_loss, inplace, backend, counted):
            grad = logits if inplace else torch.empty_like(logits)
            loss = _launch(logits, target, ignore_index, reduction, label_smoothing, z_loss, grad, backend, counted)
            ctx.save_for_backward(grad)
            ctx.used = False
            ctx.backend = backend
            if inplace:
                # the logits now hold the gradient: bump their version so that any other operation
                # that saved them for its own backward raises instead of reading the gradient
                torch.autograd.graph.increment_version(logits)
            return loss

        @staticmethod
        def backward(ctx, grad_loss):
            if ctx.used:
                raise RuntimeError("cross_entropy's backward ran twice: it scales its stored gradient in place, "
                                   "so it can run once per forward (compute the loss again instead of retain_graph)")
            ctx.used = True
            (grad,) = ctx.saved_tensors
            (_scale_rows_cuda if ctx.backend == "cuda" else _scale_rows)(grad, grad_loss)
            return grad, None, None, None, None, None, None, None, None

    return CrossEntropy


_FN = []


def cross_entropy(logits, target, *, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, z_loss: float = 0.0, inplace: bool = False, backend: str | None = None,
                  check_targets: bool = True):
    """F.cross_entropy(logits, target, ...) for (rows, vocab) logits (fp32, fp16, bf16) with the loss
    in fp32 and the gradient computed in the same kernel. `inplace`: the gradient overwrites the
    logits (which then must not be needed again). Without autograd (no grad required) only the
    loss is computed (one read of the logits). `backend`:
    "cuda" (the fast family's kernel, the default on a GPU with CuPy) or "triton" (the twin).
    `check_targets`: a target outside [0, vocab) that is not ignore_index raises ValueError before
    anything is returned (in place: before the launch). On a GPU the host then waits for that test
    (not for the kernel) once per call; check_targets=False skips the wait, as F.cross_entropy and
    Liger do, and such a target gives a NaN loss for its row and a NaN gradient row instead (the
    kernels never read outside the row)."""
    _check(logits, target, ignore_index, reduction, label_smoothing, z_loss)
    import torch

    grad_wanted = logits.requires_grad and torch.is_grad_enabled()
    if inplace and grad_wanted and logits.is_leaf:
        # the gradient would overwrite a parameter, and autograd would then hand the leaf its own
        # storage as .grad: refused before anything runs, as PyTorch refuses in-place ops on such a leaf
        raise ValueError("inplace=True would write the gradient over a leaf tensor that requires grad (a parameter); "
                         "pass the output of an operation (e.g. the logits of a matmul), or inplace=False")
    # every kernel here reads row r's target at target + r: a strided view (labels[:, 0]) is copied
    # (rows * 8 bytes), not read as if it were dense
    target = target.contiguous()
    backend = _backend(logits, backend)
    vocab = logits.shape[1]
    counted = None
    if backend == "cuda":
        # the CUDA kernels read 64-bit targets; the test and the mean's count in one launch
        target = target if target.dtype == torch.int64 else target.long()
        checked, counted = _targets_on_device(target, vocab, ignore_index, check_targets, reduction == "mean")
    else:
        checked = _targets_checked(target, vocab, ignore_index) if check_targets else None
    try:
        # under torch.no_grad() no backward can follow: the loss alone, one read (and never a
        # gradient written over the logits)
        if not grad_wanted:
            loss = _launch(logits, target, ignore_index, reduction, label_smoothing, z_loss, None, backend, counted)
        else:
            if inplace and checked:  # the gradient would overwrite the logits: the verdict first
                _raise_bad_targets(checked, target, vocab, ignore_index)
            if not _FN:
                _FN.append(_function())
            loss = _FN[0].apply(logits, target, ignore_index, reduction, label_smoothing, z_loss, inplace, backend,
                                counted)
    finally:
        # read before anything returns, raises or propagates: the verdict's pinned slot is reused by
        # this thread's next call
        if checked:
            _raise_bad_targets(checked, target, vocab, ignore_index)
    return loss


def traffic_bytes(rows: int, vocab: int, elem_bytes: int = 2, *, fused: bool = True) -> int:
    """The model's bytes for loss + gradient. Fused (this kernel, the CUDA kernel to come): the
    logits read once and the gradient written once (the Triton twin reads them twice). Eager
    PyTorch: log_softmax (read, write), the loss gathers a column; backward: read the
    log-probabilities, write the gradient (fp32 intermediates counted at elem_bytes too)."""
    n = rows * vocab * elem_bytes
    return 2 * n if fused else 4 * n


__all__ = ["cross_entropy", "reference", "traffic_bytes", "R"]
