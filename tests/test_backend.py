"""Backend detection and the doctor's preflight."""
import io

from kernels import backend


def test_detection_is_consistent():
    b = backend.detect()
    assert b.best in {"cuda", "hip", "triton", "triton-interpreter", "cpu"}
    if b.gpu is None:
        assert b.best in {"triton-interpreter", "cpu"}
        assert not b.triton_gpu
    if b.nvidia:
        assert b.nvidia.arch.startswith("sm_") and b.nvidia.sm_count > 0 and b.nvidia.warp_size == 32


def test_doctor_prints_one_line_per_check_and_a_verdict():
    out = io.StringIO()
    assert backend.doctor(file=out) == 0
    text = out.getvalue()
    lines = text.splitlines()
    for check in ("python", "torch", "triton", "cupy", "gpu", "nvrtc", "nvcc", "hipcc"):
        assert any(line.startswith(("[ok]", "[--]")) and f" {check} " in line + " " for line in lines), check
    assert lines[-1].startswith("ready: ")
    assert "Lab 3 (Triton)" in text


def test_cpu_machine_reports_interpreter_and_compile_only():
    b = backend.detect()
    if b.gpu is not None:
        return  # the statement is about machines without a GPU
    out = io.StringIO()
    backend.doctor(file=out)
    text = out.getvalue()
    assert "interpreter" in text
    if b.nvrtc:
        assert "compile-only" in text
    assert backend.verdict().startswith("ready: interpreter only") or not b.triton_interpreter


def test_labs_table_covers_every_lab():
    names = " ".join(lab for lab, _, _ in backend.labs())
    for lab in ("Lab 1", "Lab 2", "Lab 3", "Benchmark"):
        assert lab in names


def test_make_run_path_runs_every_lab_it_can():
    """python -m kernels run (= make run): doctor, Lab 1/2 (native or compile-only), Lab 3."""
    import subprocess
    import sys

    from kernels.native import ROOT

    p = subprocess.run([sys.executable, "-m", "kernels", "run"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    assert "ready: " in out and "== Lab 3 (Triton)" in out and "all kernels PASSED" in out
    b = backend.detect()
    if b.gpu is None and b.nvrtc:
        assert "No GPU: compile-only." in out and "softmax_online_1pass" in out
        assert "results/nvidia-h200/run-cuda.txt" in out and "# gpu: NVIDIA H200" in out
        assert "No timings are taken here" in out


def test_results_recorder_recomputes_notebook_outputs_between_bench_and_nbval(monkeypatch, tmp_path):
    """`make results` runs its steps in one order, whatever order they are asked in: the notebooks'
    stored outputs are recomputed on the CPU after the benchmark and before nbval compares them on
    the GPU (notebooks 05, 07, 09 print figures from bench.json). A failing step fails the run."""
    from kernels import bench, provenance, record

    calls = []
    monkeypatch.setattr(provenance, "gpu_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(bench, "main", lambda argv: calls.append("bench") or 0)
    monkeypatch.setattr(record, "run_cuda", lambda out: calls.append("run-cuda") or 0)
    monkeypatch.setattr(record, "refresh_notebooks", lambda: calls.append("refresh") or 0)
    monkeypatch.setattr(record, "notebooks", lambda out: calls.append("notebooks") or 0)
    assert record.main(["--out", str(tmp_path)]) == 0
    assert calls == ["bench", "run-cuda", "refresh", "notebooks"]
    calls.clear()
    assert record.main(["--out", str(tmp_path), "notebooks", "bench"]) == 0
    assert calls == ["bench", "notebooks"]
    monkeypatch.setattr(record, "refresh_notebooks", lambda: 1)
    assert record.main(["--out", str(tmp_path), "refresh"]) == 1


def test_results_recorder_refuses_without_a_gpu(capsys, monkeypatch):
    from kernels import provenance, record

    monkeypatch.setattr(provenance, "gpu_name", lambda: "no GPU")  # what a GPU-less machine reports
    assert record.main(["bench"]) == 1
    assert "no GPU here" in capsys.readouterr().out
    # `make notebooks` (the refresh step alone) is the one step that runs without a GPU
    monkeypatch.setattr(record, "refresh_notebooks", lambda: 0)
    assert record.main(["refresh"]) == 0
