#!/usr/bin/env bash
# Prediction on the bundled workloads: for each workload, record a profile, symbolize,
# train, then run it without and with the model (llamalloc run --stats) and print the footprint and the
# prediction counters (cache hit ratio, model runs, mean ns per model run).
#   usage: src/model/tools/measure_workloads.sh OUTDIR [SCALE] [WORKLOAD...]
#   env:   LLAMALLOC_BUILD_DIR (default <repo>/build), SAMPLE_BYTES (default 4096), EPOCHS (default 15),
#          STEP=train|run|all (default all)
set -euo pipefail
out=${1:?usage: measure_workloads.sh OUTDIR [SCALE] [WORKLOAD...]}
scale=${2:-small}
shift $(( $# >= 2 ? 2 : 1 ))
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(image-server word-count frag-micro)
repo=$(cd "$(dirname "$0")/../../.." && pwd)
build=${LLAMALLOC_BUILD_DIR:-$repo/build}
export LLAMALLOC_BUILD_DIR=$build
step=${STEP:-all}
mkdir -p "$out"
cmd_of() {
  python3 - "$1" "$scale" <<'PY'
import sys
from llamalloc import workloads
w = workloads.get(sys.argv[1])
print("\0".join(w.command(sys.argv[2])), end="")
PY
}
for w in "${workloads[@]}"; do
  mapfile -d '' cmd < <(cmd_of "$w")
  if [ "$step" != run ]; then
    llamalloc record --sample-bytes "${SAMPLE_BYTES:-4096}" -o "$out/$w.prof" -- "${cmd[@]}" > "$out/$w.record.out"
    llamalloc symbolize "$out/$w.prof" > /dev/null
    llamalloc train "$out/$w.prof" -o "$out/$w.model" --epochs "${EPOCHS:-15}" > "$out/$w.train.txt" 2>&1
  fi
  if [ "$step" != train ]; then
    llamalloc run --stats "$out/$w.without.json" -- "${cmd[@]}" > "$out/$w.without.out"
    llamalloc run --model "$out/$w.model" --stats "$out/$w.with.json" -- "${cmd[@]}" > "$out/$w.with.out"
    python3 - "$w" "$out/$w.without.json" "$out/$w.with.json" <<'PY'
import json, sys
name, without, with_ = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
c = with_.get("counters", with_)
hits, misses, runs = c["prediction_cache_hits"], c["prediction_cache_misses"], c["model_runs"]
ns = c.get("prediction_ns", 0)
mib = lambda b: b / 2**20
print(f"{name}: footprint {mib(without['footprint_bytes']):.1f} -> {mib(with_['footprint_bytes']):.1f} MiB "
      f"(peak {mib(without['peak_footprint_bytes']):.1f} -> {mib(with_['peak_footprint_bytes']):.1f}), "
      f"live {mib(with_['live_bytes']):.1f} MiB; cache hits {hits} misses {misses} "
      f"hit ratio {hits / max(1, hits + misses):.4f}; model runs {runs}, "
      f"{ns / max(1, runs) / 1000:.1f} us per run")
PY
  fi
done
