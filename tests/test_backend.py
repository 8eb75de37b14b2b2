"""The one probe of the machine (backend.detect) and the doctor's preflight, on this machine and on
machines described to it (so a CPU-only CI proves what a GPU machine would be told, and back)."""
import io
import os
import subprocess
import sys

import pytest

from a07_softmax import backend
from a07_softmax.backend import Backends, Device
from a07_softmax.paths import ROOT

H200 = Device("NVIDIA", "NVIDIA H200", "sm_90", 132, 32)


def _doctor(b: Backends) -> str:
    out = io.StringIO()
    assert backend.doctor(file=out, b=b) == 0
    return out.getvalue()


def test_detection_here_agrees_with_what_this_machine_can_import():
    """The probe against independent evidence: what imports and what torch says."""
    import importlib.util

    b = backend.detect()
    try:
        import torch

        assert b.torch_version == torch.__version__ and b.torch_gpu == torch.cuda.is_available()
    except ImportError:
        assert b.torch_version is None and not b.torch_gpu
    assert b.triton_installed == (importlib.util.find_spec("triton") is not None)
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
        assert b.nvrtc == f"{major}.{minor}"
    except ImportError:
        assert b.nvrtc is None
    if b.nvidia:
        assert b.nvidia.arch.startswith("sm_") and b.nvidia.sm_count > 0 and b.nvidia.warp_size == 32


def test_doctor_prints_one_line_per_check_and_a_verdict():
    text = _doctor(backend.detect())
    lines = text.splitlines()
    for check in ("python", "torch", "triton", "cupy", "gpu", "nvrtc", "nvcc", "hipcc"):
        assert any(line.startswith(("[ok]", "[--]")) and f" {check} " in line + " " for line in lines), check
    assert lines[-1].startswith("ready: ")
    assert "Lab 3 (Triton)" in text


def test_a_machine_without_gpu_is_told_interpreter_and_compile_only(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    b = Backends(torch_version="2.13", triton_version="3.6", triton_installed=True, nvrtc="13.0")
    text = _doctor(b)
    assert "interpreter" in text and "compile-only" in text
    assert backend.verdict(b) == "ready: interpreter only (+ CUDA compile-only)"
    assert b.best == "triton-interpreter" and b.triton_device == "cpu" and not b.native


def test_a_mac_without_triton_or_nvrtc_runs_references_only():
    b = Backends(torch_version="2.13")
    assert backend.verdict(b) == "ready: CPU references only" and b.triton_device is None
    rows = {lab: how for lab, how, _ in backend.labs(b)}
    assert rows["Lab 1 + Lab 2 (CUDA/HIP via CuPy RawModule)"] == "unavailable"
    assert rows["Lab 3 (Triton)"] == "unavailable"


def test_torch_gpu_without_cupy_runs_triton_on_the_gpu(monkeypatch):
    """The case the seven old probes disagreed on: an NVIDIA GPU that torch sees, no CuPy. The
    CUDA labs cannot launch, but Triton compiles for the GPU, and the interpreter stays off."""
    b = Backends(torch_version="2.11", torch_gpu=True, triton_version="3.6", triton_installed=True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # records the real value, so it comes back
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(backend, "_CACHE", b)
    assert backend.use_interpreter() is False and "TRITON_INTERPRET" not in os.environ
    assert b.triton_gpu and b.triton_device == "cuda" and not b.native and b.best == "triton"


def test_no_gpu_switches_the_interpreter_on_and_an_explicit_choice_wins(monkeypatch):
    b = Backends(torch_version="2.13", triton_version="3.6", triton_installed=True)
    monkeypatch.setattr(backend, "_CACHE", b)
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # records the real value, so it comes back
    monkeypatch.delenv("TRITON_INTERPRET")
    assert backend.use_interpreter() is True and b.triton_device == "cpu"
    gpu = Backends(nvidia=H200, cupy_version="14.2", torch_version="2.11", torch_gpu=True, triton_installed=True)
    monkeypatch.setattr(backend, "_CACHE", gpu)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a learner forcing the interpreter on a GPU machine
    assert backend.use_interpreter() is True and gpu.triton_device == "cpu" and gpu.native


def test_the_interpreter_runs_a_loop_to_a_runtime_bound_on_this_triton_and_numpy():
    """use_interpreter() on any triton and NumPy: triton < 3.8's interpreter turned a one-element array
    into an int in a way NumPy 2.4 refuses (triton-lang/triton#9171), so every loop whose bound is a
    kernel argument failed there; use_interpreter() mends it. A fresh process forced into the
    interpreter (on a GPU machine too), running the online softmax (tl.range to n_cols) on a CPU
    tensor."""
    pytest.importorskip("triton", reason="triton is not installed here (Linux only): no interpreter to run")
    code = ("import torch, a07_softmax\n"
            "assert a07_softmax.use_interpreter()\n"
            "from a07_softmax import triton_softmax as T\n"
            "x = torch.randn(3, 300) * 20\n"
            "torch.testing.assert_close(T.softmax_online(x, tile=64), torch.softmax(x.double(), 1).float())\n"
            "print('RAN')\n")
    env = dict(os.environ, TRITON_INTERPRET="1")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "RAN" in p.stdout, p.stderr[-3000:]


def test_labs_table_covers_every_lab():
    names = " ".join(lab for lab, _, _ in backend.labs())
    for lab in ("Lab 1", "Lab 2", "Lab 3", "Benchmark"):
        assert lab in names


def test_a07_lists_its_commands_and_python_m_is_the_same_program():
    for cmd in ([sys.executable, "-m", "a07_softmax", "--help"], [str(ROOT / ".venv" / "bin" / "a07"), "--help"]):
        if not os.path.exists(cmd[0]):
            continue  # the console script exists only where the course is installed into .venv
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        for sub in ("run", "doctor", "check", "grade", "bench", "results", "notebooks", "slides"):
            assert f"    {sub}" in p.stdout, sub
    p = subprocess.run([sys.executable, "-m", "a07_softmax", "check", "99"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "invalid choice" in p.stderr


@pytest.mark.slow
def test_a07_run_runs_every_lab_it_can():
    """a07 run (= make run): doctor, Lab 1/2 (native or compile-only), Lab 3."""
    p = subprocess.run([sys.executable, "-m", "a07_softmax", "run"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    assert "ready: " in out and "== Lab 3 (Triton)" in out and "all kernels PASSED" in out
    b = backend.detect()
    if b.gpu is None and b.nvrtc:
        assert "No GPU: compile-only." in out and "softmax_online_1pass" in out
        assert "results/nvidia-h200/run-cuda.txt" in out and "# gpu: NVIDIA H200" in out
        assert "No timings are taken here" in out
