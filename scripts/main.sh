#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job (`llamalloc demo`).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
"$repo/scripts/setup.sh"
export PATH="$PATH:$(go env GOPATH 2>/dev/null)/bin"
exec llamalloc demo "$@"
