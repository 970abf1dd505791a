/* The peak of the subrelease tests' programs: objects of 1-4 KiB, each written whole, up to `total` bytes, into
   objects[]; then all but every keep_every-th are freed (the survivors, long-lived state made during the peak, are
   left written with 1). Returns how many objects were made. */
#ifndef PEAK_FILL_H
#define PEAK_FILL_H
#include <stdlib.h>
#include <string.h>

static size_t fill_then_free_most(void** objects, size_t total, unsigned keep_every) {
  size_t n = 0, made = 0;
  for (unsigned i = 0; made < total; i++, n++) {
    size_t size = 1024 + (i * 2654435761u) % 3072;
    objects[n] = malloc(size);
    memset(objects[n], 1, size);
    made += size;
  }
  for (size_t i = 0; i < n; i++)
    if (i % keep_every != 0) free(objects[i]);
  return n;
}
#endif
