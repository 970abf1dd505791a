"""`llamalloc bench`: the workloads under every allocator, side by side (docs/bench.md)."""
from __future__ import annotations

from pathlib import Path

import click

from .. import allocators as _allocators, bench as _bench, workloads as _workloads
from ..errors import UserError


@click.command("bench")
@click.option("--workload", "-w", "workload_names", multiple=True, metavar="NAME",
              help=f"Workload to run (repeatable), or a group: corpus (every corpus shape and the bundled "
                   f"workloads). Default: {', '.join(_workloads.DEFAULT_WORKLOADS)}. "
                   f"Known: {', '.join(_workloads.WORKLOADS)}.")
@click.option("--allocators", default=",".join(_allocators.ALLOCATORS), show_default=True,
              help="Comma-separated allocators; NAME=/path/lib.so preloads any library under a name.")
@click.option("--repeat", default=3, show_default=True, type=int, help="Runs per workload and allocator (median).")
@click.option("--scale", type=click.Choice(_workloads.SCALES), default="default", show_default=True,
              help="small: seconds per run (tests); default: about a minute per run.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("bench-out"),
              show_default=True, help="Folder for plots, llamalloc statistics files and the JSON.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the JSON results (default: OUT/bench.json).")
@click.option("--interval", default=0.1, show_default=True, type=float, help="RSS sampling interval, seconds.")
@click.option("--no-plots", is_flag=True, help="Skip the matplotlib plots.")
@click.option("--quiet-seconds", type=float, default=None, metavar="S",
              help="Length of the workloads' quiet phase after the load, where the steady state is measured "
                   "(default: 2 at small scale, 10 at default scale; 0: none).")
@click.option("--model", "model_specs", multiple=True, metavar="WORKLOAD=MODEL",
              help=f"A model for a workload (repeatable): adds the allocator {_allocators.MODEL_ALLOCATOR}, llamalloc "
                   f"with that model (LLAMALLOC_MODEL and the program's token tables).")
def command(workload_names, allocators, repeat, scale, out_dir, json_path, interval, no_plots, model_specs,
            quiet_seconds):
    """Run workloads under glibc, jemalloc, tcmalloc, mimalloc and llamalloc (LD_PRELOAD) and compare time,
    throughput, peak and final RSS and AnonHugePages, and the steady state after the peak (mean RSS, footprint
    and live bytes over the workloads' quiet phase), as ratios to glibc."""
    if interval <= 0:
        raise UserError("--interval must be positive")
    if quiet_seconds is not None and quiet_seconds < 0:
        raise UserError("--quiet-seconds must be >= 0")
    names = list(workload_names) or list(_workloads.DEFAULT_WORKLOADS)
    models: dict[str, Path] = {}
    for spec in model_specs:
        workload, sep, path = spec.partition("=")
        if not sep or not workload or not path:
            raise UserError(f"--model {spec}: expected WORKLOAD=MODEL")
        _workloads.get(workload)  # an unknown workload is bad input
        if not Path(path).is_file():
            raise UserError(f"--model {spec}: {path} does not exist")
        models[workload] = Path(path)
    # `llamalloc+model=/path/lib.so` names it with another library (an experimental build): not added again.
    if models and _allocators.MODEL_ALLOCATOR not in [a.partition("=")[0].strip() for a in allocators.split(",")]:
        allocators = f"{allocators},{_allocators.MODEL_ALLOCATOR}"
    json_path = json_path or out_dir / "bench.json"

    import re

    from ..progress import Bar

    bar = Bar(None, "bench", "run", prefix="bench: ")

    def progress(line: str) -> None:
        bar.line(line)
        m = re.match(r"\[(\d+)/(\d+)\] .*: ", line)  # a run finished (or failed): "[done/total] ...: ..."
        if m:
            bar.set(int(m.group(1)), int(m.group(2)))

    try:
        result = _bench.run_bench(names, allocators, repeat, scale, out_dir, progress=progress,
                                  interval_seconds=interval, models=models, quiet_seconds=quiet_seconds)
    finally:
        bar.close()
    _bench.write_json(result, json_path)
    click.echo(_bench.format_table(result))
    for line in _bench.learning_costs(result):
        click.echo(line)
    click.echo(f"bench: results written to {json_path}", err=True)
    if not no_plots:
        for path in _bench.plot_rss(result, out_dir):
            click.echo(f"bench: plot {path}", err=True)
    if result.problems:
        raise UserError(f"bench: {len(result.problems)} problem(s), what completed is in {json_path}: "
                        + "; ".join(result.problems), exit_code=1)
