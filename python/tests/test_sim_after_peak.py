"""After the peak, one window everywhere (docs/bench.md, "After the peak"): on a trace whose peak drops to about 5%
of itself for a long quiet phase before the exit teardown, `simulate`'s after-peak figures, its verdict and
`report`'s headline give the same window (the quiet phase) and the same verdict; the simulator's own after_peak_*
figures (C++) equal `llamalloc.after_peak`'s (Python) to the byte; `top` lists what the quiet phase keeps."""
from __future__ import annotations

import re

import numpy as np
import pytest

from llamalloc import after_peak, simulate as sim
from llamalloc.cli import main

from test_sim_support import alloc, free, write_trace

MIB = 1 << 20
BASE = 0x7F0000000000
OBJ = 64 * 1024
OBJECTS = 1600         # 100 MiB at the peak
KEPT_EVERY = 18        # 89 objects, 5.6 MiB, live through the quiet phase
TEARDOWN_MS = 60_000.0


@pytest.fixture(scope="module")
def quiet_trace(tmp_path_factory):
    """100 MiB of 64 KiB objects allocated over the first second, side by side in the program's addresses; at 1 s
    all but every 18th are freed (5.6% of the peak stays live) and nothing happens for 59 s (the quiet phase);
    at 60 s the program's exit teardown frees the rest. Every 2 MiB page of the program's addresses keeps a
    survivor through the quiet phase; an oracle that knows lifetimes puts the survivors on pages of their own."""
    events = []
    for i in range(OBJECTS):
        events.append(alloc(i * 1000.0 / OBJECTS, BASE + i * OBJ, OBJ))
    for i in range(OBJECTS):
        if i % KEPT_EVERY:
            events.append(free(1000.0 + i * 50.0 / OBJECTS, BASE + i * OBJ))
    for i in range(0, OBJECTS, KEPT_EVERY):
        events.append(free(TEARDOWN_MS + i * 5.0 / OBJECTS, BASE + i * OBJ))
    return write_trace(tmp_path_factory.mktemp("quiet") / "quiet.trace", events)


@pytest.fixture(scope="module")
def replayed(quiet_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("quiet-sim") / "quiet.sim.json"
    assert main(["simulate", str(quiet_trace), "-p", "pages-2m", "-p", "llama-oracle", "--interval-ms", "100",
                 "-o", str(out), "-q"]) == 0
    return out


def test_the_quiet_phase_that_keeps_5_percent_is_after_the_peak_and_the_teardown_is_not(replayed):
    result = sim.load(replayed)
    pages, oracle = result.policies["pages-2m"], result.policies["llama-oracle"]
    first = pages.summary["first_time_ns"]
    for p in (pages, oracle):
        a = p.after_peak()
        # The window runs from the drop at 1 s to the last sample before the teardown at 60 s. The rule of before
        # (teardown where live falls below 10% of the peak) ended it at the drop and kept no quiet sample.
        assert (a["start_ns"] - first) / 1e9 == pytest.approx(1.0, abs=0.11)
        assert (a["end_ns"] - first) / 1e9 == pytest.approx(60.0, abs=0.11)
        assert a["samples"] > 580
        assert a["live_bytes"] == (OBJECTS + KEPT_EVERY - 1) // KEPT_EVERY * OBJ
    # Every 2 MiB page of the program's addresses is pinned by a survivor; the oracle keeps a few.
    assert pages.after_peak()["footprint_bytes"] == pytest.approx(100 * MIB, rel=0.03)
    assert oracle.after_peak()["footprint_bytes"] <= 16 * MIB


def test_the_simulators_after_peak_figures_are_pythons_to_the_byte(replayed):
    for p in sim.load(replayed).policies.values():
        a, s = p.after_peak(), p.summary
        assert (s["after_peak_start_ns"], s["after_peak_end_ns"], s["after_peak_samples"]) == \
            (a["start_ns"], a["end_ns"], a["samples"])
        assert (s["after_peak_footprint_bytes"], s["after_peak_live_bytes"]) == (a["footprint_bytes"],
                                                                                 a["live_bytes"])
        assert s["after_peak_heap_resident_bytes"] == a["heap_resident_bytes"]


def test_simulate_and_report_give_the_same_verdict_on_the_same_window(replayed, capsys, tmp_path):
    result = sim.load(replayed)
    verdict = sim.conclusion(result, "quiet.trace")
    o = result.policies["llama-oracle"].after_peak()["footprint_bytes"]
    b = result.policies["pages-2m"].after_peak()["footprint_bytes"]
    assert "lifetime placement can help" in verdict
    assert f"{o / MIB:,.1f} MiB" in verdict and f"{b / MIB:,.1f} MiB" in verdict
    window = sim.window_text(result.policies["llama-oracle"])
    assert window in verdict and window == sim.window_text(result.policies["pages-2m"])

    # simulate's table: the after-peak column and, under it, the window and the verdict.
    from llamalloc.commands.simulate import summary_table
    table = summary_table(result)
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.startswith(("pages-2m", "llama-"))}
    assert rows["pages-2m"][2] == f"{b / MIB:,.1f}" and rows["llama-oracle"][2] == f"{o / MIB:,.1f}"
    assert f"after-peak: medians over {window} of the trace" in table
    assert verdict in table

    # report's headline: the same sentence.
    out = tmp_path / "rep"
    assert main(["report", "--sim", str(replayed), "-o", str(out), "-q"]) == 0
    page = (out / "index.html").read_text()
    headline = re.search(r'<p class="conclusion"><strong>(.*?)</strong>', page).group(1)
    assert headline == verdict.replace("'", "&#x27;")


def test_top_lists_what_the_quiet_phase_keeps(quiet_trace, capsys):
    assert main(["top", str(quiet_trace)]) == 0
    out = capsys.readouterr().out
    kept = (OBJECTS + KEPT_EVERY - 1) // KEPT_EVERY
    assert f"{kept * OBJ / MIB:,.1f} MiB live in {kept:,} objects" in out, out
    assert "at the end of the quiet phase after the peak, 60.00 s" in out, out


def test_the_window_rule():
    t = np.arange(0, 1000, 10.0)
    live = np.r_[np.full(20, 100.0), np.full(78, 5.0), [0.0, 0.0]]
    w = after_peak.window(t, live)
    assert (w.start, w.stop) == (20, 98)  # the quiet phase; the teardown's samples left out
    live = np.r_[np.full(20, 100.0), np.full(80, 5.0)]
    assert after_peak.window(t, live).stop == 100  # no teardown: to the end
    live = np.r_[np.full(20, 100.0), np.full(40, 10.0), np.full(40, 1.0)]
    assert after_peak.window(t, live).stop == 100  # a long phase at 1% is a phase, not a teardown
    live = np.r_[np.full(10, 100.0), np.full(88, 95.0), [30.0, 30.0]]
    assert (lambda w: (w.start, w.stop))(after_peak.window(t, live)) == (97, 98)  # straight into the teardown
    assert len(after_peak.window([], [])) == 0
    assert after_peak.median([1, 3, 4, 6]) == 3.0  # the mean of the middle two, rounded down, as in C++
