"""`llamalloc record` on programs with known allocation sites, under every allocator."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from llamalloc import profile
from test_profiler_common import (PEERS, assert_exact_sites, lifetime_bounds, llamalloc, peer_library, pprof,
                                  program, site_samples)


def record(tmp_path, *args, name="p.prof", sample_bytes=1, env=None, rc=0, symbolize=True, stdout=None):
    out = tmp_path / name
    r = llamalloc("record", "-o", out, "--sample-bytes", sample_bytes, *args, env=env, check_rc=rc)
    if stdout is not None:
        stdout.append(r.stdout)
    if symbolize:
        llamalloc("symbolize", out, check_rc=0)
    return out


def record_sites(tmp_path, *args, env=None, rc=0, program_args=("sites",), exe=None):
    """Records prof-sites and returns the profile and the lifetime bounds the program printed."""
    printed: list[str] = []
    out = record(tmp_path, *args, "--", exe or program(), *program_args, env=env, rc=rc, stdout=printed)
    return profile.load(out), lifetime_bounds(printed[0])


def test_exact_sites_counts_and_lifetime_classes(tmp_path):
    prof, bounds = record_sites(tmp_path)
    assert prof.symbolized and prof.sample_bytes == 1
    assert prof.program == str(program())
    assert re.fullmatch(r"[0-9a-f]{40}", prof.build_id)
    assert set(bounds) == {"site_tens", "site_medium"}
    assert_exact_sites(prof, bounds)


def test_without_frame_pointers_the_dwarf_unwinder_gives_the_same_sites(tmp_path):
    out = record(tmp_path, "--", program("prof-sites-nofp"), "sites")
    prof = profile.load(out)
    for site in ("site_short", "site_tens", "site_never"):
        (s,) = site_samples(prof, site)
        assert s.stack[0] == site and "main" in s.stack, s.stack


@pytest.mark.parametrize("unwind", ["fp", "dwarf"])
def test_each_unwinder_alone_on_a_frame_pointer_build(tmp_path, unwind):
    env = dict(os.environ, LLAMALLOC_PROF_UNWIND=unwind)
    assert_exact_sites(*record_sites(tmp_path, env=env))


@pytest.mark.parametrize("peer", list(PEERS))
def test_works_over_each_allocator(tmp_path, peer):
    lib = peer_library(peer)
    args = ["--preload", lib] if lib else []
    prof, bounds = record_sites(tmp_path, *args)
    assert_exact_sites(prof, bounds)
    if lib:
        name = os.path.basename(lib).split(".so")[0]
        assert any(os.path.basename(m.path).startswith(name) for m in prof.mappings), \
            f"{peer} was not loaded: {[m.path for m in prof.mappings]}"


def test_peer_already_in_ld_preload_comes_after_the_profiler(tmp_path):
    env = dict(os.environ, LD_PRELOAD=PEERS["jemalloc"])
    prof, bounds = record_sites(tmp_path, env=env)
    assert_exact_sites(prof, bounds)
    assert any("jemalloc" in m.path for m in prof.mappings)


def test_coarse_sampling_scales_counts(tmp_path):
    n = 200_000
    out = record(tmp_path, "--", program(), "scale", n, sample_bytes=64 * 1024)
    prof = profile.load(out)
    (s,) = site_samples(prof, "site_scale")
    # ~780 samples of 256 B each: the unbiased estimate is within a few percent; 15% is > 4 sigma.
    assert abs(s.values["alloc_objects"] - n) < 0.15 * n, s.values
    assert abs(s.values["alloc_space"] - 256 * n) < 0.15 * 256 * n
    assert s.values["freed_objects"] == s.values["alloc_objects"] == s.values["class_0"]
    assert prof.sample_bytes == 64 * 1024


def test_threads_freeing_across_threads(tmp_path):
    prof = profile.load(record(tmp_path, "--", program(), "threads"))
    (s,) = site_samples(prof, "site_cross_thread")
    assert s.values["alloc_objects"] == 2000
    assert s.values["freed_objects"] == 2000
    assert s.values["live_at_exit_objects"] == 0


def test_fork_and_exec_children_get_profiles_of_their_own(tmp_path):
    printed: list[str] = []
    out = record(tmp_path, "--", program(), "fork", stdout=printed)
    prof = profile.load(out)
    assert site_samples(prof, "site_short")[0].values["alloc_objects"] == 200
    assert not site_samples(prof, "site_child")
    children = sorted(tmp_path.glob("p.prof.*"))
    assert len(children) == 2, children
    for child in children:
        llamalloc("symbolize", child, check_rc=0)
    loaded = [profile.load(c) for c in children]
    forked = [p for p in loaded if site_samples(p, "site_child")]
    execed = [p for p in loaded if site_samples(p, "site_tens")]
    assert len(forked) == 1 and len(execed) == 1
    assert site_samples(forked[0], "site_child")[0].values["alloc_objects"] == 11
    assert not site_samples(forked[0], "site_short"), "the forked child must not inherit the parent's samples"
    assert_exact_sites(execed[0], lifetime_bounds(printed[0]))


def test_exit_status_is_passed_through_and_profile_still_written(tmp_path):
    assert_exact_sites(*record_sites(tmp_path, rc=3, program_args=("sites", "3")))


def test_command_not_found_exits_127(tmp_path):
    r = llamalloc("record", "-o", tmp_path / "x.prof", "--", "/no/such/program-xyz")
    assert r.returncode == 127
    assert r.stderr.strip().splitlines() == ["llamalloc: error: /no/such/program-xyz: command not found"]
    assert not (tmp_path / "x.prof").exists()


def test_profile_on_signal_and_periodically_while_running(tmp_path):
    # A "server" that never exits by itself: python sleeping; SIGUSR2 asks for a profile while it runs.
    out = tmp_path / "srv.prof"
    script = ("import os, signal, time\n"
              "x = [bytearray(4096) for _ in range(2000)]\n"
              "os.kill(os.getpid(), signal.SIGUSR2)\n"
              "y = [bytearray(100) for _ in range(100)]\n"
              "time.sleep(1.5)\n"
              "os._exit(0)\n")  # no exit handlers: only the signal's and the periodic profiles exist
    r = llamalloc("record", "-o", out, "--interval", "0.2", "--", "python3", "-c", script)
    assert r.returncode == 0, r.stderr
    prof = profile.load(out)
    assert sum(s.values["alloc_space"] for s in prof.samples) > 4096 * 1000


def test_pprof_reads_the_profile(tmp_path):
    out = record(tmp_path, "--", program(), "sites")
    top = subprocess.run([pprof(), "-top", "-sample_index=alloc_objects", str(out)], capture_output=True,
                         text=True, timeout=120)
    assert top.returncode == 0, top.stderr
    line = next(l for l in top.stdout.splitlines() if l.rstrip().endswith(" site_short"))
    assert line.split()[0] == "200"
    assert "llamalloc-profile v1" in top.stdout
    raw = subprocess.run([pprof(), "-raw", str(out)], capture_output=True, text=True, timeout=120)
    assert raw.returncode == 0 and "class_7/count" in raw.stdout and "request_size" in raw.stdout


def test_killed_by_a_signal_still_writes_its_profile(tmp_path):
    # SIGTERM left at its default: the profiler writes the profile, then the program dies of the signal.
    script = ("import os, signal\n"
              "x = [bytearray(1000) for _ in range(3000)]\n"
              "os.kill(os.getpid(), signal.SIGTERM)\n")
    out = tmp_path / "k.prof"
    r = llamalloc("record", "-o", out, "--sample-bytes", 4096, "--", "python3", "-c", script)
    assert r.returncode == 128 + 15, r.stderr
    prof = profile.load(out)
    assert sum(s.values["alloc_space"] for s in prof.samples) >= 3000 * 1000 * 0.8
