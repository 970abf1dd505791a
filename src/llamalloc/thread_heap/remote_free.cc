// Remote frees: a free into another thread's span pushes the block on the span's one atomic list (xfree), which
// the owner takes in bulk (collect_remote), as mimalloc's sharded free lists. Rules: remote_pending is set before
// the push onto an empty list and cleared before each take, so that the owner's unchecked free never pushes a
// block that is on the remote list; the first remote free into a span marked full puts it on its owner's notify
// list, once (kXfreeNotified), and asks for a reclaim when the owner has exited; a list longer than the span holds,
// or more blocks than were handed out, is a double free; a span of the shared or sampled heap is freed into as
// its owner, under the shared heap's lock (shared_free). drain_notify takes a heap's notify list: each span gets
// its blocks back and is requeued (cached when empty), or, in an abandoned heap, given back when empty, else
// parked again.
#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

uint32_t thread_heap_internal::list_length(const SmallSpan* s, void* head, void** last) {
  uint32_t n = 0;
  for (void* b = head; b != nullptr; b = reinterpret_cast<void*>(*static_cast<uintptr_t*>(b) ^ s->key)) {
    if (++n > s->capacity) ThreadHeapOps::bad_free(b, "double free (a span's list of freed blocks loops)");
    *last = b;
  }
  return n;
}

void ThreadHeapOps::remote_free(PageHeap& page_heap, SmallSpan* s, void* p) {
  if (LLAMALLOC_UNLIKELY(s->owner == page_heap.shared_heap() || s->owner == page_heap.sampled_heap()))
    return shared_free(page_heap, s, p);
  if (LLAMALLOC_UNLIKELY(tl_live_delta < -kLiveFlushBytes)) flush_live_delta(page_heap);
  uintptr_t x = s->xfree.load(std::memory_order_relaxed);
  uintptr_t state;
  do {
    state = x & kXfreeStateMask;
    // The first block on the list: the owner's free takes the checked path until it takes the list (set before
    // the push, while p still keeps the span alive; once per batch, so the owner's line is written once per take,
    // not per remote free).
    if ((x & ~kXfreeStateMask) == 0) s->remote_pending.store(1, kHandshakeStore);
    *static_cast<uintptr_t*>(p) = (x & ~kXfreeStateMask) ^ s->key;
    // acq_rel: a free that sees the owner's full mark also sees what the owner wrote before setting it (the
    // span's notify link; a lock-prefixed cmpxchg either way on x86).
  } while (!s->xfree.compare_exchange_weak(x, reinterpret_cast<uintptr_t>(p) | (state == kXfreeFull ? kXfreeNotified : state),
                                           std::memory_order_acq_rel, std::memory_order_relaxed));
  if (state == kXfreeFull) {
    // The first remote free into a full span: tell its owner (once, until the owner drains it).
    ThreadHeap* owner = static_cast<ThreadHeap*>(s->owner);
    SmallSpan* head = owner->notify.load(std::memory_order_relaxed);
    do {
      s->notify_next = head;
    } while (!owner->notify.compare_exchange_weak(head, s, std::memory_order_release, std::memory_order_relaxed));
    // Its thread is gone: the next slow path that would take new memory drains it first.
    if (owner->abandoned.load(std::memory_order_relaxed)) hooks.reclaim_pending.store(true, std::memory_order_relaxed);
  }
}

void ThreadHeapOps::collect_remote(SmallSpan* s) {
  uintptr_t x = s->xfree.load(std::memory_order_relaxed);
  if ((x & ~kXfreeStateMask) == 0) return;
  // Cleared before the take (a locked instruction, which orders it): a remote free that pushes onto the emptied
  // list sets it again first.
  s->remote_pending.store(0, kHandshakeStore);
  do {
    if ((x & ~kXfreeStateMask) == 0) return;
  } while (!s->xfree.compare_exchange_weak(x, x & kXfreeStateMask, std::memory_order_acquire, std::memory_order_relaxed));
  void* head = reinterpret_cast<void*>(x & ~kXfreeStateMask);
  void* last = nullptr;
  uint32_t n = list_length(s, head, &last);
  if (n > s->used) bad_free(head, "double free (more blocks freed by other threads than were handed out)");
  *static_cast<uintptr_t*>(last) = reinterpret_cast<uintptr_t>(s->free) ^ s->key;
  s->free = head;
  s->used -= n;
}

void ThreadHeapOps::drain_notify(PageHeap& page_heap, ThreadHeap& heap) {
  SmallSpan* s = heap.notify.exchange(nullptr, std::memory_order_acquire);
  while (s != nullptr) {
    SmallSpan* next = s->notify_next;
    s->notify_next = nullptr;
    s->remote_pending.store(0, kHandshakeStore);  // (before the take, as collect_remote)
    uintptr_t x = s->xfree.exchange(0, std::memory_order_acquire);  // the blocks, and the state back to normal
    void* head = reinterpret_cast<void*>(x & ~kXfreeStateMask);
    if (head != nullptr) {
      void* last = nullptr;
      uint32_t n = list_length(s, head, &last);
      if (n > s->used) bad_free(head, "double free (more blocks freed by other threads than were handed out)");
      *static_cast<uintptr_t*>(last) = reinterpret_cast<uintptr_t>(s->free) ^ s->key;
      s->free = head;
      s->used -= n;
    }
    if (heap.abandoned.load(std::memory_order_relaxed)) {
      // Nobody allocates from it: give the span back once empty, else park it again for the thread that adopts
      // the heap (the sweeper purges its free pages if none comes within a pass: purge_pooled).
      if (s->queued) unlink(heap, s);
      if (span_empty(s) || !park_abandoned(s)) {
        unpark_from_pool(heap, s);
        give_back(page_heap, s);
      } else {
        park_in_pool(heap, s);
      }
    } else {
      if (!s->queued) {
        s->lifetime_class = s->home_class;
        enqueue_back(heap, s);
      }
      if (span_empty(s) && heap.spans[s->lifetime_class][s->size_class] != s) release_span(page_heap, heap, s);
    }
    s = next;
  }
}

}  // namespace llamalloc
