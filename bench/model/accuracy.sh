#!/usr/bin/env bash
# Accuracy of the lifetime model on the workloads (docs/model.md; figures in docs/results/2026-11-21-model-accuracy.md).
#
# Records 3 runs of each revision of image-server and word-count under `llamalloc record --sample-bytes 8192`
# (the run variants are RUN_VARIANTS in python/src/llamalloc/model/benchmark.py), symbolises them, merges the
# runs of each revision and, per workload and revision, trains 5 models each on 80% of the stacks and reports on
# the stacks they did not see (every stack held out once, predictions pooled); then trains on all of r1 and
# reports on r2, and the other way round. LSTM, exact-match lookup and allocation site + size; one JSON row per
# experiment, then the Markdown table of docs/results/2026-11-21-model-accuracy.md.
#
#   bench/model/accuracy.sh [OUT_DIR] [options of `python -m llamalloc.model.benchmark workloads`]
#       e.g. bench/model/accuracy.sh /tmp/acc --workload word-count --weight-power 1 --reuse
#
# Needs the `workloads` and `llamalloc_prof` targets built in $LLAMALLOC_BUILD_DIR (default: build/). Takes
# about 15 minutes of recording and 24 trainings (5 folds and 2 cross-revision models per workload and
# revision pair), 1.5 to 3 minutes each on this 2-core machine. --reuse keeps the profiles of an earlier run
# in OUT_DIR/profiles, so that other training settings (--weight-power, --folds, --only) reuse the same data.
set -euo pipefail
out=${1:-bench-model-out}
[ $# -gt 0 ] && shift
mkdir -p "$out"
python -m llamalloc.model.benchmark workloads --profiles "$out/profiles" "$@" | tee "$out/accuracy.txt"
