// What the thread heap's files (thread_heap/*.cc, one per concept: thread_heap.h lists them) share, and nothing
// outside them uses: the links of the span queues and of the pool's parked spans, a span's emptiness and the
// pages of a block (inline, as they were when the files were one), and the steps of one concept that another
// calls, each defined in the file named above it.
#pragma once

#include <cstdint>

#include "thread_heap/thread_heap.h"

namespace llamalloc::thread_heap_internal {

// A span with no object handed out: every block is free or parked (span purge; parked blocks are not in `used`).
inline bool span_empty(const SmallSpan* s) { return s->used == 0; }

// Puts p, a block of s, on top of heap's remote-free batch, which holds blocks of s (or is empty, batch_tail set
// to p by the caller), and pushes the batch once it holds remote_batch_limit(s). The heap's owner, entered.
inline void batch_append(ThreadHeap& heap, SmallSpan* s, void* p) {
  *static_cast<uintptr_t*>(p) = reinterpret_cast<uintptr_t>(heap.batch_head) ^ s->key;
  heap.batch_head = p;
  if (++heap.batch_count >= ThreadHeapOps::remote_batch_limit(s)) ThreadHeapOps::flush_remote_batch(heap);
}

inline void enqueue_front(ThreadHeap& heap, SmallSpan* s) {
  SmallSpan*& head = heap.spans[s->lifetime_class][s->size_class];
  s->prev = nullptr;
  // (An empty queue's head is the static empty span or a borrowed one: ThreadHeap::spans.)
  s->next = heap.tails[s->lifetime_class][s->size_class] == nullptr ? nullptr : head;
  if (s->next != nullptr) s->next->prev = s;
  else heap.tails[s->lifetime_class][s->size_class] = s;
  head = s;
  s->queued = 1;
}

// At the end of the queue (ThreadHeap::tails says why), behind the span the fast path is using.
inline void enqueue_back(ThreadHeap& heap, SmallSpan* s) {
  SmallSpan*& tail = heap.tails[s->lifetime_class][s->size_class];
  if (tail == nullptr) return enqueue_front(heap, s);
  s->prev = tail;
  s->next = nullptr;
  tail->next = s;
  tail = s;
  s->queued = 1;
}

inline void unlink(ThreadHeap& heap, SmallSpan* s) {
  // Shorter classes that borrow s stop (ThreadHeap::spans): it is full, emptied or moving, and may go back to the
  // page heap.
  for (unsigned c = 0; c < s->lifetime_class; ++c)
    if (heap.spans[c][s->size_class] == s) heap.spans[c][s->size_class] = &g_empty_span;
  SmallSpan*& head = heap.spans[s->lifetime_class][s->size_class];
  if (s->prev != nullptr) s->prev->next = s->next;
  else head = s->next != nullptr ? s->next : &g_empty_span;
  if (s->next != nullptr) s->next->prev = s->prev;
  else heap.tails[s->lifetime_class][s->size_class] = s->prev;
  s->next = s->prev = nullptr;
  s->queued = 0;
}

// The abandoned heap's list of parked spans (ThreadHeap::pool_parked).
inline void park_in_pool(ThreadHeap& heap, SmallSpan* s) {
  if (s->pool_parked) return;
  s->prev = nullptr;
  s->next = heap.pool_parked;
  if (s->next != nullptr) s->next->prev = s;
  heap.pool_parked = s;
  s->pool_parked = 1;
}

inline void unpark_from_pool(ThreadHeap& heap, SmallSpan* s) {
  if (!s->pool_parked) return;
  if (s->prev != nullptr) s->prev->next = s->next;
  else heap.pool_parked = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  s->next = s->prev = nullptr;
  s->pool_parked = 0;
}

// Span purge: the 4 KiB pages that block i of s covers, as a mask of s's pages.
inline uint64_t pages_of_block(const SmallSpan* s, uint32_t i) {
  uint64_t first = uint64_t(i) * s->block_size / kSmallPageBytes;
  uint64_t last = (uint64_t(i) * s->block_size + s->block_size - 1) / kSmallPageBytes;
  return (last >= 63 ? ~uint64_t{0} : (uint64_t{2} << last) - 1) & ~((uint64_t{1} << first) - 1);
}

// spans.cc
void give_back(PageHeap& page_heap, SmallSpan* s);

// span_queues.cc
// A partially free span of size class sc from a longer lifetime class of this thread heap, for class lc, which has
// no span with a free block (HeapConfig::span_recycling): the longest class first, the first span with a free
// block among the 32 behind the head of its queue (the longer class's fast path is using the head). It moves
// to lc's queue: its holes take objects expected to die before the ones it holds, and those keep it (and its
// huge page) in use either way. Its home_class stays the longer class, whose queue or span cache it goes back
// to once it has been full or is empty (after_owner_free, drain_notify, release_span). Without this, a
// long-lived class's span keeps the holes its dead objects leave until its own class allocates again, while a
// program that overwrites long-lived values with shorter-lived ones puts the new values on pages of their own.
SmallSpan* adopt_longer_span(ThreadHeap& heap, unsigned lc, unsigned sc);

// Takes a full span off its queue and marks it so that the first remote free tells the owner. false when a
// remote free came first (the span has a free block again).
bool mark_full(ThreadHeap& heap, SmallSpan* s);

// remote_free.cc
// Walks an encoded list; the number of blocks and the last one. Aborts on a list longer than the span holds
// (a cycle: a block freed twice by other threads).
uint32_t list_length(const SmallSpan* s, void* head, void** last);

// span_purge.cc
// The span is empty or about to be re-listed whole: its purged pages are no longer the span's to track.
void forget_purge(PageHeap& page_heap, SmallSpan* s);

// heap_pool.cc
// A span of an abandoned thread heap that still holds objects: off the queue, marked full (any later remote free
// notifies). false when its objects are all back after all (then the caller gives it back).
bool park_abandoned(SmallSpan* s);

// shared_heap.cc
// A small object of size class sc in class lc for `heap`, from the shared thread heap (uses_shared_heap), under
// its lock; counts the allocation in heap's window of the class (ThreadHeap::own_class).
void* allocate_shared(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, unsigned sc);

}  // namespace llamalloc::thread_heap_internal
