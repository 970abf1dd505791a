#!/usr/bin/env python3
"""The program clock against an untraced run (docs/profiler.md, "Program time"): each workload's load phase as the
workload times it itself, untraced ("seconds") and under `llamalloc trace` ("program_seconds", the same phase on
the profiler's program clock, which the workload reads through workloads/common/program_clock.h; and its wall
time, "seconds"). The traced phase's program time should be the untraced phase's time.

    python3 bench/profiler/traced_clock.py [--workloads image-server,lru-cache,session-store] [--scale small]
                                           [--reps 3] [--json OUT] [--library libllamalloc_prof.so]

Runs alternate (untraced, traced, untraced, traced, ...) so that a change in the machine's load hits both alike;
each figure is the median of --reps runs. The quiet phase is off (--quiet-seconds 0): the load is what is timed.
At small scale image-server serves SMALL_IMAGE_SERVER_REQUESTS requests (its own 240 are too few to time).
Prints one row per workload: untraced seconds, traced wall seconds, traced program seconds, and program/untraced.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from llamalloc import paths

SHAPES = ("lru-cache", "session-store", "ttl-cache", "hash-trimmed-cache", "batch-arena", "producer-consumer",
          "message-broker", "query-spikes-cache", "mixed-lifetime-cache", "stream-pipeline", "ast-builder")


#: image-server's requests at small scale: its 240 take 0.2-0.7 s on a 2-core machine, too short to time.
SMALL_IMAGE_SERVER_REQUESTS = 1200


def command(workload: str, scale: str) -> list[str]:
    if workload == "image-server":
        requests = ["--requests", str(SMALL_IMAGE_SERVER_REQUESTS)] if scale == "small" else []
        return [str(paths.build_dir() / "workloads" / "image-server" / "image-server"), "--scale", scale,
                *requests, "--quiet-seconds", "0"]
    if workload in SHAPES:
        return [str(paths.build_dir() / "workloads" / "shapes" / "shapes"), "--shape", workload, "--scale", scale,
                "--quiet-seconds", "0"]
    sys.exit(f"traced_clock: unknown workload {workload} (image-server or a shape: {', '.join(SHAPES)})")


def report(stdout: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the workload's output")


def run(cmd: list[str], traced: bool, tmp: Path, library: Path | None = None) -> dict:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if traced and library is not None:  # another build of the tracer, preloaded as `llamalloc trace` does
        env.update(LD_PRELOAD=str(library), LLAMALLOC_PROF_MODE="trace", LLAMALLOC_PROF_OUTPUT=str(tmp / "t.trace"))
    elif traced:
        cmd = [sys.executable, "-m", "llamalloc", "trace", "--no-compress", "-o", str(tmp / "t.trace"), "--", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        sys.exit(f"traced_clock: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    out = report(r.stdout)
    if not out.get("ok", False):
        sys.exit(f"traced_clock: {' '.join(cmd)}: the workload's own checks failed: {out}")
    if traced and "program_seconds" not in out:
        sys.exit(f"traced_clock: {' '.join(cmd)}: no program_seconds: the workload does not read the program clock")
    (tmp / "t.trace").unlink(missing_ok=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="image-server,lru-cache,session-store")
    ap.add_argument("--scale", default="small", choices=("small", "default"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--library", type=Path, default=None,
                    help="trace with this libllamalloc_prof.so (another build, e.g. an earlier commit's, which "
                         "must export llamalloc_prof_program_ns) instead of the package's")
    args = ap.parse_args()
    rows = []
    print(f"{'workload':<16} {'untraced s':>11} {'traced wall s':>14} {'traced program s':>17} {'program/untraced':>17}")
    with tempfile.TemporaryDirectory(prefix="traced-clock-") as tmp:
        for workload in args.workloads.split(","):
            cmd = command(workload, args.scale)
            plain, wall, program = [], [], []
            for _ in range(args.reps):
                plain.append(run(cmd, False, Path(tmp))["seconds"])
                traced = run(cmd, True, Path(tmp), args.library)
                wall.append(traced["seconds"])
                program.append(traced["program_seconds"])
            row = {"workload": workload, "scale": args.scale, "untraced_s": statistics.median(plain),
                   "traced_wall_s": statistics.median(wall), "traced_program_s": statistics.median(program),
                   "runs": {"untraced_s": plain, "traced_wall_s": wall, "traced_program_s": program}}
            row["ratio"] = row["traced_program_s"] / row["untraced_s"]
            rows.append(row)
            print(f"{workload:<16} {row['untraced_s']:>11.3f} {row['traced_wall_s']:>14.3f} "
                  f"{row['traced_program_s']:>17.3f} {row['ratio']:>16.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
