"""The untrusted side of the exercise checker: run a learner's functions on given inputs and save
what they return. Copied into a sandbox folder and run there as a script (`python -I`), it imports
nothing of the course: it reads request.json and inputs/*.npy, writes outputs/<id>.npy, one line per
call to results.jsonl (what happened, never whether it was right) and the call in progress to
progress.txt. The trusted parent (a07_softmax/check.py) judges the outputs against its own float64
references; whatever this process prints or writes elsewhere changes no verdict.
"""
import json
import os
import sys
import time
import traceback


def where(exc, module_file):
    """file:line of the innermost frame in the learner's file, else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if os.path.basename(f.filename) == os.path.basename(module_file)]
    f = (mine or frames or [None])[-1]
    return f"{os.path.basename(f.filename)}:{f.lineno}" if f else ""


def is_not_implemented(exc):
    while exc is not None:
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in repr(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class RefuseCoursePackage:
    """An import hook: the learner's code may not import the course package (its reference
    implementations would do the exercise for it). Under bubblewrap the package is also hidden; this
    names the reason wherever the child runs."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "a07_softmax":
            raise ImportError(f"import of {name} refused: the course package is out of an exercise's reach "
                              "(its reference implementations would do the exercise; write the code yourself)")
        return None


def trusted_launchers(mod, torch, triton):
    """The scaffolds' launches of exercises 05 and 06, in the checker's code: the checker calls a
    learner's kernels through these, never through the learner's wrappers (an answer that PyTorch
    computes beside an empty kernel is no answer). The kernels' signatures are the scaffolds'.
    Every row of an input and an output lies in a row of block + 1 elements (block: the kernel's
    BLOCK), the gap after it filled with NaN, and every output is NaN before the launch: a kernel
    that writes nothing shows, one that indexes rows by n_cols instead of the stride reads and
    writes the wrong places, and one that stores its lanes past n_cols writes into the gap. What
    comes back is the whole padded output; the parent judges the row and checks the gap."""
    # the exercise's ignore_index (-100), whatever the learner's file sets; a case may pass another
    # (the kernel takes it as an argument: a kernel that tests for -100 itself ignores the wrong rows)
    nan = float("nan")
    mappings = []   # the guarded buffers' memory maps, alive as long as the launchers

    def guarded_full(shape, dtype):
        """A CPU tensor of NaN in pages of its own, right after a page that may not be touched (and
        before another): a kernel that reads or writes before a tensor's first element (a negative
        index: a target of ignore_index, -100, used as a column) stops with a segmentation fault,
        which the parent names, instead of reading whatever lies there and throwing it away. Where
        the pages cannot be protected, a plain tensor."""
        import ctypes
        import mmap

        nbytes = torch.empty(0, dtype=dtype).element_size() * rows_cols(shape)
        page = mmap.PAGESIZE
        data = -(-max(nbytes, 1) // page) * page
        try:
            mm = mmap.mmap(-1, page + data + page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            if libc.mprotect(ctypes.c_void_p(base), page, 0) or \
                    libc.mprotect(ctypes.c_void_p(base + page + data), page, 0):
                raise OSError("mprotect")
        except (OSError, AttributeError, ValueError, TypeError):
            return torch.full(shape, nan, dtype=dtype)
        mappings.append(mm)
        t = torch.frombuffer(mm, dtype=torch.uint8, count=nbytes, offset=page).view(dtype).view(shape)
        return t.fill_(nan)

    def rows_cols(shape):
        n = 1
        for d in shape:
            n *= d
        return n

    def padded(x):
        rows, cols = x.shape
        shape = (rows, triton.next_power_of_2(cols) + 1)
        buf = guarded_full(shape, x.dtype) if x.device.type == "cpu" else \
            torch.full(shape, nan, dtype=x.dtype, device=x.device)
        buf[:, :cols] = x
        return buf[:, :cols]

    def with_gaps(t):  # a padded row's view widened to the whole padded row, gap included
        return t.as_strided((t.shape[0], t.stride(0)), (t.stride(0), 1))

    def scale_mask_softmax(x, scale, causal=True, q_len=None):
        rows, cols = x.shape
        x = padded(x)
        out = padded(torch.full_like(x, nan))
        mod.scale_mask_softmax_kernel[(rows,)](out, x, cols, x.stride(0), scale, q_len or rows, CAUSAL=causal,
                                               BLOCK=triton.next_power_of_2(cols))
        return with_gaps(out)

    def log_softmax(x):
        rows, cols = x.shape
        x = padded(x)
        out = padded(torch.full_like(x, nan))
        mod.log_softmax_kernel[(rows,)](out, x, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return with_gaps(out)

    def loss_and_grad(logits, targets, ignore_index=-100):
        rows, cols = logits.shape
        logits = padded(logits)
        loss = torch.full((rows,), nan, dtype=torch.float32, device=logits.device)
        grad = padded(torch.full_like(logits, nan))
        mod.cross_entropy_kernel[(rows,)](loss, grad, logits, targets.to(torch.int32), cols, logits.stride(0),
                                          ignore_index, BLOCK=triton.next_power_of_2(cols))
        return loss, with_gaps(grad)
    return {"scale_mask_softmax": scale_mask_softmax, "log_softmax": log_softmax,
            "cross_entropy": lambda logits, targets, ignore_index=-100: loss_and_grad(logits, targets, ignore_index)[0],
            "cross_entropy_grad": lambda logits, targets, ignore_index=-100: loss_and_grad(logits, targets,
                                                                                           ignore_index)[1]}


def main(request_path):
    box = os.path.dirname(os.path.abspath(request_path))
    req = json.load(open(request_path))
    if req.get("interpret"):
        os.environ["TRITON_INTERPRET"] = "1"
        # trusted, copied beside this file by sandbox.py (the course package is out of reach here)
        import importlib.util
        spec = importlib.util.spec_from_file_location(
            "triton_compat", os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_compat.py"))
        compat = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(compat)
        compat.fix_interpreter_for_numpy()
    import numpy as np

    folder = os.path.join(box, "inputs")
    inputs = {name[:-4]: np.load(os.path.join(folder, name), allow_pickle=False)
              for name in (os.listdir(folder) if os.path.isdir(folder) else []) if name.endswith(".npy")}
    progress = open(os.path.join(box, "progress.txt"), "a", buffering=1)
    results = open(os.path.join(box, "results.jsonl"), "a", buffering=1)

    def report(**item):
        results.write(json.dumps(item) + "\n")

    torch = None
    if req.get("torch"):
        import torch
    device = req.get("device") or "cpu"

    def arg(spec):
        if not isinstance(spec, dict) or "array" not in spec:
            return spec
        a = inputs[spec["array"]]
        kind = spec.get("as", "numpy")
        if kind == "list":
            return a.tolist()
        if kind == "torch":
            t = torch.from_numpy(a.copy())
            if spec.get("dtype"):
                t = t.to(getattr(torch, spec["dtype"]))
            return t.to(device)
        if kind == "cupy":
            import cupy
            return cupy.asarray(a)
        return a.copy()

    def save(call_id, value):
        if torch is not None and isinstance(value, torch.Tensor):
            dtype = str(value.dtype).replace("torch.", "")
            value = value.detach().cpu()
            value = value.float() if dtype in ("bfloat16", "float16") else value
            arr = value.numpy()
        else:
            dtype = None
            if type(value).__module__.startswith("cupy"):
                value = value.get()
            arr = np.asarray(value)
            if arr.dtype == object:
                arr = np.asarray(value, dtype=np.float64)
        np.save(os.path.join(box, "outputs", f"{call_id}.npy"), arr, allow_pickle=False)
        return dtype or str(arr.dtype)

    if req["kind"] == "baseline":
        # the trusted twin of a timed run (check.py's _judge_clock): what a "python" run does around
        # the learner's call (start, import NumPy, load the inputs, save an array), without the call,
        # so that the judge can take it off the timed run's clock
        for call in req["calls"]:
            save(call["id"], next(arg(a) for a in call.get("args", []) if isinstance(a, dict) and "array" in a))
            report(id=call["id"], ok=True)
    elif req["kind"] == "python":
        module_file = os.path.join(box, req["module"])
        progress.write("import\n")
        sys.modules.pop("a07_softmax", None)
        sys.meta_path.insert(0, RefuseCoursePackage())
        kernel_types = ()
        if req.get("trusted_launch"):  # taken before the learner's code runs and can rebind names
            from triton.runtime.interpreter import InterpretedFunction
            from triton.runtime.jit import JITFunction
            kernel_types = (JITFunction, InterpretedFunction)   # @triton.jit compiled, or interpreted
        try:
            import importlib.util
            spec = importlib.util.spec_from_file_location("submission", module_file)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["submission"] = mod
            spec.loader.exec_module(mod)
        except BaseException as e:  # noqa: BLE001 - the learner's import can raise anything
            report(id="import", error=f"{type(e).__name__}: {e}"[-600:], where=where(e, module_file),
                   not_implemented=is_not_implemented(e))
            return 0
        launchers = {}
        if req.get("trusted_launch"):
            import triton
            launchers = trusted_launchers(mod, torch, triton)
            # the parent checked the source (one @triton.jit def, bound once); this catches a kernel
            # swapped at run time (setattr, globals()) for something that is not a Triton kernel
            for name in req.get("kernels", []):
                kernel = getattr(mod, name, None)
                if not any(issubclass(type(kernel), k) for k in kernel_types):
                    report(id="import", error=f"TypeError: {name} is a {type(kernel).__name__} when the checker "
                                              "launches it, not a @triton.jit kernel", where=os.path.basename(module_file))
                    return 0
        for call in req["calls"]:
            progress.write(call["id"] + "\n")
            try:
                fn = launchers[call["fn"]] if req.get("trusted_launch") else getattr(mod, call["fn"])
                args = [arg(a) for a in call.get("args", [])]
                values = []
                start = time.monotonic()  # the learner's function only, not the input conversion
                for extra in call.get("repeat", [{}]):
                    kwargs = {k: arg(v) for k, v in {**call.get("kwargs", {}), **extra}.items()}
                    value = fn(*args, **kwargs)
                    if call.get("convert") == "stats" and isinstance(value, dict):
                        value = [value.get("online"), value.get("no_rescale")]
                    values.append(value)
                seconds = time.monotonic() - start   # before the output is written (32 MB at 2e6 elements)
                value = values[0] if len(values) == 1 else values
                dtype = save(call["id"], value)
                report(id=call["id"], ok=True, dtype=dtype, seconds=round(seconds, 3))
            except BaseException as e:  # noqa: BLE001
                report(id=call["id"], error=f"{type(e).__name__}: {e}"[-600:], where=where(e, module_file),
                       not_implemented=is_not_implemented(e))
    elif req["kind"] == "cpu":  # a drill built for the CPU target by the parent: run it, keep its output
        import subprocess
        for call in req["calls"]:
            progress.write(call["id"] + "\n")
            p = subprocess.run(call["argv"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if p.returncode:
                report(id=call["id"], error=f"the kernel exited {p.returncode}: {p.stderr.decode(errors='replace')[-400:]}")
                continue
            try:
                out = np.fromfile(call["out"], dtype=np.float32).reshape(call["shape"])
                np.save(os.path.join(box, "outputs", call["id"] + ".npy"), out, allow_pickle=False)
                report(id=call["id"], ok=True, dtype="float32")
            except (OSError, ValueError) as e:
                report(id=call["id"], error=f"{type(e).__name__}: {e}")
    else:  # a CUDA/HIP drill: compile the learner's source, launch each call's kernel
        import cupy
        progress.write("compile\n")
        try:
            src = open(os.path.join(box, req["source"])).read()
            mod = cupy.RawModule(code=src, options=tuple(req["options"]))
        except BaseException as e:  # noqa: BLE001
            report(id="compile", error=f"{type(e).__name__}: {e}"[-1500:])
            return 0
        for call in req["calls"]:
            progress.write(call["id"] + "\n")
            try:
                args = []
                for a in call["args"]:
                    if isinstance(a, dict) and "out" in a:
                        args.append(cupy.full(tuple(a["out"]), cupy.nan, dtype=cupy.float32))  # poisoned
                    elif isinstance(a, dict) and "int32" in a:
                        args.append(np.int32(a["int32"]))
                    elif isinstance(a, dict) and "float32" in a:
                        args.append(np.float32(a["float32"]))
                    else:
                        args.append(arg(a))
                mod.get_function(call["kernel"])(tuple(call["grid"]), tuple(call["block"]), tuple(args))
                cupy.cuda.runtime.deviceSynchronize()
                dtype = save(call["id"], args[call["out_index"]])
                report(id=call["id"], ok=True, dtype=dtype)
            except BaseException as e:  # noqa: BLE001
                report(id=call["id"], error=f"{type(e).__name__}: {e}"[-600:])
    progress.write("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
