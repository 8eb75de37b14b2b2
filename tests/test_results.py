"""Committed GPU results: they follow the schema, and they are not older than their sources."""
import pytest

from kernels import provenance, results

BENCHES = results.available()


def test_there_are_committed_h200_results():
    assert "nvidia-h200" in BENCHES


@pytest.mark.parametrize("gpu", BENCHES)
def test_bench_json_follows_the_schema(gpu):
    d = results.load_bench(gpu)
    assert results.schema_errors(d) == []
    assert d["copy_GBps"] > 0 and d["runs"]
    assert all(r["traversals"] >= 2 and r["ms"] > 0 for r in d["runs"])


@pytest.mark.parametrize("gpu", BENCHES)
def test_bench_json_is_not_stale(gpu):
    stale = results.is_stale(results.load_bench(gpu))
    assert not stale, f"results/{gpu}/bench.json was measured on older sources: {stale}; re-run make bench there"


@pytest.mark.parametrize("gpu", BENCHES)
def test_every_timed_output_was_checked_and_the_course_kernels_passed(gpu):
    """Every run carries its float64 check. The course's own kernels (cuda.*, hip.*, triton.*) must
    pass it; a peer (torch.*) that misses the tolerance is recorded as measured, and the notebooks
    say so (eager bf16 torch rounds x * scale to bf16 before its softmax)."""
    d = results.load_bench(gpu)
    assert all(isinstance(r.get("passed"), bool) and r["max_rel_err"] >= 0 for r in d["runs"])
    ours = [(r["impl"], r["dtype"], r["cols"], r["max_rel_err"]) for r in results.failed_checks(d)
            if not r["impl"].startswith("torch.")]
    assert not ours


@pytest.mark.parametrize("name", ["run-cuda.txt", "notebooks.txt"])
def test_committed_run_logs_name_gpu_date_versions_and_fresh_sources(name):
    p = results.RESULTS / "nvidia-h200" / name
    text = p.read_text()
    assert "# gpu: NVIDIA H200" in text and "# date: " in text and "# versions: " in text
    recorded = provenance.parse_header(text)
    assert recorded, "no sha256 lines in the header"
    assert not provenance.stale_sources(recorded), f"{name} is older than {provenance.stale_sources(recorded)}"


def test_schema_check_catches_mistakes():
    d = {"gpu": "x", "date": "d", "versions": {"torch": 1}, "sources_sha256": {}, "copy_GBps": 1.0,
         "runs": [{"impl": "k4", "op": "soft", "dtype": "float32", "rows": 1, "cols": 1, "ms": "fast",
                   "GBps_min_bytes": 1.0, "traversals": 2, "max_rel_err": 0.0}]}
    errs = " ".join(results.schema_errors(d))
    for words in ("versions.triton", "runs[0].ms", "runs[0].op", "does not name its source"):
        assert words in errs


def test_stale_detection(tmp_path):
    now = provenance.sources_sha256()
    assert provenance.stale_sources(now) == []
    first = next(iter(now))
    assert provenance.stale_sources({first: "0" * 64}) == [first]


def test_plots_render_from_committed_results(tmp_path):
    from kernels import bench

    written = bench.plots(results.load_bench("nvidia-h200"), tmp_path)
    assert sorted(written) == ["fast_softmax.png", "fused_vs_unfused.png", "lab1_time_ratio_vs_model.png",
                               "softmax_gbps_bfloat16.png", "softmax_gbps_float32.png"]
    assert all((tmp_path / f).stat().st_size > 20_000 for f in written)


def test_bench_refuses_politely_without_a_gpu(capsys):
    from kernels import backend, bench

    if backend.detect().gpu is not None:
        return
    assert bench.main([]) == 1
    assert "no GPU here" in capsys.readouterr().out
