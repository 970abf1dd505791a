#!/usr/bin/env bash
# The README's second command: set up, build, and run every test (C++ under ctest, then pytest).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
"$repo/scripts/setup.sh"
export PATH="$PATH:$(go env GOPATH 2>/dev/null)/bin"
build="${LLAMALLOC_BUILD_DIR:-$repo/build}"
status=0
echo "== C++ tests (ctest) =="
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" --timeout 900 || status=1
echo "== The heap's tests under ThreadSanitizer and UBSan =="
bash "$repo/scripts/sanitize.sh" thread undefined || status=1
echo "== Python import contracts (lint-imports, .importlinter) =="
# The package's layers (docs/architecture.md, "Python package layers"): a module imports only from its own layer
# or below, function-level imports included. No cache, so that the check leaves no folder in the checkout.
lint-imports --no-cache --no-logo "$repo/.importlinter" || status=1
echo "== Python and whole-program tests (pytest) =="
set +e
python3 -m pytest -q "$repo/python/tests" -p no:cacheprovider
rc=$?
set -e
# pytest exit 5 means "no tests collected": that is a failure of this command, not a pass.
[ $rc -eq 0 ] || status=1
exit $status
