"""The LLAMA paper's Table 3 ("Learning-based Memory Allocation for C++ Server Workloads", Maas et al.,
ASPLOS 2020; docs/references.md) on this project's workloads: for each workload, profile it, train its
model, then run it under jemalloc, tcmalloc, llamalloc and llamalloc with the model (`llamalloc bench --model`)
and print accuracy, steady-state memory, live bytes, fragmentation reduction and the prediction cache's hit
ratio. The main table is the steady state, as the paper's "final steady-state memory" is; the peak and at-exit
tables follow it.

    python3 bench/table3/run.py OUT [--scale default] [--repeat 1] [-w WORKLOAD ...] [--hidden 16]
                                    [--label RULE] [--target label|distribution] [--quiet-seconds S]

Each step's output stays in OUT (profiles, models, training reports, bench.json, stats files); a step whose
output exists is not redone, so an interrupted run continues. Measured quantities and their sources:

- accuracy: the LSTM's weighted / unweighted accuracy on held-out stacks, from `llamalloc train`'s report;
- steady state (the main table): every workload ends its load with a quiet phase in which its long-lived state
  stays live (docs/workloads.md); M = the mean RSS of the measured process over that phase, the one measure of
  memory every allocator shares (jemalloc's and tcmalloc's 2 MiB-page footprint is not visible to us); live =
  llamalloc+model's own mean live bytes over the phase (the bytes the program asked for and has not freed;
  the same program under every allocator). Reduction of A over B = 1 - (M_A - live) / (M_B - live).
  RSS also holds what is not heap (code, stacks, the allocator's metadata), the same few MiB under every
  allocator, which enters M_A - live and M_B - live alike and pulls the reduction towards 0. llamalloc's own
  steady-state footprint (huge pages in use) is printed beside it;
- footprint, at the peak and at exit: llamalloc's own (huge pages in use, its statistics file); for jemalloc and
  tcmalloc, whose pages we cannot see, RSS (peak and final, sampled by bench): resident bytes, not 2 MiB pages,
  so the comparison is only rough (the trace-based lower bound is `llamalloc simulate --policy
  pages-2m` on a trace taken under them);
- peak and at exit: footprint as above for llamalloc, RSS for jemalloc and tcmalloc; live: peak and final live
  bytes from llamalloc+model's statistics file; the workloads free nearly everything before they exit, so the
  at-exit table says little;
- fragmentation reduction of A over B: 1 - (footprint_A - live) / (footprint_B - live);
- cache hit ratio: prediction cache hits / (hits + misses) under llamalloc+model.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

from llamalloc import paths, profile, workloads

# bench/ on the path: bench/corpus/run.py runs the llamalloc command for this campaign too (run_llamalloc).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from corpus import run as corpus  # noqa: E402

MiB = 1 << 20
ALLOCATORS = ("jemalloc", "tcmalloc", "llamalloc", "llamalloc+model")


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def reduction(m_a, m_b, live):
    """Fragmentation reduction of A over B: 1 - (M_A - live) / (M_B - live); None when undefined."""
    if None in (m_a, m_b, live) or m_b - live <= 0:
        return None
    return 1 - (m_a - live) / (m_b - live)


def steady_rows(data: dict, names: list[str]) -> list[dict]:
    """The steady-state Table 3 from a bench.json: per workload, the median over runs of the mean steady-state RSS
    of each allocator, llamalloc's own steady footprints, live (llamalloc+model's, else llamalloc's) and the
    reductions of llamalloc+model over jemalloc, tcmalloc and llamalloc."""
    rows = {(e["workload"], e["allocator"]): e for e in data["results"]}

    def steady(w, alloc, key):
        return _median([(r.get("metrics") or {}).get("steady_state", {}).get(key)
                        for r in rows.get((w, alloc), {}).get("runs", [])
                        if r.get("ok") and isinstance((r.get("metrics") or {}).get("steady_state"), dict)])

    out = []
    for w in names:
        m = {a: steady(w, a, "rss_bytes") for a in ALLOCATORS}
        live = steady(w, "llamalloc+model", "llamalloc_live_bytes")
        if live is None:
            live = steady(w, "llamalloc", "llamalloc_live_bytes")
        target = m["llamalloc+model"]
        out.append({
            "workload": w, "rss": m, "live": live,
            "footprint": {a: steady(w, a, "llamalloc_footprint_bytes") for a in ("llamalloc", "llamalloc+model")},
            "samples": steady(w, "llamalloc+model", "samples"),
            "reduction": {b: reduction(target, m[b], live) for b in ("jemalloc", "tcmalloc", "llamalloc")},
        })
    return out


def format_steady(rows: list[dict], acc: dict, scale: str, repeat: int) -> str:
    f = lambda v: "-" if v is None else f"{v / MiB:.1f}"  # noqa: E731
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    lines = [f"Table 3 analogue in the steady state after the peak (quiet phase), scale {scale}, median of {repeat} "
             f"run(s), MiB. Memory: mean RSS over the quiet phase (every allocator); live: llamalloc+model's mean "
             f"live bytes over the phase; fp: llamalloc's own mean footprint (huge pages in use)"]
    head = ["workload", "accuracy (w/u)", "jemalloc", "tcmalloc", "llamalloc", "llamalloc+model", "live",
            "reduction vs jemalloc", "vs tcmalloc", "vs llamalloc", "fp llamalloc", "fp llamalloc+model"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        lines.append("| " + " | ".join([
            r["workload"], acc.get(r["workload"], "-"), *(f(r["rss"][a]) for a in ALLOCATORS), f(r["live"]),
            *(pct(r["reduction"][b]) for b in ("jemalloc", "tcmalloc", "llamalloc")),
            f(r["footprint"]["llamalloc"]), f(r["footprint"]["llamalloc+model"])]) + " |")
    return "\n".join(lines)


def sh(*args: str, log: Path | None = None) -> str:
    out = corpus.run_llamalloc("table3: $ ", args, log)
    if out.returncode not in (0, 1):
        sys.exit(f"table3: llamalloc {args[0]} failed ({out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout


def record(name: str, scale: str, out: Path, sample_bytes: int, over: str = "glibc") -> None:
    """Profiles the workload's measured process (for redis: the server) as `llamalloc record` would, over glibc
    or over llamalloc (`record --preload libllamalloc.so`). Over llamalloc the profile knows which reallocs stay
    in their block, exactly as the heap that will run the model does (docs/profiler.md): redis's profile then
    has 178 of its 188 contexts in the process with its model, against 167 of 185 recorded over glibc. glibc
    stays the default: one of two word-count models trained on profiles recorded over llamalloc kept 40 MiB in
    the steady state, against 24-26 for the other and for every glibc-recorded one
    (docs/results/2026-11-27-placement-options-replay.md)."""
    if out.exists():
        return
    w = workloads.get(name)
    raw_dir = Path(tempfile.mkdtemp(prefix=f"table3-{name}-"))
    preload = [str(paths.native_library("libllamalloc_prof.so"))]
    if over == "llamalloc":
        preload.append(str(paths.native_library("libllamalloc.so")))
    # The caller's own llamalloc settings (a model, statistics) would change what is recorded over llamalloc.
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_") or k.startswith("LLAMALLOC_PROF_")}
    env.update({"LD_PRELOAD": ":".join(preload), "LLAMALLOC_PROF_MODE": "profile",
                "LLAMALLOC_PROF_OUTPUT": str(raw_dir / "raw.%p"), "LLAMALLOC_PROF_SAMPLE_BYTES": str(sample_bytes)})
    print(f"table3: profiling {name} ({scale}, over {over})", file=sys.stderr, flush=True)
    work = Path(tempfile.mkdtemp(prefix=f"table3-{name}-run-"))
    w.executable()
    w.run(scale, env, work)
    raws = sorted(raw_dir.glob("raw.*"), key=lambda p: p.stat().st_size)
    if not raws:
        sys.exit(f"table3: {name}: the profiler wrote no profile")
    profile.write(profile.from_raw(raws[-1]), out)  # the process that allocated most: the workload's own
    sh("symbolize", str(out))


def accuracy(report: str) -> str:
    """The LSTM row of `llamalloc train`'s report: weighted / unweighted accuracy."""
    for line in report.splitlines():
        if line.strip().lower().startswith("lstm"):
            nums = re.findall(r"(\d+(?:\.\d+)?)%", line)
            if len(nums) >= 2:
                return f"{nums[0]}% / {nums[1]}%"
    return "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", default="default")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("-w", "--workload", action="append")
    ap.add_argument("--hidden", default="16")
    ap.add_argument("--label", default=None, help="the label rule `llamalloc train` uses (default: train's)")
    ap.add_argument("--target", default=None, choices=["label", "distribution"],
                    help="what `llamalloc train` fits (default: train's)")
    ap.add_argument("--sample-bytes", type=int, default=4096)
    ap.add_argument("--record-over", choices=["glibc", "llamalloc"], default="glibc",
                    help="the allocator under the profiler while recording (default: glibc; llamalloc: the profile "
                         "knows exactly which reallocs stay in their block)")
    ap.add_argument("--quiet-seconds", type=float, default=None,
                    help="the workloads' quiet phase, where the steady state is measured (default: theirs)")
    a = ap.parse_args()
    names = a.workload or ["image-server", "word-count", "frag-micro", "redis"]
    a.out.mkdir(parents=True, exist_ok=True)
    models, acc = {}, {}
    for name in names:
        prof, model, report = a.out / f"{name}.prof", a.out / f"{name}.model", a.out / f"{name}.train.txt"
        record(name, a.scale, prof, a.sample_bytes, a.record_over)
        if not model.exists():
            sh("train", str(prof), "-o", str(model), "--hidden", a.hidden,
               *([] if a.label is None else ["--label", a.label]),
               *([] if a.target is None else ["--target", a.target]), log=report)
        models[name] = model
        acc[name] = accuracy(report.read_text()) if report.exists() else "-"
    bench_json = a.out / "bench.json"
    if not bench_json.exists():
        sh("bench", *sum((["-w", n] for n in names), []), "--allocators", "jemalloc,tcmalloc,llamalloc",
           *sum((["--model", f"{n}={models[n]}"] for n in names), []), "--repeat", str(a.repeat),
           *([] if a.quiet_seconds is None else ["--quiet-seconds", str(a.quiet_seconds)]),
           "--scale", a.scale, "--out", str(a.out / "bench"), "--json", str(bench_json), log=a.out / "bench.txt")
    data = json.loads(bench_json.read_text())
    rows = {(e["workload"], e["allocator"]): e for e in data["results"]}

    def runs(w, alloc):
        return [r for r in rows.get((w, alloc), {}).get("runs", []) if r.get("ok")]

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    def stat(w, alloc, key):
        return med([r["llamalloc_stats"][key] for r in runs(w, alloc) if isinstance(r.get("llamalloc_stats"), dict)
                    and key in r["llamalloc_stats"]])

    def rss(w, alloc, key):
        return med([r.get(key) for r in runs(w, alloc)])

    def red(a_fp, b_fp, live):
        if None in (a_fp, b_fp, live) or b_fp - live <= 0:
            return "-"
        return f"{100 * (1 - (a_fp - live) / (b_fp - live)):.0f}%"

    print("\n" + format_steady(steady_rows(data, names), acc, a.scale, a.repeat))
    f = lambda v: "-" if v is None else f"{v / MiB:.0f}"  # noqa: E731
    for when, rss_key, fp_key, live_key in (("at the peak", "peak_rss_bytes", "peak_footprint_bytes", "peak_live_bytes"),
                                            ("at exit", "final_rss_bytes", "footprint_bytes", "live_bytes")):
        print(f"\nTable 3 analogue {when}, scale {a.scale}, median of {a.repeat} run(s), MiB. jemalloc and tcmalloc: "
              f"RSS; llamalloc: its footprint (huge pages in use); live: llamalloc+model's statistics")
        head = ["workload", "accuracy (w/u)", "jemalloc", "tcmalloc", "llamalloc", "llamalloc+model", "live",
                "reduction vs jemalloc", "vs tcmalloc", "vs llamalloc", "fp/live", "cache hits", "time vs jemalloc"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for w in names:
            live = stat(w, "llamalloc+model", live_key)
            je, tc = rss(w, "jemalloc", rss_key), rss(w, "tcmalloc", rss_key)
            ll, lm = stat(w, "llamalloc", fp_key), stat(w, "llamalloc+model", fp_key)
            hits = med([r["llamalloc_stats"]["counters"]["prediction_cache_hits"] /
                        max(1, r["llamalloc_stats"]["counters"]["prediction_cache_hits"] +
                            r["llamalloc_stats"]["counters"]["prediction_cache_misses"])
                        for r in runs(w, "llamalloc+model") if isinstance(r.get("llamalloc_stats"), dict)])
            t_je, t_lm = med([r.get("seconds") for r in runs(w, "jemalloc")]), \
                med([r.get("seconds") for r in runs(w, "llamalloc+model")])
            print("| " + " | ".join([
                w, acc[w], f(je), f(tc), f(ll), f(lm), f(live), red(lm, je, live), red(lm, tc, live), red(lm, ll, live),
                "-" if not live or lm is None else f"{lm / live:.2f}", "-" if hits is None else f"{100 * hits:.2f}%",
                "-" if not t_je or t_lm is None else f"{t_lm / t_je:.2f}"]) + " |")


if __name__ == "__main__":
    main()
