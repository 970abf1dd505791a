// The C and C++ allocation semantics on top of the process-wide heap: malloc, free, calloc, realloc, the
// aligned entry points, usable size, and allocation in an explicit lifetime class. override/ forwards to these.
//
// Allocation code overview
//
// malloc and free have an inline fast path each (heap_malloc, heap_free below): it takes no lock, makes no call
// in the common case, and ends every other case in one call to an out-of-line slow path. The thread heap
// (ThreadHeap, worked on by the functions of namespace ThreadHeapOps, one file per concept under thread_heap/) is
// the calling thread's own (tl_heap); the page heap (PageHeap, g_page_heap) is the process's, and has one lock.
// The shape:
//
//   malloc(size)                                   override/malloc.cc; operator new: heap_new, alloc/new.cc
//   - heap_malloc(size)                            FAST, here
//     - owner_enter(tl_heap), sweep_requested()    FAST, thread_heap/thread_heap.h: the sweep handshake
//     - with a learned predictor: probe the thread's prediction cache; a hit names the lifetime class
//     - span_pop(spans[lifetime class][size class])
//                                                  FAST, thread_heap/thread_heap.h: a block of the span's free
//                                                  list. Done, unless the size is not small, the span is empty,
//                                                  a sweep is requested, or the cache missed:
//     - malloc_slow(...)                           slow, alloc/alloc.cc
//       - thread_heap()                            inline, alloc/runtime_internal.h; a thread's first
//         - attach_thread_heap()                   allocation: alloc/thread_heap_pool.cc (process init, a heap
//                                                  from the pool or new, the sweeper thread at the second
//                                                  heap: alloc/sweeper.cc)
//       - ThreadHeapOps::wait_for_sweep()          if a sweep is requested: thread_heap/owner_free.cc
//       - malloc_slow_entered()                    alloc/alloc.cc
//         - Predictor::predict()                   if the fast path had no class (predictor/)
//         - ThreadHeapOps::allocate()              the thread heap: thread_heap/spans.cc
//           - small, long-lived class: the shared thread heap, under its lock (thread_heap/shared_heap.cc)
//           - small: span_pop, else alloc_small(): frees from other threads (remote_free.cc), the next span of
//             the queue (span_queues.cc), the spans of exited threads (heap_pool.cc), a span of a longer class
//             (span_queues.cc), else new_span()
//             - PageHeap::alloc_large()            the page heap: page_heap/large_objects.cc, its lock
//           - large and huge: PageHeap::alloc_large()
//       - maybe_pass_inline()                      inline, alloc/runtime_internal.h; without a sweeper
//         - run_inline_passes()                    thread, the page passes: alloc/sweeper.cc
//
//   free(p)                                        override/malloc.cc; operator delete the same
//   - heap_free(p)                                 FAST, here
//     - ThreadHeapOps::span_of(p)                  FAST, thread_heap/thread_heap.h: the page map's span slot
//                                                  (null for nullptr and for large and huge objects)
//     - ThreadHeapOps::free_block(...)             FAST, thread_heap/thread_heap.h: the block index check,
//                                                  then by who frees:
//       - the owner (no remote frees waiting): span_push, without reading the block (a double free is caught
//         by a later pop or when the span goes back: check_released_list). Done, unless the span emptied or
//         was off its queue:
//         - owner_free_slow()                      slow, thread_heap/owner_free.cc: requeue the span, or cache
//                                                  it and give the oldest cached one back
//                                                  (PageHeap::free_large); then maybe_pass_inline
//       - the owner while a sweep is requested: owner_free_after_sweep()
//                                                  slow, thread_heap/owner_free.cc
//       - another thread, or remote frees waiting: free_checked()
//                                                  slow, thread_heap/owner_free.cc: the block's first word
//                                                  read; one that looks like a free-list link goes to
//                                                  free_suspicious(), which walks the span's lists
//         - another thread: remote_free()          thread_heap/remote_free.cc: an atomic push on the span's
//                                                  remote list; the first into a full span also goes on its
//                                                  owner's notify list (the shared thread heap's spans:
//                                                  shared_free, thread_heap/shared_heap.cc, under its lock)
//     - not a small object: free_slow(p)           slow, alloc/alloc.cc
//       - ThreadHeapOps::deallocate()              thread_heap/spans.cc
//         - PageHeap::free_large()                 the page heap: page_heap/large_objects.cc, its lock
//       - maybe_pass_inline()
//
//   realloc(p, size)                               no fast path of its own
//   - heap_realloc(p, size)                        alloc/alloc.cc
//     - nullptr: heap_malloc; size 0: heap_free
//     - ThreadHeapOps::check_live(), or the page heap's owns() and large_usable_size(): p must be a live object
//     - it stays where it is when realloc_keeps_small or realloc_keeps_large says so (alloc/realloc_rule.h)
//     - else heap_malloc, memcpy, heap_free: both fast paths
//
//   calloc, reallocarray, usable size, the lifetime-class entry point: alloc/alloc.cc. memalign and the other
//   aligned entry points: heap_malloc at the default alignment, else malloc_slow with the alignment. operator
//   new's handler loop: alloc/new.cc.
//
// Under all of this is the process runtime (alloc/runtime.h lists its files): process init, the thread-heap
// pool, the sweeper and the idle sweep that give memory back, fork().
#pragma once

#include <cstddef>
#include <cstdint>

#include "alloc/runtime.h"
#include "base.h"
#include "page_heap/page_heap.h"
#include "thread_heap/thread_heap.h"
#include "predictor/predictor.h"

namespace llamalloc {

// The class argument of malloc_slow that asks the predictor for one.
inline constexpr unsigned kPredictClass = ~0u;

// The slow paths of heap_malloc and heap_free (alloc/alloc.cc). stack_address: the stack height the fast path
// keyed the prediction cache with (0: take this frame's).
LLAMALLOC_NOINLINE void* malloc_slow(size_t size, size_t alignment, unsigned lifetime_class, uintptr_t return_address,
                                     uintptr_t stack_address = 0);
LLAMALLOC_NOINLINE void free_slow(void* p);

LLAMALLOC_FAST void debug_check_heap() {
  if (LLAMALLOC_DEBUG_CHECKS) check_heap();
}

LLAMALLOC_FAST void* heap_malloc(size_t size) {
  ThreadHeap* h = tl_heap;
  unsigned lc = kPredictClass;
  uintptr_t stack_address = 0;
  // The sweep handshake (thread_heap/thread_heap.h) covers the span pop; a requested sweep sends the call to the slow path, which
  // waits for it.
  if (LLAMALLOC_LIKELY(size <= kSmallMaxBytes) && (owner_enter(h), LLAMALLOC_LIKELY(!sweep_requested(h)))) {
    unsigned fast = h->fast_class;
    if (LLAMALLOC_UNLIKELY(h->prediction_cache.entries != nullptr)) {
      // A learned predictor: probe this thread's prediction cache inline (the LLAMA paper, section 7). A hit
      // that is not due for re-prediction costs a hash, one load and two stores; anything else goes to the
      // predictor.
      stack_address = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
      uint64_t key = prediction_cache_key(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), stack_address,
                                          model_size_bucket(size));
      // Two ways per set, one cache line (src/model/prediction_cache.h).
      PredictionCacheEntry* set = &h->prediction_cache.entries[(key >> h->prediction_cache.shift) & ~uint64_t{1}];
      PredictionCacheEntry* way = set;
      if (LLAMALLOC_UNLIKELY(way->key != key)) ++way;  // (a newcomer takes the first way: most hits are there)
      PredictionCacheEntry& e = *way;
      // (A shared entry's hits + 1 wraps to 0; every kPredictionCheckEvery hits the predictor checks the path.)
      uint32_t n = e.hits + 1;
      if (LLAMALLOC_LIKELY(e.key == key && n % kPredictionCheckEvery != 0 &&
                           n < uint64_t(h->prediction_cache.repredict_every) << e.backoff)) {
        e.hits++;
        std::atomic<uint64_t>& hits = *h->prediction_cache.hits;
        hits.store(hits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        fast = lc = e.lifetime_class;
      }
    }
    SmallSpan* s = h->spans[fast][size_class_of(size)];
    if (void* p = span_pop(s)) {
      tl_live_delta += int64_t(s->own_block_size);
      debug_check_heap();
      owner_exit(h);
      return p;
    }
  }
  // (The slow path ends the owner's turn.)
  return malloc_slow(size, kMinAlignBytes, lc, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), stack_address);
}

LLAMALLOC_FAST void heap_free(void* p) {
  // free() writes the block's first word (the link), and another thread's free reads it first: start the miss
  // on a block the program has not touched for a while now, so that it overlaps the metadata lookups below.
  __builtin_prefetch(p, 1);
  SmallSpan* s = ThreadHeapOps::span_of(g_page_heap, p);  // null for nullptr: region slot 0 is never ours
  if (LLAMALLOC_LIKELY(s != nullptr)) {
    tl_live_delta -= int64_t(s->block_size);  // before: after a remote push the owner may give the span back
    if (LLAMALLOC_DEBUG_CHECKS) {
      ThreadHeapOps::free_block(g_page_heap, tl_heap, s, p);
      return check_heap();
    }
    return ThreadHeapOps::free_block(g_page_heap, tl_heap, s, p);
  }
  return free_slow(p);
}

// The rest of the C API (alloc/alloc.cc).
// llamalloc_malloc_class: an object in the given lifetime class, whatever the predictor says.
void* heap_malloc_class(size_t size, unsigned lifetime_class);
void* heap_calloc(size_t count, size_t size);
void* heap_realloc(void* p, size_t size);
void* heap_reallocarray(void* p, size_t count, size_t size);
// alignment: a power of two, or rounded up to one (glibc's memalign). nullptr + ENOMEM on exhaustion.
void* heap_memalign(size_t alignment, size_t size);
int heap_posix_memalign(void** out, size_t alignment, size_t size);
void* heap_aligned_alloc(size_t alignment, size_t size);
void* heap_valloc(size_t size);
void* heap_pvalloc(size_t size);
size_t heap_usable_size(const void* p);
// operator new: loops on the new handler, throws std::bad_alloc (alloc/new.cc, built with exceptions); the
// nothrow forms return nullptr (alloc/alloc.cc).
void* heap_new(size_t size);
void* heap_new_aligned(size_t size, size_t alignment);
void* heap_new_nothrow(size_t size) noexcept;
void* heap_new_aligned_nothrow(size_t size, size_t alignment) noexcept;

}  // namespace llamalloc
