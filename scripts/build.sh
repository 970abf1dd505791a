#!/usr/bin/env bash
# Configures and builds llamalloc into build/ (RelWithDebInfo, Ninja).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build="${LLAMALLOC_BUILD_DIR:-$repo/build}"
jobs=$(nproc)
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
fi
cmake --build "$build" -j "$jobs"
