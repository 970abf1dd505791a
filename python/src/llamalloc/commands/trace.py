"""`llamalloc trace`: run a program under the full tracer (every malloc and free), or convert a trace."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import click

from .. import trace as _trace
from ..errors import FormatError, UserError
from ..launch import check_command
from .record import run_preloaded
from .. import files

#: With --duration: seconds between SIGTERM and SIGKILL for a program that does not stop.
KILL_AFTER_S = 10.0


def _finish(raw: Path, out: Path, compress: bool = True) -> None:
    """Moves a finished trace into place: compressed (zstd) to a temporary name in the destination folder and
    renamed; uncompressed, a rename (the tracer writes it in a folder beside the output) or a copy and a rename."""
    if not compress:
        try:
            os.replace(raw, out)
            return
        except OSError:
            pass
    with files.replacing(out) as tmp:
        if compress:
            _trace.compress_file(raw, tmp)
        else:
            shutil.copyfile(raw, tmp)


@click.command("trace", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Trace to write (default llamalloc.trace), or the Parquet file with --to-parquet.")
@click.option("--to-parquet", "to_parquet", default=None, type=click.Path(dir_okay=False), metavar="TRACE",
              help="Convert TRACE to Parquet (one row per event) instead of running a program.")
@click.option("--preload", multiple=True, metavar="LIB",
              help="A library to preload after the tracer, e.g. another allocator (repeatable).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Stop the program after this many seconds (SIGTERM; the tracer closes its trace first) and keep "
                   "the trace of that time.")
@click.option("--compress/--no-compress", default=True, show_default=True,
              help="Write the trace compressed with zstd (simulate, --to-parquet and the Python reader take both).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(output, to_parquet, preload, duration, compress, cmd):
    """Run CMD recording every allocation and free, or convert a trace with --to-parquet.

    \b
      llamalloc trace -o server.trace -- ./server --flags
      llamalloc trace --to-parquet server.trace -o server.parquet
    The program's exit status is passed through; its children that allocate get traces OUTPUT.<pid>.
    """
    if to_parquet is not None:
        if cmd:
            raise UserError("--to-parquet converts a trace: give no command with it")
        out = Path(output) if output else Path(to_parquet).with_suffix(".parquet")
        n = _trace.write_parquet(to_parquet, out)
        click.echo(f"{n} events written to {out}", err=True)
        return
    if not cmd:
        raise UserError("no command to trace (usage: llamalloc trace -o FILE -- CMD ...)")
    cmd = check_command(cmd)
    out = Path(output or "llamalloc.trace")
    if out.parent and not out.parent.exists():
        raise UserError(f"{out.parent}: no such directory")
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

        pid, status = run_preloaded(cmd, env, preload, on_poll=watch)
        stopped = stop["sent"] is not None and status == 128 + signal.SIGTERM
        if stopped:
            click.echo(f"llamalloc: stopped {cmd[0]} after {duration:g} s (--duration)", err=True)
            status = 0
        main_raw = None
        for raw in sorted(tmpdir.glob("trace.*")):
            if raw.name == f"trace.{pid}":
                main_raw = raw
            else:
                _finish(raw, out.with_name(f"{out.name}.{raw.name.split('.', 1)[1]}"), compress)
        if main_raw is None:
            msg = f"{cmd[0]} ended without writing a trace"
            if status != 0:
                click.echo(f"llamalloc: warning: {msg}", err=True)
                sys.exit(status)
            raise UserError(msg)
        try:
            events = _trace.read_raw(main_raw, _trace.TRACE_MAGIC, _trace.TRACE_VERSION, "trace").end[2]
        except FormatError as e:
            # Killed before its exit handlers ran: there is no complete trace to give.
            click.echo(f"llamalloc: warning: {cmd[0]} left an incomplete trace ({e.problem}); "
                       f"nothing written to {out}", err=True)
            sys.exit(status if status != 0 else 2)
        raw_bytes = main_raw.stat().st_size
        _finish(main_raw, out, compress)
        size = f"{out.stat().st_size / 1e6:.1f} MB" + (f", zstd from {raw_bytes / 1e6:.1f} MB" if compress else "")
        if status != 0:
            click.echo(f"llamalloc: {cmd[0]} exited with status {status}; trace written to {out}", err=True)
        click.echo(f"llamalloc: trace of {events} events written to {out} ({size})", err=True)
        click.echo(f"llamalloc: next: llamalloc simulate {out} -p pages-2m -p mesh -p llama-oracle", err=True)
        sys.exit(status)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
