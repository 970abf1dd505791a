#!/usr/bin/env bash
# Soak: the lifecycle stress programs of tests/stress/ (random malloc/realloc/memalign with content checks and
# cross-thread frees, fork from a threaded parent, dlopen/dlclose of allocating plugins, 100k short-lived threads)
# under libllamalloc.so for MINUTES in all, with THREADS threads, without a model and (when the llamalloc Python
# package is importable) with a constant and a random model through `llamalloc run --model`. Each program runs
# again and again until its share of the time is spent; any run that fails stops nothing else and is reported.
# Prints a summary table; exit status 1 when any run failed. Logs and models are kept in OUT.
#
#   bench/soak/run.sh [MINUTES (default 10)] [THREADS (default 16)] [OUT (default soak-out)]
# Environment: LLAMALLOC_BUILD_DIR (default build/).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
minutes=${1:-10}
threads=${2:-16}
out=${3:-soak-out}
build=${LLAMALLOC_BUILD_DIR:-$repo/build}
lib=$build/src/llamalloc/libllamalloc.so
bin=$build/tests/stress
for f in "$lib" "$bin"/stress-{random,fork,threads,dlopen,exit-handoff}; do
  [ -e "$f" ] || { echo "soak: error: $f not found (build the project first)" >&2; exit 2; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)

variants=(none)
if python3 -c 'import llamalloc.model.modelfile' 2>/dev/null && python3 "$repo/bench/soak/models.py" "$out/models"; then
  variants+=(constant random)
else
  echo "soak: the llamalloc Python package is not importable: runs without a model only" >&2
fi
programs=(random fork threads dlopen exit-handoff)
slice=$(python3 -c "print(max(5.0, $minutes * 60 / (${#programs[@]} * ${#variants[@]})))" 2>/dev/null \
        || echo $((minutes * 60 / (${#programs[@]} * ${#variants[@]}) )))
# One run of a time-driven program lasts at most this long, so that a failure shows up early in its log.
run_seconds=$(python3 -c "print(min($slice, 60.0))" 2>/dev/null || echo 60)
echo "soak: $minutes min, $threads threads, ${#variants[@]} variant(s) x ${#programs[@]} programs, ${slice}s each; logs in $out"
export LLAMALLOC_CACHE_DIR=$out/token-cache
export STRESS_EXPECT_ALLOCATOR=llamalloc

summary=$out/summary.txt
printf '%-10s %-9s %5s %5s %9s  %s\n' program model runs fails maxrss_MB "last line" > "$summary"
status=0
for program in "${programs[@]}"; do
  for variant in "${variants[@]}"; do
    log=$out/$program.$variant.log
    : > "$log"
    runs=0 fails=0 maxrss=0 last=""
    end=$(( $(date +%s) + ${slice%.*} ))
    seed=1
    while [ "$(date +%s)" -lt "$end" ] || [ $runs -eq 0 ]; do
      case $program in
        threads) args=(-t "$threads" -n 100000 -S "$seed") ;;
        exit-handoff) args=(-t "$threads" -n 20000 -S "$seed") ;;
        *) args=(-t "$threads" -s "$run_seconds" -S "$seed") ;;
      esac
      if [ "$variant" = none ]; then
        cmd=(env LD_PRELOAD="$lib" "$bin/stress-$program" "${args[@]}")
      else
        cmd=(python3 -m llamalloc run --model "$out/models/$variant.model" -- "$bin/stress-$program" "${args[@]}")
      fi
      echo "== run $((runs + 1)) seed $seed: ${cmd[*]}" >> "$log"
      /usr/bin/time -f 'maxrss_kb %M' -o "$out/time.tmp" "${cmd[@]}" >> "$log" 2>&1
      rc=$?
      runs=$((runs + 1))
      rss=$(awk '/maxrss_kb/ {print int($2 / 1024)}' "$out/time.tmp" 2>/dev/null || echo 0)
      [ "${rss:-0}" -gt "$maxrss" ] && maxrss=$rss
      if [ $rc -ne 0 ]; then
        fails=$((fails + 1))
        status=1
        echo "== FAILED with status $rc" >> "$log"
      fi
      last=$(grep -E "stress-$program: (ok|FAIL)" "$log" | tail -n1)
      seed=$((seed + 1))
    done
    printf '%-10s %-9s %5d %5d %9d  %s\n' "$program" "$variant" "$runs" "$fails" "$maxrss" "$last" | tee -a "$summary"
  done
done
echo
cat "$summary"
[ $status -eq 0 ] && echo "soak: all runs passed" || echo "soak: FAILURES (see the logs in $out)"
exit $status
