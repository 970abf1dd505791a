"""`llamalloc trace`: run a program under the full tracer (every malloc and free), or convert a trace."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import click

from .. import trace as _trace
from ..errors import FormatError, UserError
from .record import run_preloaded


def _finish(raw: Path, out: Path) -> None:
    """Moves a finished trace into place: a rename (the tracer writes it in a folder beside the output), or a
    copy to a temporary name in the destination folder and a rename."""
    try:
        os.replace(raw, out)
        return
    except OSError:
        pass
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(raw, tmp)
        os.replace(tmp, out)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror}") from None
    finally:
        if tmp.exists():
            tmp.unlink()


@click.command("trace", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Trace to write (default llamalloc.trace), or the Parquet file with --to-parquet.")
@click.option("--to-parquet", "to_parquet", default=None, type=click.Path(dir_okay=False), metavar="TRACE",
              help="Convert TRACE to Parquet (one row per event) instead of running a program.")
@click.option("--preload", multiple=True, metavar="LIB",
              help="A library to preload after the tracer, e.g. another allocator (repeatable).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(output, to_parquet, preload, cmd):
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
    out = Path(output or "llamalloc.trace")
    if out.parent and not out.parent.exists():
        raise UserError(f"{out.parent}: no such directory")
    try:  # beside the output, so that the finished trace is renamed into place, not copied
        tmpdir = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError:
        tmpdir = Path(tempfile.mkdtemp(prefix="llamalloc-trace-"))
    try:
        env = {"LLAMALLOC_PROF_MODE": "trace", "LLAMALLOC_PROF_OUTPUT": str(tmpdir / "trace.%p")}
        pid, status = run_preloaded(cmd, env, preload)
        main_raw = None
        for raw in sorted(tmpdir.glob("trace.*")):
            if raw.name == f"trace.{pid}":
                main_raw = raw
            else:
                _finish(raw, out.with_name(f"{out.name}.{raw.name.split('.', 1)[1]}"))
        if main_raw is None:
            msg = f"{cmd[0]} ended without writing a trace"
            if status != 0:
                click.echo(f"llamalloc: warning: {msg}", err=True)
                sys.exit(status)
            raise UserError(msg)
        try:
            _trace.read_raw(main_raw, _trace.TRACE_MAGIC, _trace.TRACE_VERSION, "trace")
        except FormatError as e:
            # Killed before its exit handlers ran: there is no complete trace to give.
            click.echo(f"llamalloc: warning: {cmd[0]} left an incomplete trace ({e.problem}); "
                       f"nothing written to {out}", err=True)
            sys.exit(status if status != 0 else 2)
        _finish(main_raw, out)
        if status != 0:
            click.echo(f"llamalloc: {cmd[0]} exited with status {status}; trace written to {out}", err=True)
        sys.exit(status)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
