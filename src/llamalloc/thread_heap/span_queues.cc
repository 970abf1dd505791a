// Span queues: each (lifetime class, size class) of a thread heap has a queue of spans, linked by next and prev.
// Its head is the span the fast path allocates from (the static empty span when the queue is empty, so that the
// fast path needs no null check). Rules: a span that fills leaves its queue marked full (mark_full), so that the
// first remote free into it tells its owner through the notify list; a span that a free brings back goes to the
// tail (ThreadHeap::tails says why); a class with no span with a free block first takes a partly free span of a
// longer class of the same heap (adopt_longer_span, HeapConfig::span_recycling), whose home_class stays the
// longer class. ThreadHeap::check checks the queues and the span cache.
#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

SmallSpan* thread_heap_internal::adopt_longer_span(ThreadHeap& heap, unsigned lc, unsigned sc) {
  for (unsigned l = kMaxClasses; l-- > lc + 1;) {
    SmallSpan* head = heap.spans[l][sc];
    if (head == &g_empty_span) continue;
    unsigned looked = 0;
    for (SmallSpan* s = head->next; s != nullptr && looked < 32; s = s->next, ++looked) {
      if (s->capacity == s->used + s->parked) continue;
      unlink(heap, s);
      s->lifetime_class = uint8_t(lc);
      enqueue_front(heap, s);
      return s;
    }
  }
  return nullptr;
}

bool thread_heap_internal::mark_full(ThreadHeap& heap, SmallSpan* s) {
  uintptr_t x = s->xfree.load(std::memory_order_relaxed);
  for (;;) {
    if ((x & ~kXfreeStateMask) != 0) return false;
    if ((x & kXfreeStateMask) == kXfreeNotified) break;  // already on the notify list: drain re-queues it
    if (s->xfree.compare_exchange_weak(x, x | kXfreeFull, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  unlink(heap, s);
  return true;
}

bool ThreadHeap::check(PageHeap& page_heap) const {
  for (unsigned sc = 0; sc < kNumSizeClasses; ++sc)
    if (spans[kMaxClasses][sc] != &g_empty_span) return false;
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc) {
      const SmallSpan* prev = nullptr;
      if (tails[lc][sc] == nullptr) {
        // Empty, or borrowing the span of a longer class of this heap (ThreadHeap::spans).
        const SmallSpan* b = spans[lc][sc];
        if (b != &g_empty_span && (b->owner != this || !b->queued || b->lifetime_class <= lc || b->size_class != sc))
          return false;
        continue;
      }
      if (spans[lc][sc] == &g_empty_span) return false;
      for (const SmallSpan* s = spans[lc][sc]; s != &g_empty_span && s != nullptr; s = s->next) {
        if (s->next == nullptr && tails[lc][sc] != s) return false;
        if (s->owner != this || !s->queued || s->cached || s->prev != prev) return false;
        if (s->size_class != sc || s->lifetime_class != lc || s->block_size != size_class_bytes(sc)) return false;
        // The list first: a double free by the owner (which free() does not look for) makes it loop, which
        // list_length reports as such, before the counts it also skews.
        void* last = nullptr;
        uint32_t listed = list_length(s, s->free, &last);
        uint32_t extended = s->extended.load(std::memory_order_relaxed);
        if (s->used + s->parked > extended || extended > s->capacity) return false;
        if (ThreadHeapOps::span_of(page_heap, reinterpret_cast<void*>(s->start + s->span_bytes - 1)) != s) return false;
        if (listed + s->used + s->parked > extended) return false;
        prev = s;
      }
    }
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned k = 0; k < kSpanKinds; ++k)
      for (unsigned i = 0; i < kSpanCacheSlots; ++i) {
        const SmallSpan* s = cache[lc][k][i];
        if ((i < cache_count[lc][k]) != (s != nullptr)) return false;
        if (s != nullptr && (!s->cached || s->extended.load(std::memory_order_relaxed) != 0 || s->queued || s->owner != this)) return false;
      }
  return true;
}

}  // namespace llamalloc
