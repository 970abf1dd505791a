"""Traces (docs/formats/trace.md): recording one (`record_trace`, the work of `llamalloc trace`). The format and
its reader are llamalloc.traceformat; this module re-exports them, so that `llamalloc.trace` is the whole trace
API for its users:

    t = llamalloc.trace.load("server.trace")
    t.events            # numpy structured array, in time order: time_ns, address, size_bytes, stack_id, ...
    t.stacks[stack_id]  # tuple of addresses, innermost first
    t.to_table()        # pyarrow.Table, one row per event (what --to-parquet writes)

Inside the package, a module that only reads these files imports llamalloc.traceformat, not this module: this
one starts programs (llamalloc.run), and a reader below it must not depend on it (docs/architecture.md, "Python
package layers").
"""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import FormatError
from .run import run_under_profiler
from . import files
from .traceformat import (  # noqa: F401  (re-exported: the public trace API)
    END, EVENT_DTYPE, FLAG_PROGRAM_TIME, FROM_REALLOC, HEADER, KIND_ALLOC, KIND_FREE, MAPPING, NO_STACK,
    RAW_PROFILE_MAGIC, RAW_PROFILE_VERSION, REC_END, REC_EVENTS, REC_MAPPING, REC_PROGRAM, REC_SITE, REC_STACK,
    REC_SYMBOLS, RECORD, TRACE_MAGIC, TRACE_VERSION, ZSTD_LEVEL, ZSTD_MAGIC, Header, Mapping, RawFile, Trace,
    compress_bytes, compress_file, file_bytes, is_compressed, load, read_raw, write_parquet,
)


# ---- recording ---------------------------------------------------------------------------------------------

#: With a duration: seconds between SIGTERM and SIGKILL for a program that does not stop.
KILL_AFTER_S = 10.0


@dataclass
class Tracing:
    """What `record_trace` did. `events` is None when the program wrote no trace (`found` False) or left an
    incomplete one (`problem` says how; nothing is written then)."""
    status: int
    stopped: bool = False       # stopped at the end of the duration (status is then 0)
    found: bool = True
    events: int | None = None
    problem: str | None = None
    raw_bytes: int = 0          # the program's trace before compression


def finish_trace(raw: Path, out: Path, compress: bool = True) -> None:
    """Moves a finished trace into place: compressed (zstd) through a temporary file in the destination folder;
    uncompressed, renamed (the tracer writes it in a folder beside the output) or copied."""
    if compress:
        with files.replacing(out) as tmp:
            compress_file(raw, tmp)
    else:
        files.move_file(raw, out)


def record_trace(cmd: list[str], out: Path, preload: tuple[str, ...] = (), duration: float | None = None,
                 compress: bool = True) -> Tracing:
    """Runs cmd under the tracer (libllamalloc_prof.so in its trace mode) and writes its trace to out; other
    processes that allocate get OUTPUT.<pid>. With `duration`, stops the program (SIGTERM, then SIGKILL after
    KILL_AFTER_S) that many seconds after it started."""
    try:  # beside the output, so that the finished trace is renamed into place, not copied
        tmpdir = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError:
        tmpdir = Path(tempfile.mkdtemp(prefix="llamalloc-trace-"))
    try:
        env = {"LLAMALLOC_PROF_MODE": "trace", "LLAMALLOC_PROF_OUTPUT": str(tmpdir / "trace.%p")}
        started = time.monotonic()
        stop = {"sent": None}

        def watch(pid: int) -> None:
            if duration is None:
                return
            elapsed = time.monotonic() - started
            try:
                if stop["sent"] is None and elapsed >= duration:
                    os.kill(pid, signal.SIGTERM)
                    stop["sent"] = elapsed
                elif stop["sent"] is not None and elapsed >= stop["sent"] + KILL_AFTER_S:
                    os.kill(pid, signal.SIGKILL)  # it ignores SIGTERM: its trace stays incomplete
            except ProcessLookupError:
                pass

        pid, status = run_under_profiler(cmd, env, preload, on_poll=watch)
        result = Tracing(status)
        if stop["sent"] is not None and status == 128 + signal.SIGTERM:
            result.stopped, result.status = True, 0
        main_raw = None
        for raw in sorted(tmpdir.glob("trace.*")):
            if raw.name == f"trace.{pid}":
                main_raw = raw
            else:
                finish_trace(raw, out.with_name(f"{out.name}.{raw.name.split('.', 1)[1]}"), compress)
        if main_raw is None:
            result.found = False
            return result
        try:
            events = read_raw(main_raw, TRACE_MAGIC, TRACE_VERSION, "trace").end[2]
        except FormatError as e:
            # Killed before its exit handlers ran: there is no complete trace to give.
            result.problem = e.problem
            return result
        result.raw_bytes = main_raw.stat().st_size
        finish_trace(main_raw, out, compress)
        result.events = events
        return result
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
