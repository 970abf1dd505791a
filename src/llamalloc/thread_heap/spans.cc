// Spans: the size-class spans a thread heap takes from the page heap and gives back to it, the span cache, and
// the thread heap's entry points below the fast path (allocate, deallocate, release_all). A span is taken as a
// large object of its lifetime class (the shared thread heap's on the longest class's pages). Rules: a thread's
// spans of a class are smaller while it holds few of them (grown_span_bytes); a span's blocks go on its free
// list kExtendBytes at a time, as the program uses them, linked with a key of its own (span_key) that is never
// 0; a span's size_spans entries are set before its first block is handed out and cleared before it goes back
// to the page heap; a span that its count says is empty has its blocks checked (check_released_list) before it
// is cached or given back; an empty span waits in the span cache (kSpanCacheSlots per class and span size, the
// oldest given back first) with extended = 0, so that any free into it is reported; the allocation slow path
// walks at most 16 spans of a queue before it takes new memory, and drains the pool's notify lists first when a
// free asked for it.
#include <errno.h>

#include <cstring>

#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

__thread ThreadHeap* tl_heap __attribute__((tls_model("initial-exec"))) = &g_empty_heap;
__thread int64_t tl_live_delta __attribute__((tls_model("initial-exec"))) = 0;
constinit SmallSpan g_empty_span{};
constinit ThreadHeap g_empty_heap;

namespace {

// Blocks put on the free list at a time: a fresh span is touched 16 KiB by 16 KiB, as the program uses it, after
// a first step of 4 KiB. A thread keeps the span each (lifetime class, size class) allocates from even when it is
// empty, and a request's temporaries of many sizes leave one such span per size behind, most holding a block or
// two at a time: with a model that gives temporaries a class of their own, that is one span per size and
// lifetime class and thread, and what the first step touched stays resident at the peak.
constexpr size_t kFirstExtendBytes = 4 * 1024;
constexpr size_t kExtendBytes = 16 * 1024;

uintptr_t span_key(uintptr_t start) {
  // Different per span and per process (ASLR moves g_empty_span): a program's data rarely decodes to a link.
  uint64_t x = (start ^ reinterpret_cast<uintptr_t>(&g_empty_span)) * 0x9E3779B97F4A7C15ull;
  return uintptr_t(x ^ (x >> 29)) | 1;  // never 0: the end of a list is not stored as 0
}

void set_size_span(PageHeap& page_heap, uintptr_t start, size_t bytes, SmallSpan* s) {
  for (size_t off = 0; off < bytes; off += kBlockSpanBytes)
    page_heap.size_span_slot(start + off)->store(s, std::memory_order_release);
}

void init_span(ThreadHeap& heap, SmallSpan* s, uintptr_t start, size_t span_bytes, unsigned lc, unsigned sc) {
  size_t bs = size_class_bytes(sc);
  s->free = nullptr;
  s->key = span_key(start);
  s->start = start;
  s->used = 0;
  s->capacity = uint32_t(span_bytes / bs);
  s->extended.store(0, std::memory_order_relaxed);
  s->block_size = uint32_t(bs);
  s->reciprocal = uint32_t(((uint64_t{1} << 32) + bs - 1) / bs);
  s->span_bytes = uint32_t(span_bytes);
  s->own_key = s->key;
  s->own_start = start;
  s->own_span_bytes = s->span_bytes;
  s->own_block_size = s->block_size;
  s->size_class = uint8_t(sc);
  s->lifetime_class = s->home_class = uint8_t(lc);
  s->queued = s->cached = 0;
  s->next = s->prev = nullptr;
  s->purged_pages = 0;
  s->parked = 0;
  s->swept_used = 0;
  s->xfree.store(0, std::memory_order_relaxed);
  s->remote_pending.store(0, std::memory_order_relaxed);
  s->owner_freed = 0;
  s->pool_parked = 0;
  s->owner = &heap;
  s->notify_next = nullptr;
}

SmallSpan* new_span(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, unsigned sc) {
  size_t bytes = lc >= page_heap.shared_class_min() ? long_lived_span_bytes(sc) : size_class_span_bytes(sc);
  uint8_t& taken = heap.spans_taken[lc][sc];
  bytes = grown_span_bytes(bytes, taken);
  unsigned kind = span_kind(bytes);
  uint8_t& n = heap.cache_count[lc][kind];
  if (n > 0) {
    // Held all along: its count moves from the size class it served to this one (give_back takes it off this
    // one's).
    SmallSpan* s = heap.cache[lc][kind][--n];
    heap.cache[lc][kind][n] = nullptr;
    uint8_t& was = heap.spans_taken[lc][s->size_class];
    if (was > 0) --was;
    if (taken < UINT8_MAX) ++taken;
    init_span(heap, s, s->start, bytes, lc, sc);
    return s;
  }
  if (taken < UINT8_MAX) ++taken;
  // The shared thread heap's spans come from the huge pages of the longest class, whatever the class of their
  // objects: it serves the long-lived objects that threads make few of, whose spans fill slowly; on pages of
  // their own class, each class would hold an open page of its own, where the spans of other objects of the
  // class come and go around them, for a few KiB of objects.
  unsigned page_class = &heap == page_heap.shared_heap() ? page_heap.num_classes() - 1 : lc;
  void* p = page_heap.alloc_large(page_class, bytes, kBlockSpanBytes);
  if (p == nullptr) return nullptr;
  page_heap.counters().block_spans_handed_out.fetch_add(1, std::memory_order_relaxed);
  uintptr_t start = reinterpret_cast<uintptr_t>(p);
  SmallSpan* s = small_span_in(page_heap.span_of(start));
  init_span(heap, s, start, bytes, lc, sc);
  set_size_span(page_heap, start, bytes, s);
  return s;
}

void extend(SmallSpan* s) {
  uint32_t extended = s->extended.load(std::memory_order_relaxed);
  uint32_t n = s->capacity - extended;
  uint32_t step = uint32_t((extended == 0 ? kFirstExtendBytes : kExtendBytes) / s->block_size);
  if (step == 0) step = 1;
  if (n > step) n = step;
  uintptr_t first = s->start + uintptr_t(extended) * s->block_size;
  uintptr_t link = reinterpret_cast<uintptr_t>(s->free);
  for (uint32_t i = n; i-- > 0;) {
    uintptr_t b = first + uintptr_t(i) * s->block_size;
    *reinterpret_cast<uintptr_t*>(b) = link ^ s->key;
    link = b;
  }
  s->free = reinterpret_cast<void*>(link);
  s->extended.store(extended + n, std::memory_order_relaxed);
}

}  // namespace

void thread_heap_internal::give_back(PageHeap& page_heap, SmallSpan* s) {
  // One span fewer held: a class whose spans go back as fast as they come (a request's temporaries of many
  // sizes, whose empty spans the sweeper takes back between requests) keeps small ones. Counted as ever taken,
  // every size class a worker of hash-trimmed-cache used grew to a full span, 36 of them, 2.2 MiB, nearly empty
  // (a replay: 58 MiB of huge pages at the peak with a model against 50 without; 50 and 48 counted as held).
  // The owner, or a thread that has the heap to itself (the sweeper, a drain of the pool's heaps).
  if (s->owner != nullptr) {
    uint8_t& taken = static_cast<ThreadHeap*>(s->owner)->spans_taken[s->home_class][s->size_class];
    if (taken > 0) --taken;
  }
  ThreadHeapOps::check_released_list(s);
  forget_purge(page_heap, s);
  uintptr_t start = s->start;
  set_size_span(page_heap, start, s->span_bytes, nullptr);
  page_heap.free_large(reinterpret_cast<void*>(start));  // may release the page and with it s's metadata
}

bool ThreadHeapOps::refill_free(PageHeap& page_heap, SmallSpan* s) {
  if (s->free != nullptr) return true;
  collect_remote(s);
  if (s->free != nullptr) return true;
  if (s->parked != 0) {
    unpark(page_heap, s);
    if (s->free != nullptr) return true;
  }
  if (s->extended.load(std::memory_order_relaxed) < s->capacity) {
    extend(s);
    return true;
  }
  return false;
}

void* ThreadHeapOps::alloc_small(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, unsigned sc) {
  SmallSpan** head = &heap.spans[lc][sc];
  // This thread's remote-free batch waits no longer than its next slow path.
  if (heap.batch_span.load(std::memory_order_relaxed) != nullptr) flush_remote_batch(heap);
  if (heap.notify.load(std::memory_order_relaxed) != nullptr) drain_notify(page_heap, heap);
  // The queue from its head: the first span with a free block (or one that comes back) serves; full ones leave
  // the queue until a free brings them back. Bounded, so a long queue of full spans costs one pass each.
  for (unsigned tries = 0; *head != &g_empty_span && tries < 16; ++tries) {
    SmallSpan* s = *head;
    if (refill_free(page_heap, s)) return span_pop(s);
    if (!mark_full(heap, s)) {
      collect_remote(s);
      return span_pop(s);
    }
  }
  // About to take new memory: first give back what frees into exited threads' spans have emptied.
  if (hooks.reclaim_pending.load(std::memory_order_relaxed) && hooks.pool != nullptr)
    reclaim_abandoned(page_heap, *hooks.pool);
  if (page_heap.span_recycling()) {
    if (SmallSpan* s = adopt_longer_span(heap, lc, sc); s != nullptr && refill_free(page_heap, s)) return span_pop(s);
  }
  SmallSpan* s = new_span(page_heap, heap, lc, sc);
  if (s == nullptr) return nullptr;
  enqueue_front(heap, s);
  extend(s);
  return span_pop(s);
}

void* ThreadHeapOps::allocate(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, size_t size, size_t alignment) {
  unsigned sc = classify(size, alignment);
  void* p;
  if (sc != kLargeRequest) {
    if (uses_shared_heap(page_heap, heap, lc)) {
      // A long-lived class: from the thread heap all threads share (the thread's own spans of this class stay
      // empty, so its fast path always comes here), unless this thread makes them fast (ThreadHeap::own_class).
      p = allocate_shared(page_heap, heap, lc, sc);
    } else {
      p = span_pop(heap.spans[lc][sc]);
      if (p == nullptr) p = alloc_small(page_heap, heap, lc, sc);
    }
    if (p != nullptr) tl_live_delta += int64_t(size_class_bytes(sc));
  } else {
    p = page_heap.alloc_large(lc, size, alignment);
    if (p != nullptr) tl_live_delta += int64_t(size);
  }
  if (p == nullptr) errno = ENOMEM;
  return p;
}

size_t ThreadHeapOps::deallocate(PageHeap& page_heap, ThreadHeap* heap, void* p) {
  if (p == nullptr) return 0;
  if (SmallSpan* s = span_of(page_heap, p)) {
    size_t bytes = free_small(page_heap, heap, s, p);
    tl_live_delta -= int64_t(bytes);
    return bytes;
  }
  if (!page_heap.owns(p)) fatal_pointer("free of", p, "pointer not allocated by llamalloc");
  size_t bytes = page_heap.free_large(p);
  tl_live_delta -= int64_t(bytes);
  return bytes;
}

void ThreadHeapOps::release_span(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s) {
  // On the notify list (a remote free after it was full, since collected): the drain gives it back.
  if (s->xfree.load(std::memory_order_acquire) & kXfreeNotified) return;
  if (s->queued) unlink(heap, s);
  s->lifetime_class = s->home_class;  // cached for the class whose huge page it is on
  size_t bytes = s->span_bytes;
  unsigned kind = span_kind(bytes), lc = s->lifetime_class;
  uint8_t& n = heap.cache_count[lc][kind];
  if (n == kSpanCacheSlots) {
    // The oldest cached span goes back to the page heap.
    give_back(page_heap, heap.cache[lc][kind][0]);
    memmove(&heap.cache[lc][kind][0], &heap.cache[lc][kind][1], sizeof(SmallSpan*) * (kSpanCacheSlots - 1));
    --n;
  }
  check_released_list(s);
  // Kept with its size_spans entries, and extended = 0 so that any free into it is reported.
  forget_purge(page_heap, s);
  s->free = nullptr;
  s->extended.store(0, std::memory_order_relaxed);
  s->cached = 1;
  heap.cache[lc][kind][n++] = s;
}

void ThreadHeapOps::release_all(PageHeap& page_heap, ThreadHeap& heap) {
  flush_remote_batch(heap);
  drain_notify(page_heap, heap);
  uint32_t emptied = 0, emptied_blocks = 0;
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc) {
      bool queued = heap.tails[lc][sc] != nullptr;
      SmallSpan* s = queued ? heap.spans[lc][sc] : nullptr;
      uint32_t last_bytes = 0;
      while (s != &g_empty_span && s != nullptr) {
        SmallSpan* next = s->next;
        collect_remote(s);
        if (span_empty(s) && !(s->xfree.load(std::memory_order_acquire) & kXfreeNotified)) {
          last_bytes = s->span_bytes;
          unlink(heap, s);
          give_back(page_heap, s);
        }
        s = next;
      }
      if (queued && heap.tails[lc][sc] == nullptr) {
        ++emptied;
        emptied_blocks += uint32_t((last_bytes + kBlockBytes - 1) / kBlockBytes);
      }
    }
  heap.swept_queues = emptied;
  heap.swept_blocks = emptied_blocks;
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned k = 0; k < kSpanKinds; ++k) {
      while (heap.cache_count[lc][k] > 0) {
        uint8_t& n = heap.cache_count[lc][k];
        give_back(page_heap, heap.cache[lc][k][--n]);
        heap.cache[lc][k][n] = nullptr;
      }
    }
}

uint32_t ThreadHeapOps::program_slow_paths(ThreadHeap& heap, uint32_t ops, uint32_t seen, uint64_t* retaken_blocks) {
  uint32_t ran = ops - seen, retaken = heap.swept_queues;
  if (retaken_blocks != nullptr) *retaken_blocks += heap.swept_blocks;
  heap.swept_queues = heap.swept_blocks = 0;
  return ran > retaken ? ran - retaken : 0;
}

}  // namespace llamalloc
