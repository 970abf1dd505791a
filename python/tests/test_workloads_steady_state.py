"""The workloads' quiet phase after the load peak, its steady_state figures, and how `llamalloc bench`
and bench/table3 report them (docs/workloads.md, docs/bench.md)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamalloc import bench, workloads
from llamalloc.allocators import Allocator
from test_workloads_support import is_real_llamalloc, llamalloc_library, preload_env

QUIET = 1.0  # seconds: short, so that the tests stay fast
WORKLOADS = ["image-server", "word-count", "frag-micro", "redis"]
REPO = Path(__file__).resolve().parents[2]


def _env(allocator: str) -> dict[str, str]:
    return preload_env(None if allocator == "glibc" else llamalloc_library())


def _real_llamalloc(allocator: str) -> bool:
    return allocator == "llamalloc" and is_real_llamalloc(llamalloc_library())


@pytest.mark.parametrize("allocator", ["glibc", "llamalloc"])
@pytest.mark.parametrize("name", WORKLOADS)
def test_quiet_phase_reports_the_steady_state_with_the_long_lived_state_live(name, allocator, tmp_path):
    started = time.monotonic()
    result = workloads.get(name).run("small", _env(allocator), tmp_path, quiet_seconds=QUIET)
    wall = time.monotonic() - started
    steady = result["steady_state"]
    assert isinstance(steady, dict), result
    # The phase lasted as long as asked, sampled several times a second.
    assert QUIET * 0.9 <= steady["seconds"] < QUIET + 5
    assert steady["interval_seconds"] == pytest.approx(0.2)
    assert steady["samples"] >= 5
    assert 0 < steady["rss_bytes"] <= steady["max_rss_bytes"]
    assert steady["last_rss_bytes"] > 0 and steady["anon_huge_pages_bytes"] >= 0
    assert result["seconds"] <= wall - 0.9 * QUIET  # the work's time leaves the quiet phase out
    if _real_llamalloc(allocator):
        # llamalloc's own figures, read while the program runs: the long-lived state is still live.
        assert steady["llamalloc_samples"] >= 5
        assert steady["llamalloc_footprint_bytes"] >= steady["llamalloc_live_bytes"] > 0
        # (A mean over the phase: the sweeper gives idle threads' spans back during it, so the footprint moves.)
        assert steady["llamalloc_footprint_bytes"] >= 2 << 20
    elif allocator == "glibc":
        assert "llamalloc_footprint_bytes" not in steady and "llamalloc_live_bytes" not in steady

    # The workload's own account of its long-lived state during the phase.
    if name == "image-server":
        assert result["checksum"] == workloads.IMAGE_SERVER_CHECKSUMS["small"]  # the probes change no image
        assert steady["idle_requests"] == steady["samples"]
        server = steady["server"]
        assert server["sessions"] > 0 and server["stat_keys"] > 0 and server["cluster_nodes"] > 0
        assert server["trace_lines"] >= result["requests"]
    elif name == "word-count":
        assert steady["distinct_words"] == result["distinct_words"] > 0
        assert steady["round_summaries"] == result["rounds"]
        if _real_llamalloc(allocator):
            # The global tables (a string and a count per distinct word) are live through the phase.
            assert steady["llamalloc_live_bytes"] > 16 * result["distinct_words"]
    elif name == "frag-micro":
        assert steady["workload_live_bytes"] == result["live_bytes"] > 0
        assert steady["long_lived_objects"] == result["long_lived_objects"]
        assert result["live_bytes"] <= steady["footprint4k_bytes"] <= steady["footprint_bytes"]
        if _real_llamalloc(allocator):
            assert steady["llamalloc_live_bytes"] >= result["live_bytes"]
    elif name == "redis":
        # The refilled keys stay; INFO memory's used_memory is redis's own count of its heap.
        assert steady["keys"] > 0 and result["keys_at_end"] >= steady["keys"]
        assert steady["workload_live_bytes"] > 1000 * steady["keys"]
        assert steady["idle_requests"] == 2 * steady["samples"]


@pytest.mark.parametrize("name", WORKLOADS)
def test_quiet_seconds_0_gives_no_steady_state(name, tmp_path):
    result = workloads.get(name).run("small", _env("glibc"), tmp_path, quiet_seconds=0)
    assert result["ok"] is True
    assert result["steady_state"] is None


def test_word_count_counts_are_the_same_with_and_without_the_quiet_phase(tmp_path):
    w = workloads.get("word-count")
    a = w.run("small", _env("glibc"), tmp_path, quiet_seconds=0)
    b = w.run("small", _env("glibc"), tmp_path, quiet_seconds=QUIET)
    assert (a["checksum"], a["top"], a["words"]) == (b["checksum"], b["top"], b["words"])


@pytest.mark.parametrize("name", ["image-server", "word-count", "frag-micro"])
@pytest.mark.parametrize("value", ["-1", "soon", "1e9"])
def test_bad_quiet_seconds_is_a_usage_error(name, value):
    exe = workloads.get(name).executable()
    out = subprocess.run([str(exe), "--scale", "small", "--quiet-seconds", value], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2
    assert "--quiet-seconds" in out.stderr.splitlines()[0]


def test_the_programs_default_quiet_phase_follows_the_scale(tmp_path):
    # No --quiet-seconds: the small scale's default (QUIET_SECONDS["small"]), whichever order the flags come in.
    exe = workloads.get("frag-micro").executable()
    for args in (["--scale", "small"], ["--quiet-seconds", "0.4", "--scale", "small"]):
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, env=_env("glibc"))
        steady = json.loads(out.stdout.strip().splitlines()[-1])["steady_state"]
        expected = 0.4 if "--quiet-seconds" in args else workloads.QUIET_SECONDS["small"]
        assert expected * 0.9 <= steady["seconds"] < expected + 2


# ----------------------------------------------------------------------------------------------------------
def _bench(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([sys.executable, "-m", "llamalloc", "bench", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_bench_reports_the_steady_state_beside_peak_and_final(tmp_path):
    lib = llamalloc_library()
    spec = "glibc,llamalloc" if is_real_llamalloc(lib) and "LLAMALLOC_TEST_PRELOAD" not in os.environ \
        else f"glibc,llamalloc={lib}"
    out = _bench(["--scale", "small", "--repeat", "1", "--allocators", spec, "-w", "frag-micro", "-w", "word-count",
                  "--quiet-seconds", str(QUIET), "--out", str(tmp_path / "out"), "--no-plots"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert data["quiet_seconds"] == QUIET
    for entry in data["results"]:
        s, r = entry["summary"], entry["ratios_to_glibc"]
        assert s["steady_samples"] >= 5 and s["steady_rss_bytes"] > 0
        assert s["steady_anon_huge_pages_bytes"] >= 0
        run = entry["runs"][0]
        assert s["steady_rss_bytes"] == run["metrics"]["steady_state"]["rss_bytes"]
        glibc = next(e["summary"] for e in data["results"]
                     if e["workload"] == entry["workload"] and e["allocator"] == "glibc")
        assert r["steady_rss_bytes"] == pytest.approx(s["steady_rss_bytes"] / glibc["steady_rss_bytes"])
        if entry["workload"] == "frag-micro":
            assert s["steady_workload_live_bytes"] == run["metrics"]["live_bytes"]
            assert s["steady_workload_footprint_bytes"] >= s["steady_workload_live_bytes"]
        if entry["allocator"] == "llamalloc" and is_real_llamalloc(lib):
            assert s["steady_footprint_bytes"] >= s["steady_live_bytes"] > 0
        elif entry["allocator"] == "glibc":
            assert "steady_footprint_bytes" not in s and "steady_live_bytes" not in s
    header = out.stdout.splitlines()[0]
    for column in ("peak RSS MiB", "final RSS MiB", "steady RSS MiB", "steady x", "steady fp MiB", "steady live MiB"):
        assert column in header
    assert "steady-state RSS" in out.stderr  # progress lines


def test_bench_without_a_quiet_phase_has_no_steady_figures(tmp_path):
    out = _bench(["--scale", "small", "--repeat", "1", "--allocators", "glibc", "-w", "word-count",
                  "--quiet-seconds", "0", "--out", str(tmp_path / "out"), "--no-plots"], tmp_path)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "out" / "bench.json").read_text())
    s = data["results"][0]["summary"]
    assert s["steady_rss_bytes"] is None and s["steady_samples"] is None
    assert data["results"][0]["runs"][0]["metrics"]["steady_state"] is None


def test_bench_refuses_a_negative_quiet_phase(tmp_path):
    out = _bench(["--scale", "small", "--quiet-seconds", "-1", "--out", str(tmp_path / "out")], tmp_path)
    assert out.returncode == 2
    assert "--quiet-seconds must be >= 0" in out.stderr


def _run_with_steady(allocator: str, steady: dict | None, workload: str = "w") -> bench.Run:
    return bench.Run(workload, allocator, 0, ok=True, metrics={"seconds": 1.0, "steady_state": steady},
                     samples=[(0.0, 100, 0), (0.1, 50, 0)])


def test_summary_takes_the_median_of_the_steady_state_means():
    result = bench.BenchResult(scale="small", repeat=3, workloads=["w"],
                               allocators=[Allocator("glibc", None), Allocator("llamalloc", None)])
    for rss in (10, 30, 20):
        result.runs.append(_run_with_steady("glibc", {"samples": 6, "rss_bytes": rss, "anon_huge_pages_bytes": 0,
                                                      "workload_live_bytes": 4}))
    for rss, fp, live in ((5, 4, 2), (7, 6, 3), (6, 4, 2)):
        result.runs.append(_run_with_steady("llamalloc", {
            "samples": 6, "rss_bytes": rss, "anon_huge_pages_bytes": fp, "llamalloc_footprint_bytes": fp,
            "llamalloc_live_bytes": live, "workload_live_bytes": 4}))
    g, ll = result.summary("w", "glibc"), result.summary("w", "llamalloc")
    assert g["steady_rss_bytes"] == 20 and g["steady_workload_live_bytes"] == 4
    assert "steady_footprint_bytes" not in g
    assert ll["steady_rss_bytes"] == 6 and ll["steady_footprint_bytes"] == 4 and ll["steady_live_bytes"] == 2
    assert result.ratios("w", "llamalloc")["steady_rss_bytes"] == pytest.approx(0.3)
    table = bench.format_table(result)
    row = next(line for line in table.splitlines() if line.startswith("w ") and "llamalloc" in line)
    assert row.split()[-4:] == ["0.0", "0.30", "0.0", "0.0"]  # MiB: tiny figures; the ratio is what counts
    glibc_row = next(line for line in table.splitlines() if line.startswith("w ") and "glibc" in line)
    assert glibc_row.rstrip().endswith("(own)")  # no llamalloc figures: the workload's own live bytes


def _table3():
    spec = importlib.util.spec_from_file_location("table3_run", REPO / "bench" / "table3" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table3_reduction_is_computed_on_the_steady_state():
    t3 = _table3()
    MiB = 1 << 20

    def entry(allocator, steady_runs, peak=1000 * MiB):
        return {"workload": "w", "allocator": allocator, "runs": [
            {"ok": True, "peak_rss_bytes": peak, "metrics": {"steady_state": s}} for s in steady_runs]}

    data = {"results": [
        entry("jemalloc", [{"rss_bytes": 110 * MiB}, {"rss_bytes": 130 * MiB}, {"rss_bytes": 120 * MiB}]),
        entry("tcmalloc", [{"rss_bytes": 60 * MiB}]),
        entry("llamalloc", [{"rss_bytes": 40 * MiB, "llamalloc_footprint_bytes": 36 * MiB,
                             "llamalloc_live_bytes": 19 * MiB}]),
        entry("llamalloc+model", [{"rss_bytes": 30 * MiB, "llamalloc_footprint_bytes": 26 * MiB,
                                   "llamalloc_live_bytes": 20 * MiB, "samples": 50}]),
    ]}
    [row] = t3.steady_rows(data, ["w"])
    assert row["rss"]["jemalloc"] == 120 * MiB  # the median over runs, not the peak
    assert row["live"] == 20 * MiB  # llamalloc+model's live bytes
    assert row["reduction"]["jemalloc"] == pytest.approx(1 - 10 / 100)
    assert row["reduction"]["tcmalloc"] == pytest.approx(1 - 10 / 40)
    assert row["reduction"]["llamalloc"] == pytest.approx(1 - 10 / 20)
    assert row["footprint"] == {"llamalloc": 36 * MiB, "llamalloc+model": 26 * MiB}
    text = t3.format_steady([row], {"w": "50% / 40%"}, "small", 3)
    assert "| w | 50% / 40% | 120.0 | 60.0 | 40.0 | 30.0 | 20.0 | 90% | 75% | 50% | 36.0 | 26.0 |" in text
    assert t3.reduction(30, 20, 20) is None  # B at live: undefined, not a division by zero


@pytest.mark.parametrize("over", ["glibc", "llamalloc"])
def test_table3_records_over_the_allocator_it_is_asked_for(tmp_path, monkeypatch, over):
    # The profiled process gets the profiler, then libllamalloc.so with --record-over llamalloc; a model or other
    # llamalloc setting of the caller's environment does not reach it (it would change what is recorded).
    t3 = _table3()
    seen = {}

    class Program:
        def executable(self):
            return "/bin/ls"

        def run(self, scale, env, work):
            seen.update(env)
            subprocess.run(["/bin/ls", "-l", "/usr/lib"], env=env, stdout=subprocess.DEVNULL, check=True)
            return {}

    monkeypatch.setattr(t3.workloads, "get", lambda name: Program())
    monkeypatch.setenv("LLAMALLOC_MODEL", str(tmp_path / "some.model"))
    out = tmp_path / "ls.prof"
    t3.record("ls", "small", out, 4096, over)
    preloaded = [Path(p).name for p in seen["LD_PRELOAD"].split(":")]
    assert preloaded == (["libllamalloc_prof.so", "libllamalloc.so"] if over == "llamalloc"
                         else ["libllamalloc_prof.so"])
    assert "LLAMALLOC_MODEL" not in seen and seen["LLAMALLOC_PROF_MODE"] == "profile"
    assert out.stat().st_size > 0
