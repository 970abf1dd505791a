#!/usr/bin/env python3
"""Internal waste of large objects: bytes asked / bytes used, for sizes from 8 KiB to 2 MiB, under glibc,
jemalloc, mimalloc and llamalloc (redis's memefficiency test needs >= 0.82 for 16 KiB values; docs/testing.md).

For each allocator and size, a small C program (compiled here with cc) allocates COUNT objects of that size
(COUNT = max(16, 64 MiB / size)), writes every byte asked for, and reports
  usable: asked / sum of malloc_usable_size  (what redis's used_memory counts with MALLOC=libc)
  rss:    asked / growth of the resident set (/proc/self/statm, after the writes)
A ratio of 1.00 wastes nothing; 0.50 uses twice what was asked. Not a speed benchmark: one run per cell.

  bench/heap/large_waste.py [--build BUILD_DIR] [--json OUT.json] [--total-mib 64]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HELPER = r"""
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static long resident_bytes(void) {
  long size = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (!f || fscanf(f, "%ld %ld", &size, &resident) != 2) { perror("statm"); exit(1); }
  fclose(f);
  return resident * sysconf(_SC_PAGESIZE);
}
int main(int argc, char** argv) {
  size_t size = strtoull(argv[1], 0, 10), count = strtoull(argv[2], 0, 10);
  void** p = calloc(count, sizeof(void*));
  for (size_t i = 0; i < 4; i++) free(malloc(size));  /* first-use set-up outside the measurement */
  long before = resident_bytes();
  size_t usable = 0;
  for (size_t i = 0; i < count; i++) {
    p[i] = malloc(size);
    if (!p[i]) { fprintf(stderr, "malloc(%zu) failed\n", size); return 1; }
    memset(p[i], (int)(i | 1), size);
    usable += malloc_usable_size(p[i]);
  }
  long after = resident_bytes();
  printf("%zu %zu %zu %ld\n", size, count, usable, after - before);
  for (size_t i = 0; i < count; i++) free(p[i]);
  free(p);
  return 0;
}
"""

KIB, MIB = 1024, 1024 * 1024
SIZES = [8 * KIB, 8 * KIB + 1, 10000, 12 * KIB, 16 * KIB, 16 * KIB + 6, 20000, 24 * KIB, 32 * KIB, 32 * KIB + 1,
         48 * KIB, 64 * KIB, 64 * KIB + 1, 96 * KIB, 128 * KIB, 128 * KIB + 1, 192 * KIB, 256 * KIB,
         256 * KIB + 1, 384 * KIB, 512 * KIB, 512 * KIB + 1, 768 * KIB, MIB, MIB + 1, 1536 * KIB, 2 * MIB - 64,
         2 * MIB]
PEERS = {"glibc": None, "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
         "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2"}


def main() -> int:
    repo = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=Path(os.environ.get("LLAMALLOC_BUILD_DIR", repo / "build")))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--total-mib", type=int, default=64)
    args = ap.parse_args()
    allocators = dict(PEERS, llamalloc=str(args.build / "src" / "llamalloc" / "libllamalloc.so"))
    for name, lib in list(allocators.items()):
        if lib is not None and not Path(lib).exists():
            print(f"large_waste: warning: {lib} missing, {name} skipped", file=sys.stderr)
            del allocators[name]
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        print("large_waste: error: no C compiler (cc)", file=sys.stderr)
        return 2
    results: dict[str, dict[int, dict]] = {name: {} for name in allocators}
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "waste.c", Path(tmp) / "waste"
        src.write_text(HELPER)
        subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
        for size in SIZES:
            count = max(16, args.total_mib * MIB // size)
            for name, lib in allocators.items():
                env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_") and k != "LD_PRELOAD"}
                if lib:
                    env["LD_PRELOAD"] = lib
                r = subprocess.run([str(exe), str(size), str(count)], env=env, capture_output=True, text=True,
                                   timeout=300)
                if r.returncode != 0:
                    print(f"large_waste: error: {name} size {size}: {r.stderr.strip()}", file=sys.stderr)
                    return 1
                _, n, usable, rss = (int(x) for x in r.stdout.split())
                asked = size * n
                results[name][size] = {"count": n, "asked": asked, "usable": usable, "rss_growth": rss,
                                       "usable_ratio": asked / usable, "rss_ratio": asked / rss if rss > 0 else None}
    names = list(allocators)
    print("bytes asked / bytes used (1.00 = no waste); usable = malloc_usable_size, rss = resident growth")
    header = f"{'size':>10} " + " ".join(f"{n + ' usable':>16} {n + ' rss':>13}" for n in names)
    print(header)
    for size in SIZES:
        cells = []
        for n in names:
            r = results[n][size]
            rss = f"{r['rss_ratio']:.2f}" if r["rss_ratio"] is not None else "-"
            cells.append(f"{r['usable_ratio']:>16.2f} {rss:>13}")
        print(f"{size:>10} " + " ".join(cells))
    for n in names:
        worst = min(SIZES, key=lambda s: results[n][s]["usable_ratio"])
        print(f"{n}: worst usable ratio {results[n][worst]['usable_ratio']:.2f} at {worst} B")
    if args.json:
        args.json.write_text(json.dumps({"sizes": SIZES, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
