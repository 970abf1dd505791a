#!/usr/bin/env bash
# Scaling checks for a many-core machine, from a bundle made by bench/scaling/bundle.sh, under a time
# budget, most important first; every phase's output goes to OUT as it is made (OUT/scaling.tar.gz is refreshed
# after each phase, so a run cut short still returns what it finished):
#   1. the machine (cores, kernel, transparent huge pages);
#   2. Table 4 at one thread per core (bench/heap/run_table4.sh with the rows "threads:N", and the cross-thread rows
#      with N/2 producer/consumer pairs), glibc, jemalloc, tcmalloc, mimalloc and llamalloc, median of 3;
#   3. the multi-threaded mimalloc-bench programs at N threads, all five allocators, median of 3, one run.py per
#      program (so a program cut off by the budget costs only itself);
#   4. the randomised multi-thread tests at N threads: the stress programs under libllamalloc.so, the heap tests'
#      randomised and cross-thread tests with LLAMALLOC_TEST_THREADS=N, and the same under ThreadSanitizer;
#   5. the single-threaded mimalloc-bench programs, once each, while the budget lasts.
#   usage: bench/scaling/run.sh BUNDLE OUT [THREADS (default: nproc)] [BUDGET_SECONDS (default 570)]
# Environment: SCALING_TABLE4=0 skips step 2, SCALING_TESTS=0 step 4; SCALING_MT and SCALING_ST name the programs
# of steps 3 and 5 (space-separated run.py test names; empty: none), e.g. SCALING_MT= SCALING_ST="espresso barnes"
# to spend a short run on the programs a previous one did not reach.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 2 ] || { echo "usage: bench/scaling/run.sh BUNDLE OUT [THREADS] [BUDGET_SECONDS]" >&2; exit 2; }
bundle=$(cd "$1" 2>/dev/null && pwd) || { echo "run.sh: error: bundle $1 not found" >&2; exit 2; }
mkdir -p "$2" && out=$(cd "$2" && pwd)
threads=${3:-$(nproc)}
budget=${4:-570}
deadline=$(( $(date +%s) + budget ))
left() { echo $(( deadline - $(date +%s) )); }
res=$(mktemp -d)
pack() { tar czf "$out/scaling.tar.gz.tmp" -C "$res" . && mv "$out/scaling.tar.gz.tmp" "$out/scaling.tar.gz"; }
lib=$bundle/lib
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
allocs=(--alloc glibc= --alloc "jemalloc=$lib/libjemalloc.so.2" --alloc "tcmalloc=$lib/libtcmalloc_minimal.so.4"
        --alloc "mimalloc=$lib/libmimalloc.so.2" --alloc "llamalloc=$lib/libllamalloc.so")
echo "scaling: $threads threads, budget ${budget}s, results in $out"

# 1. The machine.
{ uname -a; nproc; grep -m1 'model name' /proc/cpuinfo; grep -E 'MemTotal|Hugepagesize' /proc/meminfo
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)"
  echo "thp defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>&1)"
  python3 --version; } > "$res/machine.txt" 2>&1
cat "$res/machine.txt"; pack

# 2. Table 4 at one thread per core.
t4=$(mktemp -d)
mkdir -p "$t4/bench/heap" "$t4/src/llamalloc"
ln -s "$bundle/bin/heap_table4_bench" "$t4/bench/heap/"
ln -s "$lib/libllamalloc.so" "$t4/src/llamalloc/"
if [ "${SCALING_TABLE4:-1}" != 0 ]; then
  echo "== table4 (left $(left)s)"
  TABLE4_PEER_LIBS=$lib timeout $(( $(left) > 120 ? 120 : $(left) )) \
    bash "$repo/bench/heap/run_table4.sh" "$t4" 3 "threads:($threads|$((threads / 2)))\$" > "$res/table4.txt" 2>&1
  echo "table4 exit $?"; cat "$res/table4.txt"; pack
fi

# 3. The multi-threaded mimalloc-bench programs. Seconds each needs for 5 allocators x 3 runs, roughly.
# (Measured on the 16-core machine on 2026-11-26: larson 106 s, xmalloc-test 75, alloc-testN 76, glibc-thread 30.)
declare -A need=([larsonN]=110 [larsonN-sized]=110 [xmalloc-testN]=85 [alloc-testN]=80 [cache-scratchN]=15
                 [cache-thrashN]=15 [glibc-thread]=35)
reserve=70  # for the tests of step 4
for t in ${SCALING_MT-larsonN xmalloc-testN alloc-testN larsonN-sized cache-scratchN cache-thrashN glibc-thread}; do
  if [ "$(left)" -lt $(( ${need[$t]:-60} + reserve )) ]; then echo "== $t skipped: $(left)s left"; continue; fi
  echo "== $t (left $(left)s)"
  timeout $(( $(left) - reserve )) python3 "$bundle/mib/run.py" --build "$bundle/mib/bin" --threads "$threads" \
    --repeat 3 --tests "$t" "${allocs[@]}" --json "$res/mib-$t.json" > "$res/mib-$t.txt" 2>&1
  echo "exit $?"; tail -3 "$res/mib-$t.txt"; pack
done

# 4. Randomised multi-thread tests at N threads.
export STRESS_EXPECT_ALLOCATOR=llamalloc
check() {  # name, seconds, command...
  local name=$1 secs=$2; shift 2
  if [ "$(left)" -lt "$secs" ]; then echo "$name: skipped ($(left)s left)" | tee -a "$res/tests.txt"; return; fi
  local t0=$(date +%s)
  timeout "$secs" "$@" > "$res/test-$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - t0 ))s: $(tail -1 "$res/test-$name.log")" | tee -a "$res/tests.txt"
}
if [ "${SCALING_TESTS:-1}" != 0 ]; then
  echo "== tests (left $(left)s)"
  check stress-random 20 env LD_PRELOAD="$lib/libllamalloc.so" "$bundle/bin/stress-random" -t "$threads" -s 5
  check stress-fork 20 env LD_PRELOAD="$lib/libllamalloc.so" "$bundle/bin/stress-fork" -t "$threads" -s 3
  check stress-dlopen 20 env LD_PRELOAD="$lib/libllamalloc.so" "$bundle/bin/stress-dlopen" -t "$threads" -s 3
  check stress-threads 30 env LD_PRELOAD="$lib/libllamalloc.so" "$bundle/bin/stress-threads" -t "$threads" -n 50000
  check stress-exit-handoff 30 env LD_PRELOAD="$lib/libllamalloc.so" "$bundle/bin/stress-exit-handoff" -t "$threads" \
    -n 8000 -m 512
  filter='HeapTest.Randomised*:HeapTest.ProducersAndConsumers*:HeapTest.SweepsOfBusyThreads*'
  check heap-test 45 env LLAMALLOC_TEST_THREADS="$threads" LLAMALLOC_TEST_STEPS=2500 "$bundle/bin/heap_test" \
    --gtest_filter="$filter"
  if [ -e "$bundle/bin/heap_test.tsan" ]; then
    check heap-test-tsan 90 env LLAMALLOC_TEST_THREADS="$threads" LLAMALLOC_TEST_STEPS=500 \
      TSAN_OPTIONS=halt_on_error=1 "$bundle/bin/heap_test.tsan" --gtest_filter="$filter"
  fi
  pack
fi

# 5. The single-threaded programs, once each, while the budget lasts.
for t in ${SCALING_ST-espresso alloc-test1 glibc-simple barnes cache-scratch1 mleak10 malloc-large}; do
  if [ "$(left)" -lt 20 ]; then echo "== $t skipped: $(left)s left"; continue; fi
  echo "== $t (left $(left)s)"
  timeout $(( $(left) - 5 )) python3 "$bundle/mib/run.py" --build "$bundle/mib/bin" --threads "$threads" \
    --repeat 1 --tests "$t" "${allocs[@]}" --json "$res/mib-$t.json" > "$res/mib-$t.txt" 2>&1
  echo "exit $?"; tail -2 "$res/mib-$t.txt"; pack
done
echo "scaling: done, $(left)s of the budget left"
