#!/usr/bin/env bash
# cmake --install puts libllamalloc.so, libllamalloc.a, llamalloc.h and llamalloc.pc in place, and a C program
# builds against them with pkg-config (shared and static) and runs on llamalloc. The library has a versioned SONAME
# (libllamalloc.so.0, with the links libllamalloc.so.0 and libllamalloc.so). A full install (every component) adds
# the profiler, the simulator and the tools.
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" --component llamalloc >/dev/null
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cat > "$prefix/t.c" <<'C'
#include <llamalloc.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  char* p = llamalloc_malloc_class(100, LLAMALLOC_CLASS_NEVER_FREED);
  strcpy(p, "class");
  char* q = malloc(50);
  strcpy(q, "malloc");
  printf("%s %s %d\n", p, q, malloc_usable_size(q) >= 50);
  free(p);
  free(q);
  return 0;
}
C
cc "$prefix/t.c" -o "$prefix/shared" $(pkg-config --cflags --libs llamalloc) -Wl,-rpath,"$prefix/lib"
cc "$prefix/t.c" -o "$prefix/static" $(pkg-config --cflags llamalloc) "$prefix/lib/libllamalloc.a" $(pkg-config --libs-only-other --static llamalloc) -lstdc++ -lpthread
for exe in shared static; do
  out=$("$prefix/$exe")
  [ "$out" = "class malloc 1" ] || { echo "install_test: $exe printed '$out'" >&2; exit 1; }
done
# (grep on captured output: grep -q closing the pipe early would fail the pipeline under pipefail)
deps=$(ldd "$prefix/shared")
grep -q "$prefix/lib/libllamalloc.so" <<<"$deps" || { echo "install_test: not linked to the installed library" >&2; exit 1; }
symbols=$(nm "$prefix/static")
grep -q " T malloc$" <<<"$symbols" || { echo "install_test: static program does not carry llamalloc's malloc" >&2; exit 1; }
# Versioned SONAME and its links.
soname=$(readelf -d "$prefix/lib/libllamalloc.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libllamalloc.so.0" ] || { echo "install_test: SONAME is '$soname', not libllamalloc.so.0" >&2; exit 1; }
[ -L "$prefix/lib/libllamalloc.so" ] && [ -L "$prefix/lib/libllamalloc.so.0" ] \
  || { echo "install_test: libllamalloc.so and libllamalloc.so.0 are not links" >&2; exit 1; }
grep -q "libllamalloc.so.0 => $prefix/lib/libllamalloc.so.0" <<<"$deps" \
  || { echo "install_test: the program does not record the SONAME libllamalloc.so.0" >&2; exit 1; }
# Preloading the unversioned name works.
out=$(LD_PRELOAD="$prefix/lib/libllamalloc.so" "$prefix/static")
[ "$out" = "class malloc 1" ] || { echo "install_test: preloaded, printed '$out'" >&2; exit 1; }
# Every component: the profiler, the simulator, the model tool.
full=$prefix/full
cmake --install "$build" --prefix "$full" >/dev/null
for f in lib/libllamalloc.so lib/libllamalloc.a lib/libllamalloc_prof.so bin/llamalloc-sim bin/llamalloc-options \
         bin/llamalloc-model-tool include/llamalloc.h include/llamalloc/trace_format.h lib/pkgconfig/llamalloc.pc; do
  [ -e "$full/$f" ] || { echo "install_test: the full install has no $f" >&2; exit 1; }
done
sim_err=$("$full/bin/llamalloc-sim" 2>&1 || true)
grep -q "llamalloc-sim: error: no trace given" <<<"$sim_err" || { echo "install_test: installed llamalloc-sim: $sim_err" >&2; exit 1; }
echo "install_test: ok"
