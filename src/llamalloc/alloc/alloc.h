// The C and C++ allocation semantics on top of the process-wide heap: malloc, free, calloc, realloc, the
// aligned entry points, usable size, and allocation in an explicit lifetime class. override/ forwards to these.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base.h"
#include "heap/heap.h"
#include "local/local.h"
#include "predictor/predictor.h"

namespace llamalloc {

// The process-wide global allocator: Linux platform, CLOCK_MONOTONIC. Constant-initialised.
extern GlobalAllocator g_global;
inline constexpr unsigned kPredictClass = ~0u;

// stack_address: the stack height the fast path keyed the prediction cache with (0: take this frame's).
LLAMALLOC_NOINLINE void* malloc_slow(size_t size, size_t alignment, unsigned lifetime_class, uintptr_t return_address,
                                     uintptr_t stack_address = 0);
LLAMALLOC_NOINLINE void free_slow(void* p);
// Initialises the heap once (options, predictor); safe to call any number of times.
void ensure_init();
// Installs a predictor (before the first allocation; the learned predictor does this at start).
void set_predictor(Predictor* predictor);
Predictor* predictor();
// Flushes this thread's live-byte delta into the heap's gauges.
void flush_live_bytes();
// llamalloc_collect(): gives back the memory this thread's heap holds that no object needs (include/llamalloc.h).
void heap_collect();
// glibc's malloc_trim: heap_collect(); whether it gave memory back to the OS (huge pages or subreleased blocks).
bool heap_trim();
// The thread heaps used since the last pass (a slow path of their owner or a notify pending; every heap every 8
// passes), and not inside the allocator now, give back their empty spans and take in the frees other threads
// made into them (docs/heap.md, "Idle threads"). One pass; the sweeper thread runs it every LLAMALLOC_SWEEP_MS.
// every_heap: every other thread's heap not inside the allocator now (llamalloc_collect, tests). Returns the
// number of heaps swept.
unsigned sweep_idle_heaps(bool every_heap = false);
// The passes in a row without a hit or a slow path after which a thread's prediction cache is dropped (about a
// second of LLAMALLOC_SWEEP_MS periods).
uint32_t prediction_cache_idle_passes();
// Checks the global allocator and this thread's heap; aborts on a broken invariant.
void check_heap();

LLAMALLOC_FAST void debug_check_heap() {
  if (LLAMALLOC_DEBUG_CHECKS) check_heap();
}

LLAMALLOC_FAST void* heap_malloc(size_t size) {
  LocalHeap* h = tl_heap;
  unsigned lc = kPredictClass;
  uintptr_t stack_address = 0;
  // The sweep handshake (local.h) covers the span pop; a requested sweep sends the call to the slow path, which
  // waits for it.
  if (LLAMALLOC_LIKELY(size <= kSmallMaxBytes) && (owner_enter(h), LLAMALLOC_LIKELY(!sweep_requested(h)))) {
    unsigned fast = h->fast_class;
    if (LLAMALLOC_UNLIKELY(h->prediction_cache.entries != nullptr)) {
      // A learned predictor: probe this thread's prediction cache inline (papers/000 section 7). A hit that is
      // not due for re-prediction costs a hash, one load and two stores; anything else goes to the predictor.
      stack_address = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
      uint64_t key = prediction_cache_key(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), stack_address,
                                          request_size_class(size));
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
      tl_live_delta += int64_t(s->block_size);
      debug_check_heap();
      owner_exit(h);
      return p;
    }
  }
  // (The slow path ends the owner's turn.)
  return malloc_slow(size, kMinAlignBytes, lc, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), stack_address);
}

LLAMALLOC_FAST void heap_free(void* p) {
  // free() reads the block's first word (the double-free check) and writes it (the link): start the miss on a
  // block the program has not touched for a while now, so that it overlaps the metadata lookups below.
  __builtin_prefetch(p, 1);
  SmallSpan* s = LocalAllocator::span_of(g_global, p);  // null for nullptr: region slot 0 is never ours
  if (LLAMALLOC_LIKELY(s != nullptr)) {
    tl_live_delta -= int64_t(s->block_size);  // before: after a remote push the owner may give the span back
    if (LLAMALLOC_DEBUG_CHECKS) {
      LocalAllocator::free_block(g_global, tl_heap, s, p);
      return check_heap();
    }
    return LocalAllocator::free_block(g_global, tl_heap, s, p);
  }
  return free_slow(p);
}

void* heap_malloc_class(size_t size, unsigned lifetime_class);
void* heap_calloc(size_t count, size_t size);
void* heap_realloc(void* p, size_t size);
void* heap_reallocarray(void* p, size_t count, size_t size);
// alignment: any power of two. nullptr + ENOMEM on exhaustion.
void* heap_memalign(size_t alignment, size_t size);
int heap_posix_memalign(void** out, size_t alignment, size_t size);
void* heap_aligned_alloc(size_t alignment, size_t size);
void* heap_valloc(size_t size);
void* heap_pvalloc(size_t size);
size_t heap_usable_size(const void* p);
// operator new: loops on the new handler, throws std::bad_alloc (new.cc, built with exceptions).
void* heap_new(size_t size);
void* heap_new_aligned(size_t size, size_t alignment);
void* heap_new_nothrow(size_t size) noexcept;
void* heap_new_aligned_nothrow(size_t size, size_t alignment) noexcept;

}  // namespace llamalloc
