"""Running a learner's code where it cannot reach the judge.

The checker and the grader never run a submission in their own process. Each run gets a fresh
temporary folder (the "box") holding only what it needs: a copy of the submission, the course
headers a CUDA drill includes, the inputs, and the child runner (exercise_child.py). The child
computes outputs and writes them as .npy files into the box; the trusted parent reads them and
judges. Nothing the child prints is a verdict. The parent reads back what the child left (outputs,
logs, progress) through read_box_file only: no symbolic link followed, no FIFO waited on, only regular
files, so whatever the child turned those files into cannot make the judge read elsewhere or hang.

Limits on every run: a wall-clock timeout after which the child's whole process group is killed,
CPU time, file sizes and open files (and, where no GPU is used, address space). Output goes to files
in the box, never to a pipe, so a child that leaves a process behind holding its output cannot make
the parent wait.

Where bubblewrap (`bwrap`, Linux; `apt-get install bubblewrap`) works, the child also runs in its
own mount, PID and network namespaces: the whole file system read-only except the box, the course's
solutions/ and the folder being graded hidden behind empty tmpfs mounts, no network, and every
process it started gone when it ends. Without bubblewrap (macOS, Windows, containers that forbid
namespaces) the limits above still hold, but the child runs as the same user with the same view of
the disk: `a07 grade` says so in its report. A07_SANDBOX=none switches bubblewrap off.

The course package itself is out of the child's reach as well: hidden like solutions/ under
bubblewrap, and refused by an import hook in the child everywhere, so that an answer cannot hand the
work to the course's own reference implementations.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .paths import PACKAGE, ROOT

CHILD = Path(__file__).resolve().parent / "exercise_child.py"
MAX_FILE_BYTES = 256 << 20
CPU_SECONDS_SLACK = 5


def bwrap_works() -> bool:
    """bubblewrap is installed and can create the namespaces here (checked once per process)."""
    global _BWRAP
    if _BWRAP is None:
        exe = shutil.which("bwrap")
        ok = False
        if exe and os.environ.get("A07_SANDBOX", "") != "none":
            try:
                ok = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent",
                                     "true"], capture_output=True, timeout=20).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _BWRAP = ok
    return _BWRAP


_BWRAP: bool | None = None


@dataclass
class ChildRun:
    returncode: int | None
    timed_out: bool
    seconds: float
    stdout: str
    stderr: str
    running: str                         # the call the child had started last (progress file)
    results: list = field(default_factory=list)   # the child's own report per call (never a verdict)
    sandboxed: bool = False


_BOXES: Path | None = None


def boxes_root() -> Path:
    """One folder per process that holds every box; a sandboxed child sees only its own box in it."""
    global _BOXES
    if _BOXES is None or not _BOXES.is_dir():
        _BOXES = Path(tempfile.mkdtemp(prefix="a07-boxes-"))
    return _BOXES


def new_box(prefix: str = "box-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=boxes_root()))


def _limits(cpu_seconds: int, memory_bytes: int | None):
    def apply():
        import resource

        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        if memory_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    return apply


def run_child(box: Path, request: dict, timeout: float, *, gpu: bool, hide=(), memory_bytes: int | None = 4 << 30,
              env_extra: dict | None = None, on_progress=None) -> ChildRun:
    """Run exercise_child.py in `box` on `request` (written to box/request.json). on_progress(call id)
    is called as the child starts each call (read from its progress file while it runs)."""
    shutil.copy(CHILD, box / "exercise_child.py")
    shutil.copy(CHILD.parent / "triton_compat.py", box / "triton_compat.py")
    (box / "request.json").write_text(json.dumps(request))
    out_dir = box / "outputs"
    out_dir.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(box), "TMPDIR": str(box),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
           "TRITON_CACHE_DIR": str(box / ".triton"), "CUPY_CACHE_DIR": str(box / ".cupy"), "A07_BOX": str(box)}
    for key in ("CUDA_VISIBLE_DEVICES", "CUDA_PATH", "LD_LIBRARY_PATH", "HIP_PLATFORM", "ROCM_PATH"):
        if key in os.environ:
            env[key] = os.environ[key]
    env.update(env_extra or {})
    cmd = [sys.executable, "-I", "-B", str(box / "exercise_child.py"), str(box / "request.json")]
    sandboxed = bwrap_works()
    if sandboxed:
        # read-only everything; the other boxes, solutions/ and what the caller hides behind empty
        # tmpfs mounts; then this box, writable (the only place the child can write)
        wrap = ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
                "--tmpfs", str(box.parent)]
        # the course package too (and a setuptools build copy of it): an answer that calls the course's
        # own reference (reference.online_trace, reference.attention_row_tiled) wrote nothing itself
        for path in [ROOT / "solutions", PACKAGE, ROOT / "build", *hide]:
            if Path(path).exists() and not str(box).startswith(str(path)):
                wrap += ["--tmpfs", str(path)]
        wrap += ["--bind", str(box), str(box), "--unshare-net", "--unshare-pid", "--unshare-ipc",
                 "--die-with-parent", "--new-session", "--chdir", str(box)]
        cmd = wrap + cmd
    limits = _limits(int(timeout) + CPU_SECONDS_SLACK, None if gpu else memory_bytes)
    start = time.monotonic()
    with open(box / "stdout.txt", "wb") as out, open(box / "stderr.txt", "wb") as err:
        proc = subprocess.Popen(cmd, cwd=box, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True, preexec_fn=limits)
        timed_out, seen = False, 0
        deadline = time.monotonic() + timeout
        try:
            while True:
                done = False
                try:
                    proc.wait(timeout=0.25 if on_progress else timeout)
                    done = True
                except subprocess.TimeoutExpired:
                    timed_out = time.monotonic() >= deadline
                if on_progress:  # also what a quick child did at once
                    lines = read_box_file(box, "progress.txt", 1 << 20).decode(errors="replace").splitlines()
                    for line in lines[seen:]:
                        on_progress(line.strip())
                    seen = len(lines)
                if done or timed_out:
                    break
        finally:
            # the whole process group: whatever the child started goes with it
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
            _reap(box)
    seconds = time.monotonic() - start

    def tail(name, n=4000):
        return read_box_file(box, name, n).decode(errors="replace")

    results = []
    for line in tail("results.jsonl", 1 << 20).splitlines():
        try:
            item = json.loads(line)
            if isinstance(item, dict):
                results.append(item)
        except json.JSONDecodeError:
            continue
    running = tail("progress.txt", 400).strip().splitlines()
    return ChildRun(None if timed_out else proc.returncode, timed_out, seconds, tail("stdout.txt"), tail("stderr.txt"),
                    running[-1] if running else "", results, sandboxed)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def read_box_file(box: Path, relpath: str, limit: int, *, whole: bool = False) -> bytes:
    """The last `limit` bytes of a file the child may have written (b"" if there is none), read so that
    the child cannot make the judge wait or read elsewhere: every component of `relpath` is opened
    without following a symbolic link (the child could swap outputs/ for a link to another folder),
    a FIFO is never waited on (a child that leaves results.jsonl as a FIFO with no writer would
    otherwise hang the grader for good) and only a regular file is read. whole=True refuses a file
    longer than `limit` (ValueError) instead of reading its tail."""
    parts = [part for part in Path(relpath).parts if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"{relpath!r} is not a path inside the box")
    fds = []
    try:
        try:
            if os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
                fds.append(os.open(box, os.O_RDONLY | os.O_DIRECTORY))
                for part in parts[:-1]:
                    fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fds[-1]))
                fd = os.open(parts[-1], os.O_RDONLY | _NOFOLLOW, dir_fd=fds[-1])
            else:   # Windows: no dir_fd; a child there has the learner's rights anyway (see above)
                fd = os.open(Path(box, *parts), os.O_RDONLY | _NOFOLLOW | getattr(os, "O_BINARY", 0))
        except OSError:
            return b""
        fds.append(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return b""
        if st.st_size > limit:
            if whole:
                raise ValueError(f"{relpath}: {st.st_size} bytes, more than the {limit} expected")
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, left = [], min(limit, st.st_size)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        for fd in reversed(fds):
            os.close(fd)


def load_output(box: Path, relpath: str):
    """An array the child saved (numpy .npy, no pickles), read as read_box_file reads; None if the
    child left no regular file there. ValueError if what is there is not an array."""
    import io

    import numpy as np

    data = read_box_file(box, relpath, MAX_FILE_BYTES, whole=True)
    if not data:
        return None
    return np.load(io.BytesIO(data), allow_pickle=False)


def _reap(box: Path) -> None:
    """Kill what escaped the process group (a child that called setsid): every process whose
    environment still names this box. With bubblewrap the PID namespace already took them."""
    marker = f"A07_BOX={box}".encode()
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def remove_box(box: Path) -> None:
    shutil.rmtree(box, ignore_errors=True)
