#!/usr/bin/env python3
"""Lifetime-class agreement of a sparse profile with a dense trace of the same program, run the same way
(docs/profiler.md, "Program time"; the definition is llamalloc.agreement's): the program runs once under
`llamalloc trace` and once under `llamalloc record`, and the two class distributions by objects are compared.

    python3 bench/profiler/agreement.py [--workload image-server] [--scale small] [--sample-bytes 524288]
                                        [--libdir DIR] [--json OUT] [-- EXTRA ARGS FOR THE WORKLOAD]

--libdir DIR takes libllamalloc_prof.so from DIR (LLAMALLOC_LIBDIR), to compare one profiler build with
another. Prints each distribution (objects per class, in percent), the clock each file's times are on, and the
agreement; exits 1 when the agreement is below llamalloc.agreement.MIN_AGREEMENT.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from llamalloc import agreement, workloads
from llamalloc.model.classes import CLASS_NAMES


def run(cmd: list[str], env: dict[str, str]) -> None:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"agreement.py: error: {' '.join(cmd[:4])} ... exited {r.returncode}: {r.stderr.strip()[-400:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="image-server", choices=sorted(workloads.WORKLOADS))
    ap.add_argument("--scale", default="small")
    ap.add_argument("--sample-bytes", type=int, default=524288)
    ap.add_argument("--libdir", help="take libllamalloc_prof.so from this folder")
    ap.add_argument("--json", help="write the result here too")
    ap.add_argument("extra", nargs="*", help="further arguments for the workload (after --)")
    args = ap.parse_args()
    w = workloads.WORKLOADS[args.workload]
    if not isinstance(w, workloads.Workload):
        sys.exit(f"agreement.py: error: workload {args.workload}: only single-program workloads are supported")
    try:
        cmd = w.command(args.scale, args.extra)
    except workloads.WorkloadMissing as e:
        sys.exit(f"agreement.py: error: {e}")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if args.libdir:
        env["LLAMALLOC_LIBDIR"] = str(Path(args.libdir).resolve())
    llamalloc = [sys.executable, "-m", "llamalloc"]
    with tempfile.TemporaryDirectory(prefix="llamalloc-agreement-") as tmp:
        trace_path, profile_path = Path(tmp) / "run.trace", Path(tmp) / "run.prof"
        run([*llamalloc, "trace", "-o", str(trace_path), "--", *cmd], env)
        run([*llamalloc, "record", "--sample-bytes", str(args.sample_bytes), "-o", str(profile_path), "--", *cmd],
            env)
        a = agreement.compare(trace_path, profile_path)
    pt = 100 * a.trace_objects / max(a.trace_objects.sum(), 1)
    pp = 100 * a.profile_objects / max(a.profile_objects.sum(), 1)
    print(f"{'class':>8} {'trace %':>9} {'profile %':>10}")
    for k, name in enumerate(CLASS_NAMES):
        print(f"{name:>8} {pt[k]:9.2f} {pp[k]:10.2f}")
    print(f"objects: trace {a.trace_objects.sum():.0f}, profile (estimated) {a.profile_objects.sum():.0f}")
    print(f"clocks: trace {a.trace_clock}, profile {a.profile_clock}")
    print(f"agreement by objects: {100 * a.agreement:.1f}%")
    if args.json:
        result = {"workload": args.workload, "scale": args.scale, "sample_bytes": args.sample_bytes,
                  "command": cmd, "agreement": a.agreement, "trace_clock": a.trace_clock,
                  "profile_clock": a.profile_clock, "trace_objects": a.trace_objects.tolist(),
                  "profile_objects": a.profile_objects.tolist()}
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if a.agreement >= agreement.MIN_AGREEMENT else 1


if __name__ == "__main__":
    sys.exit(main())
