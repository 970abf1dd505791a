"""`llamalloc simulate`: what-if replay of a trace under page sizes, meshing and allocator policies."""
from __future__ import annotations

from pathlib import Path

import click

from .. import sim


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def summary_table(result: sim.SimResult) -> str:
    """The comparison the user reads first: footprint and fragmentation per policy, at the peak, after it (before
    teardown) and at exit (after the program's destructors ran, often nearly empty: exit ratios are large)."""
    head = (f"{'policy':<18} {'peak MiB':>9} {'after-peak MiB':>14} {'live MiB':>9} {'frag':>7} {'avg frag':>9} "
            f"{'exit MiB':>9} {'exit live':>9} {'events/s':>9}")
    lines = [head, "-" * len(head)]
    for name, p in result.policies.items():
        s = p.summary
        a = p.after_peak()
        lines.append(f"{name:<18} {_mib(s['peak_footprint_bytes']):>9} {_mib(a['footprint_bytes']):>14} "
                     f"{_mib(a['live_bytes']):>9} {a['fragmentation_ratio']:>6.2f}x "
                     f"{s['average_fragmentation_ratio']:>8.2f}x {_mib(s['final_footprint_bytes']):>9} "
                     f"{_mib(s['final_live_bytes']):>9} {s['events_per_second']:>9.3g}")
    lines.append(f"after-peak: medians between the live peak (live below {100 * sim.PEAK_FRACTION:.0f}% of its "
                 f"maximum) and teardown (below {100 * sim.TEARDOWN_FRACTION:.0f}%); exit: the trace's end, after "
                 "teardown")
    model = result.policies.get("llama-model")
    if model is not None:
        e = model.extras
        lines.append(f"llama-model: prediction cache hit rate {100 * e.get('prediction_cache_hit_rate', 0):.1f}% "
                     f"({e.get('prediction_cache_hits', 0):.0f} hits, {e.get('prediction_cache_misses', 0):.0f} "
                     f"misses), {e.get('model_runs', 0):.0f} model runs; against each object's true class: "
                     f"{100 * e.get('accuracy_exact', 0):.1f}% exact, "
                     f"{100 * e.get('accuracy_within_one_class', 0):.1f}% within one class")
    first = next(iter(result.policies.values())).summary
    if first.get("unknown_frees"):
        lines.append(f"note: {first['unknown_frees']} frees named an address that was never allocated "
                     "(counted and skipped)")
    return "\n".join(lines)


@click.command("simulate")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--policy", "-p", "policies", multiple=True, required=True,
              help="pages-4k, pages-2m, mesh (= mesh-4k + mesh-2m), mesh-4k, mesh-2m, tcmalloc, "
                   "tcmalloc-lifetime, llama-oracle, llama-default, llama-model (with --model); repeat for several")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="result JSON (default: TRACE's file name with the suffix .sim.json, in the current folder: "
                   "server.trace -> server.sim.json); the timeline CSV goes beside it")
@click.option("--interval-ms", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="timeline sample period, in trace time")
@click.option("--mesh-period-ms", type=click.FloatRange(min=0, min_open=True), default=100.0, show_default=True,
              help="how often the mesh policies mesh (Mesh itself: at most every 100 ms)")
@click.option("--seed", type=int, default=1, show_default=True, help="randomness of the mesh policies")
@click.option("--deadline-k", type=click.IntRange(1, 1000), default=4, show_default=True,
              help="llama policies: a huge page's deadline is K x its class duration (as LLAMALLOC_DEADLINE_K)")
@click.option("--heap-option", "heap_options", multiple=True, metavar="NAME=VALUE",
              help="llama policies: place as the library does under LLAMALLOC_NAME=VALUE; one of the heap's "
                   "placement options (DEFAULT_CLASS, SAME_CLASS_RECYCLING, SMALL_HEAP_PAGES, "
                   "SHARED_CLASS, LONG_CLASS, SPAN_RECYCLING, DENSE_FIRST, DEADLINE_K; docs/options.md); repeat for "
                   "several. The others stay at the library's defaults")
@click.option("--thread-idle-ms", type=click.FloatRange(min=0), default=500.0, show_default=True,
              help="llama policies: a traced thread with no event for this long gives its empty spans back, as "
                   "the library's sweeper does for an idle thread (and as a thread that exits does; traces carry "
                   "no thread exits); 0: never. The library also sweeps working threads; the replay does not")
@click.option("--snapshot-ms", type=float, multiple=True, help="heap snapshot times (llama policies)")
@click.option("--model", "model", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="llama-model: the lifetime model (from `llamalloc train`)")
@click.option("--tokens", "tokens", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="llama-model: token tables from `llamalloc prepare` (default: prepared for the trace's binaries "
                   "and cached, as `llamalloc run --model` does)")
@click.option("--repredict-every", type=click.IntRange(min=0), default=1000, show_default=True,
              help="llama-model: a cache entry runs the model again after this many hits (LLAMALLOC_REPREDICT_EVERY; "
                   "0: never)")
@click.option("--repredict-backoff", type=click.IntRange(0, 16), default=10, show_default=True,
              help="llama-model: a re-prediction that keeps the class doubles the entry's period, at most this many "
                   "times (LLAMALLOC_REPREDICT_BACKOFF; 0: always every --repredict-every hits)")
@click.option("--min-confidence", type=click.IntRange(0, 100), default=60, show_default=True,
              help="llama-model: a prediction below this probability (percent) places the object as llama-default "
                   "does (LLAMALLOC_MIN_CONFIDENCE; 0: always the model's class)")
@click.option("--min-class", type=click.IntRange(0, 7), default=1, show_default=True,
              help="llama-model: a predicted class shorter than this is raised to it (LLAMALLOC_MIN_CLASS; 0: the "
                   "model's class as it is)")
@click.option("--unseen-trial", type=click.IntRange(0, 1000000), default=64, show_default=True,
              help="llama-model: a context the model was not trained on gets the longest class until its cache entry "
                   "has had about this many hits (LLAMALLOC_UNSEEN_TRIAL; 0: the model's class at once)")
@click.option("--predict-log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="llama-model: write 'class: token ids' for each context the model classifies (as "
                   "LLAMALLOC_PREDICT_LOG does in the process)")
@click.option("--quiet", "-q", is_flag=True, help="no progress lines")
def command(trace: Path, policies: tuple[str, ...], out: Path | None, interval_ms: float, mesh_period_ms: float,
            seed: int, deadline_k: int, heap_options: tuple[str, ...], thread_idle_ms: float, snapshot_ms: tuple[float, ...], model: Path | None,
            tokens: Path | None, repredict_every: int, repredict_backoff: int, min_confidence: int,
            min_class: int, unseen_trial: int, predict_log: Path | None, quiet: bool) -> None:
    """Replay TRACE (from `llamalloc trace`) through placement policies and compare their memory footprint."""
    if out is None:
        out = sim.default_output(trace)
    from ..progress import Bar

    expanded = [q for p in policies for q in sim.ALIASES.get(p, (p,))]
    bar = Bar(len(expanded), "simulate", "policy", prefix="simulate: ") if not quiet else None

    def progress(line: str) -> None:
        bar.line(line)
        if " done in " in line:
            bar.advance()

    try:
        result = _simulate(trace, policies, out, interval_ms, mesh_period_ms, seed, snapshot_ms, deadline_k,
                           thread_idle_ms, None if quiet else progress, model, tokens, repredict_every,
                           predict_log, repredict_backoff, min_confidence, min_class, unseen_trial, heap_options)
    finally:
        if bar is not None:
            bar.close()
    click.echo(summary_table(result))
    if heap_options:
        click.echo("llama policies placed as the library does under "
                   + " ".join(o if o.startswith("LLAMALLOC_") else "LLAMALLOC_" + o for o in heap_options))
    click.echo(f"wrote {out} (timeline: {out.with_name(out.stem + '.timeline.csv')})")


def _simulate(trace, policies, out, interval_ms, mesh_period_ms, seed, snapshot_ms, deadline_k, thread_idle_ms,
              progress, model, tokens, repredict_every, predict_log, repredict_backoff, min_confidence=60,
              min_class=1, unseen_trial=64, heap_options=()):
    return sim.simulate(trace, policies, out, interval_ms=interval_ms, mesh_period_ms=mesh_period_ms,
                          seed=seed, snapshot_ms=snapshot_ms, deadline_k=deadline_k, thread_idle_ms=thread_idle_ms,
                          progress=progress, model=model, tokens=tokens, repredict_every=repredict_every,
                          predict_log=predict_log, repredict_backoff=repredict_backoff,
                          min_confidence=min_confidence, min_class=min_class, unseen_trial=unseen_trial,
                          heap_options=heap_options,
                          warn=lambda line: click.echo(f"simulate: warning: {line}", err=True))
