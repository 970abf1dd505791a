// The C allocation API: one forwarding line per entry point, nothing else (snmalloc override/malloc.cc).
#include <cstddef>

#include "alloc/alloc.h"
#include "llamalloc.h"
#include "stats.h"

using namespace llamalloc;

LLAMALLOC_EXPORT void* malloc(size_t size) { return heap_malloc(size); }
LLAMALLOC_EXPORT void free(void* p) { heap_free(p); }
LLAMALLOC_EXPORT void cfree(void* p) { heap_free(p); }
LLAMALLOC_EXPORT void free_sized(void* p, size_t) { heap_free(p); }
LLAMALLOC_EXPORT void free_aligned_sized(void* p, size_t, size_t) { heap_free(p); }
LLAMALLOC_EXPORT void* calloc(size_t count, size_t size) { return heap_calloc(count, size); }
LLAMALLOC_EXPORT void* realloc(void* p, size_t size) { return heap_realloc(p, size); }
LLAMALLOC_EXPORT void* reallocarray(void* p, size_t count, size_t size) { return heap_reallocarray(p, count, size); }
LLAMALLOC_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) { return heap_posix_memalign(out, alignment, size); }
LLAMALLOC_EXPORT void* aligned_alloc(size_t alignment, size_t size) { return heap_aligned_alloc(alignment, size); }
LLAMALLOC_EXPORT void* memalign(size_t alignment, size_t size) { return heap_memalign(alignment, size); }
LLAMALLOC_EXPORT void* valloc(size_t size) { return heap_valloc(size); }
LLAMALLOC_EXPORT void* pvalloc(size_t size) { return heap_pvalloc(size); }
LLAMALLOC_EXPORT size_t malloc_usable_size(void* p) { return heap_usable_size(p); }
LLAMALLOC_EXPORT void* llamalloc_malloc_class(size_t size, unsigned lifetime_class) { return heap_malloc_class(size, lifetime_class); }

// Runtime statistics (include/llamalloc.h): the JSON of LLAMALLOC_STATS, at any time, without allocating.
LLAMALLOC_EXPORT size_t llamalloc_stats_json(char* buf, size_t capacity) { return stats_snapshot(buf, capacity, false); }
LLAMALLOC_EXPORT void llamalloc_stats_print(void) {
  // As llamalloc_stats_json: this thread's live-byte delta and the predictor's counters first.
  flush_live_bytes();
  if (Predictor* p = predictor()) p->report(g_page_heap.counters());
  print_stats(g_page_heap);
}
LLAMALLOC_EXPORT void llamalloc_collect(void) { heap_collect(); }
