"""Span purge (docs/heap-memory.md, "Span purge"): after a cache drops most of its entries, the survivors keep
almost every size-class span and huge page in use, so no whole block or page is free; the 4 KiB pages inside
those spans whose objects are all free go back to the OS within about a second, while the survivors stay where
they are with their data, and the blocks on those pages are handed out again when the program needs them."""
from __future__ import annotations

from pathlib import Path

import pytest

from linked_support import build_linked, run_json

# Four worker threads fill a cache of 200-2000 B values (64 MiB) and stay alive, idle ("alive"), or exit ("exit":
# their heaps go to the pool, their spans parked); the main thread drops nine entries in ten (frees into the
# workers' spans); then 1.5 s of quiet. RSS right after the drop and at the end, the allocator's statistics, then
# the cache is refilled (by the workers, or by the main thread) and every value is checked.
PROG = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <llamalloc.h>
#include "smaps.h"

enum { THREADS = 4, PER_THREAD = 16000 };
static unsigned char* values[THREADS][PER_THREAD];
static size_t sizes[THREADS][PER_THREAD];
static pthread_barrier_t filled, dropped, refilled;

static void fill(long t, int only_missing) {
  for (long i = 0; i < PER_THREAD; i++) {
    if (only_missing && values[t][i] != NULL) continue;
    size_t size = 200 + (size_t)((i * 2654435761u + t * 40503u) % 1800);
    values[t][i] = malloc(size);
    sizes[t][i] = size;
    memset(values[t][i], (int)((t * 31 + i) & 0xff), size);
  }
}

static int exiting;

static void* worker(void* arg) {
  long t = (long)arg;
  fill(t, 0);
  pthread_barrier_wait(&filled);
  if (exiting) return NULL;
  pthread_barrier_wait(&dropped);  /* idle: no allocator call while the main thread drops and waits */
  fill(t, 1);
  pthread_barrier_wait(&refilled);
  return NULL;
}

int main(int argc, char** argv) {
  exiting = argc > 1 && strcmp(argv[1], "exit") == 0;
  pthread_t threads[THREADS];
  pthread_barrier_init(&filled, NULL, THREADS + 1);
  pthread_barrier_init(&dropped, NULL, THREADS + 1);
  pthread_barrier_init(&refilled, NULL, THREADS + 1);
  for (long t = 0; t < THREADS; t++) pthread_create(&threads[t], NULL, worker, (void*)t);
  pthread_barrier_wait(&filled);
  if (exiting)
    for (long t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  long peak = rss_kib();
  for (long t = 0; t < THREADS; t++)
    for (long i = 0; i < PER_THREAD; i++)
      if ((i * 7 + t) % 10 != 0) { free(values[t][i]); values[t][i] = NULL; }
  long after_drop = rss_kib();
  struct timespec quiet = {1, 500 * 1000000L};
  nanosleep(&quiet, NULL);
  long quiet_rss = rss_kib();
  static char stats[8192];
  size_t n = llamalloc_stats_json(stats, sizeof stats - 1);
  stats[n] = 0;
  if (exiting) {
    for (long t = 0; t < THREADS; t++) fill(t, 1);
  } else {
    pthread_barrier_wait(&dropped);
    pthread_barrier_wait(&refilled);
    for (long t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  }
  for (long t = 0; t < THREADS; t++)
    for (long i = 0; i < PER_THREAD; i++)
      for (size_t b = 0; b < sizes[t][i]; b += 97)
        if (values[t][i][b] != (unsigned char)((t * 31 + i) & 0xff)) return 4;  /* a value damaged */
  print_drop_report(peak, after_drop, quiet_rss, stats);
  return 0;
}
"""

MIB = 1 << 20


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build_linked(tmp_path_factory.mktemp("span-purge"), PROG)


@pytest.mark.parametrize("workers", ["alive", "exit"])
def test_a_dropped_caches_pages_go_back_within_a_second_and_the_survivors_keep_their_data(program, workers):
    (on,) = run_json(program, workers)  # (exit 4: a value was damaged by the purge or the refill)
    (off,) = run_json(program, workers, LLAMALLOC_SUBRELEASE="0")  # no subrelease, no span purge
    kib = 1024
    assert on["peak_rss_kib"] * kib >= 48 * MIB, on
    assert off["stats"]["span_purged_bytes"] == 0 and off["stats"]["counters"]["span_pages_purged"] == 0
    # Without it, the survivors (one entry in ten) keep nearly every page of the peak.
    assert off["quiet_rss_kib"] >= 0.8 * off["peak_rss_kib"], off
    # With it, the free pages inside the survivors' spans went back within the 1.5 s: about half of the peak
    # (0.50-0.51 here; the survivors, one 200-2000 B value in ten, touch about half of the 4 KiB pages).
    assert on["stats"]["span_purged_bytes"] >= 24 * MIB, on["stats"]
    assert on["stats"]["counters"]["span_pages_purged"] * 4096 >= on["stats"]["span_purged_bytes"]
    assert on["quiet_rss_kib"] <= 0.6 * on["peak_rss_kib"], on
    assert on["quiet_rss_kib"] <= 0.6 * off["quiet_rss_kib"], (on, off)
