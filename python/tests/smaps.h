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
