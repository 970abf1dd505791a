"""The llama policies against the library itself: a program runs under libllamalloc.so (with its statistics)
and under the tracer at the same time; the trace replayed through llama-default (the same heap code, every
object in the default class as the library does without a model) must reproduce the library's footprint, and
llama-oracle's lifetime classes must be the ones the trace's own alloc/free times give."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from llamalloc import paths, simulate as sim, trace as trace_mod


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("oracle")
    workload = paths.native_binary("tests/sim/sim_oracle_workload")
    lib = paths.native_library("libllamalloc.so")
    stats = d / "stats.json"
    trace = d / "run.trace"
    # K = 1000 puts every deadline (10 s for class 0) past the end of the run: the process reads a coarse clock
    # at its own moments and the replay uses the trace's event times, so a deadline that expires mid-run can
    # fall between different events in the two and make later decisions differ. Without one, the two runs
    # must agree exactly.
    # The trace ends when the program's teardown begins, with its thread still holding its spans; the library's
    # before-exit statistics are taken at the same moment (LLAMALLOC_STATS_BEFORE_EXIT).
    env = dict(os.environ, LLAMALLOC_STATS=str(stats), LLAMALLOC_DEADLINE_K="1000", LLAMALLOC_STATS_BEFORE_EXIT="1")
    # Its own session, so that a hung run is killed with its child (the workload) rather than orphaned.
    proc = subprocess.Popen([sys.executable, "-m", "llamalloc", "trace", "-o", str(trace), "--preload", str(lib),
                             "--", str(workload), "60"], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail("the workload hung under libllamalloc.so (the heap, not the simulator)")
    assert proc.returncode == 0, output.decode(errors="replace")
    result = sim.simulate(trace, ["llama-default", "llama-oracle"], d / "sim.json",
                          heap_options=["DEADLINE_K=1000"], thread_idle_ms=0)  # its one thread lives to the end
    before_exit = json.loads((d / "stats.before-exit.json").read_text())
    return dict(json.loads(stats.read_text()), before_exit=before_exit), trace, result


def test_llama_default_reproduces_the_librarys_own_statistics(traced_run):
    stats, _, result = traced_run
    s = result.policies["llama-default"].summary
    e = result.policies["llama-default"].extras
    # The same objects, in the same order, in the same class, through the same heap code. Not exactly: the
    # few allocations the process makes before the tracer starts (the loader's, libc's start-up) are in the
    # library's heap and not in the trace. They sit in the first spans, which early line recycling queues and
    # hands out in a different order, so the replay agrees to a huge page and the counters to a quarter (overflow allocations differ most).
    two_mib = 2 << 20
    assert abs(s["peak_footprint_bytes"] - stats["peak_footprint_bytes"]) <= two_mib
    # The end of the trace is the start of the program's teardown: the replay's final footprint is the process's
    # then (its thread's spans still held), not the one after the library's exit gave them back.
    assert abs(s["final_footprint_bytes"] - stats["before_exit"]["footprint_bytes"]) <= two_mib
    assert s["final_live_bytes"] > 0
    for counter in ("block_spans_handed_out", "blocks_recycled", "huge_pages_released"):
        assert abs(e[counter] - stats["counters"][counter]) <= 0.25 * stats["counters"][counter] + 8, counter
    for counter in ("deadlines_expired", "promotions", "demotions"):
        assert e[counter] == stats["counters"][counter], counter
    assert e["deadline_k"] == 1000
    assert stats["counters"]["block_spans_handed_out"] > 20  # the workload exercised the heap (spans are 16-256 KiB)


def test_llama_oracle_uses_each_objects_true_lifetime_class(traced_run):
    _, trace, result = traced_run
    table = trace_mod.load(trace).to_table()
    kind = np.array(table.column("kind").to_pylist())
    time_ns = table.column("time_ns").to_numpy()
    alloc_index = table.column("alloc_index").to_numpy()
    frees = np.flatnonzero((kind == "free") & (alloc_index >= 0))
    lifetimes = time_ns[frees] - time_ns[alloc_index[frees]]
    bounds = [10_000_000 * 10**c for c in range(6)]
    expected = np.bincount(np.searchsorted(bounds, lifetimes, side="right"), minlength=8)
    expected[7] = (kind == "alloc").sum() - len(frees)  # never freed
    extras = result.policies["llama-oracle"].extras
    got = [extras[f"allocs_class_{c}"] for c in range(8)]
    assert got == expected.tolist()
    o = result.policies["llama-oracle"].summary
    d = result.policies["llama-default"].summary
    assert o["peak_live_bytes"] == d["peak_live_bytes"]
    assert o["final_footprint_bytes"] > 0 and o["peak_footprint_bytes"] >= o["final_footprint_bytes"]
    # Every class in use holds at least one huge page at the end (the never-freed objects' class included).
    final_pages = {c: result.policies["llama-oracle"].timeline[f"hp_class_{c}"][-1] for c in range(8)}
    assert final_pages[7] >= 1
    snapshot = result.policies["llama-oracle"].snapshots[-1]
    assert sum(1 for p in snapshot["pages"]) * (2 << 20) == o["final_footprint_bytes"]
