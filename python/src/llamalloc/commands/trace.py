"""`llamalloc trace`: run a program under the full tracer (every malloc and free), or convert a trace."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import trace as _trace
from ..errors import UserError
from ..run import check_command, end_without_output


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
        # Checked before the conversion, which reads the whole trace first.
        if str(out.parent) and not out.parent.is_dir():
            raise UserError(f"{out.parent}: no such directory (for -o {output})")
        n = _trace.write_parquet(to_parquet, out)
        click.echo(f"{n} events written to {out}", err=True)
        return
    if not cmd:
        raise UserError("no command to trace (usage: llamalloc trace -o FILE -- CMD ...)")
    cmd = check_command(cmd)
    out = Path(output or "llamalloc.trace")
    if out.parent and not out.parent.exists():
        raise UserError(f"{out.parent}: no such directory")
    t = _trace.record_trace(cmd, out, preload, duration, compress)
    status = t.status
    if t.stopped:
        click.echo(f"llamalloc: stopped {cmd[0]} after {duration:g} s (--duration)", err=True)
    if not t.found:
        end_without_output(f"{cmd[0]} ended without writing a trace", status)
    if t.problem is not None:
        click.echo(f"llamalloc: warning: {cmd[0]} left an incomplete trace ({t.problem}); "
                   f"nothing written to {out}", err=True)
        sys.exit(status if status != 0 else 2)
    size = f"{out.stat().st_size / 1e6:.1f} MB" + (f", zstd from {t.raw_bytes / 1e6:.1f} MB" if compress else "")
    if status != 0:
        click.echo(f"llamalloc: {cmd[0]} exited with status {status}; trace written to {out}", err=True)
    click.echo(f"llamalloc: trace of {t.events} events written to {out} ({size})", err=True)
    # What the measurement is: a user comparing the trace's lifetimes with the run's should know.
    click.echo("llamalloc: the tracer slows allocating code several times (8-14x on the bundled workloads; sleeps "
               "and I/O are not slowed); the trace's times are the program's own, with the tracer's work left "
               "out, so that lifetimes are those of an untraced run (docs/profiler.md, \"Program time\")", err=True)
    click.echo(f"llamalloc: next: llamalloc simulate {out} -p pages-2m -p mesh -p llama-oracle", err=True)
    sys.exit(status)
