#!/usr/bin/env bash
# Runs redis's own test suite (`./runtest` of the same Debian source package that build.sh builds) against the
# cached redis-server (MALLOC=libc), optionally under a preloaded allocator.
#
#   workloads/redis/runtest.sh [--preload LIB] [--dir DIR] [--] RUNTEST_ARGS...
#
# e.g.  workloads/redis/runtest.sh --preload build/src/llamalloc/libllamalloc.so -- --single unit/info --clients 2
#       workloads/redis/runtest.sh --print-tree     prints the unpacked source tree's path (and runs nothing)
#
# The source tree (tests/, runtest, tcl helpers) is unpacked once beside the cached binary. Each run gets its own
# directory DIR (default: a new temporary one, removed at the end) holding a copy of tests/ and runtest, and a
# src/ whose redis-server is a stand-in script: it execs the real binary with LD_PRELOAD=LIB, keeping argv[0]
# (so the server under test is exactly the cached binary, and every server the suite starts runs under LIB).
# src/redis-cli and src/redis-benchmark are Debian's (redis-tools, the same release). The exit status is
# runtest's; its output is runtest's.
set -euo pipefail
die() { printf 'redis runtest: %s\n' "$*" >&2; exit 2; }

preload=""
dir=""
print_tree=0
while [ $# -gt 0 ]; do
  case "$1" in
    --preload) [ $# -ge 2 ] || die "--preload needs a library"; preload=$2; shift 2 ;;
    --dir) [ $# -ge 2 ] || die "--dir needs a folder"; dir=$2; shift 2 ;;
    --print-tree) print_tree=1; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
if [ -n "$preload" ]; then
  [ -f "$preload" ] || die "$preload does not exist"
  preload=$(realpath "$preload")
fi
command -v tclsh8.6 >/dev/null || command -v tclsh >/dev/null || die "tclsh is missing (Debian package tcl)"
for tool in redis-cli redis-benchmark; do
  command -v "$tool" >/dev/null || die "$tool is missing (Debian package redis-tools)"
done

here=$(cd "$(dirname "$0")" && pwd)
server=$("$here/build.sh" | tail -n1)
[ -x "$server" ] || die "build.sh gave no redis-server"
cache_dir=$(dirname "$server")
tree="$cache_dir/tree"

# Unpack the source tree once (same .dsc as the build), under the build's lock.
if [ ! -f "$tree/.complete" ]; then
  cache_root=$(dirname "$cache_dir")
  exec 9>"$cache_root/.lock"
  flock 9
  if [ ! -f "$tree/.complete" ]; then
    key=$(basename "$cache_dir")
    dsc=$(ls "$cache_root/src-$key"/redis_*.dsc 2>/dev/null | head -n1 || true)
    [ -n "$dsc" ] || die "no redis source package in $cache_root/src-$key (remove $cache_dir and rerun build.sh)"
    rm -rf "$tree" "$tree.tmp"
    dpkg-source -x "$dsc" "$tree.tmp" >/dev/null 2>&1 || die "dpkg-source -x $dsc failed"
    touch "$tree.tmp/.complete"
    mv "$tree.tmp" "$tree"
  fi
  exec 9>&-
fi
if [ $print_tree -eq 1 ]; then
  echo "$tree"
  exit 0
fi

cleanup=""
if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/redis-runtest.XXXXXX")
  cleanup=$dir
fi
mkdir -p "$dir/src"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/tests"
cp -r "$tree/tests" "$tree/runtest" "$dir/"
ln -sf "$(command -v redis-cli)" "$dir/src/redis-cli"
ln -sf "$(command -v redis-benchmark)" "$dir/src/redis-benchmark"
{
  echo '#!/bin/bash'
  echo "# Stand-in for redis-server: the cached binary, under LD_PRELOAD=${preload:-(nothing: glibc)}."
  if [ -n "$preload" ]; then
    echo "export LD_PRELOAD=$(printf '%q' "$preload")\${LD_PRELOAD:+:\$LD_PRELOAD}"
  fi
  echo "exec -a \"\$0\" $(printf '%q' "$server") \"\$@\""
} > "$dir/src/redis-server"
chmod +x "$dir/src/redis-server"

cd "$dir"
set +e
./runtest "$@"
rc=$?
set -e
[ -z "$cleanup" ] || rm -rf "$cleanup"
exit $rc
