#!/usr/bin/env bash
# The LLAMA paper's Table 4 (docs/references.md) side by side: the same benchmark binary under glibc, jemalloc, mimalloc and llamalloc
# (LD_PRELOAD), interleaved for several repetitions; prints the median ns per alloc+free pair and the ratios of
# llamalloc to mimalloc and jemalloc. CPU time is the primary figure (a shared machine deschedules threads, which
# inflates wall time); wall time medians are printed too.
#   usage: bench/heap/run_table4.sh [BUILD_DIR] [REPETITIONS] [FILTER]
# FILTER is a --benchmark_filter regular expression (e.g. 'threads:16' on the 16-core machine); default: all rows.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-${LLAMALLOC_BUILD_DIR:-$repo/build}}
reps=${2:-5}
filter=${3:-.}
bench=$build/bench/heap/heap_table4_bench
llamalloc=$build/src/llamalloc/libllamalloc.so
for f in "$bench" "$llamalloc"; do
  [ -e "$f" ] || { echo "run_table4.sh: error: $f not found (build the heap_table4_bench and llamalloc_shared targets)" >&2; exit 2; }
done
peers=${TABLE4_PEER_LIBS:-/usr/lib/x86_64-linux-gnu}  # where the peers' libraries are (Debian's by default)
declare -A libs=([glibc]="" [jemalloc]=$peers/libjemalloc.so.2 [tcmalloc]=$peers/libtcmalloc_minimal.so.4
                 [mimalloc]=$peers/libmimalloc.so.2 [llamalloc]=$llamalloc)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < reps; r++)); do
  for name in glibc jemalloc tcmalloc mimalloc llamalloc; do
    lib=${libs[$name]}
    if [ -n "$lib" ] && [ ! -e "$lib" ]; then echo "run_table4.sh: warning: $lib missing, $name skipped" >&2; continue; fi
    LD_PRELOAD=$lib "$bench" --benchmark_min_time=0.2 --benchmark_filter="$filter" --benchmark_format=json > "$out/$name.$r.json"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys, pathlib, collections
out = pathlib.Path(sys.argv[1])
cpu, real = collections.defaultdict(list), collections.defaultdict(list)
for f in sorted(out.glob("*.json")):
    alloc = f.name.split(".")[0]
    for b in json.loads(f.read_text())["benchmarks"]:
        cpu[(b["name"], alloc)].append(b["cpu_time"])
        real[(b["name"], alloc)].append(b["real_time"])
names = list(dict.fromkeys(n for n, _ in cpu))
allocs = [a for a in ["glibc", "jemalloc", "tcmalloc", "mimalloc", "llamalloc"] if any((n, a) in cpu for n in names)]
med = lambda d, k: statistics.median(d[k]) if k in d else float("nan")
print(f"median ns per alloc+free pair, CPU time (wall time in parentheses), {len(next(iter(cpu.values())))} runs each")
print(f"{'benchmark':42}" + "".join(f"{a:>20}" for a in allocs) + f"{'llama/mi':>10}{'llama/je':>10}")
for n in names:
    row = "".join(f"{med(cpu, (n, a)):>11.1f} ({med(real, (n, a)):>5.1f})" for a in allocs)
    # Cross-thread rows: the freeing thread's CPU is not the benchmark thread's, so the ratio is of wall time.
    d = real if "CrossThread" in n else cpu
    l, m, j = med(d, (n, "llamalloc")), med(d, (n, "mimalloc")), med(d, (n, "jemalloc"))
    print(f"{n:42}{row}{l / m:>10.2f}{l / j:>10.2f}")
PY
