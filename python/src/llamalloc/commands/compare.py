"""`llamalloc compare -- PROG ARGS`: your own command under every allocator, side by side."""
from __future__ import annotations

import shlex
import shutil
import time
from pathlib import Path

import click

from .. import compare as _compare
from .. import files
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
@click.option("--repeat", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Runs per allocator (in turn, so that a slow moment of the machine falls on all): medians, and "
                   "whether the difference is beyond the runs' spread.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="llamalloc-compare",
              show_default=True, help="Folder for compare.json, compare.png and each run's output (NAME.log).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(allocators, model, binaries, client, startup, interval, repeat, out_dir, cmd):
    """Run CMD under glibc, jemalloc, tcmalloc, mimalloc and llamalloc (and llamalloc+model with --model), sample
    its memory, and compare peak, steady-state (after the peak) and final RSS and time.

    \b
      llamalloc compare -- ./prog --flags
      llamalloc compare --model server.model --client './load.sh' -- ./server --port 7000
    """
    cmd = check_command(cmd)
    if binaries and not model:
        raise UserError("--binary names the binaries a model predicts for: give --model with it")
    # The folder is checked here and made by compare() once the allocators, the model and the program are known
    # to be good: bad input leaves nothing behind.
    out = files.check_output_folder(out_dir)
    made = files.missing_top(out)  # what compare creates, and removes on failure
    from ..progress import Bar

    bar = Bar(None, "compare", "run", prefix="compare: ")
    started = time.monotonic()
    names = {}

    def on_start(i: int, total: int, name: str, rep: int) -> None:
        bar.set(i, total)
        elapsed = time.monotonic() - started
        left = f", about {elapsed / i * (total - i):.0f} s left" if i else ""
        names[i] = f"[{i + 1}/{total}] {name}" + (f" run {rep + 1}/{repeat}" if repeat > 1 else "")
        bar.line(f"{names[i]} ... ({elapsed:.0f} s elapsed{left})")

    def on_done(i: int, total: int, run) -> None:
        bar.set(i + 1, total)
        f = run.figures()
        what = (run.problem if run.problem else
                f"{run.seconds:.2f} s, peak {_compare._mib(f['peak_rss_bytes'])} MiB, steady "
                f"{_compare._mib(f['steady_rss_bytes'])} MiB")
        bar.line(f"{names[i]}: {what}")

    def clean_up() -> None:
        """What this compare wrote goes (the folder too when it made it): nothing half-done is left behind."""
        for r in runs:
            _compare.log_path(out, r.allocator, r.repeat).unlink(missing_ok=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)

    runs = []
    try:
        runs = _compare.compare(list(cmd), allocators, out, model=model, binaries=list(binaries), client=client,
                                interval=interval, startup=startup, repeat=repeat, on_start=on_start,
                                on_done=on_done)
    except _compare.Interrupted as e:
        bar.close()
        runs = e.runs
        if runs:
            click.echo(_compare.format_table(runs))
        clean_up()
        raise UserError(f"interrupted after {len(runs)} runs (the rows above); {out} left as it was",
                        exit_code=130) from None
    except UserError:
        bar.close()
        clean_up()
        raise
    finally:
        bar.close()
    if not any(s.runs for s in _compare.summarize(runs)):
        click.echo(_compare.format_table(runs))
        click.echo(_compare.verdict(runs, list(cmd)))
        failed = next((r for r in runs if r.problem), None)
        tail = ""
        if failed is not None:
            log = _compare.log_path(out, failed.allocator, failed.repeat)
            try:
                last = log.read_text(errors="replace").strip().splitlines()[-3:]
                tail = f"; the last lines of its output under {failed.allocator}: " + " | ".join(last) if last else ""
            except OSError:
                pass
        clean_up()
        raise UserError(f"no allocator ran {cmd[0]} to the end{tail}", exit_code=1)
    # The files first, then the table: a full standard output (llamalloc.cli) loses no result. Both files are
    # written, or neither (a full disk): what a former compare left in the folder stays as it was.
    json_path, png = out / "compare.json", out / "compare.png"
    try:
        with files.replacing(json_path) as json_tmp, files.replacing(png) as png_tmp:
            json_tmp.write_text(_compare.json_text(runs, list(cmd), client))
            _compare.draw(runs, png_tmp, shlex.join(cmd)[:80])
    except UserError as e:
        click.echo(_compare.format_table(runs))
        clean_up()
        raise UserError(f"{e}; the runs' results are not kept ({out} left as it was)", exit_code=1) from None
    click.echo(_compare.format_table(runs))
    click.echo(_compare.verdict(runs, list(cmd)))
    click.echo(f"wrote {json_path} and {png}", err=True)
