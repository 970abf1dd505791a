"""`llamalloc simulate` end to end: hand-made traces whose footprints are worked out by hand, and bad input."""
from __future__ import annotations

import json
import math

import pytest
from conftest import one_error_line, run

from llamalloc import simulate as sim

from test_sim_support import alloc, free, trace_bytes, write_trace

K4 = 4096
M2 = 2 << 20
BASE = 0x7F0000000000  # 2 MiB aligned


@pytest.fixture
def small_trace(tmp_path):
    # t=0: 64 B at BASE; t=5: 64 B one huge page further; t=15: 3 pages' worth at BASE + 8 KiB;
    # t=25: the first object freed; t=35: a free of an address never allocated; t=38: the 3-page object freed.
    events = [alloc(0, BASE, 64), alloc(5, BASE + M2, 64), alloc(15, BASE + 2 * K4, 3 * K4),
              free(25, BASE), free(35, BASE + 12345), free(38, BASE + 2 * K4)]
    return write_trace(tmp_path / "small.trace", events)


def test_pages_policies_match_hand_computed_footprints(small_trace, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc, stdout, _ = run(["simulate", str(small_trace), "-p", "pages-4k", "-p", "pages-2m", "-o", str(out),
                         "--interval-ms", "10", "-q"], capsys)
    assert rc == 0
    assert "pages-4k" in stdout and "pages-2m" in stdout
    assert "1 frees named an address that was never allocated" in stdout
    result = sim.load(out)
    p4, p2 = result.policies["pages-4k"], result.policies["pages-2m"]
    # 4 KiB: {page 0}, {0, hp1}, {0, hp1, pages 2,3,4} = 5 pages peak; final: hp1's page only.
    assert p4.summary["peak_footprint_bytes"] == 5 * K4
    assert p4.summary["final_footprint_bytes"] == 1 * K4
    # 2 MiB: huge pages 0 and 1 from t=5 to t=38; at the end only huge page 1.
    assert p2.summary["peak_footprint_bytes"] == 2 * M2
    assert p2.summary["final_footprint_bytes"] == M2
    for p in (p4, p2):
        assert p.summary["unknown_frees"] == 1
        assert p.summary["final_live_bytes"] == 64
        assert p.summary["peak_live_bytes"] == 64 + 64 + 3 * K4
        assert p.summary["events_per_second"] > 0
    # Timeline: samples at 0, 10, 20, 30 ms and the last event (38 ms).
    assert list(p4.timeline["time_ns"]) == [0, 10e6, 20e6, 30e6, 38e6]
    assert list(p4.timeline["live_bytes"]) == [0, 128, 128 + 3 * K4, 64 + 3 * K4, 64]
    assert list(p4.timeline["footprint_bytes"]) == [0, 2 * K4, 5 * K4, 4 * K4, K4]
    assert list(p2.timeline["footprint_bytes"]) == [0, 2 * M2, 2 * M2, 2 * M2, M2]
    # Average fragmentation: mean of footprint/live over samples with live > 0.
    ratios = [2 * K4 / 128, 5 * K4 / (128 + 3 * K4), 4 * K4 / (64 + 3 * K4), K4 / 64]
    assert p4.summary["average_fragmentation_ratio"] == pytest.approx(sum(ratios) / 4, rel=1e-5)
    assert p4.summary["final_fragmentation_ratio"] == pytest.approx(K4 / 64)


def test_mesh_and_tcmalloc_policies_on_a_hand_made_trace(tmp_path, capsys):
    # 300 objects of 16 B: a Mesh span holds 256, so 2 pages; a TCMalloc 8 KiB span holds 512: 1 huge page.
    # Then every object but the first is freed. Mesh keeps the first (full, then detached) span for the one
    # survivor and the second span stays attached to its thread though empty, as in Mesh: still 2 pages.
    # TCMalloc: one huge page throughout, whatever the placement.
    events = [alloc(i * 0.01, BASE + 16 * i, 16) for i in range(300)]
    events += [free(10 + i * 0.01, BASE + 16 * i) for i in range(1, 300)]
    trace = write_trace(tmp_path / "m.trace", events)
    out = tmp_path / "m.json"
    rc, _, _ = run(["simulate", str(trace), "-p", "mesh", "-p", "tcmalloc", "-p", "tcmalloc-lifetime",
                    "-o", str(out), "-q"], capsys)
    assert rc == 0
    r = sim.load(out)
    assert set(r.policies) == {"mesh-4k", "mesh-2m", "tcmalloc", "tcmalloc-lifetime"}
    assert r.policies["mesh-4k"].summary["peak_footprint_bytes"] == 2 * K4
    assert r.policies["mesh-4k"].summary["final_footprint_bytes"] == 2 * K4
    assert r.policies["mesh-2m"].summary["peak_footprint_bytes"] == M2
    for name in ("tcmalloc", "tcmalloc-lifetime"):
        assert r.policies[name].summary["peak_footprint_bytes"] == M2
        assert r.policies[name].summary["final_footprint_bytes"] == M2
    assert "footprint4k_bytes" in r.policies["mesh-2m"].timeline
    assert "hp_long_spans" in r.policies["tcmalloc-lifetime"].timeline
    # 16-byte spans have capacity 512 > 16: the lifetime-aware filler files them with the long-lived spans.
    assert r.policies["tcmalloc-lifetime"].timeline["hp_long_spans"][-1] == 1


@pytest.mark.parametrize("cut", [0, 10, 63, 64, 70, 100, 150])
def test_truncated_trace_names_the_offset_and_writes_nothing(tmp_path, capsys, cut):
    data = trace_bytes([alloc(0, BASE, 64), free(1, BASE)])
    trace = tmp_path / "cut.trace"
    trace.write_bytes(data[:cut])
    out = tmp_path / "cut.json"
    rc, stdout, err = run(["simulate", str(trace), "-p", "pages-4k", "-o", str(out), "-q"], capsys)
    line = one_error_line(rc, err)
    assert line.startswith("llamalloc: error: ") and str(trace) in line
    assert "at byte offset " in line
    assert not out.exists() and not list(tmp_path.glob("cut.timeline*")) and not list(tmp_path.glob("*.tmp.*"))


def test_foreign_file_and_unknown_policy_are_one_line_errors(tmp_path, capsys):
    foreign = tmp_path / "photo.jpg"
    foreign.write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 200)
    rc, _, err = run(["simulate", str(foreign), "-p", "pages-2m", "-o", str(tmp_path / "x.json")], capsys)
    assert rc == 2 and "not a llamalloc trace (bad magic) at byte offset 0" in err
    good = write_trace(tmp_path / "g.trace", [alloc(0, BASE, 8)])
    rc, _, err = run(["simulate", str(good), "-p", "pages-3m"], capsys)
    assert rc == 2 and "unknown policy 'pages-3m'" in err


def test_load_refuses_other_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(sim.FormatError, match="not a llamalloc simulation result"):
        sim.load(bad)
    bad.write_text(json.dumps({"format": "llamalloc-sim", "version": 99}))
    with pytest.raises(sim.FormatError, match="version 99"):
        sim.load(bad)


def test_heap_options_place_the_llama_policies_as_the_library_would(tmp_path, capsys):
    # A "never freed" object of 64 KiB, then one freed after 20 s ("< 100 s", class 4). With the library's
    # defaults class 4 takes blocks of the never-freed class's page (LLAMALLOC_LONG_CLASS=4): one huge page. With
    # LONG_CLASS=8 it has a class of its own but, in a small heap, borrows the never-freed page's free blocks
    # (LLAMALLOC_SMALL_HEAP_PAGES): still one. With both off, two.
    K64 = 64 << 10
    trace = write_trace(tmp_path / "long.trace", [alloc(0, BASE, K64), alloc(1, BASE + M2, K64),
                                                  free(20001, BASE + M2)])
    peaks = {}
    for name, options in {"defaults": [], "long8": ["LONG_CLASS=8"],
                          "long8-nosmall": ["LLAMALLOC_LONG_CLASS=8", "SMALL_HEAP_PAGES=0"]}.items():
        out = tmp_path / f"{name}.json"
        args = ["simulate", str(trace), "-p", "llama-oracle", "-o", str(out), "-q"]
        for o in options:
            args += ["--option", o]
        rc, stdout, err = run(args, capsys)
        assert rc == 0, err
        assert ("placed as the library does under" in stdout) == bool(options)
        result = json.loads(out.read_text())
        heap_options = result["policies"][0]["heap_options"]
        assert heap_options["LONG_CLASS"] == (8 if options else 4)
        assert heap_options["SMALL_HEAP_PAGES"] == (0 if len(options) == 2 else 8)
        peaks[name] = sim.load(out).policies["llama-oracle"].summary["peak_footprint_bytes"]
    assert peaks == {"defaults": M2, "long8": M2, "long8-nosmall": 2 * M2}


@pytest.mark.parametrize("option, message", [
    # Bounds and names come from the library's options table, checked by the library's own parser.
    ("LONG_CLASS=9", "--option LONG_CLASS=9: not an integer in [1, 8]"),
    ("DENSE_FIRST=yes", "--option DENSE_FIRST=yes: not an integer in [0, 1]"),
    ("MIN_CONFIDENCE=101", "--option MIN_CONFIDENCE=101: not an integer in [0, 100]"),
    ("DEADLINE_K=0", "--option DEADLINE_K=0: not an integer in [1, 1000]"),
    ("LONG_CLAS=4", "--option LONG_CLAS=4: LLAMALLOC_LONG_CLAS is not a llamalloc option (did you mean "
                    "LLAMALLOC_LONG_CLASS?)"),
    ("NO_SUCH_THING=1", "--option NO_SUCH_THING=1: LLAMALLOC_NO_SUCH_THING is not a llamalloc option"),
    ("MODEL=x.model", "--option MODEL: give it as --model"),
    ("LONG_CLASS", "--option LONG_CLASS: expected NAME=VALUE"),
])
def test_a_bad_option_is_a_one_line_error_before_the_replay(tmp_path, capsys, option, message):
    trace = write_trace(tmp_path / "g.trace", [alloc(0, BASE, 8)])
    out = tmp_path / "x.json"
    rc, _, err = run(["simulate", str(trace), "-p", "llama-default", "-o", str(out), "--option", option, "-q"],
                     capsys)
    assert one_error_line(rc, err).startswith("llamalloc: error: " + message), err
    assert "Traceback" not in err
    assert not out.exists()


def test_an_option_the_replay_does_not_model_is_named_in_a_warning(tmp_path, capsys):
    trace = write_trace(tmp_path / "g.trace", [alloc(0, BASE, 8)])
    out = tmp_path / "x.json"
    rc, _, err = run(["simulate", str(trace), "-p", "llama-default", "-o", str(out), "--option",
                      "SWEEP_MS=100", "-q"], capsys)
    assert rc == 0, err
    assert "simulate: warning: --option SWEEP_MS: the replay does not model LLAMALLOC_SWEEP_MS; ignored" in err


def test_deprecated_option_flags_are_heap_options(tmp_path, capsys):
    # --deadline-k K is --option DEADLINE_K=K, checked against the same table.
    trace = write_trace(tmp_path / "g.trace", [alloc(0, BASE, 8)])
    out = tmp_path / "x.json"
    rc, _, err = run(["simulate", str(trace), "-p", "llama-default", "-o", str(out), "--deadline-k", "7", "-q"],
                     capsys)
    assert rc == 0, err
    assert "--deadline-k is deprecated; use --option DEADLINE_K=7" in err
    assert json.loads(out.read_text())["policies"][0]["heap_options"]["DEADLINE_K"] == 7
    rc, _, err = run(["simulate", str(trace), "-p", "llama-default", "-o", str(out), "--deadline-k", "0", "-q"],
                     capsys)
    assert rc == 2 and "llamalloc: error: --option DEADLINE_K=0: not an integer in [1, 1000]" in err


def test_settings_are_one_record(tmp_path):
    trace = write_trace(tmp_path / "g.trace", [alloc(0, BASE, 8)])
    settings = sim.Settings(interval_ms=5, heap_options=("DEADLINE_K=3",))
    result = sim.simulate(trace, ["llama-default"], tmp_path / "a.json", settings)
    assert result.interval_ns == 5_000_000
    assert result.policies["llama-default"].extras["deadline_k"] == 3
    # The same fields as keywords.
    result = sim.simulate(trace, ["llama-default"], tmp_path / "b.json", interval_ms=5, heap_options=["DEADLINE_K=3"])
    assert result.policies["llama-default"].extras["deadline_k"] == 3
    with pytest.raises(sim.UserError, match="DEADLINE_K=0: not an integer"):
        sim.simulate(trace, ["llama-default"], tmp_path / "c.json", heap_options=["DEADLINE_K=0"])


def test_an_output_that_cannot_be_written_is_one_line_before_the_replay(small_trace, capsys, monkeypatch):
    # /proc takes no new file, whatever the permission bits say to root (os.access says yes).
    out = "/proc/llamalloc-small.sim.json"
    monkeypatch.setattr(sim.subprocess, "Popen", lambda *_, **__: pytest.fail("the replay ran"))
    rc, _, err = run(["simulate", str(small_trace), "-p", "pages-4k", "-o", out, "-q"], capsys)
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"llamalloc: error: {out}: cannot write in folder "
                                                               "/proc: "), err
