"""The corpus of program shapes (docs/workloads.md): every shape runs at small scale under glibc and under
llamalloc, checks itself, drops most of its peak and reports the steady state of its quiet phase; the group
`corpus` names them all with the bundled workloads."""
from __future__ import annotations

import subprocess

import pytest

from llamalloc import workloads
from llamalloc.errors import UserError
from test_workloads_support import is_real_llamalloc, llamalloc_library, preload_env

QUIET = 0.4  # seconds: short, so that the tests stay fast
# Shapes that keep almost nothing after the drop. llamalloc adds a thread's count of live bytes to its total only
# once it passes 256 KiB (kLiveFlushBytes, src/llamalloc/stats.h), so where idle threads still hold counts of what
# another thread freed, the total reads 0 although a few bytes are live.
KEEP_ALMOST_NOTHING = {"free-all", "free-all-pool"}


def _env(allocator: str) -> dict[str, str]:
    return preload_env(None if allocator == "glibc" else llamalloc_library())


def _check_steady_state(steady, allocator: str, keeps_almost_nothing: bool = False) -> None:
    assert isinstance(steady, dict), steady
    assert QUIET * 0.9 <= steady["seconds"] < QUIET + 5
    assert steady["samples"] >= 3 and steady["interval_seconds"] == pytest.approx(0.2)
    assert 0 < steady["rss_bytes"] <= steady["max_rss_bytes"]
    if allocator == "llamalloc" and is_real_llamalloc(llamalloc_library()):
        assert steady["llamalloc_samples"] >= 1
        least = 0 if keeps_almost_nothing else 1
        assert steady["llamalloc_footprint_bytes"] >= steady["llamalloc_live_bytes"] >= least
    elif allocator == "glibc":
        assert "llamalloc_footprint_bytes" not in steady


@pytest.mark.parametrize("shape", list(workloads.SHAPES))
def test_shape_peaks_drops_and_idles_under_glibc_and_llamalloc(shape, tmp_path):
    results = {}
    for allocator in ("glibc", "llamalloc"):
        result = workloads.get(shape).run("small", _env(allocator), tmp_path, quiet_seconds=QUIET)
        assert result["workload"] == shape and result["ok"] is True, result
        assert result["operations"] > 0 and result["operations_per_second"] > 0
        # Most of the peak is dropped before the quiet phase; what stays is the shape's long-lived state.
        assert 0 <= 2 * result["live_bytes"] < result["peak_live_bytes"], result
        assert result["peak_rss_bytes"] > result["peak_live_bytes"] // 2
        steady = result["steady_state"]
        _check_steady_state(steady, allocator, keeps_almost_nothing=shape in KEEP_ALMOST_NOTHING)
        assert steady["workload_live_bytes"] >= 0
        results[allocator] = result
    # A checksum, where the shape has one, does not depend on the allocator or the thread schedule.
    assert results["glibc"].get("checksum") == results["llamalloc"].get("checksum")


def test_shapes_program_rejects_bad_options():
    exe = workloads.get("lru-cache").executable()
    for args, flag in ((["--shape", "no-such-shape"], "--shape"), (["--scale", "small"], "--shape"),
                       (["--shape", "lru-cache", "--threads", "0"], "--threads"),
                       (["--shape", "ast-builder", "--threads", "4"], "--threads"),
                       (["--shape", "free-all", "--threads", "4"], "--threads"),
                       (["--shape", "lru-cache", "--quiet-seconds", "soon"], "--quiet-seconds")):
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2, (args, out.stderr)
        assert flag in out.stderr.splitlines()[0]


def _run_small(shape: str, tmp_path) -> dict:
    result = workloads.get(shape).run("small", _env("glibc"), tmp_path, quiet_seconds=QUIET)
    assert result["workload"] == shape and result["ok"] is True, result
    _check_steady_state(result["steady_state"], "glibc")
    return result


def test_query_spikes_cache_keeps_its_cache_and_drops_the_spikes_temporaries(tmp_path):
    result = _run_small("query-spikes-cache", tmp_path)
    # The cache survives the last spike whole (every item and every query's answer) and stays live through the
    # quiet phase; what is live after the drop is the cache and nothing else.
    assert result["cache_entries"] == result["operations"] and result["queries"] == 8 * 256
    assert 0 < result["live_bytes"] == result["cache_bytes"]
    assert result["steady_state"]["workload_live_bytes"] == result["live_bytes"]
    assert result["steady_state"]["entries"] == result["cache_entries"]
    # The peak is the cache with a spike's temporaries on top, which outweigh it: a few tens of MiB here.
    assert result["spike_peak_bytes"] > result["cache_bytes"]
    assert result["peak_live_bytes"] > result["live_bytes"] + result["spike_peak_bytes"] // 2
    assert 16 << 20 < result["peak_live_bytes"] < 128 << 20
    assert result["hits"] == result["probes"] > 0  # every probe asks for an item cached in an earlier round


def test_free_all_keeps_almost_nothing_after_the_peak_on_one_thread_or_an_idle_pool(tmp_path):
    single, pool = _run_small("free-all", tmp_path), _run_small("free-all-pool", tmp_path)
    for result in (single, pool):
        assert 0 <= result["live_bytes"] < 0.05 * result["peak_live_bytes"], result
        assert result["live_bytes"] == result["steady_state"]["workload_live_bytes"]
        assert result["steady_state"]["records"] == 0 and result["attachments"] > 0
    assert single["threads"] == 1 and "idle_workers" not in single["steady_state"]
    # The pool's workers sit idle on their queue through the quiet phase, while another thread freed it all.
    assert pool["threads"] == pool["workers"] == pool["steady_state"]["idle_workers"] == 4
    # One catalog, whichever threads load it.
    assert single["checksum"] == pool["checksum"] and single["peak_live_bytes"] == pool["peak_live_bytes"]


def test_mixed_lifetime_cache_keeps_the_owned_twentieth_of_one_call_sites_entries(tmp_path):
    result = _run_small("mixed-lifetime-cache", tmp_path)
    # The owned slice is one key hash in 20: about 5% of the entries, and all that is left after the sweep.
    assert 0.04 < result["owned_entries"] / result["inserted"] < 0.06, result
    assert result["owned_entries"] + result["expired"] == result["inserted"]
    assert result["steady_state"]["entries"] == result["owned_entries"]
    # Nearly the whole peak is copies: what stays is about 5% of it (the copies inserted first have expired by
    # the peak, so a little more than 5%).
    assert 0.03 < result["live_bytes"] / result["peak_live_bytes"] < 0.10, result
    assert result["steady_state"]["workload_live_bytes"] == result["live_bytes"]


def test_cpython_shape_runs_its_objects_through_llamalloc(tmp_path):
    pids = []
    result = workloads.get("cpython").run("small", _env("llamalloc"), tmp_path, on_start=pids.append,
                                          quiet_seconds=QUIET)
    assert pids and result["ok"] is True
    assert result["pymalloc"] == "malloc"  # every object through the allocator under test
    assert result["catalog_entries"] > 0 and result["blobs"] > 0 and result["orders"] > 0
    _check_steady_state(result["steady_state"], "llamalloc")


def test_sqlite_shape_keeps_one_row_in_ten_and_reports_its_own_heap(tmp_path):
    sqlite = workloads.get("sqlite")
    result = sqlite.run("small", _env("llamalloc"), tmp_path, quiet_seconds=QUIET)
    assert result["rows_kept"] * sqlite.keep_one_in == result["rows"]
    # sqlite's own count of its heap follows the data: most of it is gone after the deletes.
    assert 0 < 2 * result["live_bytes"] < result["peak_live_bytes"]
    steady = result["steady_state"]
    _check_steady_state(steady, "llamalloc")
    assert steady["rows"] == result["rows_kept"] and steady["idle_requests"] == steady["samples"]
    assert 0 < steady["workload_live_bytes"] < result["peak_live_bytes"]


def test_external_shapes_without_a_quiet_phase(tmp_path):
    for name in ("cpython", "sqlite"):
        result = workloads.get(name).run("small", _env("glibc"), tmp_path, quiet_seconds=0)
        assert result["ok"] is True and result["steady_state"] is None


def test_the_corpus_group_names_every_shape_and_the_bundled_workloads():
    corpus = workloads.expand(["corpus"])
    assert len(corpus) >= 12 and len(set(corpus)) == len(corpus)
    assert set(workloads.SHAPES) | {"cpython", "sqlite", "redis", "image-server", "word-count",
                                    "frag-micro"} <= set(corpus)
    assert all(name in workloads.WORKLOADS for name in corpus)
    # A group and its members together: each workload once, in order.
    assert workloads.expand(["frag-micro", "corpus"])[0] == "frag-micro"
    assert len(workloads.expand(["frag-micro", "corpus"])) == len(corpus)
    with pytest.raises(UserError, match="corpus"):
        workloads.get("no-such-workload")


def test_bench_runs_every_workload_of_the_corpus_group(tmp_path, monkeypatch):
    from llamalloc import bench

    ran = []

    def one_run(workload, allocator, rep, *args, **kwargs):
        ran.append(workload.name)
        return bench.Run(workload.name, allocator.name, rep, ok=True, metrics={"seconds": 1.0})

    monkeypatch.setattr(bench, "_one_run", one_run)
    result = bench.run_bench(["corpus"], "glibc", 1, "small", tmp_path / "out")
    assert result.workloads == workloads.expand(["corpus"])
    # Each one ran, or is reported as missing (a workload whose program is not built).
    missing = [name for name in result.workloads if any(p.startswith(f"workload {name}:") for p in result.problems)]
    assert sorted(ran + missing) == sorted(result.workloads)
    assert set(workloads.SHAPES) <= set(ran)
    with pytest.raises(UserError, match="no-such-workload"):
        bench.run_bench(["corpus", "no-such-workload"], "glibc", 1, "small", tmp_path / "out")
