"""`llamalloc trace`: every event of a known sequence of calls comes back exactly; threads; Parquet."""
from __future__ import annotations


import numpy as np
import pyarrow.parquet as pq
import pytest

from llamalloc import trace
from test_profiler_common import llamalloc, peer_library, program


def run_trace(tmp_path, *args, rc=0, name="t.trace"):
    out = tmp_path / name
    r = llamalloc("trace", "-o", out, *args, check_rc=rc)
    return out, r


def expected_sequence(stdout: str):
    seq = []
    for line in stdout.splitlines():
        f = line.split()
        if f[0] == "alloc":
            seq.append(("alloc", int(f[1], 16), int(f[2])))
        elif f[0] == "free":
            seq.append(("free", int(f[1], 16), None))
    return seq


@pytest.mark.parametrize("peer", ["glibc", "jemalloc"])
def test_known_sequence_round_trips_exactly(tmp_path, peer):
    lib = peer_library(peer)
    args = ["--preload", lib] if lib else []
    out, r = run_trace(tmp_path, *args, "--", program(), "sequence")
    expected = expected_sequence(r.stdout)
    assert len(expected) == 14
    llamalloc("symbolize", out, check_rc=0)
    t = trace.load(out)
    assert t.symbolized and t.program == str(program())
    addresses = {a for _, a, _ in expected}
    ev = t.events
    got = []
    for e in ev:
        if int(e["address"]) in addresses:
            kind = "alloc" if e["kind"] & 0xFF == trace.KIND_ALLOC else "free"
            got.append((kind, int(e["address"]), int(e["size_bytes"]) if kind == "alloc" else None, e))
    # The window from the first marker's allocation to its free.
    start = next(i for i, g in enumerate(got) if g[:3] == expected[0])
    window = got[start:start + len(expected)]
    assert [g[:3] for g in window] == expected
    threads = {int(g[3]["thread_id"]) for g in window}
    assert len(threads) == 1
    for kind, _, size, e in window:
        if kind == "alloc":
            frames = t.frames(int(e["stack_id"]))
            assert "run_sequence" in frames[:2] and "main" in frames, frames
        else:
            assert e["stack_id"] == trace.NO_STACK
    # realloc(p2, 5000): the free of p2 and the allocation of p4 are marked as its halves.
    realloc_halves = [g for g in window if g[3]["kind"] & trace.FROM_REALLOC]
    assert [(g[0], g[2]) for g in realloc_halves] == [("free", None), ("alloc", 5000)]
    aligned = [g for g in window if g[2] == 300]
    assert aligned[0][3]["alignment_bytes"] == 64
    times = ev["time_ns"]
    assert np.all(np.diff(times.astype(np.int64)) >= 0)


def test_threads_and_parquet(tmp_path):
    out, _ = run_trace(tmp_path, "--", program(), "threads")
    llamalloc("symbolize", out, check_rc=0)
    t = trace.load(out)
    allocs = [e for e in t.events if e["kind"] & 0xFF == trace.KIND_ALLOC and e["size_bytes"] == 72
              and "site_cross_thread" in t.frames(int(e["stack_id"]))[:1]]
    assert len(allocs) == 2000
    alloc_thread = {int(e["thread_id"]) for e in allocs}
    addrs = {int(e["address"]) for e in allocs}
    frees = [e for e in t.events if e["kind"] & 0xFF == trace.KIND_FREE and int(e["address"]) in addrs]
    assert len(frees) == 2000
    free_thread = {int(e["thread_id"]) for e in frees}
    assert len(alloc_thread) == 1 and len(free_thread) == 1 and alloc_thread != free_thread

    pq_path = tmp_path / "t.parquet"
    llamalloc("trace", "--to-parquet", out, "-o", pq_path, check_rc=0)
    table = pq.read_table(pq_path)
    assert table.num_rows == len(t.events)
    rows = table.to_pydict()
    cross_frees = [i for i in range(table.num_rows)
                   if rows["kind"][i] == "free" and rows["address"][i] in addrs]
    assert len(cross_frees) == 2000
    for i in cross_frees:
        j = rows["alloc_index"][i]
        assert j >= 0 and rows["kind"][j] == "alloc" and rows["address"][j] == rows["address"][i]
        assert rows["size_bytes"][i] == 72 and rows["thread_id"][j] != rows["thread_id"][i]
    assert table.schema.metadata[b"llamalloc.trace.version"] == b"1"


def test_exit_status_and_children(tmp_path):
    out, _ = run_trace(tmp_path, "--", program(), "sites", 5, rc=5)
    assert len(trace.load(out).events) > 250
    out, _ = run_trace(tmp_path, "--", program(), "fork", name="f.trace")
    children = sorted(tmp_path.glob("f.trace.*"))
    assert len(children) == 2
    for c in children:
        llamalloc("symbolize", c, check_rc=0)
    sizes = [sorted(set(trace.load(c).events["size_bytes"].tolist())) for c in children]
    assert any(900 in s for s in sizes) and any(5000 in s for s in sizes)


def test_command_not_found(tmp_path):
    r = llamalloc("trace", "-o", tmp_path / "x.trace", "--", "no-such-program-xyz")
    assert r.returncode == 127 and "command not found" in r.stderr
    assert not (tmp_path / "x.trace").exists()


def test_killed_by_a_signal_still_writes_a_complete_trace(tmp_path):
    script = ("import os, signal\n"
              "x = [bytearray(1000) for _ in range(3000)]\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n")
    out = tmp_path / "k.trace"
    r = llamalloc("trace", "-o", out, "--", "python3", "-c", script)
    assert r.returncode == 128 + 15, r.stderr
    t = trace.load(out)
    assert (t.events["size_bytes"] >= 1000).sum() >= 3000
