"""papers/000 Table 3 on this project's workloads (issue 6): for each workload, profile it, train its model,
then run it under jemalloc, tcmalloc, llamalloc and llamalloc with the model (`llamalloc bench --model`) and
print accuracy, final footprint, live bytes, fragmentation reduction and the prediction cache's hit ratio.

    python3 bench/table3/run.py OUT [--scale default] [--repeat 1] [-w WORKLOAD ...] [--hidden 16]

Each step's output stays in OUT (profiles, models, training reports, bench.json, stats files); a step whose
output exists is not redone, so an interrupted run continues. Measured quantities and their sources:

- accuracy: the LSTM's weighted / unweighted accuracy on held-out stacks, from `llamalloc train`'s report;
- footprint: llamalloc's own (huge pages in use at exit, its statistics file); for jemalloc and tcmalloc, whose
  pages we cannot see, the final RSS (resident bytes at exit: an upper bound of their 2 MiB-page footprint only
  if every resident page is part of a live huge page, so the figures compare like with like only roughly; the
  trace-based lower bound of DESIGN.md is `llamalloc simulate --policy pages-2m` on a trace taken under them);
- live: the live bytes at exit from llamalloc's statistics file (the same program state under every allocator);
- fragmentation reduction of A over B: 1 - (footprint_A - live) / (footprint_B - live) (DESIGN.md);
- cache hit ratio: prediction cache hits / (hits + misses) under llamalloc+model.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llamalloc import paths, profile, workloads

MiB = 1 << 20


def sh(*args: str, log: Path | None = None) -> str:
    print("table3: $ " + " ".join(args), file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, "-m", "llamalloc", *args], capture_output=True, text=True)
    if log is not None:
        log.write_text(out.stdout + out.stderr)
    if out.returncode not in (0, 1):
        sys.exit(f"table3: llamalloc {args[0]} failed ({out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout


def record(name: str, scale: str, out: Path, sample_bytes: int) -> None:
    """Profiles the workload's measured process (for redis: the server) as `llamalloc record` would."""
    if out.exists():
        return
    w = workloads.get(name)
    raw_dir = Path(tempfile.mkdtemp(prefix=f"table3-{name}-"))
    env = dict(os.environ)
    env.update({"LD_PRELOAD": str(paths.native_library("libllamalloc_prof.so")), "LLAMALLOC_PROF_MODE": "profile",
                "LLAMALLOC_PROF_OUTPUT": str(raw_dir / "raw.%p"), "LLAMALLOC_PROF_SAMPLE_BYTES": str(sample_bytes)})
    print(f"table3: profiling {name} ({scale})", file=sys.stderr, flush=True)
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
    ap.add_argument("--sample-bytes", type=int, default=4096)
    a = ap.parse_args()
    names = a.workload or ["image-server", "word-count", "frag-micro", "redis"]
    a.out.mkdir(parents=True, exist_ok=True)
    models, acc = {}, {}
    for name in names:
        prof, model, report = a.out / f"{name}.prof", a.out / f"{name}.model", a.out / f"{name}.train.txt"
        record(name, a.scale, prof, a.sample_bytes)
        if not model.exists():
            sh("train", str(prof), "-o", str(model), "--hidden", a.hidden, log=report)
        models[name] = model
        acc[name] = accuracy(report.read_text()) if report.exists() else "-"
    bench_json = a.out / "bench.json"
    if not bench_json.exists():
        sh("bench", *sum((["-w", n] for n in names), []), "--allocators", "jemalloc,tcmalloc,llamalloc",
           *sum((["--model", f"{n}={models[n]}"] for n in names), []), "--repeat", str(a.repeat),
           "--scale", a.scale, "--out", str(a.out / "bench"), "--json", str(bench_json), log=a.out / "bench.txt")
    data = json.loads(bench_json.read_text())
    rows = {(e["workload"], e["allocator"]): e for e in data["results"]}

    def runs(w, alloc):
        return [r for r in rows.get((w, alloc), {}).get("runs", []) if r.get("ok")]

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    print(f"Table 3 analogue, scale {a.scale}, median of {a.repeat} run(s); MiB at exit")
    head = ["workload", "accuracy (w/u)", "jemalloc RSS", "tcmalloc RSS", "llamalloc fp", "llamalloc+model fp",
            "live", "reduction vs jemalloc", "vs tcmalloc", "vs llamalloc", "cache hits"]
    print(" | ".join(head))
    for w in names:
        live = med([r["llamalloc_stats"]["live_bytes"] for r in runs(w, "llamalloc+model") if r.get("llamalloc_stats")])
        fp = lambda alloc: med([r["llamalloc_stats"]["footprint_bytes"] for r in runs(w, alloc)  # noqa: E731
                                if r.get("llamalloc_stats")])
        rss = lambda alloc: med([r.get("final_rss_bytes") or (r.get("memory") or {}).get("final_rss_bytes")  # noqa
                                 for r in runs(w, alloc)])
        je, tc, ll, lm = rss("jemalloc"), rss("tcmalloc"), fp("llamalloc"), fp("llamalloc+model")
        hits = med([r["llamalloc_stats"]["counters"]["prediction_cache_hits"] /
                    max(1, r["llamalloc_stats"]["counters"]["prediction_cache_hits"] +
                        r["llamalloc_stats"]["counters"]["prediction_cache_misses"])
                    for r in runs(w, "llamalloc+model") if r.get("llamalloc_stats")])

        def red(b):
            if None in (lm, b, live) or b - live <= 0:
                return "-"
            return f"{100 * (1 - (lm - live) / (b - live)):.0f}%"

        f = lambda v: "-" if v is None else f"{v / MiB:.1f}"  # noqa: E731
        print(" | ".join([w, acc[w], f(je), f(tc), f(ll), f(lm), f(live), red(je), red(tc), red(ll),
                          "-" if hits is None else f"{100 * hits:.2f}%"]))


if __name__ == "__main__":
    main()
