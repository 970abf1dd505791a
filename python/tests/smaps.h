// /proc/self/smaps_rollup from the C programs of the Python tests (linked_support.build_linked puts this folder on
// their include path).
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The KiB of the field `key` ("Rss:", "AnonHugePages:", ...) of /proc/self/smaps_rollup; -1 when it cannot be read.
static inline long smaps_kib(const char* key) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0) v = atol(line + n);
  if (f) fclose(f);
  return v;
}

static inline long rss_kib(void) { return smaps_kib("Rss:"); }

// The report of the tests that free most of a peak and wait (span purge, quiet subrelease), one JSON line: RSS at
// the peak, right after the frees and after the wait, and the allocator's statistics JSON taken then.
static inline void print_drop_report(long peak, long after_drop, long quiet_rss, const char* stats) {
  printf("{\"peak_rss_kib\": %ld, \"after_drop_rss_kib\": %ld, \"quiet_rss_kib\": %ld, \"stats\": %s}\n", peak,
         after_drop, quiet_rss, stats);
}
