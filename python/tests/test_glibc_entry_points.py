"""glibc's own names for the allocator and its malloc.h extensions (src/llamalloc/override/glibc.cc): a program
written for glibc that calls __libc_malloc / __libc_free, malloc_trim or mallinfo2 gets the heap it allocates
from, both linked and under LD_PRELOAD."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from linked_support import build_linked, run_json
from llamalloc.paths import native_library

PROG = r"""
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* mallinfo, kept for old programs */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "smaps.h"

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);
extern void* __libc_valloc(size_t);
extern void* __libc_pvalloc(size_t);
extern void __libc_free(void*);

enum { N = 8192, SIZE = 4096, KEEP_EVERY = 64 };
static void* objects[N];

int main(void) {
  /* Mixed: what one name gives, the other frees (glibc's free would abort on the heap's pointers). */
  char* a = malloc(100);
  memset(a, 1, 100);
  __libc_free(a);
  char* b = __libc_malloc(100);
  memset(b, 2, 100);
  if (malloc_usable_size(b) < 100) return 10;
  free(b);
  unsigned char* c = __libc_calloc(10, 10);
  for (int i = 0; i < 100; i++) if (c[i] != 0) return 11;
  c = __libc_realloc(c, 5000);
  if (c == NULL || c[99] != 0) return 12;
  free(c);
  void* d = __libc_memalign(4096, 100);
  if (d == NULL || (uintptr_t)d % 4096 != 0) return 13;
  __libc_free(d);
  void* e = __libc_valloc(100);
  void* f = __libc_pvalloc(100);
  if (e == NULL || f == NULL || (uintptr_t)e % 4096 != 0 || (uintptr_t)f % 4096 != 0) return 14;
  free(e);
  __libc_free(f);

  /* mallinfo2: the heap's live bytes and footprint (glibc's would describe its own, unused arena). */
  struct mallinfo2 before = mallinfo2();
  for (int i = 0; i < N; i++) { objects[i] = malloc(SIZE); memset(objects[i], 3, SIZE); }
  struct mallinfo2 peak = mallinfo2();
  struct mallinfo peak_int = mallinfo();
  /* A peak of 32 MiB of which one object in 64 stays: sparse huge pages that malloc_trim can give back. */
  for (int i = 0; i < N; i++) if (i % KEEP_EVERY != 0) free(objects[i]);
  struct mallinfo2 after = mallinfo2();
  long rss_before_trim = rss_kib();
  int trimmed = malloc_trim(0);
  long rss_after_trim = rss_kib();
  for (int i = 0; i < N; i += KEEP_EVERY)
    if (((unsigned char*)objects[i])[SIZE - 1] != 3) return 15; /* the survivors are intact */
  printf("{\"before_live\": %zu, \"peak_live\": %zu, \"peak_arena\": %zu, \"peak_free\": %zu, "
         "\"peak_int_live\": %d, \"after_live\": %zu, \"trimmed\": %d, \"rss_before_trim_kib\": %ld, "
         "\"rss_after_trim_kib\": %ld}\n",
         before.uordblks, peak.uordblks, peak.arena, peak.fordblks, peak_int.uordblks, after.uordblks, trimmed,
         rss_before_trim, rss_after_trim);
  return 0;
}
"""

MIB = 1 << 20
PEAK = 8192 * 4096


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build_linked(tmp_path_factory.mktemp("glibc"), PROG)


def check(doc: dict) -> None:
    # The live bytes are the heap's own: the 32 MiB peak, then its 1/64 survivors.
    assert doc["before_live"] < MIB, doc
    assert PEAK <= doc["peak_live"] - doc["before_live"] <= PEAK + MIB, doc
    assert doc["peak_int_live"] == doc["peak_live"], doc
    assert doc["peak_arena"] >= doc["peak_live"] and doc["peak_free"] == doc["peak_arena"] - doc["peak_live"], doc
    assert doc["after_live"] - doc["before_live"] <= PEAK // 64 + MIB, doc
    # malloc_trim gave the sparse pages' free blocks back at once (no sweeper pass, no demand window).
    assert doc["trimmed"] == 1, doc
    assert doc["rss_before_trim_kib"] * 1024 >= 24 * MIB, doc
    assert doc["rss_after_trim_kib"] <= 0.5 * doc["rss_before_trim_kib"], doc


def test_linked_program_gets_the_heap_under_glibcs_names(program):
    (doc,) = run_json(program, LLAMALLOC_SWEEP_MS="0")
    check(doc)


def test_preloaded_program_gets_the_heap_under_glibcs_names(tmp_path):
    # Built against glibc alone: every name binds to libllamalloc.so only through LD_PRELOAD.
    src = tmp_path / "p.c"
    src.write_text(PROG)
    exe = tmp_path / "p"
    subprocess.run(["cc", "-O1", "-I", str(Path(__file__).parent), "-o", str(exe), str(src)], check=True)  # smaps.h
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_")}
    env.update(LD_PRELOAD=str(native_library("libllamalloc.so")), LLAMALLOC_SWEEP_MS="0")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
    check(json.loads(r.stdout))


def test_malloc_stats_prints_the_heaps_statistics(tmp_path):
    exe = build_linked(tmp_path, "#include <malloc.h>\nint main(void) { malloc_stats(); return 0; }\n", "s")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert '"format": "llamalloc-stats"' in r.stderr and '"footprint_bytes"' in r.stderr, r.stderr
