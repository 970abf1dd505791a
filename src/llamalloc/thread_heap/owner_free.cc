// The owner's frees and the checks on every small free. Rules: the owner's free (free_block, thread_heap.h) does
// not read the block; a double free by the owner is caught before a block is handed out twice (the pop that
// reaches it finds a link outside the span: corrupt_free_block; a span its count says is empty has its blocks
// scanned: check_released_list). A free by another thread, or into a span with remote frees waiting, reads the
// block first (free_checked): a first word that decodes to a link of the span sends it to free_suspicious, which
// walks the span's lists. The owner touches its spans only between owner_enter and owner_exit, and waits for a
// requested sweep (wait_for_sweep) before it does. A span that the owner's free empties, or frees into while it
// is off its queue, is requeued or cached (after_owner_free); the owner's slow path ends with the slow-free hook,
// outside the thread heap.
#include <sched.h>

#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

void ThreadHeapOps::owner_free_slow(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s) {
  owner_count_slow(&heap);
  // A thread that frees much and then sleeps runs no other slow path that would flush its live-byte count.
  if (tl_live_delta < -kLiveFlushBytes) flush_live_delta(page_heap);
  after_owner_free(page_heap, heap, s);
  owner_exit(&heap);
  if (hooks.slow_free != nullptr) hooks.slow_free();
}

void ThreadHeapOps::after_owner_free(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s) {
  if (!s->queued) {
    // It was full: back on the queue, and remote frees need not tell us any more.
    uintptr_t x = s->xfree.load(std::memory_order_relaxed);
    while ((x & kXfreeStateMask) == kXfreeFull &&
           !s->xfree.compare_exchange_weak(x, x & ~kXfreeFull, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
    s->lifetime_class = s->home_class;  // an adopted span goes back to its own class's queue
    enqueue_back(heap, s);
  }
  if (span_empty(s) && heap.spans[s->lifetime_class][s->size_class] != s) return release_span(page_heap, heap, s);
  // The span the fast path allocates from, emptied kHeadEmptiesToBorrow times: this class's objects of this size
  // die young (a request's temporaries), and a span of its own, kept empty between requests, is memory held per
  // thread, size and class (with a model, a worker of hash-trimmed-cache held such spans for three classes where a
  // run without one holds them for one: 2.2 MiB on their free lists at the end of its fill). It goes back, and
  // the class allocates from the span a longer class of this thread allocates from while that span stays on its
  // queue: the holes its objects leave there are refilled by the next allocations, and objects that die young
  // leave few when it fills. A class whose spans do not empty (objects that outlive a request) keeps its own:
  // borrowed for every class, the longer class's spans filled with them (ast-builder's steady RSS with its model
  // rose from 0.548x to 0.722x the run without one). The count starts again whatever happens here: left at the
  // mark, every later empty would take the slow path.
  unsigned lc = s->lifetime_class, sc = s->size_class;
  if (heap.head_empties[lc][sc] < kHeadEmptiesToBorrow) return;
  heap.head_empties[lc][sc] = 0;
  if (span_empty(s) && s->home_class == lc && page_heap.span_recycling()) {
    for (unsigned l = lc + 1; l < kMaxClasses; ++l) {
      SmallSpan* h = heap.spans[l][sc];
      if (heap.tails[l][sc] == nullptr || !refill_free(page_heap, h)) continue;
      release_span(page_heap, heap, s);  // (unlinked, unless a remote free's notify holds it: then not borrowed)
      if (heap.tails[lc][sc] == nullptr) heap.spans[lc][sc] = h;
      return;
    }
  }
}

void ThreadHeapOps::wait_for_sweep(ThreadHeap& heap) {
  do {
    owner_exit(&heap);
    // The sweeper withdraws the request as soon as it is done with this heap (tens of microseconds): not the
    // pool's lock, which it holds until it is done with every heap.
    while (heap.sweep.load(std::memory_order_acquire) != 0) sched_yield();
    owner_enter(&heap);
  } while (sweep_requested(&heap));
}

void ThreadHeapOps::owner_free_after_sweep(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s, void* p) {
  wait_for_sweep(heap);
  // s still holds p, so the sweep kept it (it gives back only empty spans) and this heap still owns it.
  span_push(s, p);
  s->owner_freed = 1;  // (reached from the unchecked free too)
  if (--s->used == 0 || !s->queued) return owner_free_slow(page_heap, heap, s);
  owner_exit(&heap);
}

void ThreadHeapOps::free_checked(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p) {
  // A free block's first word is an encoded link: inside the span (or null). A live object's first word is the
  // program's data, which matches that only by chance; then the lists are walked to be sure.
  uintptr_t link = *static_cast<uintptr_t*>(p) ^ s->key;
  if (LLAMALLOC_UNLIKELY(link - s->start < s->span_bytes || link == 0)) return free_suspicious(page_heap, heap, s, p);
  if (s->owner != heap) {
    // Into the batch this thread holds for s, inline (the common case of a run of remote frees; remote_free
    // opens and pushes batches). The static empty heap never holds one.
    if (heap->batch_span.load(std::memory_order_relaxed) == s) {
      owner_enter(heap);
      // (Read again once entered: a sweep may have pushed it.)
      if (LLAMALLOC_LIKELY(!sweep_requested(heap) && heap->batch_span.load(std::memory_order_relaxed) == s)) {
        batch_append(*heap, s, p);
        return owner_exit(heap);
      }
      owner_exit(heap);
    }
    return remote_free(page_heap, heap, s, p);
  }
  owner_enter(heap);
  if (sweep_requested(heap)) return owner_free_after_sweep(page_heap, *heap, s, p);
  span_push(s, p);
  if (--s->used == 0 || !s->queued) return owner_free_slow(page_heap, *heap, s);
  owner_exit(heap);
}

void ThreadHeapOps::free_suspicious(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p) {
  if (s->owner == heap) {
    owner_enter(heap);  // before its lists are read: a sweeper may be taking remote frees into them
    if (sweep_requested(heap)) wait_for_sweep(*heap);
    if (on_free_list(s, p)) bad_free(p, "double free, or a pointer never allocated (its block is free)");
    span_push(s, p);
    if (--s->used == 0 || !s->queued) return owner_free_slow(page_heap, *heap, s);
    return owner_exit(heap);
  }
  remote_free(page_heap, heap, s, p, true);
}

bool ThreadHeapOps::on_free_list(const SmallSpan* s, const void* p) {
  // Bounded walks: the owner's lists may be changing if this thread is not the owner.
  auto on = [&](const void* head) {
    uint32_t n = 0;
    for (const void* b = head; b != nullptr && n <= s->capacity; ++n) {
      if (b == p) return true;
      uintptr_t a = reinterpret_cast<uintptr_t>(b);
      if (a - s->start >= s->span_bytes) return false;
      b = reinterpret_cast<const void*>(*static_cast<const uintptr_t*>(b) ^ s->key);
    }
    return false;
  };
  return on(s->free) ||
         on(reinterpret_cast<void*>(s->xfree.load(std::memory_order_acquire) & ~kXfreeStateMask)) ||
         is_parked(s, p);
}

void ThreadHeapOps::check_released_list(const SmallSpan* s) {
  if (!s->owner_freed) return;
  // Every block of a span with none in use is free: its first word is a link of the span (or the list's end).
  // A block freed twice leaves the count one short while another block is in use, whose first word is the
  // program's data or the wipe it got when handed out. A scan in address order, not a walk of the list: the
  // hardware prefetches it, where a walk waits on each cold block in turn.
  uint32_t extended = s->extended.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < extended; ++i) {
    if (s->purged_pages != 0 && (pages_of_block(s, i) & s->purged_pages) != 0) continue;  // (parked: no link)
    uintptr_t b = s->start + uintptr_t(i) * s->block_size;
    uintptr_t link = *reinterpret_cast<const uintptr_t*>(b) ^ s->key;
    if (LLAMALLOC_UNLIKELY(link - s->start >= s->span_bytes && link != 0))
      fatal_pointer("free into the span of", reinterpret_cast<void*>(b),
                    "double free (the span counts no object in use, yet this one is)");
  }
}

void ThreadHeapOps::check_live(const SmallSpan* s, const void* p, const char* what) {
  if (block_index(s, p) == ~0u)
    fatal_pointer(what, p, s->cached ? "object already freed" : "pointer not the start of an object");
  uintptr_t link = *static_cast<const uintptr_t*>(p) ^ s->key;
  if ((link - s->start < s->span_bytes || link == 0) && on_free_list(s, p)) fatal_pointer(what, p, "object already freed");
}

void ThreadHeapOps::bad_free(const void* p, const char* what) { fatal_pointer("free of", p, what); }

void ThreadHeapOps::bad_small_free(const SmallSpan* s, const void* p) {
  bad_free(p, s->cached ? "double free (its span is empty)" : "pointer not the start of an object");
}

void corrupt_free_block(const SmallSpan* s, const void* block) {
  (void)s;
  fatal_pointer("malloc: freed block", block, "its link was overwritten: written after it was freed, or freed twice");
}

}  // namespace llamalloc
