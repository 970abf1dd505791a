#!/usr/bin/env bash
# The heap's tests (ctest -R '^heap\.': the whole heap through its entry points, multi-threaded with cross-thread
# frees, the idle sweep racing busy threads, thread exit, fork) built with ThreadSanitizer and with UBSan, each
# in its own build folder. Any report fails the run. scripts/test.sh runs it; by hand:
#   bash scripts/sanitize.sh [thread|undefined ...]     (default: both)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(thread undefined)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
# Death tests re-execute the test binary (the fork-only style is unreliable with threads under a sanitizer).
export GTEST_DEATH_TEST_STYLE=threadsafe
for kind in "${kinds[@]}"; do
  case "$kind" in thread|undefined|address) ;; *) echo "sanitize.sh: unknown sanitizer '$kind' (thread, undefined, address)" >&2; exit 2;; esac
  build="${LLAMALLOC_SANITIZE_BUILD_DIR:-$repo/build-$kind}"
  echo "== heap tests built with -fsanitize=$kind ($build) =="
  mkdir -p "$build"
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLAMALLOC_SANITIZE="$kind" \
        -DLLAMALLOC_BUILD_BENCH=OFF -DLLAMALLOC_BUILD_WORKLOADS=OFF > "$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
  cmake --build "$build" --target heap_test heap_learn_test page_heap_test deadlines_test page_cache_test subrelease_test -j "$(nproc)"
  # Left out: the two tests that preload libllamalloc.so into an uninstrumented program (sh, python3), which a
  # sanitizer-built malloc replacement cannot be.
  ctest --test-dir "$build" -R '^heap\.' -E 'StatsTest\.(PreloadedProgram|ProgramThatOverwrites)' \
        --output-on-failure -j "$(nproc)" --timeout 900
done
