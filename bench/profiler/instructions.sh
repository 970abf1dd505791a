#!/usr/bin/env bash
# Instructions added per malloc+free pair by the profiler (record mode, default rate) and the tracer, counted
# by valgrind's callgrind: deterministic, so it means something even on a loaded machine where timings do not.
# prof-sites `scale N` does N malloc(256)+free pairs; the difference between two N cancels start-up costs.
#
#   bench/profiler/instructions.sh [BUILD_DIR]     (default: build)
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
sites="$build/tests/profiler/prof-sites"
lib="$build/src/profiler/libllamalloc_prof.so"
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
[ -x "$sites" ] && [ -f "$lib" ] || { echo "build prof-sites and llamalloc_prof in $build first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
count() {  # mode n
  local env=()
  [ "$1" = plain ] || env=(LD_PRELOAD="$lib" LLAMALLOC_PROF_MODE="$1" LLAMALLOC_PROF_OUTPUT="$out/o.%p")
  env "${env[@]}" valgrind --tool=callgrind --callgrind-out-file=/dev/null "$sites" scale "$2" 2>&1 |
    awk '/Collected/ {print $4}'
}
n1=100000 n2=300000
declare -A per_pair
for mode in plain profile trace; do
  a=$(count $mode $n1); b=$(count $mode $n2)
  per_pair[$mode]=$(( (b - a) / (n2 - n1) ))
done
printf '{"instructions_per_malloc_free_pair": {"plain": %d, "record": %d, "trace": %d}, ' \
  "${per_pair[plain]}" "${per_pair[profile]}" "${per_pair[trace]}"
printf '"added": {"record": %d, "trace": %d}}\n' \
  $(( per_pair[profile] - per_pair[plain] )) $(( per_pair[trace] - per_pair[plain] ))
