#!/usr/bin/env bash
# Training speed of the lifetime model (docs/results/2026-11-21-model-accuracy.md): one epoch of 50,000 weighted examples
# of the synthetic server (12,500 contexts), hidden 64, from a fresh process. The first run compiles the
# training and prediction steps (XLA) with an empty compilation cache; the second finds them in the cache
# (LLAMALLOC_CACHE_DIR/jax), as every later `llamalloc train` on the machine does. Each prints one JSON row.
#
#   bench/model/speed.sh [EXAMPLES]
set -euo pipefail
examples=${1:-50000}
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
for run in cold warm; do
  start=$(date +%s.%N)
  row=$(LLAMALLOC_CACHE_DIR="$cache" python -m llamalloc.model.benchmark speed --examples "$examples" --epochs 1 \
        2>/dev/null)
  end=$(date +%s.%N)
  echo "{\"run\": \"$run\", \"process_seconds\": $(python -c "print(round($end - $start, 1))"), \"row\": $row}"
done
