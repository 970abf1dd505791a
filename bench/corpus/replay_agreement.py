"""The replay against the real run: per shape, the heap-resident bytes after the peak that `llamalloc simulate`'s
llama-default replay of the shape's trace gives, beside what llamalloc's own statistics report for the shape run
for real under it, and the verdicts `simulate`'s table, `report`'s headline and the README's rule give.

    python3 bench/corpus/replay_agreement.py OUT [--scale small] [--repeat 3] [--traces N] [--quiet-seconds S]
                                             [-w SHAPE ...]

Per shape (default: the corpus group, bench/corpus/run.py's), each step skipped when its output exists in OUT:

- traces (after the runs): the shape under the tracer, as the corpus campaign traces it (`run._run_under_profiler`, mode trace),
  `--traces` times (default: `--repeat`) -> OUT/SHAPE.SCALE.K.trace, each replayed under pages-2m, llama-oracle and llama-default ->
  OUT/SHAPE.SCALE.K.sim.json (a shape's runs differ: its threads interleave and its clock runs at its own pace, so
  one trace is one sample, as one run is);
- real runs: the shape under libllamalloc.so, `--repeat` times, its statistics written every 0.1 s while it runs
  (LLAMALLOC_STATS_SIGNAL, docs/formats/stats.md), and its threads counted -> OUT/SHAPE.SCALE.real.json. A
  process with more than one thread (besides llamalloc's sweeper) is replayed with `--other-threads`: a thread
  that never allocates (redis-server's background threads) is in no trace, yet the library starts its sweeper
  for it.

Both with the same quiet phase after the load: `--quiet-seconds`, by default the corpus campaign's 5 s at small scale
(docs/results/2026-11-28-corpus.md) and the workloads' own 10 s at default scale. A quiet phase of 2 s (the small
scale's default) is short beside the passes that take a sparse heap down (an idle heap's spans are purged at its
1st, 2nd, 4th and 8th idle pass, 2 s): the median would fall on that descent, in the replay and in each run at a
different point of it.

Heap-resident is the footprint less the bytes subreleased and span-purged inside it (the statistics'
footprint_bytes - subreleased_bytes - span_purged_bytes; the replay's heap_resident_bytes). Both sides take the
median over the after-peak window (`llamalloc.after_peak`, docs/bench.md "After the peak") of their own samples,
the window found on their live bytes; each side's figure is the median of its traces' or runs'. The verdicts, of
the trace whose replay gives the median: `simulate`'s table line and `report`'s headline (`simulate.conclusion`,
read for "can help" or "would not help"), and the README's rule applied to the table's after-peak column (the
oracle at least 10% below pages-2m). OUT/agreement-SCALE.md gets the table, which is also printed.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as corpus  # noqa: E402  (bench/corpus/run.py: the campaign's tracing)

from llamalloc import after_peak, workloads  # noqa: E402
from llamalloc import simulate as sim  # noqa: E402
from llamalloc.allocators import Allocator, allocator_env, parse_allocators  # noqa: E402
from llamalloc.commands.simulate import summary_table  # noqa: E402
from llamalloc.report import sim_conclusion  # noqa: E402
from llamalloc.trace import finish_trace  # noqa: E402

MiB = 1 << 20
POLICIES = ("pages-2m", "llama-oracle", "llama-default")
# The shapes' quiet-phase signal (workloads/quiet.py): ignored by default, so harmless before the library's handler.
STATS_SIGNAL = workloads.STATS_SIGNAL
SAMPLE_SECONDS = 0.1
TOLERANCE = 0.10
# The quiet phase per scale when --quiet-seconds is not given (None: the workloads' default for the scale).
CAMPAIGN_QUIET_SECONDS = {"small": 5.0}


def trace_and_replay(name: str, scale: str, out: Path, quiet_seconds: float | None, k: int,
                     other_threads: bool) -> sim.SimResult:
    """The shape's k-th trace (its runs differ: threads interleave, the clock runs at its own pace) and its replay;
    `other_threads`: the process has threads that the trace may not show (`simulate --other-threads`)."""
    trace, sim_json = out / f"{name}.{scale}.{k}.trace", out / f"{name}.{scale}.{k}.sim.json"
    if not trace.exists():
        print(f"agreement: tracing {name} ({scale}, trace {k})", file=sys.stderr, flush=True)
        raws = corpus._run_under_profiler(name, scale, "trace", {}, quiet_seconds)
        finish_trace(raws[-1], trace)
    if not sim_json.exists():
        print(f"agreement: replaying {trace.name}", file=sys.stderr, flush=True)
        sim.simulate(trace, POLICIES, sim_json, other_threads=other_threads)
    return sim.load(sim_json)


def program_threads(pid: int) -> int:
    """The threads of a running process, without llamalloc's sweeper thread (0 once it is gone)."""
    n = 0
    for comm in glob.glob(f"/proc/{pid}/task/*/comm"):
        try:
            n += Path(comm).read_text().strip() != "llamalloc-sweep"
        except OSError:
            pass
    return n


class StatsSampler:
    """Has llamalloc write its statistics every SAMPLE_SECONDS (STATS_SIGNAL) and reads each file as it comes:
    (seconds since start, live, footprint, subreleased + span purged bytes). A harness that samples the program's
    quiet phase the same way (redis, cpython, sqlite) takes some of the files itself: those samples are missing."""

    def __init__(self, stats_path: Path):
        base = str(stats_path)[:-len(".json")]
        self.pattern = glob.escape(base) + ".signal-*.json"
        self.samples: list[tuple[float, int, int, int]] = []
        # The most threads the process had at once, besides llamalloc's sweeper.
        self.threads = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int) -> None:
        begun = time.monotonic()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    os.kill(pid, getattr(signal, f"SIG{STATS_SIGNAL}"))
                except ProcessLookupError:
                    return
                self._stop.wait(SAMPLE_SECONDS)
                self._collect(time.monotonic() - begun)
                self.threads = max(self.threads, program_threads(pid))

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def _collect(self, at: float) -> None:
        for name in sorted(glob.glob(self.pattern), key=lambda n: int(n.rsplit(".signal-", 1)[1].split(".")[0])):
            try:
                data = json.loads(Path(name).read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue  # being written, or taken by the harness
            Path(name).unlink(missing_ok=True)
            if all(isinstance(data.get(k), int) for k in ("live_bytes", "footprint_bytes", "subreleased_bytes",
                                                           "span_purged_bytes")):
                self.samples.append((at, data["live_bytes"], data["footprint_bytes"],
                                     data["subreleased_bytes"] + data["span_purged_bytes"]))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def real_run(name: str, scale: str, llamalloc: Allocator, quiet_seconds: float | None) -> dict:
    """One run under llamalloc: the after-peak medians of its statistics' samples."""
    w = workloads.get(name)
    workdir = Path(tempfile.mkdtemp(prefix=f"agreement-{name}-"))
    stats = workdir / "stats.json"
    env = allocator_env(llamalloc, stats)
    env["LLAMALLOC_STATS_SIGNAL"] = STATS_SIGNAL
    sampler = StatsSampler(stats)
    try:
        metrics = w.run(scale, env, workdir, on_start=sampler.start, quiet_seconds=quiet_seconds)
    finally:
        sampler.stop()
    s = sorted(sampler.samples)
    t, live = [x[0] for x in s], [x[1] for x in s]
    win = after_peak.window(t, live)
    resident = [x[2] - x[3] for x in s][win.slice]
    footprint = [x[2] for x in s][win.slice]
    steady = metrics.get("steady_state") or {}
    return {"samples": len(s), "threads": sampler.threads, "window_s": [t[win.start], t[win.stop - 1]] if len(win) else None,
            "heap_resident_bytes": after_peak.median(resident), "footprint_bytes": after_peak.median(footprint),
            "steady_rss_bytes": steady.get("rss_bytes"), "series": [list(x) for x in s]}


def real_runs(name: str, scale: str, repeat: int, out: Path, llamalloc: Allocator,
              quiet_seconds: float | None) -> list[dict]:
    path = out / f"{name}.{scale}.real.json"
    runs = json.loads(path.read_text()) if path.exists() else []
    if runs and any("threads" not in r for r in runs):
        # Runs recorded without their thread count: one more run tells it (its figures are not used).
        print(f"agreement: {name} under llamalloc, its threads", file=sys.stderr, flush=True)
        threads = real_run(name, scale, llamalloc, quiet_seconds)["threads"]
        for r in runs:
            r.setdefault("threads", threads)
        path.write_text(json.dumps(runs, indent=1))
    while len(runs) < repeat:
        print(f"agreement: {name} under llamalloc, run {len(runs) + 1}/{repeat}", file=sys.stderr, flush=True)
        runs.append(real_run(name, scale, llamalloc, quiet_seconds))
        path.write_text(json.dumps(runs, indent=1))
    return runs[:repeat]


def verdict_of(text: str | None) -> str:
    if text is None:
        return "-"
    return "can help" if "can help" in text else "would not help" if "would not help" in text else "?"


def readme_rule(result: sim.SimResult) -> str:
    """The README's diagnostic rule, read off the table's after-peak column: lifetime placement can help when the
    oracle keeps at least 10% less than 2 MiB pages without lifetimes."""
    o = result.policies["llama-oracle"].after_peak()["footprint_bytes"]
    b = result.policies["pages-2m"].after_peak()["footprint_bytes"]
    return "can help" if b and (b - o) / b >= sim.HELPS_SHARE else "would not help"


def row(name: str, scale: str, results: list[sim.SimResult], runs: list[dict]) -> dict:
    """The replays' median heap-resident bytes after the peak against the runs'; the verdicts of the replay whose
    figure is the median."""
    resident = [r.policies["llama-default"].after_peak()["heap_resident_bytes"] for r in results]
    middle = results[sorted(range(len(results)), key=lambda i: resident[i])[(len(results) - 1) // 2]]
    trace_name = Path(middle.trace).name
    real = [r["heap_resident_bytes"] for r in runs]
    table_line = [line for line in summary_table(middle).splitlines() if line.startswith(f"{trace_name}: ")]
    verdicts = (verdict_of(table_line[0] if table_line else None), verdict_of(sim_conclusion(middle, trace_name)),
                readme_rule(middle))
    replay, measured = statistics.median(resident), statistics.median(real)
    return {"shape": name, "scale": scale,
            "footprint": statistics.median(r.policies["llama-default"].after_peak()["footprint_bytes"]
                                           for r in results),
            "replay": replay, "replay_range": (min(resident), max(resident)), "real": measured,
            "real_range": (min(real), max(real)),
            "real_footprint": statistics.median(r["footprint_bytes"] for r in runs),
            "ratio": replay / measured if measured else None, "verdicts": verdicts}


def table(rows: list[dict], repeat: int, traces: int, quiet_seconds: float | None) -> str:
    quiet = "the scale's default" if quiet_seconds is None else f"{quiet_seconds:g} s"
    out = [f"Quiet phase {quiet}. Replay: llama-default, after-peak medians, median of {traces} trace(s). Real run: "
           f"llamalloc's statistics every {SAMPLE_SECONDS} s, after-peak median per run, median of {repeat} runs. "
           "Heap-resident: footprint less subreleased and span-purged bytes. MiB; the range of the traces or runs "
           "in brackets.", "",
           "| shape | scale | replay footprint | replay heap-resident | real footprint | real heap-resident | "
           "replay / real | within 10% | verdict: simulate / report / README |",
           "|---|---|---|---|---|---|---|---|---|"]

    def span(lo_hi) -> str:
        return f"[{lo_hi[0] / MiB:.1f}-{lo_hi[1] / MiB:.1f}]"

    for r in rows:
        ok = r["ratio"] is not None and abs(r["ratio"] - 1) <= TOLERANCE
        v = r["verdicts"]
        agree = "same" if len(set(v)) == 1 else "DIFFER"
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}"
        out.append(f"| {r['shape']} | {r['scale']} | {r['footprint'] / MiB:.1f} | {r['replay'] / MiB:.1f} "
                   f"{span(r['replay_range'])} | {r['real_footprint'] / MiB:.1f} | {r['real'] / MiB:.1f} "
                   f"{span(r['real_range'])} | {ratio} | {'yes' if ok else 'NO'} | {v[0]} / {v[1]} / {v[2]} ({agree}) |")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", choices=workloads.SCALES, default="small")
    ap.add_argument("--repeat", type=int, default=3, help="real runs per shape")
    ap.add_argument("--traces", type=int, default=None, help="traces per shape (default: --repeat)")
    ap.add_argument("-w", "--workload", action="append", default=None, help="a shape (default: the corpus group)")
    ap.add_argument("--quiet-seconds", type=float, default=None,
                    help="the quiet phase after the load (default: 5 at small scale, the scale's own at default)")
    a = ap.parse_args()
    quiet = a.quiet_seconds if a.quiet_seconds is not None else CAMPAIGN_QUIET_SECONDS.get(a.scale)
    traces = a.repeat if a.traces is None else a.traces
    if a.repeat < 1 or traces < 1:
        sys.exit("agreement: --repeat and --traces must be at least 1")
    names = workloads.expand(a.workload or ["corpus"])
    name, library, problem = parse_allocators("llamalloc")[0]
    if problem:
        sys.exit(f"agreement: {problem}")
    llamalloc = Allocator(name, library)
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in names:
        try:
            runs = real_runs(n, a.scale, a.repeat, a.out, llamalloc, quiet)
            other_threads = max(r["threads"] for r in runs) > 1
            results = [trace_and_replay(n, a.scale, a.out, quiet, k, other_threads) for k in range(1, traces + 1)]
            rows.append(row(n, a.scale, results, runs))
        except (RuntimeError, workloads.WorkloadMissing, workloads.WorkloadFailed) as e:
            print(f"agreement: {n}: {e}", file=sys.stderr, flush=True)
    text = table(rows, a.repeat, traces, quiet)
    (a.out / f"agreement-{a.scale}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError) as e:
        sys.exit(f"agreement: {e}")
