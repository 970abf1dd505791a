#!/usr/bin/env python3
"""Overhead of the profiler (`llamalloc record` at the default rate) and of the tracer (`llamalloc trace`) on
the bundled workloads, as throughput ratios to an unprofiled run in the same invocation (docs/profiler.md, "Overhead").

    python3 bench/profiler/overhead.py [--workloads image-server,redis] [--scale small] [--reps 5]
                                       [--sample-bytes 524288] [--json OUT]

Besides throughput, the CPU time (user + system) of the measured process is reported the same way: on a
shared, loaded machine it is far steadier than throughput. Runs are interleaved (plain, record, trace, plain, record, trace, ...) so that a change in the machine's load
hits every configuration alike; each figure is the median of --reps runs. The profiler is preloaded the way
`llamalloc record` / `llamalloc trace` preload it (LD_PRELOAD=libllamalloc_prof.so, LLAMALLOC_PROF_* set), via
llamalloc.workloads so that redis is measured on redis-server alone (its client runs unprofiled). The profile
and trace each run writes are checked to be complete, so a fast but broken run cannot count.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from llamalloc import paths, profile, trace, workloads


def environment(mode: str, out_template: str, sample_bytes: int) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for k in list(env):
        if k.startswith("LLAMALLOC_PROF_"):
            del env[k]
    if mode == "plain":
        return env
    env["LD_PRELOAD"] = str(paths.native_library("libllamalloc_prof.so"))
    env["LLAMALLOC_PROF_OUTPUT"] = out_template
    env["LLAMALLOC_PROF_MODE"] = "profile" if mode == "record" else "trace"
    env["LLAMALLOC_PROF_SAMPLE_BYTES"] = str(sample_bytes)
    return env


class CpuClock:
    """Follows the CPU time of one process (its /proc stat) until it ends: on_start is given its pid."""

    def __init__(self):
        self.seconds = 0.0
        self._thread = None

    def on_start(self, pid: int) -> None:
        self._thread = threading.Thread(target=self._follow, args=(pid,), daemon=True)
        self._thread.start()

    def _follow(self, pid: int) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        while True:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError, IndexError):
                return
            if fields[0] == "Z":
                return
            self.seconds = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            time.sleep(0.05)

    def wait(self) -> float:
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.seconds


def check_output(mode: str, workdir: Path) -> dict:
    """The run's profile or trace must be complete; returns its size figures."""
    files = sorted(p for p in workdir.glob("out.*") if not p.name.endswith(".tmp"))
    if mode == "plain":
        return {}
    if not files:
        raise SystemExit(f"{mode}: the run wrote no output")
    biggest = max(files, key=lambda p: p.stat().st_size)
    if mode == "record":
        prof_path = workdir / "p.prof"
        profile.write(profile.from_raw(biggest), prof_path)
        prof = profile.load(prof_path)
        return {"samples": len(prof.samples), "file_bytes": prof_path.stat().st_size}
    t = trace.load(biggest)
    return {"events": int(len(t.events)), "file_bytes": biggest.stat().st_size}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="image-server,redis")
    ap.add_argument("--scale", default="small", choices=workloads.SCALES)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sample-bytes", type=int, default=512 * 1024)
    ap.add_argument("--modes", default="plain,record,trace")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--extra-args", default="", help="extra arguments for the workload programs (not redis)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    results = {}
    for name in args.workloads.split(","):
        w = workloads.get(name)
        rates: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        sizes: dict[str, dict] = {}
        for rep in range(args.reps):
            for mode in modes:
                with tempfile.TemporaryDirectory(prefix="llamalloc-bench-prof-") as d:
                    workdir = Path(d)
                    env = environment(mode, str(workdir / "out.%p"), args.sample_bytes)
                    clock = CpuClock()
                    kwargs = {"extra_args": args.extra_args.split()} if args.extra_args and name != "redis" else {}
                    r = w.run(args.scale, env, workdir, on_start=clock.on_start, **kwargs)
                    rates[mode].append(float(r[w.throughput_metric]))
                    cpu[mode].append(clock.wait())
                    sizes[mode] = check_output(mode, workdir)
                print(f"{name} rep {rep + 1}/{args.reps} {mode}: {rates[mode][-1]:.1f} {w.throughput_metric}, "
                      f"{cpu[mode][-1]:.2f} s CPU",
                      file=sys.stderr, flush=True)
        med = {m: statistics.median(v) for m, v in rates.items()}
        med_cpu = {m: statistics.median(v) for m, v in cpu.items()}
        results[name] = {
            "metric": w.throughput_metric, "scale": args.scale, "reps": args.reps,
            "median": med, "runs": rates, "outputs": sizes,
            "ratio_to_plain": {m: med[m] / med["plain"] for m in modes if "plain" in med},
            "cpu_seconds": cpu, "median_cpu_seconds": med_cpu,
            "cpu_ratio_to_plain": {m: med_cpu[m] / med_cpu["plain"] for m in modes
                                   if "plain" in med_cpu and med_cpu["plain"] > 0},
        }
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
