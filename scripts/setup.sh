#!/usr/bin/env bash
# Installs everything llamalloc needs on a fresh Debian 12 machine, then builds it.
# Idempotent: each step is skipped when its result is already there.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------------
apt_packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev      # tests and microbenchmarks
  libunwind-dev zlib1g-dev libdw-dev elfutils binutils   # stack capture, symbolisation
  libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4      # peer allocators (LD_PRELOAD)
  redis-tools dpkg-dev                            # redis-benchmark; apt-get source for the redis workload
  tcl                                             # redis build and redis's own test suite (runtest)
  libpython3.11-testsuite                         # CPython's regression tests (python/tests/test_cpython_regrtest.py)
  chromium                                        # headless check of llamalloc report's HTML page
  openjdk-17-jre-headless                         # Spark's JVM: llamalloc aggregate --engine spark
)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Python package (the `llamalloc` command) ------------------------------------------------
if ! python3 -c 'import llamalloc, jax, optax, duckdb, pyspark, matplotlib, google.protobuf, click, pytest, scikit_build_core, importlinter' 2>/dev/null \
   || [ "$(python3 -c 'import llamalloc,os;print(os.path.realpath(llamalloc.__file__))' 2>/dev/null)" != "$repo/python/src/llamalloc/__init__.py" ]; then
  log "installing the Python package and its dependencies"
  python3 -m pip install -q --disable-pip-version-check -e "$repo/python[dev]"
fi

# --- Go pprof (reads our profiles) -----------------------------------------------------------
export PATH="$PATH:$(go env GOPATH 2>/dev/null)/bin"
if command -v go >/dev/null && ! command -v pprof >/dev/null; then
  log "installing pprof from the Go module proxy"
  GOFLAGS=-mod=mod go install github.com/google/pprof@latest
fi

# --- Build -----------------------------------------------------------------------------------
"$repo/scripts/build.sh"
