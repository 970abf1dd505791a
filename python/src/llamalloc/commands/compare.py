"""`llamalloc compare -- PROG ARGS`: your own command under every allocator, side by side."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from .. import compare as _compare
from ..errors import UserError
from ..run import check_command


@click.command("compare", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--allocators", default=_compare.DEFAULT_ALLOCATORS, show_default=True,
              help="Allocators to run, comma-separated (glibc, jemalloc, tcmalloc, mimalloc, llamalloc, "
                   "llamalloc+model, or NAME=/path/lib.so).")
@click.option("--model", type=click.Path(dir_okay=False), default=None,
              help="Also run llamalloc with this lifetime model (llamalloc+model).")
@click.option("--binary", "binaries", multiple=True, metavar="PATH",
              help="With --model and a wrapper script as PROG: the binary that allocates (repeatable).")
@click.option("--client", default=None, metavar="CMD",
              help="A shell command that drives PROG (a server): started --startup seconds after PROG, which is "
                   "stopped (SIGTERM) when CMD ends; the time is CMD's.")
@click.option("--startup", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="With --client: seconds to give the server before the client starts.")
@click.option("--interval", type=click.FloatRange(min=0.005), default=0.05, show_default=True,
              help="Seconds between memory samples.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="llamalloc-compare",
              show_default=True, help="Folder for compare.json, compare.png and each run's output (NAME.log).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(allocators, model, binaries, client, startup, interval, out_dir, cmd):
    """Run CMD under glibc, jemalloc, tcmalloc, mimalloc and llamalloc (and llamalloc+model with --model), sample
    its memory, and compare peak, steady-state (after the peak) and final RSS and time.

    \b
      llamalloc compare -- ./prog --flags
      llamalloc compare --model server.model --client './load.sh' -- ./server --port 7000
    """
    cmd = check_command(cmd)
    if binaries and not model:
        raise UserError("--binary names the binaries a model predicts for: give --model with it")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{out}: cannot create the folder: {e.strerror}") from None
    from tqdm import tqdm

    def progress(items):
        bar = tqdm(items, desc="compare", unit="allocator", file=sys.stderr, leave=False,
                   disable=not sys.stderr.isatty())
        for item in bar:
            bar.set_postfix_str(item[0])
            yield item

    runs = _compare.compare(list(cmd), allocators, out, model=model, binaries=list(binaries), client=client,
                            interval=interval, startup=startup, progress=progress)
    click.echo(_compare.format_table(runs))
    click.echo(_compare.verdict(runs))
    _compare.write_json(runs, list(cmd), client, out / "compare.json")
    png = _compare.plot(runs, out / "compare.png", shlex.join(cmd)[:80])
    click.echo(f"wrote {out / 'compare.json'} and {png}", err=True)
