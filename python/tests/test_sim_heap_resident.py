"""Heap-resident bytes in the replay (docs/simulator.md, "Memory: live, footprint, fragmentation"): the llama policies
run the library's sweeper passes (span purge and subrelease beside the release of empty pages) on the trace's clock,
and report the footprint less what those passes gave back inside it. On hash-trimmed-cache, whose cache is trimmed
by key hash to an eighth after its peak, the pages go sparse: the replay's heap-resident bytes after the peak are well below its footprint,
and within 10% of what llamalloc's own statistics report for the shape run for real (footprint less subreleased
and span-purged bytes, after the peak), as bench/corpus/replay_agreement.py measures it for every shape."""
from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from llamalloc import paths, simulate as sim, workloads
from llamalloc.allocators import Allocator
from llamalloc.cli import main

SHAPE = "hash-trimmed-cache"
AGREEMENT = Path(__file__).resolve().parents[2] / "bench" / "corpus" / "replay_agreement.py"


def _agreement():
    spec = importlib.util.spec_from_file_location("replay_agreement", AGREEMENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shape(tmp_path_factory):
    try:
        workloads.get(SHAPE).executable()
    except workloads.WorkloadMissing as e:
        pytest.skip(str(e))
    agreement = _agreement()
    out = tmp_path_factory.mktemp("heap-resident")
    llamalloc = Allocator("llamalloc", paths.native_library("libllamalloc.so"))
    runs = agreement.real_runs(SHAPE, "small", 3, out, llamalloc, None)
    assert min(r["threads"] for r in runs) > 1  # four threads: the replay's sweeper runs from its second
    result = agreement.trace_and_replay(SHAPE, "small", out, None, 1, False)
    return out, result, runs


def test_pages_gone_sparse_after_the_peak_are_heap_resident_below_the_footprint(shape):
    out, result, _ = shape
    default = result.policies["llama-default"]
    a, s, e = default.after_peak(), default.summary, default.extras
    assert e["blocks_subreleased"] + e["span_pages_purged"] > 0
    assert a["heap_resident_bytes"] < 0.75 * a["footprint_bytes"]
    assert s["after_peak_heap_resident_bytes"] == a["heap_resident_bytes"]  # the C++ window's median, Python's
    assert s["final_heap_resident_bytes"] <= s["final_footprint_bytes"]
    # A policy that gives back nothing inside its pages: heap-resident is its footprint.
    pages = result.policies["pages-2m"].timeline
    assert (pages["heap_resident_bytes"] == pages["footprint_bytes"]).all()
    header = (out / f"{SHAPE}.small.1.sim.timeline.csv").read_text().splitlines()[0]
    assert header.startswith("policy,time_ns,live_bytes,footprint_bytes,heap_resident_bytes")


def test_the_replays_heap_resident_bytes_match_the_real_runs_statistics_within_10_percent(shape):
    _, result, runs = shape
    replay = result.policies["llama-default"].after_peak()["heap_resident_bytes"]
    real = statistics.median(r["heap_resident_bytes"] for r in runs)
    assert replay == pytest.approx(real, rel=0.10), (replay / 2**20, [r["heap_resident_bytes"] / 2**20 for r in runs])


def test_simulates_table_labels_the_heap_resident_column(shape, capsys):
    out, _, _ = shape
    assert main(["simulate", str(out / f"{SHAPE}.small.1.trace"), "-p", "llama-default", "-o",
                 str(out / "again.sim.json")]) == 0
    text = capsys.readouterr().out
    assert "heap-resident MiB" in text and "heap-resident: the after-peak footprint less" in text
