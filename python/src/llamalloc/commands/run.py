"""`llamalloc run`: run a program with llamalloc as its allocator."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from .. import files
from ..errors import UserError
from ..run import llamalloc_env, before_exit_path, check_command, run_program


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--stats", "stats", type=click.Path(dir_okay=False),
              help="Write the allocator's statistics (JSON) here at exit (LLAMALLOC_STATS), and a snapshot from "
                   "before the program's teardown (when main returns or exit() is called, before static destructors "
                   "and atexit handlers) beside it: stats.json -> stats.before-exit.json.")
@click.option("--option", "options", multiple=True, metavar="NAME=VALUE",
              help="Set an allocator option, e.g. --option CLASSES=4 (LLAMALLOC_<NAME>; see docs/options.md). An "
                   "unknown name or a bad value is refused before CMD starts.")
@click.option("--model", "model", type=click.Path(dir_okay=False),
              help="Lifetime model (from `llamalloc train`): predict each allocation's lifetime class with it. The "
                   "token tables of CMD and its libraries are prepared first (cached; see docs/prediction.md).")
@click.option("--model-dir", "model_dir", type=click.Path(),
              help="A directory of models (*.model): take the one trained on this build of CMD's binary, else the "
                   "newest one of the same program (with a warning), else run without a model (default: "
                   "LLAMALLOC_MODEL_DIR, when --model is not given either; docs/prediction.md).")
@click.option("--learn/--no-learn", "learn", default=None,
              help="--learn: learn each calling context's lifetime class while CMD runs, also with a model, which "
                   "is then its head start (LLAMALLOC_LEARN=1); --no-learn: never (LLAMALLOC_LEARN=0). Neither: "
                   "the library's default, learning without a model only, once the heap reaches 64 MiB "
                   "(docs/prediction.md, \"Online learning\").")
@click.option("--binary", "binaries", multiple=True, metavar="PATH",
              help="With --model or --model-dir: a binary that CMD runs (when CMD is a wrapper script), whose token tables the "
                   "model needs (repeatable).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(stats, options, model, model_dir, learn, binaries, cmd):
    """Run CMD with libllamalloc.so preloaded. The program's exit status is passed through."""
    cmd = check_command(cmd)
    if model and model_dir:
        raise UserError("--model and --model-dir both choose the model: give one of them")
    what = "--model-dir"
    if not model and not model_dir and os.environ.get("LLAMALLOC_MODEL_DIR"):
        model_dir, what = os.environ["LLAMALLOC_MODEL_DIR"], "LLAMALLOC_MODEL_DIR"
    if binaries and not model and not model_dir:
        raise UserError("--binary names the binaries a model predicts for: give --model or --model-dir with it")
    for opt in options:
        if opt.partition("=")[0].upper() in ("MODEL_DIR", "LLAMALLOC_MODEL_DIR"):
            raise UserError(f"--option {opt}: give it as --model-dir (run chooses the model and prepares its token "
                            f"tables)")
    env = llamalloc_env(options, stats)
    # Chosen here: the allocator would choose again from the directory's index (and warn when it found nothing).
    env.pop("LLAMALLOC_MODEL_DIR", None)
    if learn is not None:
        env["LLAMALLOC_LEARN"] = "1" if learn else "0"
    note_builds = True
    if model_dir:
        model, note_builds = _model_from_directory(model_dir, what, cmd[0], binaries)
    if model:
        from ..prepare import prepare_for_run

        env.update(prepare_for_run(model, cmd[0], binaries=list(binaries), note_builds=note_builds))
    started = time.time_ns()
    _, status = run_program(cmd, env)
    if stats:
        _say_where_the_statistics_are(Path(stats), started)
    sys.exit(status)


def _model_from_directory(directory, what: str, program: str, binaries) -> tuple[str | None, bool]:
    """The model of `directory` for the program (its executable, and the binaries named by --binary), and whether
    prepare_for_run should still note another build (not when the choice has said so)."""
    from ..model_select import check_directory, describe_choice, select_model
    from ..prepare import resolve_program

    check_directory(directory, what)  # (before the program is looked up: the directory is the user's mistake)
    executables = [resolve_program(program)] + [resolve_program(b, as_path=True) for b in binaries]
    chosen, message = select_model(directory, executables, what=what)
    if message:
        click.echo(f"llamalloc: warning: {message}", err=True)
    elif chosen is not None:
        # A model of this very build: no warning, but the choice is the directory's, so it is said which.
        click.echo(f"llamalloc: model for {describe_choice(chosen, executables)}", err=True)
    return (str(chosen) if chosen else None), message is None


def _say_where_the_statistics_are(stats: Path, started_ns: int) -> None:
    before = before_exit_path(stats)
    if "%p" in stats.name:
        click.echo(f"llamalloc: statistics at exit in {stats}, before the program's teardown in {before} "
                   "(%p: each process's id)", err=True)
        return

    def fresh(p: Path) -> bool:
        try:
            return p.stat().st_mtime_ns >= started_ns - 1_000_000_000  # (coarse file system clocks)
        except OSError:
            return False

    parts = []
    if fresh(before):
        parts.append(f"before the program's teardown in {before}")
    if fresh(stats):
        parts.append(f"at exit in {stats}")
    if parts:
        click.echo("llamalloc: statistics " + ", ".join(parts), err=True)
        return
    # The folder was checked before the program started: one that takes no file now (a disk that filled during
    # the run) is why, and the program is not to blame.
    why = files.cannot_write_in(stats.parent)
    if why is not None:
        click.echo(f"llamalloc: warning: no statistics were written to {stats}: cannot write in folder "
                   f"{stats.parent}: {why}", err=True)
    else:
        click.echo(f"llamalloc: warning: no statistics were written to {stats} (the program was killed, or does not "
                   "run on libllamalloc.so: a statically linked program, or one that exec'd another)", err=True)
