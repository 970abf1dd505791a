#!/usr/bin/env python3
"""The aggregation benchmark: a synthetic fleet of profiles (llamalloc.fleet.synthetic: recorded profiles of the
bundled workloads copied as if from many hosts, builds and times, their counts varied) aggregated by each engine;
wall time, peak memory of the whole process tree (the driver, its parser processes or Spark's JVM) and throughput.

    python3 bench/fleet/run.py --counts 10000,100000 --engines duckdb,spark --out bench-fleet

Profiles to copy: --profiles P... (symbolized), or by default the bundled image-server, word-count and frag-micro
recorded at small scale. Each fleet is written once under OUT/fleet-COUNT and reused. Results: OUT/results.json
and a markdown table on stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "src"))

from llamalloc import paths  # noqa: E402
from llamalloc.fleet import corpus, synthetic  # noqa: E402

WORKLOADS = {
    "image-server": ["workloads/image-server/image-server", "--scale", "small"],
    "word-count": ["workloads/word-count/word-count", "--scale", "small"],
    "frag-micro": ["workloads/frag-micro/frag-micro", "--scale", "small", "--quiet-seconds", "0"],
}


def llamalloc(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamalloc", *map(str, args)], check=True, **kw)


def record_bases(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    bases = []
    for name, cmd in WORKLOADS.items():
        prof = out / f"{name}.prof"
        if not prof.exists():
            binary = paths.build_dir() / cmd[0]
            llamalloc("record", "-o", prof, "--", binary, *cmd[1:], stdout=subprocess.DEVNULL)
            llamalloc("symbolize", prof, stdout=subprocess.DEVNULL)
        bases.append(prof)
    return bases


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of root and every process below it."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            pid, ppid, pages = int(entry), int(fields[1]), int(fields[21])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
        rss[pid] = pages * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def measure(cmd: list[str], log: Path) -> tuple[float, int, int]:
    """Runs cmd; its wall seconds, the peak resident bytes of its process tree (sampled every 0.2 s), rc."""
    with open(log, "w") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        peak = 0
        done = threading.Event()

        def sample():
            nonlocal peak
            while not done.is_set():
                peak = max(peak, tree_rss_bytes(proc.pid))
                done.wait(0.2)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        rc = proc.wait()
        seconds = time.monotonic() - start
        done.set()
        t.join()
    return seconds, peak, rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="10000,100000")
    ap.add_argument("--engines", default="duckdb,spark")
    ap.add_argument("--profiles", nargs="*", default=None)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--builds", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("bench-fleet"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bases = [Path(p) for p in args.profiles] if args.profiles else record_bases(args.out / "bases")
    results = []
    for count in (int(c) for c in args.counts.split(",")):
        fleet = args.out / f"fleet-{count}"
        if not (fleet / ".complete").exists():
            t0 = time.monotonic()
            synthetic.write_fleet(bases, fleet, count, hosts=args.hosts, builds=args.builds, seed=count)
            (fleet / ".complete").write_text(f"{count}\n")
            print(f"fleet of {count} written in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        fleet_bytes = sum(p.stat().st_size for p in fleet.rglob("*.prof"))
        for engine in args.engines.split(","):
            out = args.out / f"corpus-{engine}-{count}"
            subprocess.run(["rm", "-rf", str(out)], check=True)
            cmd = [sys.executable, "-m", "llamalloc", "aggregate", str(fleet), "-o", str(out), "--engine", engine]
            cmd += ["--master", args.master] if engine == "spark" else ["--workers", str(args.workers)]
            seconds, peak, rc = measure(cmd, args.out / f"log-{engine}-{count}.txt")
            row = {"engine": engine, "profiles": count, "fleet_bytes": fleet_bytes, "seconds": round(seconds, 1),
                   "peak_rss_bytes": peak, "profiles_per_second": round(count / seconds, 1), "rc": rc}
            if rc == 0:
                m = corpus.read_manifest(out)
                row["contexts_rows"] = m.contexts_rows
                row["corpus_bytes"] = sum(p.stat().st_size for p in out.rglob("*.parquet"))
            results.append(row)
            print(json.dumps(row), file=sys.stderr)
            (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print("| engine | profiles | fleet size | time (s) | profiles/s | peak memory (MiB) | corpus rows | corpus size |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['engine']} | {r['profiles']:,} | {r['fleet_bytes'] / 2**20:,.0f} MiB | {r['seconds']:,.1f} | "
              f"{r['profiles_per_second']:,.0f} | {r['peak_rss_bytes'] / 2**20:,.0f} | {r.get('contexts_rows', '-'):,} | "
              f"{r.get('corpus_bytes', 0) / 2**20:,.1f} MiB |")
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
