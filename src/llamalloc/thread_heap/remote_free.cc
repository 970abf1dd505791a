// Remote frees: a free into another thread's span goes into the freeing thread's batch for that span, and the
// batch is pushed whole onto the span's one atomic list (xfree), which the owner takes in bulk (collect_remote),
// as mimalloc's sharded free lists. Rules: a thread holds one batch, of one span, of at most remote_batch_limit
// blocks; it is pushed when the thread frees into another span, when full, at the thread's slow paths, when a
// sweep takes the heap (every pass while it holds one) and when the thread exits; its blocks count as in use in
// the span until then, so the span stays. A block freed twice by the same thread is found in its batch; one freed
// into a batch and again by its owner or a third thread before the push is found at the push, whose walk of the
// batch finds its link changed, before the block can be handed out twice. remote_pending is set before
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
    // Every link leads to a block of the span: a block freed twice, once into a batch that has not been pushed
    // yet and once by its owner, is handed out and written meanwhile, and its link is then the program's data.
    if (reinterpret_cast<uintptr_t>(b) - s->start >= s->span_bytes)
      ThreadHeapOps::bad_free(b, "double free or write after free (a span's list of freed blocks leads out of it)");
    *last = b;
  }
  return n;
}

namespace {
// Pushes the chain head .. tail of blocks of s (linked with s's key; tail's link is written here) onto s's list of
// remote frees, in one compare-and-swap.
void push_remote(SmallSpan* s, void* head, void* tail) {
  uintptr_t x = s->xfree.load(std::memory_order_relaxed);
  uintptr_t state;
  do {
    state = x & kXfreeStateMask;
    // The first blocks on the list: the owner's free takes the checked path until it takes the list (set before
    // the push, while the blocks still keep the span alive; once per take, so the owner's line is written once per
    // take, not per remote free).
    if ((x & ~kXfreeStateMask) == 0) s->remote_pending.store(1, kHandshakeStore);
    *static_cast<uintptr_t*>(tail) = (x & ~kXfreeStateMask) ^ s->key;
    // acq_rel: a free that sees the owner's full mark also sees what the owner wrote before setting it (the
    // span's notify link; a lock-prefixed cmpxchg either way on x86).
  } while (!s->xfree.compare_exchange_weak(x, reinterpret_cast<uintptr_t>(head) | (state == kXfreeFull ? kXfreeNotified : state),
                                           std::memory_order_acq_rel, std::memory_order_relaxed));
  if (state == kXfreeFull) {
    // The first remote free into a full span: tell its owner (once, until the owner drains it).
    ThreadHeap* owner = static_cast<ThreadHeap*>(s->owner);
    SmallSpan* first = owner->notify.load(std::memory_order_relaxed);
    do {
      s->notify_next = first;
    } while (!owner->notify.compare_exchange_weak(first, s, std::memory_order_release, std::memory_order_relaxed));
    // Its thread is gone: the next slow path that would take new memory drains it first.
    if (owner->abandoned.load(std::memory_order_relaxed))
      ThreadHeapOps::hooks.reclaim_pending.store(true, std::memory_order_relaxed);
  }
}
}  // namespace

void ThreadHeapOps::flush_remote_batch(ThreadHeap& heap) {
  SmallSpan* s = heap.batch_span.load(std::memory_order_relaxed);
  if (s == nullptr) return;
  // Every block of the batch still holds the link this thread wrote (the blocks are in this thread's cache): one
  // freed again meanwhile, by the span's owner (whose free does not look into other threads' batches) or by
  // another thread, has another link, or none once handed out again, and is reported now, before the push could
  // put on the span's list a block that is in use.
  void* b = heap.batch_head;
  for (uint32_t i = 1; i < heap.batch_count; ++i) {
    uintptr_t link = *static_cast<uintptr_t*>(b) ^ s->key;
    if (link - s->start >= s->span_bytes) break;
    b = reinterpret_cast<void*>(link);
  }
  if (b != heap.batch_tail || *static_cast<uintptr_t*>(b) != s->key)
    bad_free(b, "double free (a block was freed again while another thread's batch of freed blocks held it)");
  push_remote(s, heap.batch_head, heap.batch_tail);
  heap.batch_span.store(nullptr, std::memory_order_relaxed);
  heap.batch_head = heap.batch_tail = nullptr;
  heap.batch_count = 0;
}

void ThreadHeapOps::remote_free(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p, bool suspicious) {
  if (LLAMALLOC_UNLIKELY(s->owner == page_heap.shared_heap() || s->owner == page_heap.sampled_heap())) {
    if (suspicious) {
      LockGuard g(page_heap.shared_lock());  // (its lists change only under it)
      if (on_free_list(s, p)) bad_free(p, "double free, or a pointer never allocated (its block is free)");
    }
    return shared_free(page_heap, s, p);
  }
  if (LLAMALLOC_UNLIKELY(tl_live_delta < -kLiveFlushBytes)) flush_live_delta(page_heap);
  // A thread that never allocated gets a heap of its own here; one that cannot (or the simulator's) has nowhere
  // to hold a batch.
  if (LLAMALLOC_UNLIKELY(heap == &g_empty_heap) && hooks.attach_heap != nullptr) heap = hooks.attach_heap();
  bool own = heap != nullptr && heap != &g_empty_heap;
  // Under the heap's handshake: a sweeper may push the batch of an idle heap.
  if (own) {
    owner_enter(heap);
    if (LLAMALLOC_UNLIKELY(sweep_requested(heap))) wait_for_sweep(*heap);
  }
  SmallSpan* open = own ? heap->batch_span.load(std::memory_order_relaxed) : nullptr;
  if (LLAMALLOC_UNLIKELY(suspicious)) {
    // p's first word is a link of s: a free block on one of s's lists or in this thread's batch is reported here;
    // one in another thread's batch when that batch is pushed (flush_remote_batch).
    if (on_free_list(s, p)) bad_free(p, "double free, or a pointer never allocated (its block is free)");
    if (open == s) {
      void* b = heap->batch_head;
      for (uint32_t n = 0; n < heap->batch_count; ++n) {
        if (b == p) bad_free(p, "double free (the object was already freed)");
        uintptr_t link = *static_cast<uintptr_t*>(b) ^ s->key;
        if (link - s->start >= s->span_bytes) break;  // (the end; or a link changed, which the push reports)
        b = reinterpret_cast<void*>(link);
      }
    }
  }
  if (!own) return push_remote(s, p, p);
  // Blocks freed one after another into the same span of another thread (a consumer freeing what one producer
  // made, a thread dropping a structure another built) go onto its list in one compare-and-swap, as snmalloc's
  // remote batches do: one per block made that list's cache line bounce between this thread, the owner and any
  // other thread freeing there.
  if (open != s) {
    if (open != nullptr) flush_remote_batch(*heap);
    heap->batch_span.store(s, std::memory_order_relaxed);
    heap->batch_head = nullptr;
    heap->batch_tail = p;
  }
  batch_append(*heap, s, p);
  owner_exit(heap);
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
