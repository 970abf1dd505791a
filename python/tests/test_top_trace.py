"""`llamalloc top` on a trace: it names the sites of a trace (or a profile) that was not symbolized by symbolizing
it itself (one warning line for the binaries that are missing or changed), shows its steps as a bar on a terminal
only, and leaves its table on stdout as it is."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from conftest import llamalloc, run
from llamalloc import paths, symbolize
from test_sim_support import alloc, free, mapping_record, stack_record, trace_with

PROGRAM = paths.build_dir() / "tests" / "model" / "predict-contexts"
LOAD = 0x5555_0000_0000  # where the trace says the program's executable segment was mapped
OTHER = 0x5666_0000_0000  # a changed copy of the program
GONE = 0x7F00_0000_1000  # a library that is not on this machine


def function_address(binary, name: str) -> int:
    out = subprocess.run(["nm", "-P", "--defined-only", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    return next(int(f[2], 16) for f in map(str.split, out.splitlines()) if f[:2] in ([name, "T"], [name, "t"]))


def real_trace(path, binary, changed=None):
    """Allocations from keep_record <- main of the program (never freed) and from a library that is gone and, with
    `changed`, from a copy of the program whose build id is not the one recorded; addresses as the profiler writes
    them (return address - 1, here a few bytes into each function), mapped at LOAD."""
    seg = next(s for s in symbolize.load_segments(str(binary)) if s.executable)

    def at(base, function):
        return function_address(binary, function) + 4 - seg.vaddr + base

    recorded = bytes.fromhex(symbolize.build_id(str(binary)))
    records = [mapping_record(LOAD, LOAD + seg.filesz, seg.file_offset, str(binary), recorded),
               mapping_record(GONE, GONE + 0x1000, 0, "/nonexistent/libgone.so.1"),
               stack_record(1, [at(LOAD, "keep_record"), at(LOAD, "main")]),
               stack_record(2, [GONE + 0x100, at(LOAD, "main")])]
    if changed is not None:
        records += [mapping_record(OTHER, OTHER + seg.filesz, seg.file_offset, str(changed), b"\xde\xad\xbe\xef"),
                    stack_record(3, [at(OTHER, "handle_request"), at(OTHER, "main")])]
    events = []
    for i in range(20):
        events.append(alloc(1.0 * i, 0x10_0000 + i * 0x1000, 256, stack=1))
        events.append(alloc(1.0 * i + 0.1, 0x20_0000 + i * 0x1000, 512, stack=2))
        if changed is not None:
            events.append(alloc(1.0 * i + 0.2, 0x30_0000 + i * 0x1000, 128, stack=3))
        events.append(free(1.0 * i + 0.5, 0x20_0000 + i * 0x1000))
    path.write_bytes(trace_with(records, sorted(events, key=lambda e: int.from_bytes(e[:8], "little"))))
    return path


needs_program = pytest.mark.skipif(not PROGRAM.exists() or shutil.which("eu-addr2line") is None,
                                   reason="needs the native build's test program and elfutils")


@needs_program
def test_top_symbolizes_a_trace_that_was_not_and_names_what_it_could_not(tmp_path, capsys):
    changed = tmp_path / "predict-contexts"
    shutil.copy(PROGRAM, changed)
    trace = real_trace(tmp_path / "app.trace", PROGRAM, changed)
    rc, out, err = run(["top", str(trace), "--at", "100"], capsys)
    assert rc == 0, err
    rows = out.splitlines()
    assert "symbolized here" in rows[0], out
    keep = [r for r in rows if "keep_record (predict_contexts.c:" in r]
    assert len(keep) == 1 and "<- main" in keep[0] and " 20 " in keep[0], out
    # The changed copy's frames stay addresses.
    assert any(r.split("  ")[-1].startswith(f"0x{OTHER >> 32:x}") for r in rows if "%" in r), out
    lines = [line for line in err.splitlines() if line]
    assert len(lines) == 1, err
    assert lines[0].startswith("llamalloc: warning: 2 binaries of the trace missing or changed here"), err
    assert "/nonexistent/libgone.so.1" in lines[0] and str(changed) in lines[0], err


@needs_program
def test_top_names_only_the_binary_that_is_missing(tmp_path, capsys):
    trace = real_trace(tmp_path / "app.trace", PROGRAM)
    rc, out, err = run(["top", str(trace)], capsys)
    assert rc == 0 and "keep_record (predict_contexts.c:" in out, out
    assert err == ("llamalloc: warning: 1 binary of the trace missing or changed here, its frames stay addresses: "
                   "/nonexistent/libgone.so.1\n"), err


def test_top_shows_its_steps_on_a_terminal_and_keeps_stdout_as_it_is(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "a.trace"
    trace.write_bytes(trace_with([stack_record(1, [0x401000])],
                                 [alloc(1.0, 0x10_0000, 4096), alloc(2.0, 0x20_0000, 64), free(3.0, 0x20_0000)]))
    rc, plain, err = run(["top", str(trace)], capsys)
    assert rc == 0 and err == "", err  # not a terminal: no bar
    assert plain.startswith("0.0 MiB live in 1 objects from 1 call sites") and "0x401000" in plain, plain
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    rc, out, err = run(["top", str(trace)], capsys)
    assert rc == 0 and out == plain
    assert "top: reading" in err and "top: counting" in err, err


@needs_program
def test_top_symbolizes_a_profile_that_was_not(tmp_path):
    prof = tmp_path / "bare.prof"
    llamalloc("record", "--no-symbolize", "--sample-bytes", "1", "-o", prof, "--", PROGRAM, "footprint", 10)
    r = llamalloc("top", prof)
    assert "; symbolized here)" in r.stdout.splitlines()[0], r.stdout
    # footprint keeps a 256-byte record per 200 buffers, never freed, from keep_record.
    rows = [line for line in r.stdout.splitlines() if "keep_record (predict_contexts.c:" in line]
    assert len(rows) == 1 and " 200 " in rows[0] and " never " in rows[0], r.stdout
    assert r.stderr == "", r.stderr
