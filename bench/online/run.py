"""Online lifetime learning against no model and the offline model (docs/prediction.md, "Online learning"): for
each workload, profile it and train its model, then bench it under llamalloc, llamalloc+online,
llamalloc+model and llamalloc+model+online, trace it once and replay the trace under llama-default,
llama-online, llama-model and llama-model with LEARN=1; and the stability of model plus online learning across
independent record/train runs of one workload.

    python3 bench/online/run.py OUT [--scale default] [--repeat 3] [-w WORKLOAD ...] [--stability-runs 3]
                                    [--stability-workload word-count] [--no-sim] [--quiet-seconds S]

Each step's output stays in OUT (profiles, models, bench.json files, traces, replays); a step whose output
exists is not redone, so an interrupted run continues. Figures: the steady state of `llamalloc bench` (mean RSS
and llamalloc's own footprint over the workload's quiet phase after its load), medians over the repeats; the
replay's steady footprint is the simulator's mean footprint over the same phase of the trace (its
`steady_footprint_bytes` when the trace marks the phase, else the mean after the live peak). Writes OUT/table.md.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from llamalloc.errors import UserError

# bench/ on the path: bench/corpus/run.py's profile-and-train and trace steps, and its way of running llamalloc.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import run as corpus  # noqa: E402

MiB = 1 << 20
VARIANTS = ("llamalloc", "llamalloc+online", "llamalloc+model", "llamalloc+model+online")
DEFAULT_WORKLOADS = ("image-server", "word-count", "frag-micro-unhinted", "redis")
POLICIES = ("llama-default", "llama-online", "llama-model", "llama-model+online")


def sh(*args: str, log: Path | None = None) -> str:
    out = corpus.run_llamalloc("online: $ llamalloc ", args, log)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"online: llamalloc {args[0]} failed ({out.returncode}): {tail}")
    return out.stdout


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def steady(bench: dict, workload: str, allocator: str, key: str):
    """Median over the repeats of one steady-state figure (rss_bytes, llamalloc_footprint_bytes)."""
    for e in bench.get("results", []):
        if e.get("workload") == workload and e.get("allocator") == allocator:
            return median([((r.get("metrics") or {}).get("steady_state") or {}).get(key)
                           for r in e.get("runs", []) if r.get("ok")])
    return None


def mib(v) -> str:
    return "-" if v is None else f"{v / MiB:.1f}"


def bench(out: Path, names: list[str], models: dict, allocators: str, repeat: int, scale: str, quiet, tag: str):
    path = out / f"bench-{tag}.json"
    if not path.exists():
        sh("bench", *sum((["-w", n] for n in names), []), "--allocators", allocators,
           *sum((["--model", f"{n}={models[n]}"] for n in names if n in models), []), "--repeat", str(repeat),
           *([] if quiet is None else ["--quiet-seconds", str(quiet)]), "--no-plots",
           "--scale", scale, "--out", str(out / f"bench-{tag}"), "--json", str(path), log=out / f"bench-{tag}.txt")
    return json.loads(path.read_text())


def replay(out: Path, name: str, model: Path, scale: str) -> dict[str, float]:
    """Trace the workload once (its measured process, under the tracer) and replay it under the policies:
    policy -> footprint after the peak (the median between the live peak and teardown)."""
    trace, sim_json = out / f"{name}.trace", out / f"{name}.sim.json"
    if not trace.exists():
        print(f"online: tracing {name}", file=sys.stderr, flush=True)
        corpus.finish_trace(corpus._run_under_profiler(name, scale, "trace", {})[-1], trace)
    if not sim_json.exists():
        # llama-model with LEARN=1 is model plus online learning (docs/simulator.md); one replay per setting.
        sh("simulate", str(trace), "-o", str(sim_json), "-q", "-p", "llama-default", "-p", "llama-online",
           "-p", "llama-model", "--model", str(model), log=out / f"{name}.sim.txt")
        both = out / f"{name}.sim-learn.json"
        sh("simulate", str(trace), "-o", str(both), "-q", "-p", "llama-model", "--model", str(model),
           "--option", "LEARN=1", log=out / f"{name}.sim-learn.txt")
    vals = quiet_footprints(sim_json)
    both = out / f"{name}.sim-learn.json"
    if both.exists():
        vals["llama-model+online"] = quiet_footprints(both).get("llama-model")
    return vals


def quiet_footprints(sim_json: Path) -> dict[str, float]:
    """Policy -> the replay's footprint over the workload's quiet phase, which the process's steady state
    measures: the median footprint of the timeline's samples after the load (the last sample with at least half
    the peak live bytes) while live bytes stay at least half the phase's median (before the teardown)."""
    import csv

    data = json.loads(sim_json.read_text())
    path = Path(data.get("timeline_csv") or sim_json.with_suffix(".timeline.csv"))
    if not path.is_absolute():
        path = sim_json.parent / path.name
    by_policy: dict[str, list[tuple[int, int]]] = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            by_policy.setdefault(row["policy"], []).append((int(row["live_bytes"]), int(row["footprint_bytes"])))
    out = {}
    for policy, rows in by_policy.items():
        peak = max(live for live, _ in rows) if rows else 0
        last_load = max((i for i, (live, _) in enumerate(rows) if live * 2 >= peak), default=None)
        if last_load is None:
            continue
        after = rows[last_load + 1:]
        if not after:
            continue
        mid = statistics.median(live for live, _ in after)
        quiet = [fp for live, fp in after if live * 2 >= mid]
        out[policy] = statistics.median(quiet) if quiet else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", default="default")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-w", "--workload", action="append")
    ap.add_argument("--sample-bytes", type=int, default=4096)
    ap.add_argument("--stability-workload", default="word-count")
    ap.add_argument("--stability-runs", type=int, default=3)
    ap.add_argument("--no-sim", action="store_true", help="no traces and replays")
    ap.add_argument("--quiet-seconds", type=float, default=None)
    a = ap.parse_args()
    names = a.workload or list(DEFAULT_WORKLOADS)
    a.out.mkdir(parents=True, exist_ok=True)
    models = {}
    for name in names:
        model = corpus.record_and_train(name, a.scale, a.out, a.sample_bytes)
        if model is None:
            sys.exit(f"online: {name}: training wrote no model")
        models[name] = model
    main_bench = bench(a.out, names, models, ",".join(VARIANTS), a.repeat, a.scale, a.quiet_seconds, "main")

    lines = [f"# Online learning: steady state ({a.scale} scale, {a.repeat} runs each, medians, MiB)", "",
             "| workload | figure | " + " | ".join(VARIANTS) + " | online vs none | online share of model's cut | "
             "model+online vs lower |", "|" + "---|" * (len(VARIANTS) + 5)]
    for name in names:
        for key, label in (("llamalloc_footprint_bytes", "footprint"), ("rss_bytes", "RSS")):
            v = {al: steady(main_bench, name, al, key) for al in VARIANTS}
            none, online, model, both = (v[x] for x in VARIANTS)
            share = ("-" if None in (none, online, model) or none <= model
                     else f"{(none - online) / (none - model):.0%}")
            lower = None if None in (online, model) else min(online, model)
            lines.append(f"| {name} | {label} | " + " | ".join(mib(v[al]) for al in VARIANTS) + " | "
                         + ("-" if None in (none, online) else f"{online / none:.2f}x") + f" | {share} | "
                         + ("-" if None in (both, lower) else f"{both / lower:.2f}x") + " |")
    if not a.no_sim:
        lines += ["", "## Replays: footprint over the quiet phase (MiB), beside the process's steady footprint", "",
                  "| workload | " + " | ".join(POLICIES) + " | process: " + " | process: ".join(VARIANTS)
                  + " | replay / process (online) |", "|" + "---|" * (len(POLICIES) + len(VARIANTS) + 2)]
        for name in names:
            vals = replay(a.out, name, models[name], a.scale)
            real = {al: steady(main_bench, name, al, "llamalloc_footprint_bytes") for al in VARIANTS}
            on, real_on = vals.get("llama-online"), real["llamalloc+online"]
            ratio = "-" if None in (on, real_on) else f"{on / real_on:.2f}"
            lines.append(f"| {name} | " + " | ".join(mib(vals.get(p)) for p in POLICIES) + " | "
                         + " | ".join(mib(real[al]) for al in VARIANTS) + f" | {ratio} |")
    # Stability: independent record/train runs of one workload, each model benched with and without learning.
    w = a.stability_workload
    rows = []
    for i in range(1, a.stability_runs + 1):
        d = a.out / f"stability-{i}"
        d.mkdir(exist_ok=True)
        model = corpus.record_and_train(w, a.scale, d, a.sample_bytes)
        b = bench(a.out, [w], {w: model}, "llamalloc+model,llamalloc+model+online", 1, a.scale, a.quiet_seconds,
                  f"stab{i}")
        rows.append((i, steady(b, w, "llamalloc+model", "llamalloc_footprint_bytes"),
                     steady(b, w, "llamalloc+model+online", "llamalloc_footprint_bytes")))
    if rows:
        lines += ["", f"## Stability: {len(rows)} independent record/train runs of {w} (steady footprint, MiB)", "",
                  "| run | llamalloc+model | llamalloc+model+online |", "|---|---|---|"]
        lines += [f"| {i} | {mib(m)} | {mib(mo)} |" for i, m, mo in rows]
        for col, label in ((1, "llamalloc+model"), (2, "llamalloc+model+online")):
            vals = [r[col] for r in rows if r[col]]
            if vals:
                lines.append(f"| spread ({label}) | {max(vals) / min(vals) - 1:.0%} of the lowest | |")
    text = "\n".join(lines) + "\n"
    (a.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError, UserError) as e:  # a failed step or bad input: one line
        sys.exit(f"online: {e}")
