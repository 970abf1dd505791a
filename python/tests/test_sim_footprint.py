"""The simulator's reports: mesh-4k never shows a footprint below the live bytes, `simulate` shows the state after
the peak (not only after teardown), refuses an output folder that does not exist before replaying, and reads a
zstd-compressed trace."""
from __future__ import annotations

import json

import pytest

from llamalloc import simulate as sim
from llamalloc.cli import main

from test_sim_support import alloc, free, trace_bytes, write_trace

BASE = 0x7F0000000000
OBJ = 16 * 1024  # mesh's largest small class: spans of 8 slots, so that meshing often fills a group


def _meshable_trace(tmp_path):
    """200 spans of 8 objects; then half keep 7 objects and half 1, so that meshing pairs often fill a group;
    then, after a few mesh periods, 2000 more objects of the same class."""
    events, addr, t = [], BASE, 0.0
    spans = []
    for s in range(200):
        objs = []
        for _ in range(8):
            events.append(alloc(t, addr, OBJ))
            objs.append(addr)
            addr += 1 << 20
            t += 0.01
        spans.append(objs)
    for s, objs in enumerate(spans):
        for a in (objs[1:] if s % 2 else objs[:1]):
            events.append(free(t, a))
            t += 0.01
    t = 500.0  # several mesh periods later
    for _ in range(2000):
        events.append(alloc(t, addr, OBJ))
        addr += 1 << 20
        t += 0.01
    return write_trace(tmp_path / "mesh.trace", events)


def test_mesh_4k_footprint_never_below_live(tmp_path, capsys):
    trace = _meshable_trace(tmp_path)
    out = tmp_path / "mesh.sim.json"
    assert main(["simulate", str(trace), "-p", "mesh-4k", "-o", str(out), "-q"]) == 0
    r = sim.load(out).policies["mesh-4k"]
    assert r.extras["meshes"] > 0
    tl = r.timeline
    below = tl["footprint_bytes"] < tl["live_bytes"]
    assert not below.any(), f"footprint below live at {int(below.sum())} samples"
    assert r.summary["peak_footprint_bytes"] >= r.summary["peak_live_bytes"]


def test_simulate_shows_the_state_after_the_peak_not_only_after_teardown(tmp_path, capsys):
    # 4 MiB live for a second (the peak), 1 MiB live for a second after it, then teardown to 4 KiB.
    events, t = [], 0.0
    addrs = [BASE + i * (1 << 20) for i in range(64)]
    for a in addrs:
        events.append(alloc(t, a, 64 * 1024))
    for a in addrs[16:]:
        events.append(free(1000.0, a))
    for t in range(1010, 2000, 10):  # keep the clock going at 1 MiB live
        events.append(alloc(t, BASE + (1 << 30) + t, 16))
        events.append(free(t + 1, BASE + (1 << 30) + t))
    for a in addrs[1:16]:
        events.append(free(2000.0, a))
    trace = write_trace(tmp_path / "p.trace", events)
    out = tmp_path / "p.sim.json"
    assert main(["simulate", str(trace), "-p", "pages-4k", "-o", str(out), "-q"]) == 0
    stdout = capsys.readouterr().out
    assert "after-peak MiB" in stdout and "exit MiB" in stdout
    a = sim.load(out).policies["pages-4k"].after_peak()
    assert a["live_bytes"] == pytest.approx(1 << 20, rel=0.01)
    assert a["footprint_bytes"] == pytest.approx(1 << 20, rel=0.01)
    row = next(line for line in stdout.splitlines() if line.startswith("pages-4k")).split()
    assert row[1:4] == ["4.0", "1.0", "1.0"]  # peak, after-peak footprint, after-peak live
