"""`llamalloc record`: run a program under the sampling lifetime profiler and write its profile."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import click

from ..errors import UserError
from ..record import DEFAULT_SAMPLE_BYTES, record_profile
from ..run import check_command, end_without_output


def parse_steady_state(spec: str | None) -> tuple[float, float] | None:
    """--steady-state END or START:END (seconds since the program started) -> (START, END); START defaults
    to END."""
    if spec is None:
        return None
    parts = spec.split(":")
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        values = [float(x) for x in parts]
    except ValueError:
        raise UserError(f"--steady-state: {spec!r} is not END or START:END (seconds since the program "
                        f"started, e.g. 30 or 10:30)") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise UserError(f"--steady-state: {spec!r}: times must be finite and not negative")
    start, end = (values[0], values[0]) if len(values) == 1 else values
    if end <= 0:
        raise UserError(f"--steady-state: {spec!r}: END must be after the start (greater than 0)")
    if end < start:
        raise UserError(f"--steady-state: {spec!r}: END ({end:g} s) is before START ({start:g} s)")
    return start, end


def _symbolize_all(profiles) -> bool:
    """Symbolizes each profile in place; a failure is a warning (the profile stays as written, to be symbolized
    later), not an error: the program's run is not lost. True when all were symbolized."""
    from .. import symbolize as _symbolize

    def warn(msg):
        click.echo(f"llamalloc: warning: {msg}", err=True)

    total, ok = 0, True
    for path in profiles:
        try:
            total += _symbolize.symbolize(path, None, warn)
        except UserError as e:
            warn(f"{path} is not symbolized ({e}); run `llamalloc symbolize {path}`")
            ok = False
    if ok:
        click.echo(f"llamalloc: {total} addresses symbolized", err=True)
    return ok


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default="llamalloc.prof", show_default=True, type=click.Path(dir_okay=False),
              help="Profile to write (pprof profile.proto, gzipped).")
@click.option("--sample-bytes", default=DEFAULT_SAMPLE_BYTES, show_default=True, type=click.IntRange(min=1),
              help="Mean bytes allocated between samples; 1 samples every allocation.")
@click.option("--interval", default=0.0, type=click.FloatRange(min=0),
              help="Also take a profile every this many seconds, kept as OUTPUT.at-<T>s (0: none).")
@click.option("--steady-state", "steady_state", default=None, metavar="[START:]END",
              help="Seconds since the program started: sample allocations until START (default END), and make "
                   "the profile taken at END OUTPUT (objects live then count as long-lived); the exit profile is "
                   "kept as OUTPUT.at-exit. The program keeps running.")
@click.option("--preload", multiple=True, metavar="LIB",
              help="A library to preload after the profiler, e.g. another allocator (repeatable).")
@click.option("--symbolize/--no-symbolize", "symbolize", default=True, show_default=True,
              help="Name the profiles' addresses (functions, files, lines; llamalloc symbolize) once the program "
                   "has ended, here, where its binaries are; --no-symbolize leaves that to a later "
                   "`llamalloc symbolize`.")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(output, sample_bytes, interval, steady_state, preload, symbolize, cmd):
    """Run CMD under the sampling lifetime profiler and write its profile.

    The program's exit status is passed through. Its children that also allocate (fork, exec) get profiles of
    their own, written as OUTPUT.<pid>. Send SIGUSR2 to the program for a profile while it runs: each one is
    kept as OUTPUT.at-<T>s (T: seconds since it started).
    """
    window = parse_steady_state(steady_state)
    cmd = check_command(cmd)
    out = Path(output)
    if out.parent and not out.parent.exists():
        raise UserError(f"{out.parent}: no such directory")
    rec = record_profile(cmd, out, sample_bytes, interval, window, preload)
    status = rec.status
    if not rec.found:
        end_without_output(f"{cmd[0]} ended without writing a profile (killed, or it never returned from exec/_exit)",
                           status)
    if status != 0:
        click.echo(f"llamalloc: {cmd[0]} exited with status {status}; profile written to {out}{rec.note}", err=True)
    else:
        click.echo(f"llamalloc: profile written to {out}{rec.note}", err=True)
    for m in rec.messages:
        click.echo(f"llamalloc: {m}", err=True)
    if sample_bytes <= 4096:
        # A dense profile is the tracer's cost again: say what the lifetimes are measured on.
        click.echo("llamalloc: sampling this densely slows allocating code several times (sleeps and I/O are "
                   "not slowed); lifetimes are on the program's own clock, the profiler's work left out "
                   "(docs/profiler.md, \"Program time\")", err=True)
    dumps, children = rec.dumps, rec.children
    if dumps:
        click.echo(f"llamalloc: {len(dumps)} profiles taken while it ran (SIGUSR2, --interval): "
                   f"{', '.join(str(d) for d in dumps[:6])}{' ...' if len(dumps) > 6 else ''}", err=True)
    if children:
        click.echo(f"llamalloc: profiles of {len(children)} other processes: "
                   f"{', '.join(str(c) for c in children[:4])}{' ...' if len(children) > 4 else ''}", err=True)
    model = out.with_suffix(".model") if out.suffix else out.with_name(out.name + ".model")
    if symbolize and _symbolize_all([out, *dumps, *children]):
        click.echo(f"llamalloc: next: llamalloc train {out} -o {model}", err=True)
    else:
        click.echo(f"llamalloc: next: llamalloc symbolize {out} && llamalloc train {out} -o {model}", err=True)
    # The program's status is this command's (SystemExit: cli.main keeps no status of a command's own).
    sys.exit(status)
