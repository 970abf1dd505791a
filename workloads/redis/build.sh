#!/usr/bin/env bash
# Builds the real Redis server from Debian's source package, with the libc allocator interface (MALLOC=libc,
# so that LD_PRELOAD decides which allocator it uses), symbols (-g) and frame pointers, and caches the binary.
#
#   workloads/redis/build.sh            prints the path of the cached redis-server (building it if needed)
#
# The cache is keyed by the Debian version of the redis source package, taken from the installed redis-tools
# (so that redis-server and redis-benchmark come from the same release). Only Debian's own archive is used:
# `apt-get source` needs a deb-src entry, which is written beside the deb one when it is missing.
# Environment: LLAMALLOC_CACHE_DIR (default ~/.cache/llamalloc), REDIS_BUILD_JOBS (default 2).
set -euo pipefail
log() { printf '[redis-build] %s\n' "$*" >&2; }
die() { printf 'redis build: %s\n' "$*" >&2; exit 1; }

cache_root="${LLAMALLOC_CACHE_DIR:-$HOME/.cache/llamalloc}/redis"
jobs="${REDIS_BUILD_JOBS:-2}"

version=$(dpkg-query -W -f='${source:Version}' redis-tools 2>/dev/null || true)
[ -n "$version" ] || die "redis-tools is not installed (it provides redis-benchmark): run scripts/setup.sh"
key=${version//[:~]/_}
out_dir="$cache_root/$key"
if [ -x "$out_dir/redis-server" ]; then
  echo "$out_dir/redis-server"
  exit 0
fi

# One build at a time: a second caller waits for the first and then finds the cached binary.
mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock 9
if [ -x "$out_dir/redis-server" ]; then
  echo "$out_dir/redis-server"
  exit 0
fi

command -v dpkg-source >/dev/null || die "dpkg-source is missing (package dpkg-dev): run scripts/setup.sh"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo

src_dir="$cache_root/src-$key"
mkdir -p "$src_dir"
dsc=$(ls "$src_dir"/redis_*.dsc 2>/dev/null | head -n1 || true)
if [ -z "$dsc" ]; then
  if ! apt-cache showsrc redis >/dev/null 2>&1 || [ -z "$(apt-cache showsrc redis 2>/dev/null)" ]; then
    deb=/etc/apt/sources.list.d/debian.sources
    [ -f "$deb" ] || die "$deb not found: cannot add Debian's deb-src entry for 'apt-get source redis'"
    log "adding a deb-src entry (/etc/apt/sources.list.d/debian-src.sources) and updating apt"
    sed -e 's/^Types:.*$/Types: deb-src/' "$deb" | $SUDO tee /etc/apt/sources.list.d/debian-src.sources >/dev/null
    $SUDO apt-get update -qq
  fi
  log "downloading Debian's redis source package $version"
  (cd "$src_dir" && { apt-get source --download-only -qq "redis=${version#*:}" >/dev/null 2>&1 \
                      || apt-get source --download-only -qq "redis=$version" >/dev/null 2>&1 \
                      || apt-get source --download-only -qq redis >/dev/null; }) \
    || die "apt-get source redis failed"
  dsc=$(ls "$src_dir"/redis_*.dsc | head -n1)
fi

work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "unpacking $(basename "$dsc")"
dpkg-source -x "$dsc" "$work/redis" >/dev/null 2>&1 || die "dpkg-source -x $dsc failed"

# Only redis-server is needed (redis-benchmark and redis-cli come from Debian's redis-tools). The vendored
# deps (lua, hiredis, linenoise, hdr_histogram) are built by the upstream Makefile; no TLS, no systemd.
log "building redis-server (MALLOC=libc, -O2 -g -fno-omit-frame-pointer, make -j$jobs)"
make -C "$work/redis/src" -j"$jobs" redis-server \
  MALLOC=libc BUILD_TLS=no USE_SYSTEMD=no OPTIMIZATION=-O2 \
  REDIS_CFLAGS="-g -fno-omit-frame-pointer" REDIS_LDFLAGS="-g" >"$work/build.log" 2>&1 \
  || { tail -n 30 "$work/build.log" >&2; die "make redis-server failed (log above)"; }

mkdir -p "$out_dir.tmp"
cp "$work/redis/src/redis-server" "$out_dir.tmp/redis-server"
echo "$version" > "$out_dir.tmp/VERSION"
rm -rf "$out_dir"
mv "$out_dir.tmp" "$out_dir"
log "cached $out_dir/redis-server"
echo "$out_dir/redis-server"
