#!/usr/bin/env python3
"""A buffer replaced again and again (bench/heap/huge_objects.c): malloc of BYTES, its first and last byte written,
free, PAIRS times in one thread, under glibc, jemalloc, tcmalloc, mimalloc and llamalloc, runs interleaved between
allocators, medians of --repeat. Prints the seconds, ns a pair, the ratio to glibc's time, and VmSize, VmData and
VmPTE after the first pair and after the last (KiB): growth there is address space or page tables that the run
leaks.

    python3 bench/heap/huge_objects.py [--build build] [--repeat 3] [--pairs 1000000] [--bytes 4194304]
                                       [--json OUT.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from llamalloc.allocators import PEER_LIBRARIES

ROOT = Path(__file__).resolve().parents[2]


def parse(stdout: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in stdout.splitlines():
        key, *values = line.split()
        if key == "seconds":
            out["seconds"] = float(values[0])
        else:
            out[key + "_first"], out[key + "_last"] = float(values[0]), float(values[1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--bytes", type=int, default=4 << 20)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    exe = a.build / "bench" / "heap" / "heap_huge_objects_bench"
    if not exe.exists():
        sys.exit(f"huge_objects: {exe}: not built (cmake --build {a.build} --target heap_huge_objects_bench)")
    allocs = {"glibc": {}, **{n: {"LD_PRELOAD": str(PEER_LIBRARIES[n])} for n in ("jemalloc", "tcmalloc", "mimalloc")},
              "llamalloc": {"LD_PRELOAD": str(a.build / "src" / "llamalloc" / "libllamalloc.so")}}
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_") and k != "LD_PRELOAD"}
    runs: dict[str, list[dict[str, float]]] = {}
    for r in range(a.repeat):
        for name, env in allocs.items():
            p = subprocess.run([str(exe), str(a.pairs), str(a.bytes)], env={**clean, **env}, capture_output=True,
                               text=True)
            if p.returncode != 0:
                sys.exit(f"huge_objects: under {name} failed ({p.returncode}): {p.stderr.strip()[-200:]}")
            runs.setdefault(name, []).append(parse(p.stdout))
            print(f"huge_objects: {name} run {r + 1}/{a.repeat}", file=sys.stderr, flush=True)
    med = lambda rows, k: statistics.median(x[k] for x in rows)  # noqa: E731
    base = med(runs["glibc"], "seconds")
    print(f"{a.pairs} pairs of {a.bytes} bytes, one thread (medians of {a.repeat}; Vm*: KiB after the first pair -> "
          "after the last)")
    print(f"{'allocator':<12}{'seconds':>10}{'ns/pair':>9}{'/glibc':>8}{'VmSize':>22}{'VmData':>22}{'VmPTE':>14}")
    for name, rows in runs.items():
        s = med(rows, "seconds")
        vm = "".join(f"{'%.0f -> %.0f' % (med(rows, k + '_first'), med(rows, k + '_last')):>{w}}"
                     for k, w in (("VmSize", 22), ("VmData", 22), ("VmPTE", 14)))
        print(f"{name:<12}{s:>10.3f}{s / a.pairs * 1e9:>9.0f}{s / base:>8.2f}{vm}")
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
