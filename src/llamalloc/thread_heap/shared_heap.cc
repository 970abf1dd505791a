// The shared thread heap of long-lived classes (PageHeap::shared_heap) and the sampled heap (online learning,
// PageHeap::sampled_heap): thread heaps that every thread uses under the page heap's shared lock. Rules: a small
// object of a class at or above HeapConfig::shared_class_min comes from the shared thread heap, unless this thread
// made kSharedBurst of that class within kSharedBurstNs: from then on it takes that class from its own spans
// (ThreadHeap::own_class; the windows are counted under the lock); a free into a span of either heap, by any
// thread, is made as its owner's free, under the lock, so that it is taken in without a sweeper; each object
// freed into the sampled heap goes to the sampled-free hook before it is free.
#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

void* thread_heap_internal::allocate_shared(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, unsigned sc) {
  ThreadHeap* shared = page_heap.shared_heap();
  LockGuard g(page_heap.shared_lock());
  void* p = span_pop(shared->spans[lc][sc]);
  if (p == nullptr) {
    owner_count_slow(shared);  // (the sweeper's sign of activity, as for a thread heap)
    p = ThreadHeapOps::alloc_small(page_heap, *shared, lc, sc);
  }
  if (++heap.shared_allocs[lc] >= kSharedBurst) {
    uint64_t now = page_heap.now_ns();
    // (shared_since 0: the first window, which only starts the count, in the process and in the replay)
    if (heap.shared_since[lc] != 0 && now - heap.shared_since[lc] < kSharedBurstNs) heap.own_class[lc] = 1;
    heap.shared_since[lc] = now;
    heap.shared_allocs[lc] = 0;
  }
  return p;
}

void* ThreadHeapOps::allocate_sampled(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, size_t size,
                                      size_t alignment) {
  ThreadHeap* sampled = page_heap.sampled_heap();
  unsigned sc = classify(size, alignment);
  if (sc == kLargeRequest || sampled == nullptr || sampled == &heap)
    return allocate(page_heap, heap, lc, size, alignment);
  void* p;
  {
    LockGuard g(page_heap.shared_lock());
    p = span_pop(sampled->spans[lc][sc]);
    if (p == nullptr) {
      owner_count_slow(sampled);  // (the sweeper's sign of activity, as for a thread heap)
      p = alloc_small(page_heap, *sampled, lc, sc);
    }
  }
  if (p != nullptr) tl_live_delta += int64_t(size_class_bytes(sc));
  else errno = ENOMEM;
  return p;
}

void ThreadHeapOps::shared_free(PageHeap& page_heap, SmallSpan* s, void* p) {
  if (LLAMALLOC_UNLIKELY(tl_live_delta < -kLiveFlushBytes)) flush_live_delta(page_heap);
  ThreadHeap& heap = *static_cast<ThreadHeap*>(s->owner);
  LockGuard g(page_heap.shared_lock());
  // (Before the push: once free, the block may be handed out and sampled again.)
  if (&heap == page_heap.sampled_heap() && hooks.sampled_free != nullptr) hooks.sampled_free(p);
  span_push(s, p);
  if (--s->used == 0 || !s->queued) after_owner_free(page_heap, heap, s);
}

}  // namespace llamalloc
