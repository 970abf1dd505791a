// The C and C++ allocation semantics below the inline fast path (alloc/alloc.h has the overview): the slow
// paths of malloc and free, and calloc, realloc, the aligned entry points, usable size and allocation in an
// explicit lifetime class.
//
// Rules, and why:
// - A slow path that works on the calling thread's heap enters it as its owner (owner_enter) and waits for a
//   sweep requested before (the sweep handshake, thread_heap/thread_heap.h), so that no sweeper works on the heap meanwhile.
// - The predictor runs outside that handshake: a model run may allocate, and the nested allocation's owner_exit
//   must not end the outer one's turn.
// - A failure sets errno (ENOMEM when memory runs out, EINVAL for an alignment that is not allowed;
//   posix_memalign returns the code and keeps errno), and runs no page pass, which must not change that errno.
// - Where C leaves the behaviour open, it is glibc's: malloc(0) returns an object, realloc(p, 0) frees p and
//   returns nullptr, memalign rounds an alignment that is not a power of two up, a failed realloc leaves the old
//   object valid.
// - realloc keeps an object where it is by one rule, shared with the profiler and the simulator
//   (alloc/realloc_rule.h).
#include "alloc/alloc.h"

#include <errno.h>

#include <cstring>

#include "alloc/realloc_rule.h"
#include "alloc/runtime_internal.h"

namespace llamalloc {

void check_heap() {
  g_page_heap.check_invariants();
  ThreadHeap* h = tl_heap;
  owner_enter(h);
  if (h != &g_empty_heap && sweep_requested(h)) ThreadHeapOps::wait_for_sweep(*h);
  LLAMALLOC_CHECK(h->check(g_page_heap), "invariant: thread heap inconsistent");
  owner_exit(h);
}

namespace {
// The allocation, once the slow path has entered the thread heap h: the prediction when the fast path had none,
// then the thread heap's allocation.
void* malloc_slow_entered(ThreadHeap* h, size_t size, size_t alignment, unsigned lc, uintptr_t return_address,
                          uintptr_t stack_address) {
  if (tl_live_delta > kLiveFlushBytes || tl_live_delta < -kLiveFlushBytes) flush_live_bytes();
  bool sample = false;
  if (lc == kPredictClass) {
    AllocationContext context{return_address, stack_address, size};
    // The prediction runs outside the owner's handshake: a model run may allocate (a signal handler during
    // it, or the unwinder's first use), and that nested allocation's owner_exit must not end this one's turn.
    owner_exit(h);
    unsigned predicted = current_predictor()->predict(context);
    sample = predicted & kSampleAllocation;
    lc = clamp_class(predicted & ~kSampleAllocation);
    owner_enter(h);
    if (LLAMALLOC_UNLIKELY(sweep_requested(h))) ThreadHeapOps::wait_for_sweep(*h);
    h->fast_class = every_allocation() ? uint8_t(kMaxClasses) : uint8_t(lc);
    // The first prediction of a thread with a cached predictor hands its cache to the fast path.
    if (every_allocation() && h->prediction_cache.entries == nullptr)
      current_predictor()->thread_cache(&h->prediction_cache);
  } else {
    lc = clamp_class(lc);
  }
  // The sweeper's sign of activity (quiet passes, idle heaps) is a slow path that the heap itself needed: a span
  // to refill, a large or aligned object, a class the shared heap serves. A prediction cache miss, a
  // re-prediction or a sample is not counted: with a model or learning, a program would otherwise never look as
  // quiet as the same program without them (a server's idle ticks, a few dozen allocations a pass, each a cache
  // miss after its entry was dropped), and would keep what a quiet pass gives back without them. The replay
  // counts the same (sim/llama_policy.cc).
  if (misses_fast_path(*h, lc, classify(size, alignment), alignment)) owner_count_slow(h);
  if (LLAMALLOC_UNLIKELY(sample)) {
    // Online learning samples this allocation: from the sampled heap, whose frees all reach the predictor.
    void* p = ThreadHeapOps::allocate_sampled(g_page_heap, *h, lc, size, alignment);
    if (p != nullptr) current_predictor()->sampled(p);
    debug_check_heap();
    return p;
  }
  void* p = ThreadHeapOps::allocate(g_page_heap, *h, lc, size, alignment);
  debug_check_heap();
  return p;
}
}  // namespace

void* malloc_slow(size_t size, size_t alignment, unsigned lc, uintptr_t return_address, uintptr_t stack_address) {
  if (stack_address == 0) stack_address = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  ThreadHeap* h = thread_heap();
  if (h == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  owner_enter(h);
  if (LLAMALLOC_UNLIKELY(sweep_requested(h))) ThreadHeapOps::wait_for_sweep(*h);
  void* p = malloc_slow_entered(h, size, alignment, lc, return_address, stack_address);
  owner_exit(h);
  if (LLAMALLOC_LIKELY(p != nullptr)) maybe_pass_inline();  // (not after a failure, which must keep its errno)
  return p;
}

void free_slow(void* p) {
  if (p == nullptr) return;
  // A large object may have been sampled (online learning; small sampled objects are the sampled heap's).
  if (learning()) current_predictor()->freed(p);
  ThreadHeapOps::deallocate(g_page_heap, tl_heap, p);
  if (tl_live_delta > kLiveFlushBytes || tl_live_delta < -kLiveFlushBytes) flush_live_bytes();
  debug_check_heap();
  maybe_pass_inline();
}

void* heap_malloc_class(size_t size, unsigned lifetime_class) {
  ThreadHeap* h = tl_heap;
  lifetime_class = lifetime_class < kMaxClasses ? lifetime_class : kMaxClasses - 1;
  if (size <= kSmallMaxBytes && h != &g_empty_heap && lifetime_class < g_page_heap.num_classes()) {
    owner_enter(h);
    if (!sweep_requested(h)) {
      SmallSpan* s = h->spans[lifetime_class][size_class_of(size)];
      if (void* p = span_pop(s)) {
        tl_live_delta += int64_t(s->block_size);
        debug_check_heap();
        owner_exit(h);
        return p;
      }
    }
    owner_exit(h);
  }
  return malloc_slow(size, kMinAlignBytes, lifetime_class, 0);
}

void* heap_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = heap_malloc(total);
  // A huge object on fresh huge pages needs no memset: the kernel zeroed them. One on pages from the page
  // cache (HeapConfig::page_cache_pages) does.
  if (p != nullptr && (total <= kHugePageBytes || g_page_heap.huge_object_recycled(p))) memset(p, 0, total);
  return p;
}

size_t heap_usable_size(const void* p) {
  if (p == nullptr) return 0;
  if (SmallSpan* s = ThreadHeapOps::span_of(g_page_heap, p)) return ThreadHeapOps::usable_size(s);
  return g_page_heap.large_usable_size(p);
}

void* heap_realloc(void* p, size_t size) {
  if (p == nullptr) return heap_malloc(size);
  if (size == 0) {
    heap_free(p);
    return nullptr;
  }
  size_t usable;
  if (SmallSpan* s = ThreadHeapOps::span_of(g_page_heap, p)) {
    ThreadHeap* h = tl_heap;
    bool own = s->owner == h;  // then its lists are read while no sweeper works on them
    if (own) {
      owner_enter(h);
      if (sweep_requested(h)) ThreadHeapOps::wait_for_sweep(*h);
    }
    ThreadHeapOps::check_live(s, p, "realloc of");
    if (own) owner_exit(h);
    usable = ThreadHeapOps::usable_size(s);
    if (realloc_keeps_small(usable, s->size_class, size)) return p;  // alloc/realloc_rule.h
  } else {
    if (!g_page_heap.owns(p)) fatal_pointer("realloc of", p, "pointer not allocated by llamalloc");
    usable = g_page_heap.large_usable_size(p);
    if (usable == 0) fatal_pointer("realloc of", p, "pointer not the start of a live object");
    if (realloc_keeps_large(usable, size)) return p;
  }
  void* q = heap_malloc(size);
  if (q == nullptr) return nullptr;  // the old object stays valid (C semantics)
  memcpy(q, p, size < usable ? size : usable);
  heap_free(p);
  return q;
}

void* heap_reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return heap_realloc(p, total);
}

void* heap_memalign(size_t alignment, size_t size) {
  if (alignment <= kMinAlignBytes) return heap_malloc(size);
  if ((alignment & (alignment - 1)) != 0) {
    // glibc's memalign rounds a non-power-of-two alignment up.
    size_t a = kMinAlignBytes;
    while (a < alignment && a != 0) a <<= 1;
    if (a == 0) {
      errno = EINVAL;
      return nullptr;
    }
    alignment = a;
  }
  return malloc_slow(size, alignment, kPredictClass, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

int heap_posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  int saved = errno;
  void* p = heap_memalign(alignment, size);
  if (p == nullptr) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

void* heap_aligned_alloc(size_t alignment, size_t size) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  return heap_memalign(alignment, size);
}

void* heap_valloc(size_t size) { return heap_memalign(kSmallPageBytes, size); }

void* heap_pvalloc(size_t size) {
  size_t rounded = (size + kSmallPageBytes - 1) & ~(kSmallPageBytes - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return nullptr;
  }
  return heap_memalign(kSmallPageBytes, rounded == 0 ? kSmallPageBytes : rounded);
}

void* heap_new_nothrow(size_t size) noexcept { return heap_malloc(size); }
void* heap_new_aligned_nothrow(size_t size, size_t alignment) noexcept { return heap_memalign(alignment, size); }

}  // namespace llamalloc
