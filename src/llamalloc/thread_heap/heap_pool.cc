// The heaps of exited threads (HeapPool), adopted by new threads. Rules: at thread exit (abandon) a heap's empty
// spans go back, and the spans that still hold objects leave the queues marked full and are parked on the heap
// (ThreadHeap::pool_parked), so that any later free into them reaches the heap's notify list, which any thread
// drains under the pool's lock (reclaim_abandoned: the next slow path that would take new memory, when such a
// free asked for it); a thread that adopts the heap takes its parked spans back onto its queues (adopt_parked),
// and fills their holes before it takes new memory; the sweeper purges the free pages of the parked spans of a
// heap that has waited in the pool for a whole pass (purge_pooled). Lock order: the pool's lock, then the page
// heap's.
#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

bool thread_heap_internal::park_abandoned(SmallSpan* s) {
  uintptr_t x = s->xfree.load(std::memory_order_relaxed);
  for (;;) {
    if ((x & kXfreeStateMask) == kXfreeNotified) return true;  // on the notify list: the drain handles it
    if ((x & ~kXfreeStateMask) != 0) {
      ThreadHeapOps::collect_remote(s);
      if (span_empty(s)) return false;
      x = s->xfree.load(std::memory_order_relaxed);
      continue;
    }
    if (s->xfree.compare_exchange_weak(x, kXfreeFull, std::memory_order_acq_rel, std::memory_order_relaxed)) return true;
  }
}

void ThreadHeapOps::abandon(PageHeap& page_heap, ThreadHeap& heap) {
  // First, so that a free that notifies from now on asks for a reclaim.
  heap.abandoned.store(1, std::memory_order_seq_cst);
  flush_remote_batch(heap);
  drain_notify(page_heap, heap);
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc)
      while (heap.spans[lc][sc] != &g_empty_span) {
        SmallSpan* s = heap.spans[lc][sc];
        unlink(heap, s);
        collect_remote(s);
        // Notified: another thread's free made it so and is about to push it on the notify list (or has, after
        // the drain above); given back now, the drain would later take it again -- by then possibly another
        // thread's span (a block handed out twice). park_abandoned leaves it to the drain.
        bool notified = (s->xfree.load(std::memory_order_acquire) & kXfreeStateMask) == kXfreeNotified;
        // Kept for the thread that adopts the heap, which fills its holes before it takes new memory; purged
        // by the sweeper if none comes within a pass (purge_pooled). Not purged now: a program that starts a
        // thread per task would purge at every exit the pages that the next thread faults back in.
        if ((span_empty(s) && !notified) || !park_abandoned(s)) give_back(page_heap, s);
        else park_in_pool(heap, s);
      }
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned k = 0; k < kSpanKinds; ++k)
      while (heap.cache_count[lc][k] > 0) {
        uint8_t& n = heap.cache_count[lc][k];
        give_back(page_heap, heap.cache[lc][k][--n]);
        heap.cache[lc][k][n] = nullptr;
      }
  // A span that was notified between the drain above and its parking is on the list: drain again.
  drain_notify(page_heap, heap);
}

void ThreadHeapOps::reclaim_abandoned(PageHeap& page_heap, HeapPool& pool, bool force) {
  if (!hooks.reclaim_pending.exchange(false, std::memory_order_acquire) && !force) return;
  LockGuard g(pool.lock);
  for (ThreadHeap* h = pool.head; h != nullptr; h = h->next_free)
    if (h->notify.load(std::memory_order_acquire) != nullptr) drain_notify(page_heap, *h);
}

void ThreadHeapOps::purge_pooled(PageHeap& page_heap, HeapPool& pool, bool now) {
  hooks.reclaim_pending.store(false, std::memory_order_relaxed);  // (every notify list is drained below)
  LockGuard g(pool.lock);
  for (ThreadHeap* h = pool.head; h != nullptr; h = h->next_free) {
    if (h->notify.load(std::memory_order_acquire) != nullptr) drain_notify(page_heap, *h);
    // A heap adopted within a pass of its thread's exit keeps its spans' pages for the next thread.
    if (!now && h->pool_passes++ == 0) continue;
    for (SmallSpan* s = h->pool_parked; s != nullptr; s = s->next) {
      // Notified: a remote free is about to put it on the notify list; the next drain parks it again.
      if ((s->xfree.load(std::memory_order_acquire) & kXfreeStateMask) != kXfreeFull) continue;
      uint32_t seen = (s->used + 1) | kSweptExamined;  // (purged at this count already)
      if (s->swept_used == seen) continue;
      purge_if_sparse(page_heap, s);
      s->swept_used = seen;
    }
  }
}

void ThreadHeapOps::adopt_parked(ThreadHeap& heap) {
  while (SmallSpan* s = heap.pool_parked) {
    unpark_from_pool(heap, s);
    // Full back to normal, as when the owner's free brings back a full span (after_owner_free); a span that a
    // remote free has notified meanwhile is on the notify list, whose drain queues it.
    uintptr_t x = s->xfree.load(std::memory_order_relaxed);
    while ((x & kXfreeStateMask) == kXfreeFull &&
           !s->xfree.compare_exchange_weak(x, x & ~kXfreeFull, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
    if ((x & kXfreeStateMask) == kXfreeNotified) continue;
    s->lifetime_class = s->home_class;
    enqueue_back(heap, s);
  }
  heap.pool_passes = 0;
}

}  // namespace llamalloc
