"""`llamalloc bench` at small scale: the JSON it writes, the table, the plots and the error paths."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamalloc import bench
from test_workloads_support import is_real_llamalloc, llamalloc_library

JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


def _bench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([sys.executable, "-m", "llamalloc", "bench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_bench_two_allocators_writes_json_table_and_plots(tmp_path):
    out = _bench(["--scale", "small", "--repeat", "2", "--allocators", "glibc,jemalloc",
                  "-w", "word-count", "-w", "frag-micro", "--out", str(tmp_path / "out"),
                  "--json", str(tmp_path / "b.json")], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["format"] == "llamalloc-bench" and data["version"] == bench.JSON_VERSION
    assert data["scale"] == "small" and data["repeat"] == 2 and data["problems"] == []
    assert data["allocators"] == {"glibc": None, "jemalloc": JEMALLOC}
    pairs = {(r["workload"], r["allocator"]) for r in data["results"]}
    assert pairs == {(w, a) for w in ("word-count", "frag-micro") for a in ("glibc", "jemalloc")}
    for entry in data["results"]:
        assert len(entry["runs"]) == 2 and all(run["ok"] for run in entry["runs"])
        s = entry["summary"]
        assert s["runs"] == 2 and s["seconds"] > 0 and s["throughput"] > 0
        assert s["peak_rss_bytes"] >= s["final_rss_bytes"] > 0
        for run in entry["runs"]:
            assert run["samples"], "RSS was sampled while it ran"
            assert all(len(sample) == 3 and sample[1] > 0 for sample in run["samples"])
            # The peak is the kernel's high-water mark, which no sample exceeds.
            assert run["hwm_bytes"] >= max(sample[1] for sample in run["samples"])
            assert run["peak_rss_bytes"] == run["hwm_bytes"]
        ratios = entry["ratios_to_glibc"]
        if entry["allocator"] == "glibc":
            assert all(v == pytest.approx(1.0) for v in ratios.values() if v is not None)
        else:
            assert ratios["peak_rss_bytes"] == pytest.approx(s["peak_rss_bytes"] / next(
                e["summary"]["peak_rss_bytes"] for e in data["results"]
                if e["workload"] == entry["workload"] and e["allocator"] == "glibc"))
    # word-count's checksum is the same under both allocators (otherwise a problem would be listed).
    sums = {run["metrics"]["checksum"] for e in data["results"] if e["workload"] == "word-count" for run in e["runs"]}
    assert len(sums) == 1
    assert "frag-micro" in out.stdout and "jemalloc" in out.stdout and "peak RSS" in out.stdout
    assert "[8/8]" in out.stderr  # progress lines
    assert (tmp_path / "out" / "rss-word-count.png").stat().st_size > 1000
    assert (tmp_path / "out" / "rss-frag-micro.png").stat().st_size > 1000


def test_bench_reads_the_llamalloc_statistics_file(tmp_path):
    lib = llamalloc_library()
    spec = "glibc,llamalloc" if is_real_llamalloc(lib) and "LLAMALLOC_TEST_PRELOAD" not in os.environ \
        else f"glibc,llamalloc={lib}"
    out = _bench(["--scale", "small", "--repeat", "1", "--allocators", spec, "-w", "frag-micro",
                  "--out", str(tmp_path / "out"), "--no-plots"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    entry = next(e for e in data["results"] if e["allocator"] == "llamalloc")
    run = entry["runs"][0]
    assert run["ok"]
    if is_real_llamalloc(lib):
        stats = run["llamalloc_stats"]
        assert isinstance(stats, dict) and "unreadable" not in stats, stats
        assert any("footprint" in key for key in entry["summary"]), entry["summary"]
        assert run["metrics"]["long_lived_placement"] == "llamalloc_malloc_class"


def constant_model(path: Path, lifetime_class: int) -> Path:
    """A valid model file whose answer is always `lifetime_class` (its dense layer ignores the LSTM)."""
    import numpy as np
    from llamalloc.model import modelfile
    from llamalloc.model.tokenizer import SPECIAL_TOKENS

    vocab = SPECIAL_TOKENS + ["main"]
    v, hidden = len(vocab), 1
    embedding = np.zeros((v, hidden), np.float32)
    w_input = np.zeros((hidden, 4 * hidden), np.float32)
    bias = np.zeros(4 * hidden, np.float32)
    dense_b = np.full(8, -10.0, np.float32)
    dense_b[lifetime_class] = 10.0
    modelfile.write(path, modelfile.ModelFile(
        vocabulary=vocab, embedding=embedding, w_input=w_input, w_hidden=np.zeros((hidden, 4 * hidden), np.float32),
        bias=bias, folded=(embedding @ w_input + bias).astype(np.float32), dense_w=np.zeros((hidden, 8), np.float32),
        dense_b=dense_b, max_tokens=128, default_class=lifetime_class, program="test"))
    return path


def test_bench_with_a_model_runs_llamalloc_with_it_and_reports_a_workload_without_one(tmp_path):
    lib = llamalloc_library()
    if not is_real_llamalloc(lib):
        pytest.skip("needs the real libllamalloc.so (the learned predictor is part of it)")
    model = constant_model(tmp_path / "c3.model", 3)
    out = _bench(["--scale", "small", "--repeat", "1", "--allocators", "llamalloc", "-w", "word-count",
                  "-w", "frag-micro", "--model", f"word-count={model}", "--out", str(tmp_path / "out"),
                  "--no-plots"], tmp_path)
    assert out.returncode == 1, out.stderr  # frag-micro has no model: reported, the rest completed
    assert "frag-micro under llamalloc+model: no model given" in out.stderr
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    entry = next(e for e in data["results"] if e["allocator"] == "llamalloc+model" and e["workload"] == "word-count")
    stats = entry["runs"][0]["llamalloc_stats"]
    counters = stats.get("counters", stats)
    assert counters["prediction_cache_hits"] + counters["prediction_cache_misses"] > 1000, counters
    assert stats["huge_pages_by_class"][3] > 0, "the model's class was used"
    plain = next(e for e in data["results"] if e["allocator"] == "llamalloc" and e["workload"] == "word-count")
    assert plain["runs"][0]["llamalloc_stats"]["counters"]["prediction_cache_misses"] == 0
    assert "llamalloc+model" in out.stdout


def test_bench_model_allocator_named_with_a_library_runs_that_library_with_the_model(tmp_path):
    # `llamalloc+model=/path/lib.so` (an experimental build) must not be added a second time by --model.
    lib = llamalloc_library()
    if not is_real_llamalloc(lib):
        pytest.skip("needs the real libllamalloc.so (the learned predictor is part of it)")
    model = constant_model(tmp_path / "c3.model", 3)
    out = _bench(["--scale", "small", "--repeat", "1", "--allocators", f"llamalloc+model={lib}", "-w", "word-count",
                  "--model", f"word-count={model}", "--out", str(tmp_path / "out"), "--no-plots"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [(e["workload"], e["allocator"]) for e in data["results"]] == [("word-count", "llamalloc+model")]
    stats = data["results"][0]["runs"][0]["llamalloc_stats"]
    assert stats["huge_pages_by_class"][3] > 0, "the model's class was used"


def test_bench_missing_allocator_keeps_what_completed(tmp_path):
    out = _bench(["--scale", "small", "--repeat", "1", "--allocators", "glibc,ghost=/nonexistent/libghost.so",
                  "-w", "word-count", "--out", str(tmp_path / "out"), "--no-plots"], tmp_path)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("llamalloc: error: ") and "/nonexistent/libghost.so not found" in last
    assert "Traceback" not in out.stderr
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert [(e["workload"], e["allocator"]) for e in data["results"]] == [("word-count", "glibc")]
    assert data["results"][0]["runs"][0]["ok"]
    assert any("ghost" in p for p in data["problems"])


def test_bench_missing_workload_binary_is_reported(tmp_path, monkeypatch):
    out = subprocess.run([sys.executable, "-m", "llamalloc", "bench", "--scale", "small", "--allocators", "glibc",
                          "-w", "word-count", "--out", str(tmp_path / "out"), "--no-plots"], cwd=tmp_path,
                         env={**os.environ, "LLAMALLOC_BUILD_DIR": str(tmp_path / "empty-build")},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "workload word-count" in out.stderr and "is not built" in out.stderr
    assert "Traceback" not in out.stderr
    assert json.loads((tmp_path / "out" / "bench.json").read_text())["results"] == []


@pytest.mark.parametrize("args, message", [
    (["-w", "nope"], "unknown workload 'nope'"),
    (["--allocators", "glibc,hoard"], "unknown allocator 'hoard'"),
    (["--repeat", "0"], "--repeat must be at least 1"),
    (["--model", "word-count"], "--model word-count: expected WORKLOAD=MODEL"),
    (["--model", "nope=/etc/hostname"], "unknown workload 'nope'"),
    (["--model", "word-count=/nonexistent.model"], "/nonexistent.model does not exist"),
])
def test_bench_bad_arguments_are_one_line_errors(tmp_path, args, message):
    out = _bench(["--scale", "small", "--out", str(tmp_path / "out"), *args], tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llamalloc: error: ") and message in lines[0]
    assert not (tmp_path / "out" / "bench.json").exists()


def test_smaps_rollup_reader_sees_this_process():
    rss, anon = bench.read_smaps_rollup(os.getpid())
    assert rss > 1 << 20 and anon >= 0
    assert bench.read_smaps_rollup(2 ** 22 + 12345) is None


def test_footprint_figures_found_anywhere_in_the_stats_file():
    stats = {"live_bytes": 10, "footprint_bytes": 2097152, "heap": {"peak_footprint_bytes": 4194304},
             "counters": {"block_spans": 3}}
    assert bench.footprint_figures(stats) == {"live_bytes": 10, "footprint_bytes": 2097152,
                                              "heap.peak_footprint_bytes": 4194304}
