"""`llamalloc top PROFILE|TRACE`: what stays live, by call site."""
from __future__ import annotations

import click


@click.command("top")
@click.argument("file", type=click.Path())
@click.option("-n", "--limit", type=click.IntRange(1, 100000), default=15, show_default=True,
              help="Call sites to list (the most live bytes first).")
@click.option("--at", "at_seconds", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="With a trace: what was live at this time since the program started, instead of at the end of "
                   "the quiet phase after the peak.")
def command(file, limit, at_seconds):
    """List what is live in FILE by call site: bytes, share, objects, the site's lifetime class and, from a trace,
    the 2 MiB pages those objects keep. A profile (`llamalloc record`) gives what was live when it was taken (at
    exit, or at the time of a kept profile: --interval, --steady-state); a trace (`llamalloc trace`) gives what
    was live at the end of its quiet phase after the peak, before the exit teardown, or at --at SECONDS.

    \b
      llamalloc top server.prof
      llamalloc top server.trace --at 30 -n 30
    """
    from .. import top as _top

    def warn(msg):
        click.echo(f"llamalloc: warning: {msg}", err=True)

    sites, note, is_trace = _top.load(file, at_seconds, warn)
    click.echo(_top.format_top(sites, note, is_trace, limit))
