// When an allocation leaves a thread heap's inline fast path (heap_malloc, heap_malloc_class) for the slow path
// (malloc_slow), where the heap refills the thread's span from a new span or huge page, or places a large or
// aligned object. One rule for the library and for the simulator, which replays a trace through the same heap
// and counts the slow paths as the library does (the sweeper reads that count, LocalHeap::slow_ops).
#pragma once

#include <cstddef>

#include "base.h"
#include "config.h"
#include "heap/heap.h"
#include "local/size_class.h"

namespace llamalloc {

// Whether a request misses the fast path: `sc` is its size class (classify(): kLargeRequest above
// kSmallMaxBytes), `alignment` its alignment (above kMinAlignBytes: memalign and the like, which always take the
// slow path), and `spans` the thread heap's spans of the request's lifetime class (LocalHeap::spans[lc]). The
// fast path pops the span's free list: it misses when the request is large or aligned, or the list is empty.
// spans[sc] is read only for a small request of the default alignment.
LLAMALLOC_FAST bool fast_path_misses(SmallSpan* const* spans, unsigned sc, size_t alignment) {
  return sc == kLargeRequest || alignment > kMinAlignBytes || spans[sc]->free == nullptr;
}

}  // namespace llamalloc
