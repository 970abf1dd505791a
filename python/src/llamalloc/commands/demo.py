"""`llamalloc demo`: the whole loop on a bundled workload, the README's main job.

Each step is one `llamalloc` subcommand run as its own process, so that every step keeps its own progress output
and error handling, and the demo shows the exact commands a user would type.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import click

from .. import workloads
from ..allocators import ONLINE_ALLOCATOR
from ..demo import conclusion, mib, ratio, steady_rows, steady_spread
from ..errors import UserError
from ..run import start_program
from . import load_commands

DEMO_WORKLOADS = ("image-server", "word-count", "frag-micro")
# The profile's sampling period per workload (`record --sample-bytes`). image-server makes about 250,000
# allocations at default scale, so every one is recorded (1), at no measurable cost to its run: rare contexts
# (a registry's first insert per thread) and the few objects of a mostly short-lived context that outlive the load
# (an LRU cache's last entries) are what pin huge pages after the peak, and sampling by bytes misses them, so a
# model of a sampled profile places them wrongly (docs/bench.md compares the two). word-count makes 70 million
# allocations, which sampled one by one would slow its run and lengthen the lifetimes it records.
DEMO_SAMPLE_BYTES = {"image-server": 1}
DEFAULT_DEMO_SAMPLE_BYTES = 4096
ALLOCATORS = "glibc,jemalloc,tcmalloc,mimalloc,llamalloc"


class _Steps:
    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self.start = time.monotonic()

    def run(self, title: str, args: list[str], ok_statuses=(0,)) -> str:
        self.done += 1
        shown = "llamalloc " + " ".join(shlex.quote(a) for a in args)
        click.secho(f"\n[{self.done}/{self.total}] {title}", bold=True, err=True)
        click.echo(f"  $ {shown}", err=True)
        t0 = time.monotonic()
        proc = start_program([sys.executable, "-m", "llamalloc", *args], os.environ, stdout=subprocess.PIPE, text=True)
        lines = []
        for line in proc.stdout:  # shown as it comes, and kept for the closing table
            sys.stdout.write(line)
            lines.append(line)
        rc = proc.wait()
        if rc not in ok_statuses:
            raise UserError(f"demo: step {self.done} ({title}) failed with status {rc}; "
                            f"its command was: {shown}", exit_code=1)
        click.echo(f"  done in {time.monotonic() - t0:.1f} s "
                   f"(demo so far {time.monotonic() - self.start:.0f} s)", err=True)
        return "".join(lines)


def _commands() -> dict[str, click.Command]:
    return {c.name: c for c in load_commands()}


def _command_has_option(name: str, option: str) -> bool:
    cmd = _commands().get(name)
    return cmd is not None and any(option in p.opts for p in cmd.params)


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return {}
    return {}


def _print_tables(bench_json: Path, sim_json: Path, workload: str, model_run: dict, model_stats: dict) -> None:
    bench = json.loads(bench_json.read_text())
    click.secho(f"\n{workload} under each allocator (median of {bench.get('repeat', 1)} run(s), "
                f"scale {bench.get('scale')}; steady state = the quiet phase after the load, "
                f"{bench.get('quiet_seconds', '?')} s)", bold=True)
    rows = steady_rows(bench, workload, model_run, model_stats)
    glibc_seconds = next((r[1] for r in rows if r[0] == "glibc"), None)
    table = [("allocator", "time s", "time/glibc", "peak RSS MiB", "steady RSS MiB", "steady footprint MiB",
              "steady live MiB", "final RSS MiB")]
    for name, seconds, peak, steady, foot, live, final in rows:
        table.append((name, "-" if seconds is None else f"{seconds:.2f}",
                      ratio(seconds / glibc_seconds) if seconds and glibc_seconds else "-",
                      mib(peak), mib(steady), mib(foot), mib(live), mib(final)))
    _table(table)
    click.echo("(footprint and live are llamalloc's own bookkeeping: its huge pages in use and its live bytes; RSS "
               "is read from /proc)")
    click.secho(conclusion(rows, steady_spread(bench, workload)), bold=True)
    sim = json.loads(sim_json.read_text())
    click.secho("\nReplay of its trace under each placement policy", bold=True)
    rows = [("policy", "peak footprint MiB", "final footprint MiB", "peak live MiB", "avg footprint/live")]
    for p in sim.get("policies", []):
        s = p.get("summary", {})
        rows.append((p.get("policy", "?"), mib(s.get("peak_footprint_bytes")), mib(s.get("final_footprint_bytes")),
                     mib(s.get("peak_live_bytes")),
                     "-" if s.get("average_fragmentation_ratio") is None
                     else f"{s['average_fragmentation_ratio']:.2f}"))
    _table(rows)


def _table(rows) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        click.echo("  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
        if k == 0:
            click.echo("  ".join("-" * w for w in widths))


@click.command("demo")
@click.option("-w", "--workload", type=click.Choice(DEMO_WORKLOADS), default="image-server", show_default=True,
              help="The bundled workload to run the loop on.")
@click.option("--scale", type=click.Choice(workloads.SCALES), default="default", show_default=True,
              help="default: about 10 minutes for the whole demo (image-server: 200 MiB live at its peak, 1 MiB "
                   "after it); small: about 4 minutes, where a few MiB of code and libraries outweigh the heap.")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default="llamalloc-demo",
              show_default=True, help="Folder for every file the demo writes.")
@click.option("--allocators", default=ALLOCATORS, show_default=True, help="Allocators to compare.")
@click.option("--repeat", type=click.IntRange(min=1), default=3, show_default=True,
              help="Runs per allocator in the comparison (median).")
@click.option("--epochs", type=click.IntRange(min=1), default=None,
              help="Most training epochs (default: llamalloc train's).")
@click.option("--sample-bytes", type=click.IntRange(min=1), default=None,
              help="The profile's mean bytes between samples (record --sample-bytes; default: 1, every "
                   "allocation, for image-server, 4096 for the others).")
def command(workload, scale, out_dir, allocators, repeat, epochs, sample_bytes):
    """Record, train, run with the model, trace, simulate and compare, on a bundled workload.

    Prints the comparison against the other allocators at the end and points to the report.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    wl = workloads.get(workload)
    program = wl.command(scale)  # raises a clear error when the workload is not built
    prof, model, trace = out / f"{workload}.prof", out / f"{workload}.model", out / f"{workload}.trace"
    stats, sim_json, bench_dir = out / f"{workload}.stats.json", out / f"{workload}.sim.json", out / "bench"

    has_model_run = _command_has_option("run", "--model")
    has_report = "report" in _commands()
    from .. import simulate as _sim
    # llama-model: the heap fed by the model trained in step 3, through the prediction cache (docs/simulator.md).
    policies = ["pages-4k", "pages-2m", "mesh", "tcmalloc-lifetime", "llama-default", "llama-oracle", "llama-model"]
    policies = [p for p in policies if p in _sim.POLICIES or p in _sim.ALIASES]

    steps = _Steps(7 + int(has_report))
    click.secho(f"llamalloc demo: {workload} at scale {scale}; files in {out}/", bold=True, err=True)
    if sample_bytes is None:
        sample_bytes = DEMO_SAMPLE_BYTES.get(workload, DEFAULT_DEMO_SAMPLE_BYTES)
    steps.run("record a lifetime profile" + (" of every allocation" if sample_bytes == 1 else " (sampled)"),
              ["record", "--sample-bytes", str(sample_bytes), "-o", str(prof), "--", *program])
    steps.run("symbolize it (function names for the model)", ["symbolize", str(prof)])
    steps.run("train the lifetime model",
              ["train", str(prof), "-o", str(model), *(["--epochs", str(epochs)] if epochs else [])])
    run_args = ["run", "--stats", str(stats)]
    if has_model_run:
        run_args += ["--model", str(model)]
    model_output = steps.run("run it with llamalloc" + (" and the model" if has_model_run else
                                                         " (no learned predictor built yet)"),
                             [*run_args, "--", *program])
    steps.run("trace every allocation and free",
              ["trace", "-o", str(trace), "--", *program])
    sim_args = ["simulate", str(trace), "-o", str(sim_json), "-q"]
    for p in policies:
        sim_args += ["-p", p]
    if "llama-model" in policies:
        sim_args += ["--model", str(model)]
    steps.run("replay the trace under each placement policy: " + ", ".join(policies), sim_args)
    # llamalloc + model runs in the bench too, so that it is measured as the others are (same harness, repeats).
    bench_model = ["--model", f"{workload}={model}"] if "llamalloc" in allocators.split(",") else []
    # ... and llamalloc learning online, beside it and the model.
    bench_allocators = allocators
    if "llamalloc" in allocators.split(",") and ONLINE_ALLOCATOR not in allocators.split(","):
        bench_allocators = f"{allocators},{ONLINE_ALLOCATOR}"
    steps.run("compare the allocators side by side",
              ["bench", "-w", workload, "--allocators", bench_allocators, "--repeat", str(repeat), "--scale", scale,
               "--out", str(bench_dir), *bench_model])
    if has_report:
        steps.run("write the report", ["report", "--sim", str(sim_json), "--bench", str(bench_dir / "bench.json"),
                                        "--profile", str(prof), "-o", str(out / "report")])
    s = json.loads(stats.read_text()) if stats.exists() else {}
    _print_tables(bench_dir / "bench.json", sim_json, workload, _last_json(model_output), s)
    if s:
        c = s.get("counters", {})
        click.echo(f"\nllamalloc's own statistics ({stats}): peak footprint {mib(s.get('peak_footprint_bytes'))} MiB "
                   f"for peak live {mib(s.get('peak_live_bytes'))} MiB; prediction cache hits {c.get('prediction_cache_hits', 0)}, "
                   f"misses {c.get('prediction_cache_misses', 0)}, model runs {c.get('model_runs', 0)}")
    if has_report:
        click.secho(f"\nReport: {(out / 'report' / 'index.html').resolve()}", bold=True)
