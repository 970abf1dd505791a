"""`llamalloc symbolize`: names for a profile's or a trace's addresses, stored in the file."""
from __future__ import annotations

import click

from .. import symbolize as _symbolize


@click.command("symbolize")
@click.argument("file", type=click.Path(dir_okay=True))
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Write the symbolized file here instead of replacing FILE.")
def command(file, output):
    """Fill in function names (demangled), files and lines of FILE's addresses (a profile or a trace), from the
    binaries' symbol tables and debug info, so that the file can be used on another machine."""
    def warn(msg):
        click.echo(f"llamalloc: warning: {msg}", err=True)

    n = _symbolize.symbolize(file, output, warn)
    click.echo(f"{n} addresses symbolized; written to {output or file}", err=True)
