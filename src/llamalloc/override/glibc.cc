// glibc's own names for the allocator and its malloc.h extensions, so that a program written for glibc finds
// the heap it allocates from wherever it asks (mimalloc and tcmalloc export the same; docs/heap.md, "Entry points").
//
// - __libc_malloc and the rest: glibc's internal names, which some programs and libraries call directly (a malloc
//   wrapper that forwards to them, code that frees with __libc_free what malloc gave). Left to glibc, its free
//   would get our pointers and abort ("free(): invalid pointer").
// - malloc_trim: does llamalloc_collect() (every heap's empty spans, idle memory and the page cache back to the
//   OS); 1 when memory went back, as glibc's. `pad` is glibc's top-of-heap slack: there is no such top here.
// - mallinfo2 / mallinfo: the heap's gauges in glibc's fields (glibc's would describe its own, unused arena):
//   arena = footprint (huge pages in use), uordblks = live bytes, fordblks = the rest of the footprint, keepcost =
//   free huge pages kept backed (the page cache, which malloc_trim gives back). mallinfo's int fields saturate.
// - malloc_stats: the statistics JSON on stderr, as llamalloc_stats_print (glibc prints its arenas there).
#include <malloc.h>

#include <climits>
#include <cstddef>

#include "alloc/alloc.h"
#include "llamalloc.h"
#include "stats.h"

using namespace llamalloc;

extern "C" {
LLAMALLOC_EXPORT void* __libc_malloc(size_t size) { return heap_malloc(size); }
LLAMALLOC_EXPORT void __libc_free(void* p) { heap_free(p); }
LLAMALLOC_EXPORT void __libc_cfree(void* p) { heap_free(p); }
LLAMALLOC_EXPORT void* __libc_calloc(size_t count, size_t size) { return heap_calloc(count, size); }
LLAMALLOC_EXPORT void* __libc_realloc(void* p, size_t size) { return heap_realloc(p, size); }
LLAMALLOC_EXPORT void* __libc_memalign(size_t alignment, size_t size) { return heap_memalign(alignment, size); }
LLAMALLOC_EXPORT void* __libc_valloc(size_t size) { return heap_valloc(size); }
LLAMALLOC_EXPORT void* __libc_pvalloc(size_t size) { return heap_pvalloc(size); }
LLAMALLOC_EXPORT int __posix_memalign(void** out, size_t alignment, size_t size) {
  return heap_posix_memalign(out, alignment, size);
}
}

LLAMALLOC_EXPORT int malloc_trim(size_t) noexcept { return heap_trim() ? 1 : 0; }

LLAMALLOC_EXPORT void malloc_stats() noexcept { print_stats(g_page_heap); }

LLAMALLOC_EXPORT struct mallinfo2 mallinfo2() noexcept {
  flush_live_bytes();
  GaugeSnapshot g = read_gauges(g_page_heap);
  struct mallinfo2 info = {};
  info.arena = g.footprint_bytes;
  info.uordblks = g.live_bytes;
  info.fordblks = g.footprint_bytes > g.live_bytes ? g.footprint_bytes - g.live_bytes : 0;
  info.keepcost = g.page_cache_bytes;
  return info;
}

LLAMALLOC_EXPORT struct mallinfo mallinfo() noexcept {
  struct mallinfo2 m = mallinfo2();
  auto clamp = [](size_t v) { return v > size_t(INT_MAX) ? INT_MAX : int(v); };
  struct mallinfo info = {};
  info.arena = clamp(m.arena);
  info.uordblks = clamp(m.uordblks);
  info.fordblks = clamp(m.fordblks);
  info.keepcost = clamp(m.keepcost);
  return info;
}
