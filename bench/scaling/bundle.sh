#!/usr/bin/env bash
# Packs what bench/scaling/run.sh needs on a machine that has none of this project's build or packages (the
# 16-core device machine gets the checkout only): libllamalloc.so, the peers' libraries (Debian's jemalloc,
# mimalloc, tcmalloc-minimal), Google Benchmark's library, the Table 4 benchmark, the stress programs, the heap
# tests (and their ThreadSanitizer build when there is one) and the mimalloc-bench programs with run.py.
#   usage: MIMALLOC_BENCH=DIR bench/scaling/bundle.sh [OUT (default .dev)] [MIMALLOC_BENCH_BUILD (default /tmp/mib)]
# DIR is a checkout of the mimalloc-bench subset with its run.py. Build first: ninja -C build;
# cmake -S "$MIMALLOC_BENCH" -B /tmp/mib -G Ninja && cmake --build /tmp/mib
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/.dev}
mib=${2:-/tmp/mib}
build=${LLAMALLOC_BUILD_DIR:-$repo/build}
src_mib=${MIMALLOC_BENCH:-}
[ -n "$src_mib" ] || { echo "bundle.sh: error: MIMALLOC_BENCH is not set: set it to the mimalloc-bench checkout (the folder of run.py)" >&2; exit 2; }
peers=/usr/lib/x86_64-linux-gnu
need=("$build/src/llamalloc/libllamalloc.so" "$build/bench/heap/heap_table4_bench" "$build/tests/heap/heap_test"
      "$mib/larson" "$src_mib/run.py")
for f in "${need[@]}"; do
  [ -e "$f" ] || { echo "bundle.sh: error: $f not found (see the usage line for how to build it)" >&2; exit 2; }
done
# A previous bundle is replaced; anything else at OUT is left alone.
if [ -e "$out" ] && ! { [ -d "$out" ] && { [ -z "$(ls -A "$out")" ] || [ -e "$out/mib/run.py" ]; }; }; then
  echo "bundle.sh: error: $out exists and is not a bundle; choose another OUT" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out/lib" "$out/bin" "$out/mib/bin" "$out/mib/espresso" "$out/mib/barnes"
cp -L "$build/src/llamalloc/libllamalloc.so" "$out/lib/"
for l in libjemalloc.so.2 libmimalloc.so.2 libtcmalloc_minimal.so.4; do
  if [ -e "$peers/$l" ]; then cp -L "$peers/$l" "$out/lib/"; else echo "bundle.sh: warning: $peers/$l missing" >&2; fi
done
# The libraries the programs need beyond libc and libstdc++ (which any x86-64 Linux of the same age or newer has).
for exe in "$build/bench/heap/heap_table4_bench" "$repo/build-thread/tests/heap/heap_test"; do
  [ -e "$exe" ] || continue
  ldd "$exe" | awk '/libbenchmark|libtsan/ {print $3}' | xargs -r cp -L -t "$out/lib/"
done
cp "$build/bench/heap/heap_table4_bench" "$build/tests/heap/heap_test" "$out/bin/"
if [ -e "$repo/build-thread/tests/heap/heap_test" ]; then cp "$repo/build-thread/tests/heap/heap_test" "$out/bin/heap_test.tsan"; fi
cp "$build"/tests/stress/stress-* "$build"/tests/stress/libstress-plugin-*.so "$out/bin/"
for p in "$mib"/*; do [ -f "$p" ] && [ -x "$p" ] && cp "$p" "$out/mib/bin/"; done
cp "$src_mib/run.py" "$out/mib/"
cp "$src_mib/espresso/largest.espresso" "$out/mib/espresso/"
cp "$src_mib/barnes/input" "$out/mib/barnes/"
du -sh "$out"
