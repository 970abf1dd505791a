"""The corpus campaign: every program shape of the corpus (docs/workloads.md, "The corpus") and the bundled
workloads under glibc, jemalloc, tcmalloc, mimalloc, llamalloc and llamalloc with a model trained on the shape,
and each shape's trace replayed under the placement policies. Writes OUT/table.md: per shape, steady-state RSS
after the peak and peak RSS (medians of the repeats) under every allocator, and the replay's footprint after the
peak for 4 KiB pages, llamalloc without a model, the oracle under the library's default options and the oracle
under the best options found (llama-oracle-best), with the targets each row meets.

    python3 bench/corpus/run.py OUT [--scale small] [--repeat 3] [-w SHAPE ...] [--no-model] [--no-sim]
                                    [--no-bench] [--models-only] [--sample-bytes N] [--allocators LIST]
                                    [--quiet-seconds S]

A step whose output exists in OUT is not redone, so an interrupted campaign continues. Per shape:

- profile: the shape's measured process under the profiler over glibc (`LLAMALLOC_PROF_MODE=profile`, the
  workload's own harness, as `bench/table3/run.py` does), symbolized, then `llamalloc train` -> SHAPE.model;
- trace: the same under the tracer (`LLAMALLOC_PROF_MODE=trace`) -> SHAPE.trace, then `llamalloc simulate` with
  pages-4k, llama-default, llama-oracle and llama-oracle-best (when the simulator has it) -> SHAPE.sim.json;
- one `llamalloc bench` over every shape under the allocators (bench.json), and one under llamalloc with each
  shape's model (`--allocators llamalloc+model --model SHAPE=SHAPE.model`, bench-model.json).

The footprint after the peak of a replay is `simulate`'s `after_peak()` (the median over the window that
docs/bench.md, "After the peak", defines: from the live peak's end to the end of the quiet phase, without the
exit's teardown). Memory figures only: the corpus is not a speed benchmark.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llamalloc import paths, profile, workloads
from llamalloc import simulate as sim
from llamalloc.trace import finish_trace

MiB = 1 << 20
PEERS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")
ALLOCATORS = ",".join(PEERS + ("llamalloc",))
SIM_POLICIES = ("pages-4k", "llama-default", "llama-oracle", "llama-oracle-best", "llama-model")


def run_llamalloc(echo: str, args, log: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m llamalloc ARGS`, shown on stderr as `echo` and the arguments, its output also written to `log`;
    the caller judges its exit status (bench/table3 shares it)."""
    print(echo + " ".join(args), file=sys.stderr, flush=True)
    out = subprocess.run([sys.executable, "-m", "llamalloc", *args], capture_output=True, text=True)
    if log is not None:
        log.write_text(out.stdout + out.stderr)
    return out


def sh(*args: str, log: Path | None = None) -> str:
    out = run_llamalloc("corpus: $ llamalloc ", args, log)
    if out.returncode not in (0, 1):
        tail = (out.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"llamalloc {args[0]} failed ({out.returncode}): {tail}")
    return out.stdout


def _clean_env() -> dict[str, str]:
    # The caller's own llamalloc settings (a model, statistics) would change what is recorded.
    return {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_")}


def _run_under_profiler(name: str, scale: str, mode: str, extra: dict[str, str],
                        quiet_seconds: float | None = None) -> list[Path]:
    """Runs the shape's measured process under libllamalloc_prof.so in `mode` (its quiet phase `quiet_seconds`
    long; None: the scale's default); the raw files it wrote, largest last (the process that allocated most: the
    shape's own)."""
    w = workloads.get(name)
    raw_dir = Path(tempfile.mkdtemp(prefix=f"corpus-{name}-{mode}-"))
    env = _clean_env()
    env.update({"LD_PRELOAD": str(paths.native_library("libllamalloc_prof.so")), "LLAMALLOC_PROF_MODE": mode,
                "LLAMALLOC_PROF_OUTPUT": str(raw_dir / "raw.%p"), **extra})
    w.run(scale, env, Path(tempfile.mkdtemp(prefix=f"corpus-{name}-run-")), quiet_seconds=quiet_seconds)
    raws = sorted((p for p in raw_dir.glob("raw.*") if not p.name.endswith(".tmp")), key=lambda p: p.stat().st_size)
    if not raws:
        raise RuntimeError(f"{name}: the profiler wrote nothing in {mode} mode")
    return raws


def record_and_train(name: str, scale: str, out: Path, sample_bytes: int) -> Path | None:
    prof, model = out / f"{name}.prof", out / f"{name}.model"
    if not prof.exists():
        print(f"corpus: profiling {name}", file=sys.stderr, flush=True)
        raws = _run_under_profiler(name, scale, "profile", {"LLAMALLOC_PROF_SAMPLE_BYTES": str(sample_bytes)})
        profile.write(profile.from_raw(raws[-1]), prof)
        sh("symbolize", str(prof))
    if not model.exists():
        sh("train", str(prof), "-o", str(model), log=out / f"{name}.train.txt")
    return model if model.exists() else None


def trace_and_simulate(name: str, scale: str, out: Path, model: Path | None) -> Path | None:
    trace, sim_json = out / f"{name}.trace", out / f"{name}.sim.json"
    if not trace.exists():
        print(f"corpus: tracing {name}", file=sys.stderr, flush=True)
        raws = _run_under_profiler(name, scale, "trace", {})
        finish_trace(raws[-1], trace)
    if not sim_json.exists():
        known = set(sim.POLICIES) | set(sim.ALIASES)
        args = ["simulate", str(trace), "-o", str(sim_json), "-q"]
        for p in SIM_POLICIES:
            if p in known and (p != "llama-model" or model is not None):
                args += ["-p", p]
        if model is not None and "llama-model" in known:
            args += ["--model", str(model)]
        sh(*args, log=out / f"{name}.sim.txt")
    return sim_json if sim_json.exists() else None


def sim_after_peak(sim_json: Path) -> dict[str, float]:
    """Policy -> footprint after the peak (bytes), and the best options' label under "best_options"."""
    result = sim.load(sim_json)
    out: dict = {p: r.after_peak()["footprint_bytes"] for p, r in result.policies.items()}
    best = result.policies.get("llama-oracle-best")
    if best is not None:
        out["best_options"] = " ".join(best.search.get("settings", [])) or "the defaults"
        out["candidates"] = best.search.get("candidates", [])
    return out


def bench_summary(bench_json: Path) -> dict[tuple[str, str], dict]:
    data = json.loads(bench_json.read_text())
    return {(e["workload"], e["allocator"]): e.get("summary") or {} for e in data["results"]}


def mib(v) -> str:
    return "-" if v is None else f"{v / MiB:.1f}"


def table(names: list[str], summ: dict, sims: dict[str, dict], scale: str, repeat: int) -> str:
    allocs = [*PEERS, "llamalloc", "llamalloc+model"]

    def fig(n, a, key):
        return (summ.get((n, a)) or {}).get(key)

    def ratio(a, b):
        return f"{a / b:.2f}" if a is not None and b else "-"

    out = [f"Scale {scale}, medians of {repeat} run(s), MiB.", "",
           "Steady state: mean RSS over the quiet phase after the peak. `vs best peer`: llamalloc over the lowest of "
           "the four peers; `model / none`: llamalloc with the shape's model over llamalloc without one.", "",
           "| shape | " + " | ".join(allocs) + " | vs best peer | model / none |", "|---" * (len(allocs) + 3) + "|"]
    def rows(key, last):
        """A row per shape: `key` under each allocator, llamalloc over the lowest peer, then last(shape, figures)."""
        for n in names:
            v = {a: fig(n, a, key) for a in allocs}
            peers = [v[a] for a in PEERS if v[a]]
            out.append(f"| {n} | " + " | ".join(mib(v[a]) for a in allocs) + " | "
                       + ratio(v["llamalloc"], min(peers) if peers else None) + " | " + last(n, v) + " |")

    rows("steady_rss_bytes", lambda n, v: ratio(v["llamalloc+model"], v["llamalloc"]))
    out += ["", "Peak RSS (the kernel's high-water mark). `vs lowest peer`: llamalloc over the lowest of the four "
            "peers; `AHP share`: llamalloc's highest AnonHugePages over its peak RSS (huge pages under load).", "",
            "| shape | " + " | ".join(allocs) + " | vs lowest peer | AHP share |", "|---" * (len(allocs) + 3) + "|"]
    rows("peak_rss_bytes", lambda n, v: ratio(fig(n, "llamalloc", "peak_anon_huge_pages_bytes"), v["llamalloc"]))
    out += ["", "Replays of each shape's trace, footprint after the peak (the median over the after-peak "
            "window of docs/bench.md): 4 KiB pages; llamalloc without a model and with the shape's model; the oracle under the "
            "default options and under the best options found (llama-oracle-best); `default / best` and "
            "`best / 4k`.", "",
            "| shape | pages-4k | llama-default | llama-model | llama-oracle | llama-oracle-best | default / best "
            "| best / 4k | best options |", "|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        s = sims.get(n)
        if not s:
            out.append(f"| {n} | - | - | - | - | - | - | - | (no trace) |")
            continue
        d, b, k = s.get("llama-oracle"), s.get("llama-oracle-best"), s.get("pages-4k")
        out.append(f"| {n} | {mib(k)} | {mib(s.get('llama-default'))} | {mib(s.get('llama-model'))} | {mib(d)} | "
                   f"{mib(b)} | {ratio(d, b)} | {ratio(b, k)} | {s.get('best_options', '-')} |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", choices=workloads.SCALES, default="small")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("-w", "--workload", action="append", default=None, help="a shape (default: the corpus group)")
    ap.add_argument("--no-model", action="store_true", help="no profile, no model, no llamalloc+model runs")
    ap.add_argument("--no-sim", action="store_true", help="no trace, no replay")
    ap.add_argument("--no-bench", action="store_true", help="profiles, models and replays only (no allocator runs)")
    ap.add_argument("--models-only", action="store_true",
                    help="of the benches, only llamalloc with the models (bench-model.json); no table")
    ap.add_argument("--sample-bytes", type=int, default=4096, help="the profile's sampling period (record)")
    ap.add_argument("--quiet-seconds", type=float, default=None,
                    help="the shapes' quiet phase in the bench (default: the scale's)")
    ap.add_argument("--allocators", default=ALLOCATORS)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    names = a.workload or workloads.expand(["corpus"])
    models: dict[str, Path] = {}
    sims: dict[str, dict] = {}
    for n in names:
        try:
            model = None if a.no_model else record_and_train(n, a.scale, a.out, a.sample_bytes)
            if model is not None:
                models[n] = model
            if not a.no_sim:
                sj = trace_and_simulate(n, a.scale, a.out, model)
                if sj is not None:
                    sims[n] = sim_after_peak(sj)
        except (RuntimeError, workloads.WorkloadMissing, workloads.WorkloadFailed) as e:
            print(f"corpus: {n}: {e}", file=sys.stderr, flush=True)
    if a.no_bench:
        return
    # The allocators, then llamalloc with each shape's model in a bench of its own (the models come last, so that
    # the allocators' runs can start while the shapes are still being profiled).
    quiet = ["--quiet-seconds", str(a.quiet_seconds)] if a.quiet_seconds is not None else []
    runs = [("bench.json", names, a.allocators, [])]
    if models and not a.no_model:
        runs.append(("bench-model.json", list(models), "llamalloc+model",
                     sum((["--model", f"{n}={m}"] for n, m in models.items()), [])))
    summ: dict = {}
    for file, shapes, allocators, extra in runs:
        path = a.out / file
        if not path.exists() and not (a.models_only and file == "bench.json"):
            sh("bench", *sum((["-w", n] for n in shapes), []), "--allocators", allocators, "--repeat", str(a.repeat),
               "--scale", a.scale, "--out", str(a.out / file.replace(".json", "")), "--json", str(path),
               "--no-plots", *quiet, *extra, log=a.out / file.replace(".json", ".txt"))
        if path.exists():
            summ.update(bench_summary(path))
    if a.models_only:
        return
    text = table(names, summ, sims, a.scale, a.repeat)
    (a.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError) as e:  # a failed step: one line, not a traceback
        sys.exit(f"corpus: {e}")
