#!/usr/bin/env python3
"""Huge pages where dense (docs/heap-memory.md): bench/heap/huge_pages.c under glibc, jemalloc, tcmalloc, mimalloc,
llamalloc with every page huge (LLAMALLOC_HUGE_PAGES=1) and llamalloc's default (2), runs of one mode interleaved
between allocators, medians of --repeat. Prints, per mode, RSS and AnonHugePages (MiB) after the allocations and
2 s later (the sparse and mib modes) or after the reads (randread), and the reads' seconds.

    python3 bench/heap/huge_pages.py [--build build] [--repeat 3] [--randread-mib 256] [--reads 200000000]
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


def allocators(build: Path) -> dict[str, dict[str, str]]:
    lib = str(build / "src" / "llamalloc" / "libllamalloc.so")
    out = {"glibc": {}}
    for name in ("jemalloc", "tcmalloc", "mimalloc"):
        out[name] = {"LD_PRELOAD": str(PEER_LIBRARIES[name])}
    out["llamalloc (every page huge)"] = {"LD_PRELOAD": lib, "LLAMALLOC_HUGE_PAGES": "1"}
    out["llamalloc (huge where dense)"] = {"LD_PRELOAD": lib}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--randread-mib", type=int, default=256)
    ap.add_argument("--reads", type=int, default=200_000_000)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    exe = a.build / "bench" / "heap" / "heap_huge_pages_bench"
    if not exe.exists():
        sys.exit(f"huge_pages: {exe}: not built (cmake --build {a.build} --target heap_huge_pages_bench)")
    allocs = allocators(a.build)
    modes = {"sparse": [], "mib": [], "randread": [str(a.randread_mib), str(a.reads)]}
    runs: dict = {}
    for mode, args in modes.items():
        for r in range(a.repeat):
            for name, env in allocs.items():
                clean = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_") and k != "LD_PRELOAD"}
                p = subprocess.run([str(exe), mode, *args], env={**clean, **env}, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"huge_pages: {mode} under {name} failed ({p.returncode}): {p.stderr.strip()[-200:]}")
                runs.setdefault(mode, {}).setdefault(name, []).append(json.loads(p.stdout.strip().splitlines()[-1]))
                print(f"huge_pages: {mode} {name} run {r + 1}/{a.repeat}", file=sys.stderr, flush=True)
    med = lambda rows, k: statistics.median(x[k] for x in rows)  # noqa: E731
    for mode, by in runs.items():
        print(f"\n{mode} (medians of {a.repeat}; MiB; AHP: AnonHugePages)")
        later = "after the reads" if mode == "randread" else "2 s later"
        print(f"{'allocator':<30}{'RSS':>8}{'AHP':>8}{'RSS ' + later:>22}{'AHP ' + later:>22}{'seconds':>10}")
        for name, rows in by.items():
            print(f"{name:<30}{med(rows, 'rss_kib') / 1024:>8.0f}{med(rows, 'anon_huge_kib') / 1024:>8.0f}"
                  f"{med(rows, 'later_rss_kib') / 1024:>22.0f}{med(rows, 'later_anon_huge_kib') / 1024:>22.0f}"
                  f"{med(rows, 'seconds'):>10.2f}")
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
