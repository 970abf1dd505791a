#!/usr/bin/env bash
# cmake --install puts libllamalloc.so, libllamalloc.a, llamalloc.h and llamalloc.pc in place, and a C program
# builds against them with pkg-config (shared and static) and runs on llamalloc.
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
echo "install_test: ok"
