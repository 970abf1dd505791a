"""`llamalloc run`: run a program with llamalloc as its allocator."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import UserError
from ..launch import check_command, preload_env, run_program
from ..paths import native_library


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--stats", "stats", type=click.Path(dir_okay=False),
              help="Write the allocator's statistics (JSON) here at exit (LLAMALLOC_STATS).")
@click.option("--option", "options", multiple=True, metavar="NAME=VALUE",
              help="Set an allocator option, e.g. --option CLASSES=4 (LLAMALLOC_<NAME>; see docs/options.md).")
@click.option("--model", "model", type=click.Path(dir_okay=False),
              help="Lifetime model (from `llamalloc train`): predict each allocation's lifetime class with it. The "
                   "token tables of CMD and its libraries are prepared first (cached; see docs/prediction.md).")
@click.option("--binary", "binaries", multiple=True, metavar="PATH",
              help="With --model: a binary that CMD runs (when CMD is a wrapper script), whose token tables the "
                   "model needs (repeatable).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(stats, options, model, binaries, cmd):
    """Run CMD with libllamalloc.so preloaded. The program's exit status is passed through."""
    cmd = check_command(cmd)
    if binaries and not model:
        raise UserError("--binary names the binaries a model predicts for: give --model with it")
    extra: dict[str, str] = {}
    for opt in options:
        name, sep, value = opt.partition("=")
        if not sep or not name:
            raise UserError(f"--option {opt!r}: expected NAME=VALUE")
        name = name.upper()
        extra[name if name.startswith("LLAMALLOC_") else f"LLAMALLOC_{name}"] = value
    if stats:
        out = Path(stats)
        if not out.parent.exists():
            raise UserError(f"{out.parent}: no such directory (for --stats {stats})")
        extra["LLAMALLOC_STATS"] = str(out.resolve())
    if model:
        from ..prepare import prepare_for_run

        extra.update(prepare_for_run(model, cmd[0], binaries=list(binaries)))
    env = preload_env([native_library("libllamalloc.so")], extra)
    _, status = run_program(cmd, env)
    sys.exit(status)
