"""The profiler's options (LLAMALLOC_PROF_*, docs/options.md "Profiler") in a preloaded process: a bad value or a
misspelled name warns in one line, and the options that `llamalloc record` does not set change what it does."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

from llamalloc.paths import native_library
from test_profiler_common import program


def run_profiled(tmp_path, args, **options):
    env = dict(os.environ, LD_PRELOAD=str(native_library("libllamalloc_prof.so")), LLAMALLOC_PROF_MODE="profile",
               LLAMALLOC_PROF_OUTPUT=str(tmp_path / "p.%p"), LLAMALLOC_PROF_SAMPLE_BYTES="1", **options)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, timeout=120)


def test_bad_value_and_misspelled_name_warn_and_the_profile_is_still_written(tmp_path):
    r = run_profiled(tmp_path, [program(), "sites"], LLAMALLOC_PROF_INTERVAL_S="soon", LLAMALLOC_PROF_INTERVL="1")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("llamalloc: warning: LLAMALLOC_PROF_INTERVAL_S=soon is not a number of seconds in "
                          "[0, 1000000000]; using the default 0\n") == 1, r.stderr
    assert r.stderr.count("llamalloc: warning: LLAMALLOC_PROF_INTERVL is not a llamalloc option (did you mean "
                          "LLAMALLOC_PROF_INTERVAL_S?); ignored\n") == 1, r.stderr
    assert len(list(tmp_path.glob("p.*"))) == 1 and not list(tmp_path.glob("*.dump*"))


def test_debug_prints_the_counts_and_unwind_picks_the_unwinder(tmp_path):
    counts = {}
    for unwind in ("fp", "dwarf"):
        r = run_profiled(tmp_path, [program(), "sites"], LLAMALLOC_PROF_UNWIND=unwind, LLAMALLOC_PROF_DEBUG="1")
        assert r.returncode == 0, r.stderr
        m = re.search(r"llamalloc_prof\[\d+\]: sampled (\d+), .* frame-pointer walks (\d+), dwarf walks (\d+)",
                      r.stderr)
        assert m, r.stderr
        counts[unwind] = tuple(int(x) for x in m.groups())
    assert counts["fp"][0] > 0 and counts["fp"][1] > 0 and counts["fp"][2] == 0, counts
    assert counts["dwarf"][0] > 0 and counts["dwarf"][1] == 0 and counts["dwarf"][2] > 0, counts
    r = run_profiled(tmp_path, [program(), "sites"])
    assert "llamalloc_prof[" not in r.stderr


def test_signal_chooses_the_signal_that_asks_for_a_profile(tmp_path):
    # SIGUSR1 instead of SIGUSR2: the profiler handles it (left at its default, it would kill the program).
    script = ("import os, signal\n"
              "x = [bytearray(1000) for _ in range(100)]\n"
              "os.kill(os.getpid(), signal.SIGUSR1)\n"
              "y = [bytearray(100) for _ in range(100)]\n"
              "os._exit(0)\n")
    r = run_profiled(tmp_path, [sys.executable, "-c", script], LLAMALLOC_PROF_SIGNAL=str(int(signal.SIGUSR1)))
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("p.*.dump1"))) == 1, list(tmp_path.iterdir())


def test_interval_writes_profiles_while_the_program_runs(tmp_path):
    # The program allocates for about a second and leaves without exit handlers: only periodic profiles exist.
    script = ("import os, time\n"
              "end = time.monotonic() + 1.0\n"
              "while time.monotonic() < end:\n"
              "    x = [bytearray(100) for _ in range(100)]\n"
              "os._exit(0)\n")
    r = run_profiled(tmp_path, [sys.executable, "-c", script], LLAMALLOC_PROF_INTERVAL_S="0.2")
    assert r.returncode == 0, r.stderr
    assert len(list(tmp_path.glob("p.*.dump*"))) >= 3, list(tmp_path.iterdir())
    (tmp_path / "none").mkdir()
    r = run_profiled(tmp_path / "none", [sys.executable, "-c", script])
    assert r.returncode == 0, r.stderr
    assert not list((tmp_path / "none").iterdir())
