"""`llamalloc report`: plots and tables from simulations, bench results and profiles."""
from __future__ import annotations

from pathlib import Path

import click

from .. import report as report_mod


@click.command("report")
@click.option("--sim", "sims", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="a result of `llamalloc simulate` (JSON; its timeline CSV beside it); repeatable")
@click.option("--bench", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="a result of `llamalloc bench` (JSON)")
@click.option("--profile", "profiles", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="a profile from `llamalloc record`, for the lifetime distribution; repeatable")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("llamalloc-report"), show_default=True, help="folder for the PNGs and index.html")
@click.option("--quiet", "-q", is_flag=True, help="no progress lines")
def command(sims: tuple[Path, ...], bench: Path | None, profiles: tuple[Path, ...], out_dir: Path,
            quiet: bool) -> None:
    """Draw the LLAMA paper's figures for your program: footprint per policy against live, lifetime distribution,
    meshing comparison, heap maps and bench results, as PNGs and one self-contained HTML page."""
    progress = None if quiet else (lambda line: click.echo(f"report: {line}", err=True))
    r = report_mod.make_report(sims, bench, profiles, out_dir, progress=progress)
    for c in r.conclusions:
        click.echo(c)
    click.echo(f"wrote {len(r.png_paths)} figures and {r.html_path} (open it in a browser)")
