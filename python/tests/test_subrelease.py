"""Subrelease (docs/heap.md, "Subrelease"): after a peak, the free blocks of sparse huge pages that nothing
allocates from go back to the OS, so that RSS falls to about what the surviving objects need while they stay where
they are; through the sweeper thread in a threaded program and from the slow path in a single-threaded one.
LLAMALLOC_SUBRELEASE=0 keeps every byte on 2 MiB pages."""
from __future__ import annotations

from pathlib import Path

import pytest

from linked_support import build_linked, run_json

# A 64 MiB peak of 1-4 KiB objects of which one in 256 survives, then a 3 s quiet phase; prints RSS right after
# the frees and at the end, AnonHugePages, and the allocator's statistics. "thread": a second thread heap
# starts the sweeper, and the quiet phase makes no allocator call at all. "idle-thread": all the work on the main
# thread, beside a thread that never allocates (redis's bio threads), and no allocator call in the quiet phase:
# the process already has a second thread, so the slow path's pass starts the sweeper. "quiet": one thread and
# no allocator call in the quiet phase; its 64 MiB heap starts the sweeper (LLAMALLOC_SWEEPER_FROM_MIB).
PROG = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <llamalloc.h>
#include "peak_fill.h"
#include "smaps.h"

enum { TOTAL = 64 << 20, KEEP_EVERY = 256 };
static void* objects[TOTAL / 1024];

static void* volatile sink;
static void* touch(void* arg) { sink = malloc(100); free(sink); return arg; }
static int idle_pipe[2];
static void* idle(void* arg) { char c; while (read(idle_pipe[0], &c, 1) < 0) {} return arg; }

/* Mappings that khugepaged may not collapse (VmFlags "nh": MADV_NOHUGEPAGE). */
static long nohuge_mappings(void) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  long n = 0;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " nh")) n++;
  if (f) fclose(f);
  return n;
}

static long threads(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long n = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Threads: %ld", &n) == 1) break;
  if (f) fclose(f);
  return n;
}

int main(int argc, char** argv) {
  int quiet = argc > 1 && strcmp(argv[1], "quiet") == 0;
  int threaded = argc > 1 && strcmp(argv[1], "thread") == 0;
  sink = malloc(100); free(sink); /* main has a heap first: the thread makes a second one, which starts the sweeper */
  if (threaded) { pthread_t t; pthread_create(&t, NULL, touch, NULL); pthread_join(t, NULL); }
  int idle_thread = argc > 1 && strcmp(argv[1], "idle-thread") == 0;
  pthread_t idler;
  if (idle_thread && (pipe(idle_pipe) != 0 || pthread_create(&idler, NULL, idle, NULL) != 0)) return 5;
  /* The peak: 64 MiB of 1-4 KiB objects; one in 256 stays (long-lived state made during the peak). */
  size_t n = fill_then_free_most(objects, TOTAL, KEEP_EVERY);
  long peak_rss = rss_kib();
  /* The quiet phase: 3 s in which the program still serves the odd request (a 40 KiB buffer every 5 ms) in the
     threaded mode's main thread too; the sweeper or the slow path runs the passes. */
  for (int tick = 0; tick < 600; tick++) {
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
    if (!threaded && !idle_thread && !quiet) { sink = malloc(40000); memset(sink, 2, 40000); free(sink); }
  }
  static char buf[8192];
  size_t len = llamalloc_stats_json(buf, sizeof buf);
  if (len == 0 || len >= sizeof buf) return 3;
  buf[len] = 0;
  printf("{\"after_frees_rss_kib\": %ld, \"rss_kib\": %ld, \"ahp_kib\": %ld, \"nohuge_mappings\": %ld, "
         "\"threads\": %ld, \"stats\": %s}\n", peak_rss, rss_kib(), smaps_kib("AnonHugePages:"), nohuge_mappings(),
         threads(), buf);
  for (size_t i = 0; i < n; i += KEEP_EVERY)
    if (((char*)objects[i])[0] != 1) return 4; /* the objects kept are intact */
  if (idle_thread && (write(idle_pipe[1], "x", 1) != 1 || pthread_join(idler, NULL) != 0)) return 5;
  return 0;
}
"""

MIB = 1 << 20


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return build_linked(tmp_path_factory.mktemp("subrelease"), PROG)


def run(program: Path, mode: str, **env: str) -> dict:
    # (exit 4: an object kept over the quiet phase was damaged)
    (doc,) = run_json(program, mode, **env)
    return doc


@pytest.mark.parametrize("mode", ["single", "thread", "idle-thread"])
def test_rss_falls_after_a_peak_while_the_survivors_stay(program, mode):
    on = run(program, mode)
    off = run(program, mode, LLAMALLOC_SUBRELEASE="0")
    kib = 1024
    # The huge pages stay in use either way (footprint counts them), scattered survivors on every one of them.
    for r in (on, off):
        assert r["stats"]["footprint_bytes"] >= 32 * MIB, r["stats"]
        assert r["after_frees_rss_kib"] * kib >= 48 * MIB, r
    assert off["stats"]["subreleased_bytes"] == 0 and off["stats"]["counters"]["blocks_subreleased"] == 0
    assert off["rss_kib"] >= 0.8 * off["after_frees_rss_kib"], off
    # With subrelease, what the survivors do not need went back: RSS a fraction of what it was after the frees.
    assert on["stats"]["subreleased_bytes"] >= 32 * MIB, on["stats"]
    assert on["stats"]["counters"]["blocks_subreleased"] * 8192 >= on["stats"]["subreleased_bytes"]
    # (About 0.2 when every pass has run; the first second after the peak is inside the demand window, and the
    # passes of the single-threaded run happen only on its slow paths.)
    assert on["rss_kib"] <= 0.45 * on["after_frees_rss_kib"], on
    assert on["rss_kib"] <= 0.45 * off["rss_kib"], (on, off)
    if mode != "single":  # (the sweeper thread's work: a single-threaded process gets none)
        assert on["stats"]["counters"]["idle_heap_sweeps"] >= 1, on["stats"]["counters"]
    # The subreleased pages are kept from khugepaged, which would otherwise collapse each back into a whole huge
    # page (zero-filled) as soon as one of its small pages is present: RSS would creep back up in the quiet phase.
    # (Other mappings of the process may carry the flag too: counted against the same run without subrelease.)
    assert on["nohuge_mappings"] > off["nohuge_mappings"], (on, off)


def test_a_big_single_threaded_heap_gets_the_sweeper_and_falls_while_the_program_is_quiet(program):
    quiet = run(program, "quiet")
    alone = run(program, "quiet", LLAMALLOC_SWEEPER_FROM_MIB="0")
    small = run(program, "quiet", LLAMALLOC_SWEEPER_FROM_MIB="1024")
    # 64 MiB of heap: the sweeper thread; its passes give back what the frees left while no allocator call comes.
    assert quiet["threads"] == 2 and quiet["stats"]["counters"]["idle_heap_sweeps"] >= 1, quiet
    assert quiet["rss_kib"] <= 0.45 * quiet["after_frees_rss_kib"], quiet
    # Below SWEEPER_FROM_MIB, or with 0, no thread is added, and no pass follows the last slow path.
    for r in (alone, small):
        assert r["threads"] == 1 and r["stats"]["counters"]["idle_heap_sweeps"] == 0, r
        assert r["rss_kib"] >= 0.8 * r["after_frees_rss_kib"], r


# Single-threaded: objects of lifetime classes 1-3 (as a model places them) are made and all freed, then the
# program serves the odd request. The passes that its slow paths run also give back its own empty spans, as the
# sweeper does to every thread heap: the classes' pages, which held nothing else, are released.
OWN_HEAP_PROG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <llamalloc.h>

static void* volatile sink;
int main(void) {
  static void* objects[3][3][50];
  /* Classes 2-4: above the class every plain malloc gets (LLAMALLOC_DEFAULT_CLASS, 1), whose page the
     40 KiB buffers below keep. */
  for (unsigned c = 2; c <= 4; c++)
    for (unsigned s = 0; s < 3; s++)
      for (unsigned i = 0; i < 50; i++) {
        objects[c - 2][s][i] = llamalloc_malloc_class(64 << (2 * s), c);
        memset(objects[c - 2][s][i], 1, 64 << (2 * s));
      }
  for (unsigned c = 2; c <= 4; c++)
    for (unsigned s = 0; s < 3; s++)
      for (unsigned i = 0; i < 50; i++) free(objects[c - 2][s][i]);
  static char before[8192], after[8192];
  size_t n = llamalloc_stats_json(before, sizeof before - 1);
  before[n] = 0;
  for (int tick = 0; tick < 300; tick++) {  /* 1.5 s: a 40 KiB buffer every 5 ms */
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
    sink = malloc(40000); memset(sink, 2, 40000); free(sink);
  }
  n = llamalloc_stats_json(after, sizeof after - 1);
  after[n] = 0;
  printf("{\"before\": %s, \"after\": %s}\n", before, after);
  return 0;
}
"""


def test_a_single_threaded_program_gives_back_its_own_empty_spans(tmp_path):
    program = build_linked(tmp_path, OWN_HEAP_PROG, "own")
    (doc,) = run_json(program)
    by_class_before = doc["before"]["huge_pages_by_class"]
    by_class_after = doc["after"]["huge_pages_by_class"]
    # Right after the frees each class still has its page: the spans its queues allocate from, empty, keep them.
    # Class 4's are on the longest class's pages (LLAMALLOC_LONG_CLASS, default 4), which nothing else uses here.
    assert by_class_before[4] == 0, by_class_before
    assert all(by_class_before[c] >= 1 for c in (2, 3, 7)), by_class_before
    assert all(by_class_after[c] == 0 for c in (2, 3, 4, 7)), by_class_after


def test_long_class_is_always_above_the_default_class(tmp_path):
    # LLAMALLOC_LONG_CLASS at or below the class every plain malloc gets (DEFAULT_CLASS, 1) is raised above it, as
    # SHARED_CLASS is: the plain 40 KiB buffers keep a page of class 1, and classes 2-4 use the never-freed pages.
    program = build_linked(tmp_path, OWN_HEAP_PROG, "own")
    (doc,) = run_json(program, LLAMALLOC_LONG_CLASS="1")
    before, after = doc["before"]["huge_pages_by_class"], doc["after"]["huge_pages_by_class"]
    assert after[1] >= 1 and after[7] == 0, after
    assert before[2] == before[3] == before[4] == 0 and before[7] >= 1, before


# A fall of the live bytes in a program that then goes idle: 64 MiB of 1-4 KiB objects of which one in eight
# stays, made and freed by the main thread right after a second thread heap started the sweeper; then 3.5 s
# without an allocator call ("idle"), or with a burst of 1 KiB objects made and freed every 10 ms, which takes
# spans from the page heap again and again ("allocating"). Prints RSS right after the frees and at the end.
FALL_PROG = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <llamalloc.h>
#include "peak_fill.h"
#include "smaps.h"

enum { TOTAL = 64 << 20, KEEP_EVERY = 8, BURST = 4096 };
static void* objects[TOTAL / 1024];
static void* burst[BURST];
static void* volatile sink;
static void* touch(void* arg) { sink = malloc(100); free(sink); return arg; }

int main(int argc, char** argv) {
  int allocating = argc > 1 && strcmp(argv[1], "allocating") == 0;
  sink = malloc(100); free(sink);
  pthread_t t;
  if (pthread_create(&t, NULL, touch, NULL) != 0 || pthread_join(t, NULL) != 0) return 5;
  size_t n = fill_then_free_most(objects, TOTAL, KEEP_EVERY);
  long after_frees = rss_kib();
  for (int tick = 0; tick < 350; tick++) {
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
    if (!allocating) continue;
    for (int i = 0; i < BURST; i++) { burst[i] = malloc(1024); memset(burst[i], 3, 1024); }
    for (int i = 0; i < BURST; i++) free(burst[i]);
  }
  static char buf[8192];
  size_t len = llamalloc_stats_json(buf, sizeof buf);
  if (len == 0 || len >= sizeof buf) return 3;
  buf[len] = 0;
  printf("{\"after_frees_rss_kib\": %ld, \"rss_kib\": %ld, \"stats\": %s}\n", after_frees, rss_kib(), buf);
  for (size_t i = 0; i < n; i += KEEP_EVERY)
    if (((char*)objects[i])[0] != 1) return 4;
  return 0;
}
"""


def test_a_fall_of_the_live_bytes_brings_the_sweepers_pass_forward_once_the_program_is_idle(tmp_path):
    program = build_linked(tmp_path, FALL_PROG, "fall")
    # A 5 s period: the regular pass after the sweeper's start comes 5 s in, after the program's end; the sweeper
    # looks at the live bytes every second in between.
    (idle,) = run_json(program, "idle", LLAMALLOC_SWEEP_MS="5000")
    (allocating,) = run_json(program, "allocating", LLAMALLOC_SWEEP_MS="5000")
    for r in (idle, allocating):
        assert r["after_frees_rss_kib"] * 1024 >= 48 * MIB, r
    # Idle after the fall: a pass came at the first look that found the program idle, and a quiet one a fifth of
    # the period later, which purged the sparse spans' free pages.
    assert idle["stats"]["counters"]["idle_heap_sweeps"] >= 1, idle["stats"]["counters"]
    assert idle["rss_kib"] <= 0.5 * idle["after_frees_rss_kib"], idle
    # Still taking spans from the page heap: no pass before the period's end, as a load that goes on takes back
    # what such a pass would give.
    assert allocating["stats"]["counters"]["idle_heap_sweeps"] == 0, allocating["stats"]["counters"]
    assert allocating["rss_kib"] >= 0.8 * allocating["after_frees_rss_kib"], allocating
