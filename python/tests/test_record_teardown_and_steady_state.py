"""Lifetimes that mean what the server does: teardown counts as live at exit, dumps on the signal are kept,
`record --steady-state` makes the profile at the window's end OUTPUT, and a trace ends at teardown. The program is
tests/profiler/prof_teardown.cc."""
from __future__ import annotations

import subprocess

import pyarrow.parquet as pq
import pytest

from llamalloc import profile, trace
from test_profiler_common import llamalloc, peer_library, pprof, program, site_samples

# prof_teardown.cc: site -> (count, request size class, freed by the teardown)
TEARDOWN_SITES = {
    "site_global": (20, 208, True),        # a global object's destructor
    "site_local_static": (15, 304, True),  # a function-local static's destructor (registered while main ran)
    "site_atexit": (12, 400, True),        # an atexit handler registered in main
    "site_main_freed": (25, 48, False),    # main itself, at once: class 0
}


def teardown_program():
    return program("prof-teardown")


def record(tmp_path, *args, name="p.prof", rc=0):
    out = tmp_path / name
    r = llamalloc("record", "-o", out, "--sample-bytes", 1, *args, check_rc=rc)
    return out, r


def load(path):
    llamalloc("symbolize", path, check_rc=0)
    return profile.load(path)


def one_site(prof, site):
    found = site_samples(prof, site)
    assert len(found) == 1, f"{site}: {[s.stack[:4] for s in found]}"
    return found[0]


@pytest.mark.parametrize("peer", ["glibc", "llamalloc"])
@pytest.mark.parametrize("how", ["return", "exit"])
def test_objects_freed_by_teardown_are_live_at_exit(tmp_path, how, peer):
    # main returns, or calls exit(); over glibc, and with libllamalloc.so preloaded too (whose own trampoline and
    # exit chain to ours, or ours to it).
    lib = peer_library(peer)
    out, r = record(tmp_path, *(["--preload", lib] if lib else []), "--", teardown_program(), how)
    assert r.stdout == "teardown\n"
    prof = load(out)
    for site, (count, _, by_teardown) in TEARDOWN_SITES.items():
        s = one_site(prof, site)
        assert s.values["alloc_objects"] == count, site
        if by_teardown:
            assert s.class_counts == [0] * 7 + [count], (site, s.class_counts)
            assert s.values["live_at_exit_objects"] == count and s.values["freed_objects"] == 0, site
        else:
            assert s.class_counts == [count] + [0] * 7, (site, s.class_counts)
            assert s.values["freed_objects"] == count and s.values["live_at_exit_objects"] == 0, site
        # main's frame is the one it always has: the trampoline jumps to it, it does not call it.
        assert s.stack[1] == "main", s.stack
        assert not any("trampoline" in f for f in s.stack), s.stack


def test_signal_dumps_are_kept_beside_the_exit_profile(tmp_path):
    out, r = record(tmp_path, "--", teardown_program(), "signals", name="s.prof")
    kept = sorted(tmp_path.glob("s.prof.at-*s"), key=lambda p: p.stat().st_mtime_ns)
    assert len(kept) == 2, sorted(tmp_path.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["s.prof", *(p.name for p in kept)])
    assert "2 profiles taken while it ran" in r.stderr and all(p.name in r.stderr for p in kept), r.stderr
    # Ordered by the time in their names, which the profile's own duration agrees with.
    times = [float(p.name.split(".at-")[1].rstrip("s")) for p in kept]
    first, second = sorted(zip(times, kept))
    first_prof, second_prof, final = load(first[1]), load(second[1]), load(out)
    # The first dump: before the first signal (written by the first allocation after it, site_mid's first).
    assert one_site(first_prof, "site_before").values["alloc_objects"] == 10
    assert sum(s.values["alloc_objects"] for s in site_samples(first_prof, "site_mid")) <= 1
    assert not site_samples(first_prof, "site_after")
    # The second: all of site_mid, at most the allocation of site_after that wrote it.
    assert one_site(second_prof, "site_mid").values["alloc_objects"] == 5
    assert sum(s.values["alloc_objects"] for s in site_samples(second_prof, "site_after")) <= 1
    # The exit profile, not overwritten by either.
    assert one_site(final, "site_after").values["alloc_objects"] == 7
    for path in (first[1], second[1], out):
        top = subprocess.run([pprof(), "-top", "-sample_index=alloc_objects", str(path)], capture_output=True,
                             text=True, timeout=120)
        assert top.returncode == 0 and "site_before" in top.stdout, top.stderr


def test_steady_state_profile_is_output_and_the_exit_profile_is_kept(tmp_path):
    # 10 sessions at start, held until main frees them after 2 s; a request (malloc + free) every 2 ms.
    out, r = record(tmp_path, "--steady-state", "1:1.5", "--", teardown_program(), "steady", name="st.prof")
    exit_profile = tmp_path / "st.prof.at-exit"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["st.prof", "st.prof.at-exit"]
    lines = [l for l in r.stderr.splitlines() if "steady-state profile" in l]
    assert lines == [f"llamalloc: {out} is the steady-state profile, taken at {lines[0].split(' taken at ')[1]}"]
    assert f"the exit profile is {exit_profile}" in lines[0]
    steady, at_exit = load(out), load(exit_profile)
    # At the window's end the sessions are live: long-lived. The requests keep their measured class.
    session = one_site(steady, "site_session")
    assert session.class_counts == [0] * 7 + [10], session.class_counts
    request = one_site(steady, "site_request")
    n = request.values["alloc_objects"]
    assert n > 50 and request.class_counts == [n] + [0] * 7, request.class_counts
    # Sampling stopped at START (1 s): about 500 requests of the 1000 the program made.
    assert n < 800, n
    # The exit profile: main freed the sessions after about 2 s (class 3), a measured lifetime.
    session = one_site(at_exit, "site_session")
    assert session.values["freed_objects"] == 10 and session.class_counts[7] == 0, session.class_counts
    assert sum(session.class_counts[2:4]) == 10, session.class_counts


def test_steady_state_after_the_program_ended_keeps_the_exit_profile(tmp_path):
    out, r = record(tmp_path, "--steady-state", "100", "--", teardown_program(), "return")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.prof"]
    assert "warning: no steady-state profile" in r.stderr and f"{out} is the exit profile" in r.stderr
    assert one_site(load(out), "site_global").class_counts[7] == 20


@pytest.mark.parametrize("spec,problem", [("abc", "is not END or START:END"), ("3:1", "is before START"),
                                          ("1:2:3", "is not END or START:END"), ("0", "greater than 0"),
                                          ("-1", "not negative"), ("inf", "finite")])
def test_bad_steady_state_is_a_one_line_error(tmp_path, spec, problem):
    r = llamalloc("record", "-o", tmp_path / "x.prof", f"--steady-state={spec}", "--", "true")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llamalloc: error: --steady-state: ") and problem in lines[0], \
        r.stderr
    assert not list(tmp_path.iterdir())


def test_trace_ends_at_teardown(tmp_path):
    # The trace's END is written when teardown begins: what the teardown frees has no free event (it is live at
    # the end of the trace); what main freed has one.
    out = tmp_path / "t.trace"
    llamalloc("trace", "-o", out, "--", teardown_program(), "return", check_rc=0)
    llamalloc("symbolize", out, check_rc=0)
    t = trace.load(out)
    ev = t.events
    by_site: dict[str, set[int]] = {}
    for e in ev:
        if e["kind"] & 0xFF == trace.KIND_ALLOC:
            frames = t.frames(int(e["stack_id"]))
            if frames and frames[0] in TEARDOWN_SITES:
                by_site.setdefault(frames[0], set()).add(int(e["address"]))
    freed = {int(e["address"]) for e in ev if e["kind"] & 0xFF == trace.KIND_FREE}
    for site, (count, _, by_teardown) in TEARDOWN_SITES.items():
        addresses = by_site[site]
        if by_teardown:
            assert len(addresses) == count and not addresses & freed, site
        else:
            assert addresses <= freed, site
    # The last event is no later than the end record, and the converters take the trace.
    pq_path = tmp_path / "t.parquet"
    llamalloc("trace", "--to-parquet", out, "-o", pq_path, check_rc=0)
    assert pq.read_table(pq_path).num_rows == len(ev)
    result = tmp_path / "r.json"
    llamalloc("simulate", out, "-p", "pages-4k", "-o", result, "-q", check_rc=0)
    assert result.exists()
