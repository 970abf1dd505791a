"""`llamalloc bench`: every workload under every allocator, side by side (docs/bench.md).

Each run starts the workload with the allocator preloaded (glibc: nothing preloaded), samples the measured
process's RSS and AnonHugePages from /proc/PID/smaps_rollup every `interval` seconds, and keeps the workload's
own figures. Under llamalloc, LLAMALLOC_STATS makes the allocator write its statistics file at exit, which is
kept with the run. Repeats are summarised by their median; ratios are to glibc measured in the same bench.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import workloads as _workloads
from . import allocators as _allocators
from .allocators import Allocator, allocator_env, parse_allocators
from .errors import UserError
from . import files

JSON_VERSION = 1
MiB = 1 << 20


read_smaps_rollup = _workloads.read_smaps_rollup
read_vm_hwm = _workloads.read_vm_hwm


class MemorySampler:
    """Samples a process's RSS and AnonHugePages on a thread until it stops or `stop()` is called."""

    def __init__(self, interval_seconds: float = 0.1):
        self.interval_seconds = interval_seconds
        self.samples: list[tuple[float, int, int]] = []  # (seconds since start, rss bytes, anon huge bytes)
        self.hwm_bytes: int | None = None  # the process's VmHWM at the last sample (its peak RSS so far)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pid: int) -> None:
        start = time.monotonic()

        def loop() -> None:
            while not self._stop.is_set():
                reading = read_smaps_rollup(pid)
                if reading is None:
                    return
                self.samples.append((round(time.monotonic() - start, 4), reading[0], reading[1]))
                hwm = read_vm_hwm(pid)
                if hwm is not None:
                    self.hwm_bytes = max(hwm, self.hwm_bytes or 0)
                self._stop.wait(self.interval_seconds)

        self._thread = threading.Thread(target=loop, name=f"sampler-{pid}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@dataclass
class Run:
    workload: str
    allocator: str
    repeat: int
    ok: bool
    error: str | None = None
    wall_seconds: float = 0.0
    metrics: dict = field(default_factory=dict)
    samples: list = field(default_factory=list)
    llamalloc_stats: dict | None = None
    hwm_bytes: int | None = None  # the kernel's high-water mark of RSS (VmHWM) at the last sample

    @property
    def peak_rss_bytes(self) -> int | None:
        """The highest RSS: the kernel's VmHWM as last sampled (a peak between samples included), or the highest
        sample."""
        sampled = max((s[1] for s in self.samples), default=None)
        if self.hwm_bytes is None:
            return sampled
        return max(self.hwm_bytes, sampled or 0)

    @property
    def final_rss_bytes(self) -> int | None:
        return self.samples[-1][1] if self.samples else None

    @property
    def peak_anon_huge_pages_bytes(self) -> int | None:
        return max((s[2] for s in self.samples), default=None)

    @property
    def final_anon_huge_pages_bytes(self) -> int | None:
        return self.samples[-1][2] if self.samples else None

    @property
    def steady_state(self) -> dict:
        """The workload's own "steady_state" block (its quiet phase after the load), or {} without one."""
        block = self.metrics.get("steady_state")
        return block if isinstance(block, dict) else {}

    def to_json(self) -> dict:
        return {
            "repeat": self.repeat, "ok": self.ok, "error": self.error, "wall_seconds": round(self.wall_seconds, 4),
            "seconds": self.metrics.get("seconds"), "metrics": self.metrics,
            "peak_rss_bytes": self.peak_rss_bytes, "hwm_bytes": self.hwm_bytes, "final_rss_bytes": self.final_rss_bytes,
            "peak_anon_huge_pages_bytes": self.peak_anon_huge_pages_bytes,
            "final_anon_huge_pages_bytes": self.final_anon_huge_pages_bytes,
            "llamalloc_stats": self.llamalloc_stats,
            "samples": [list(s) for s in self.samples],
        }


SUMMARY_FIELDS = ("seconds", "throughput", "peak_rss_bytes", "final_rss_bytes", "peak_anon_huge_pages_bytes",
                  "final_anon_huge_pages_bytes", "steady_rss_bytes", "steady_anon_huge_pages_bytes")
# Summary key -> key of the workload's "steady_state" block: means over the quiet phase after the load, which is
# the after-peak window of a run (docs/bench.md, "After the peak"): the workload marks the phase and samples itself
# there, so the bench takes those samples rather than a window found on its own RSS curve. footprint and live: llamalloc's own (its statistics while the program
# runs), only under llamalloc; workload_*: the program's own figures, under every allocator, where it has them.
STEADY_FIELDS = {
    "steady_samples": "samples",
    "steady_rss_bytes": "rss_bytes",
    "steady_anon_huge_pages_bytes": "anon_huge_pages_bytes",
    "steady_footprint_bytes": "llamalloc_footprint_bytes",
    "steady_live_bytes": "llamalloc_live_bytes",
    "steady_workload_live_bytes": "workload_live_bytes",
    "steady_workload_footprint_bytes": "footprint_bytes",
}


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def footprint_figures(stats: dict | None) -> dict:
    """The footprint-like figures of a llamalloc statistics file, wherever they sit in it."""
    found: dict = {}
    if not isinstance(stats, dict):
        return found

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    "footprint" in key or key in ("live_bytes", "peak_live_bytes")):
                found[f"{prefix}{key}"] = value

    walk(stats, "")
    return found


@dataclass
class BenchResult:
    scale: str
    repeat: int
    allocators: list[Allocator]
    workloads: list[str]
    runs: list[Run] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    quiet_seconds: float | None = None
    started: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def runs_of(self, workload: str, allocator: str) -> list[Run]:
        return [r for r in self.runs if r.workload == workload and r.allocator == allocator]

    def summary(self, workload: str, allocator: str) -> dict | None:
        ok = [r for r in self.runs_of(workload, allocator) if r.ok]
        if not ok:
            return None
        metric = getattr(_workloads.WORKLOADS.get(workload), "throughput_metric", None)
        out = {
            "runs": len(ok),
            "throughput_metric": metric,
            "seconds": _median([r.metrics.get("seconds", r.wall_seconds) for r in ok]),
            "throughput": _median([r.metrics.get(metric) for r in ok]) if metric else None,
            "peak_rss_bytes": _median([r.peak_rss_bytes for r in ok]),
            "final_rss_bytes": _median([r.final_rss_bytes for r in ok]),
            "peak_anon_huge_pages_bytes": _median([r.peak_anon_huge_pages_bytes for r in ok]),
            "final_anon_huge_pages_bytes": _median([r.final_anon_huge_pages_bytes for r in ok]),
        }
        for key, block_key in STEADY_FIELDS.items():
            value = _median([r.steady_state.get(block_key) for r in ok])
            if value is not None or key in ("steady_samples", "steady_rss_bytes", "steady_anon_huge_pages_bytes"):
                out[key] = value
        footprints = [footprint_figures(r.llamalloc_stats) for r in ok]
        for key in sorted({k for f in footprints for k in f}):
            out[f"llamalloc.{key}"] = _median([f.get(key) for f in footprints])
        if workload == "frag-micro":
            for key in ("live_bytes", "footprint_bytes", "footprint4k_bytes", "rss_bytes", "anon_huge_pages_bytes"):
                out[f"workload.{key}"] = _median([r.metrics.get(key) for r in ok])
        return out

    def ratios(self, workload: str, allocator: str) -> dict | None:
        mine, base = self.summary(workload, allocator), self.summary(workload, "glibc")
        if mine is None or base is None:
            return None
        out = {}
        for key in SUMMARY_FIELDS:
            a, b = mine.get(key), base.get(key)
            out[key] = (a / b) if (a is not None and b) else None
        return out

    def to_json(self) -> dict:
        results = []
        for w in self.workloads:
            for a in self.allocators:
                runs = self.runs_of(w, a.name)
                if not runs:
                    continue
                results.append({"workload": w, "allocator": a.name, "summary": self.summary(w, a.name),
                                "ratios_to_glibc": self.ratios(w, a.name), "runs": [r.to_json() for r in runs]})
        return {
            "format": "llamalloc-bench", "version": JSON_VERSION, "started": self.started, "scale": self.scale,
            "repeat": self.repeat, "quiet_seconds": self.quiet_seconds, "host": {"cpus": os.cpu_count(), "platform": sys.platform},
            "allocators": {a.name: (str(a.library) if a.library else None) for a in self.allocators},
            "workloads": self.workloads, "problems": self.problems, "results": results,
        }


def _read_stats(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return {"unreadable": f"{path}: {e}"}


Progress = Callable[[str], None]


def run_bench(workload_names: list[str], allocator_spec: str, repeat: int, scale: str, out_dir: Path,
              progress: Progress = lambda line: None, interval_seconds: float = 0.1,
              models: dict[str, Path] | None = None, quiet_seconds: float | None = None) -> BenchResult:
    """models: workload name -> model file, for the llamalloc+model allocator (its runs of a workload without a
    model are skipped and reported). quiet_seconds: the workloads' quiet phase after the load (None: their
    default for the scale; 0: none, so no steady-state figures)."""
    if quiet_seconds is not None and quiet_seconds < 0:
        raise UserError("--quiet-seconds must be >= 0")
    models = dict(models or {})
    if repeat < 1:
        raise UserError("--repeat must be at least 1")
    if scale not in _workloads.SCALES:
        raise UserError(f"--scale must be one of {', '.join(_workloads.SCALES)}")
    # Group names (`corpus`) stand for their workloads; unknown names are bad input: fail before running.
    chosen = [_workloads.get(n) for n in _workloads.expand(workload_names)]
    parsed = parse_allocators(allocator_spec)
    result = BenchResult(scale=scale, repeat=repeat, workloads=[w.name for w in chosen],
                         allocators=[Allocator(n, lib) for n, lib, _ in parsed],
                         quiet_seconds=_workloads.QUIET_SECONDS[scale] if quiet_seconds is None else quiet_seconds)
    usable = []
    for (name, lib, problem), allocator in zip(parsed, result.allocators):
        if problem:
            result.problems.append(problem)
            progress(f"skipped: {problem}")
        else:
            usable.append(allocator)
    # Absolute: workloads change directory (redis-server --dir), and the stats path must survive that.
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "stats").mkdir(exist_ok=True)

    total = len(chosen) * len(usable) * repeat
    done = 0
    for workload in chosen:
        try:
            # Find (and for redis, build) the program once, before any timing.
            workload.executable()
        except _workloads.WorkloadMissing as e:
            result.problems.append(str(e))
            progress(f"skipped: {e}")
            done += len(usable) * repeat
            continue
        model_env: dict[str, str] | None = None
        runnable = list(usable)
        if any(a.needs_model for a in usable):
            if workload.name not in models:
                for a in usable:
                    if a.needs_model:
                        problem = f"{workload.name} under {a.name}: no model given (--model {workload.name}=MODEL)"
                        result.problems.append(problem)
                        progress(f"skipped: {problem}")
                        done += repeat
                runnable = [a for a in usable if not a.needs_model]
            else:
                from .prepare import prepare_for_run  # the token tables of the program and its libraries, cached
                model_env = prepare_for_run(str(models[workload.name]), str(workload.executable()),
                                            log=lambda msg: progress(msg))
        for rep in range(repeat):
            # Interleave allocators within a repeat so that slow drift on a shared machine hits all alike.
            for allocator in runnable:
                done += 1
                label = f"[{done}/{total}] {workload.name} under {allocator.name} (repeat {rep + 1}/{repeat})"
                progress(f"{label} ...")
                run = _one_run(workload, allocator, rep, scale, out_dir, interval_seconds,
                               model_env if allocator.needs_model else None, quiet_seconds)
                result.runs.append(run)
                if run.ok:
                    peak = run.peak_rss_bytes
                    steady = run.steady_state.get("rss_bytes")
                    progress(f"{label}: {run.metrics.get('seconds', run.wall_seconds):.2f} s, peak RSS "
                             f"{(peak or 0) / MiB:.1f} MiB" +
                             ("" if steady is None else f", steady-state RSS {steady / MiB:.1f} MiB"))
                else:
                    result.problems.append(f"{workload.name} under {allocator.name}: {run.error}")
                    progress(f"{label}: FAILED: {run.error}")
    _check_same_output(result)
    return result


def _one_run(workload, allocator: Allocator, rep: int, scale: str, out_dir: Path, interval: float,
             model_env: dict[str, str] | None = None, quiet_seconds: float | None = None) -> Run:
    stats_path = out_dir / "stats" / f"{workload.name}.{allocator.name}.{rep}.json"
    stats_path.unlink(missing_ok=True)
    sampler = MemorySampler(interval)
    workdir = Path(tempfile.mkdtemp(prefix=f"llamalloc-bench-{workload.name}-"))
    started = time.monotonic()
    try:
        metrics = workload.run(scale, allocator_env(allocator, stats_path, model_env), workdir,
                               on_start=sampler.start, quiet_seconds=quiet_seconds)
        run = Run(workload.name, allocator.name, rep, ok=True, metrics=metrics)
    except UserError as e:
        run = Run(workload.name, allocator.name, rep, ok=False, error=str(e))
    except (OSError, subprocess.SubprocessError, ValueError) as e:  # a hung client, a vanished binary, bad output
        run = Run(workload.name, allocator.name, rep, ok=False, error=f"{type(e).__name__}: {e}")
    finally:
        sampler.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    run.wall_seconds = time.monotonic() - started
    run.samples = sampler.samples
    run.hwm_bytes = sampler.hwm_bytes
    if allocator.is_llamalloc:
        run.llamalloc_stats = _read_stats(stats_path)
    return run


def _check_same_output(result: BenchResult) -> None:
    """Deterministic workloads must print the same checksum under every allocator."""
    for w in result.workloads:
        sums = {r.allocator: r.metrics.get("checksum") for r in result.runs
                if r.workload == w and r.ok and r.metrics.get("checksum")}
        if len(set(sums.values())) > 1:
            result.problems.append(f"{w}: checksums differ between allocators: {sums}")


# ----------------------------------------------------------------------------------------------------------
def _fmt(value, scale: float = 1.0, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value / scale:.{digits}f}"


def format_table(result: BenchResult) -> str:
    header = ["workload", "allocator", "time s", "throughput", "peak RSS MiB", "final RSS MiB", "peak AHP MiB",
              "time x", "thrpt x", "peak x", "final x", "footprint MiB (peak)", "steady RSS MiB", "steady x",
              "steady fp MiB", "steady live MiB"]
    rows = [header]
    for w in result.workloads:
        for a in result.allocators:
            s = result.summary(w, a.name)
            if s is None:
                if result.runs_of(w, a.name):
                    rows.append([w, a.name, "FAILED"] + [""] * (len(header) - 3))
                continue
            r = result.ratios(w, a.name) or {}
            foot = "-"
            cur = next((v for k, v in s.items() if k.startswith("llamalloc.") and k.endswith("footprint_bytes")
                        and "peak" not in k), None)
            peak = next((v for k, v in s.items() if k.startswith("llamalloc.") and "peak_footprint" in k), None)
            if cur is not None or peak is not None:
                foot = f"{_fmt(cur, MiB)} ({_fmt(peak, MiB)})"
            elif w == "frag-micro" and s.get("workload.footprint_bytes") is not None:
                foot = f"{_fmt(s['workload.footprint_bytes'], MiB)} (addr)"
            thr = s.get("throughput")
            rows.append([w, a.name, _fmt(s["seconds"], 1, 2), "-" if thr is None else f"{thr:,.0f}",
                         _fmt(s["peak_rss_bytes"], MiB), _fmt(s["final_rss_bytes"], MiB),
                         _fmt(s["peak_anon_huge_pages_bytes"], MiB), _fmt(r.get("seconds"), 1, 2),
                         _fmt(r.get("throughput"), 1, 2), _fmt(r.get("peak_rss_bytes"), 1, 2),
                         _fmt(r.get("final_rss_bytes"), 1, 2), foot, _fmt(s.get("steady_rss_bytes"), MiB),
                         _fmt(r.get("steady_rss_bytes"), 1, 2), *_steady_cells(s)])
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(widths[i]) if i < 2 else str(c).rjust(widths[i]) for i, c in enumerate(row))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def learning_costs(result: BenchResult) -> list[str]:
    """Per workload, a line for each llamalloc variant with a model or learning that keeps more than llamalloc
    alone, after the peak or at it (allocators.learning_cost_lines, over the runs' spread)."""
    return learning_costs_of({w: {a.name: [(r.steady_state.get("rss_bytes"), r.peak_rss_bytes)
                                           for r in result.runs_of(w, a.name) if r.ok]
                                  for a in result.allocators}
                              for w in result.workloads})


def learning_costs_of(runs: dict[str, dict[str, list[tuple]]]) -> list[str]:
    """`learning_costs` from each workload's and allocator's good runs, each as (steady RSS, peak RSS), either
    None where the run lacks it: what `llamalloc bench` prints under its table and `report` under a bench."""
    lines = []
    for w, by_allocator in runs.items():
        for index, what in ((0, "after the peak"), (1, "at the peak")):
            figures = {}
            for name, pairs in by_allocator.items():
                values = [p[index] for p in pairs if p[index] is not None]
                if values:
                    figures[name] = (_median(values), min(values), max(values))
            lines += [f"{w}: {line}" for line in _allocators.learning_cost_lines(figures, what)]
    return lines


def _steady_cells(s: dict) -> list[str]:
    """Steady-state footprint and live: llamalloc's own where known, else the workload's (marked)."""
    def cell(own_key: str, workload_key: str, mark: str) -> str:
        if s.get(own_key) is not None:
            return _fmt(s[own_key], MiB)
        if s.get(workload_key) is not None:
            return f"{_fmt(s[workload_key], MiB)} ({mark})"
        return "-"
    return [cell("steady_footprint_bytes", "steady_workload_footprint_bytes", "addr"),
            cell("steady_live_bytes", "steady_workload_live_bytes", "own")]


def write_json(result: BenchResult, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    files.write_text(path, json.dumps(result.to_json(), indent=1))


def plot_rss(result: BenchResult, out_dir: Path) -> list[Path]:
    """One PNG per workload: RSS (solid) and AnonHugePages (dashed) over time, per allocator (first repeat)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for w in result.workloads:
        runs = [r for r in result.runs if r.workload == w and r.ok and r.repeat == 0 and r.samples]
        if not runs:
            continue
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for r in runs:
            t = [s[0] for s in r.samples]
            line, = ax.plot(t, [s[1] / MiB for s in r.samples], label=f"{r.allocator} RSS")
            ax.plot(t, [s[2] / MiB for s in r.samples], linestyle="--", color=line.get_color(), alpha=0.6,
                    label=f"{r.allocator} AnonHugePages")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("MiB")
        ax.set_title(f"{w}: resident memory over time ({result.scale} scale)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = out_dir / f"rss-{w}.png"
        with files.replacing(path) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
        plt.close(fig)
        written.append(path)
    return written
