"""Settings of the allocator's options are checked by the library's own table (`llamalloc-options --validate`,
docs/options.md): `run --option` and `simulate --option` refuse a bad one in the same line before anything runs,
and `simulate --heap-option`, the flag's former spelling, still works."""
from __future__ import annotations

import json
import subprocess

import pytest
from conftest import llamalloc

from llamalloc.paths import native_program
from test_sim_support import alloc, write_trace


def validate(*settings: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(native_program("src/llamalloc/llamalloc-options")), "--validate", *settings],
                          capture_output=True, text=True)


def test_validate_prints_one_line_per_refused_setting():
    r = validate("DEADLINE_K=3", "LLAMALLOC_MODEL=/m.model", "LONG_CLASS=9", "LONG_CLAS=4", "PROF_MODE=trace", "X")
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        "llamalloc-options: error: LONG_CLASS=9: not an integer in [1, 8]",
        "llamalloc-options: error: LONG_CLAS=4: LLAMALLOC_LONG_CLAS is not a llamalloc option (did you mean "
        "LLAMALLOC_LONG_CLASS?)",
        "llamalloc-options: error: PROF_MODE=trace: LLAMALLOC_PROF_MODE is the profiler's option (llamalloc record, "
        "llamalloc trace), not the heap's",
        "llamalloc-options: error: X: expected NAME=VALUE"]
    ok = validate("DEADLINE_K=3", "LLAMALLOC_MODEL=/m.model")
    assert (ok.returncode, ok.stderr) == (0, "")


@pytest.mark.parametrize("option, message", [
    ("LONG_CLASS=9", "--option LONG_CLASS=9: not an integer in [1, 8]"),
    ("DEADLIN_K=2", "--option DEADLIN_K=2: LLAMALLOC_DEADLIN_K is not a llamalloc option (did you mean "
                    "LLAMALLOC_DEADLINE_K?)"),
])
def test_run_and_simulate_refuse_a_bad_option_in_the_same_line(tmp_path, option, message):
    marker, out = tmp_path / "ran", tmp_path / "x.json"
    trace = write_trace(tmp_path / "g.trace", [alloc(0, 0x7F0000000000, 8)])
    for argv in (["run", "--option", option, "--", "touch", marker],
                 ["simulate", trace, "-p", "llama-default", "-o", out, "-q", "--option", option],
                 ["simulate", trace, "-p", "llama-default", "-o", out, "-q", "--heap-option", option]):
        r = llamalloc(*argv, check_rc=2)
        assert r.stderr.splitlines() == [f"llamalloc: error: {message}"], argv
    assert not marker.exists() and not out.exists()


def test_heap_option_is_the_former_spelling_of_option(tmp_path):
    trace = write_trace(tmp_path / "g.trace", [alloc(0, 0x7F0000000000, 8)])
    for flag in ("--option", "--heap-option"):
        out = tmp_path / f"{flag.strip('-')}.json"
        llamalloc("simulate", trace, "-p", "llama-default", "-o", out, "-q", flag, "DEADLINE_K=7")
        assert json.loads(out.read_text())["policies"][0]["heap_options"]["DEADLINE_K"] == 7
    assert "--heap-option" not in llamalloc("simulate", "--help").stdout
