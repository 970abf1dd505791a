"""`llamalloc simulate`: what-if replay of a trace under page sizes, meshing and allocator policies."""
from __future__ import annotations

from pathlib import Path

import click

from .. import simulate as sim


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def summary_table(result: sim.SimResult) -> str:
    """The comparison the user reads first: footprint and fragmentation per policy, at the peak, after it (to the
    end of the quiet phase, `sim.after_peak`) and at exit (after the program's own teardown, often nearly empty:
    exit ratios are large); then the verdict `llamalloc report` opens with (`sim.conclusion`)."""
    head = (f"{'policy':<18} {'peak MiB':>9} {'after-peak MiB':>14} {'heap-resident MiB':>17} {'live MiB':>9} "
            f"{'frag':>7} {'avg frag':>9} {'exit MiB':>9} {'exit live':>9} {'events/s':>9}")
    lines = [head, "-" * len(head)]
    for name, p in result.policies.items():
        s = p.summary
        a = p.after_peak()
        lines.append(f"{name:<18} {_mib(s['peak_footprint_bytes']):>9} {_mib(a['footprint_bytes']):>14} "
                     f"{_mib(a['heap_resident_bytes']):>17} {_mib(a['live_bytes']):>9} {a['fragmentation_ratio']:>6.2f}x "
                     f"{s['average_fragmentation_ratio']:>8.2f}x {_mib(s['final_footprint_bytes']):>9} "
                     f"{_mib(s['final_live_bytes']):>9} {s['events_per_second']:>9.3g}")
    lines.append(f"after-peak: medians over {sim.window_text(next(iter(result.policies.values())))} of the trace, from the live peak's end to the "
                 "end of the quiet phase, without the exit teardown (docs/bench.md, \"After the peak\"); "
                 "heap-resident: the after-peak footprint less the bytes the heap's sweeper subreleased and purged "
                 "inside it (the llama policies; the others' footprint); exit: the trace's end")
    verdict = sim.conclusion(result, Path(result.trace).name or "the trace")
    if verdict:
        lines.append(verdict)
    model = result.policies.get("llama-model")
    if model is not None:
        e = model.extras
        lines.append(f"llama-model: prediction cache hit rate {100 * e.get('prediction_cache_hit_rate', 0):.1f}% "
                     f"({e.get('prediction_cache_hits', 0):.0f} hits, {e.get('prediction_cache_misses', 0):.0f} "
                     f"misses), {e.get('model_runs', 0):.0f} model runs; against each object's true class: "
                     f"{100 * e.get('accuracy_exact', 0):.1f}% exact, "
                     f"{100 * e.get('accuracy_within_one_class', 0):.1f}% within one class")
    for name in ("llama-model", "llama-online"):
        learner = result.policies.get(name)
        if learner is not None and "learn_contexts" in learner.extras:
            lines.append(learning_line(name, learner.extras))
    best = result.policies.get("llama-oracle-best")
    if best is not None and best.search:
        lines.append(sim.search_summary(best))
    first = next(iter(result.policies.values())).summary
    if first.get("unknown_frees"):
        lines.append(f"note: {first['unknown_frees']} frees named an address that was never allocated "
                     "(counted and skipped)")
    return "\n".join(lines)


def learning_line(name: str, e: dict) -> str:
    """What the online learner did in a replay (llama-online, llama-model with LEARN=1)."""
    if e.get("learn_started", 1) == 0:
        return (f"{name}: online learning did not start: the replayed footprint stayed below LEARN_FROM_MIB "
                "(--option LEARN_FROM_MIB=0 learns from the first allocation, as a process under it does)")
    line = (f"{name}: online learning decided {e.get('learn_decided', 0):.0f} of {e.get('learn_contexts', 0):.0f} "
            f"contexts from {e.get('learn_samples', 0):.0f} sampled objects")
    if name == "llama-model":
        line += f", {e.get('learn_overrides', 0):.0f} overrides of the model's class"
    return (line + f"; the heap's classes against each object's true class: "
            f"{100 * e.get('placed_accuracy_exact', 0):.1f}% exact, "
            f"{100 * e.get('placed_accuracy_within_one_class', 0):.1f}% within one class")


#: Flags that earlier versions had for some of the library's options, kept as deprecated spellings of
#: --option NAME=VALUE (the options table checks their values).
DEPRECATED_OPTION_FLAGS = {"--deadline-k": "DEADLINE_K", "--repredict-every": "REPREDICT_EVERY",
                           "--repredict-backoff": "REPREDICT_BACKOFF", "--min-confidence": "MIN_CONFIDENCE",
                           "--min-class": "MIN_CLASS", "--unseen-trial": "UNSEEN_TRIAL"}


def _deprecated_option_flags(f):
    for flag in reversed(DEPRECATED_OPTION_FLAGS):
        f = click.option(flag, flag.lstrip("-").replace("-", "_"), hidden=True, default=None, metavar="VALUE")(f)
    return f


@click.command("simulate")
@click.argument("trace", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--policy", "-p", "policies", multiple=True, required=True,
              help="pages-4k, pages-2m, mesh (= mesh-4k + mesh-2m), mesh-4k, mesh-2m, tcmalloc, "
                   "tcmalloc-lifetime, llama-oracle, llama-oracle-best, llama-default, llama-model (with --model; "
                   "--option LEARN=1 adds online learning), llama-online (online learning without a model); "
                   "repeat for several")
@click.option("--out", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="result JSON (default: TRACE's file name with the suffix .sim.json, in the current folder: "
                   "server.trace -> server.sim.json); the timeline CSV goes beside it")
@click.option("--interval-ms", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="timeline sample period, in trace time")
@click.option("--mesh-period-ms", type=click.FloatRange(min=0, min_open=True), default=100.0, show_default=True,
              help="how often the mesh policies mesh (Mesh itself: at most every 100 ms)")
@click.option("--seed", type=int, default=1, show_default=True, help="randomness of the mesh policies")
@click.option("--option", "heap_options", multiple=True, metavar="NAME=VALUE",
              help="llama policies: configure the heap and the predictor as the library is under "
                   "LLAMALLOC_NAME=VALUE (any option of docs/options.md, e.g. DEADLINE_K=2, LONG_CLASS=8, "
                   "MIN_CLASS=0); repeat for several. The others stay at the library's defaults; an option the "
                   "replay does not model is named in a warning")
# The flag's former spelling, still taken.
@click.option("--heap-option", "former_heap_options", multiple=True, hidden=True, metavar="NAME=VALUE")
@click.option("--search", "search", multiple=True, metavar="NAME=V1,V2,...",
              help="llama-oracle-best: the values to try for a placement option (LONG_CLASS, SHARED_CLASS, "
                   "SPAN_RECYCLING, DENSE_FIRST, DEADLINE_K, SAME_CLASS_RECYCLING, SMALL_HEAP_PAGES, DEFAULT_CLASS), "
                   "in the grid; one value fixes it. Repeat for several; the others keep the default search")
@click.option("--jobs", "-j", type=click.IntRange(min=1, max=1024), default=None,
              help="llama-oracle-best: replays at once (default: one per hardware thread; each holds a heap)")
@click.option("--thread-idle-ms", type=click.FloatRange(min=0), default=500.0, show_default=True,
              help="llama policies: once the sweeper runs, a traced thread with no event for this long gives its "
                   "empty spans back, as a thread that exits does (traces carry no thread exits); 0: never, and "
                   "no sweeper pass either (the heap's placement alone)")
@click.option("--other-threads", is_flag=True,
              help="llama policies: the traced process had threads from its start that never allocate (a trace "
                   "shows only those that do), so the library's sweeper thread ran from the start: the replay runs "
                   "its passes from the start too")
@click.option("--snapshot-ms", type=float, multiple=True, help="heap snapshot times (llama policies)")
@click.option("--model", "model", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="llama-model: the lifetime model (from `llamalloc train`)")
@click.option("--tokens", "tokens", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="llama-model: token tables from `llamalloc prepare` (default: prepared for the trace's binaries "
                   "and cached, as `llamalloc run --model` does)")
@click.option("--predict-log", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="llama-model: write 'class: token ids' for each context the model classifies (as "
                   "LLAMALLOC_PREDICT_LOG does in the process)")
@_deprecated_option_flags
@click.option("--quiet", "-q", is_flag=True, help="no progress lines")
def command(trace: Path, policies: tuple[str, ...], out: Path | None, interval_ms: float, mesh_period_ms: float,
            seed: int, heap_options: tuple[str, ...], former_heap_options: tuple[str, ...],
            search: tuple[str, ...], jobs: int | None,
            thread_idle_ms: float, other_threads: bool, snapshot_ms: tuple[float, ...],
            model: Path | None, tokens: Path | None, predict_log: Path | None, quiet: bool, **deprecated) -> None:
    """Replay TRACE (from `llamalloc trace`) through placement policies and compare their memory footprint."""
    if out is None:
        out = sim.default_output(trace)
    # A deprecated flag comes first, so that an --option of the same name wins.
    spelled = []
    for flag, name in DEPRECATED_OPTION_FLAGS.items():
        value = deprecated.get(flag.lstrip("-").replace("-", "_"))
        if value is not None:
            click.echo(f"simulate: warning: {flag} is deprecated; use --option {name}={value}", err=True)
            spelled.append(f"{name}={value}")
    heap_options = (*spelled, *former_heap_options, *heap_options)
    settings = sim.Settings(interval_ms=interval_ms, mesh_period_ms=mesh_period_ms, seed=seed,
                            thread_idle_ms=thread_idle_ms, other_threads=other_threads,
                            snapshot_ms=tuple(snapshot_ms), heap_options=heap_options,
                            model=model, tokens=tokens, predict_log=predict_log, search=tuple(search),
                            jobs=jobs or 0)
    from ..progress import Bar

    expanded = [q for p in policies for q in sim.ALIASES.get(p, (p,))]
    bar = Bar(len(expanded), "simulate", "policy", prefix="simulate: ") if not quiet else None

    def progress(line: str) -> None:
        bar.line(line)
        if " done in " in line:
            bar.advance()

    try:
        result = sim.simulate(trace, policies, out, settings, progress=None if quiet else progress,
                              warn=lambda line: click.echo(f"simulate: warning: {line}", err=True))
    finally:
        if bar is not None:
            bar.close()
    click.echo(summary_table(result))
    if heap_options:
        click.echo("llama policies placed as the library does under "
                   + " ".join(o if o.startswith("LLAMALLOC_") else "LLAMALLOC_" + o for o in heap_options))
    click.echo(f"wrote {out} (timeline: {out.with_name(out.stem + '.timeline.csv')})")
