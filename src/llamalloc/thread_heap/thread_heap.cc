#include <errno.h>
#include <sched.h>

#include <cstring>

#include "thread_heap/thread_heap.h"

namespace llamalloc {

__thread ThreadHeap* tl_heap __attribute__((tls_model("initial-exec"))) = &g_empty_heap;
__thread int64_t tl_live_delta __attribute__((tls_model("initial-exec"))) = 0;
constinit SmallSpan g_empty_span{};
constinit ThreadHeap g_empty_heap;

namespace {

// Blocks put on the free list at a time: a fresh span is touched 16 KiB by 16 KiB, as the program uses it.
constexpr size_t kExtendBytes = 16 * 1024;

uintptr_t span_key(uintptr_t start) {
  // Different per span and per process (ASLR moves g_empty_span): a program's data rarely decodes to a link.
  uint64_t x = (start ^ reinterpret_cast<uintptr_t>(&g_empty_span)) * 0x9E3779B97F4A7C15ull;
  return uintptr_t(x ^ (x >> 29)) | 1;  // never 0: the end of a list is not stored as 0
}

void enqueue_front(ThreadHeap& heap, SmallSpan* s) {
  SmallSpan*& head = heap.spans[s->lifetime_class][s->size_class];
  s->prev = nullptr;
  s->next = head == &g_empty_span ? nullptr : head;
  if (s->next != nullptr) s->next->prev = s;
  else heap.tails[s->lifetime_class][s->size_class] = s;
  head = s;
  s->queued = 1;
}

// At the end of the queue (ThreadHeap::tails says why), behind the span the fast path is using.
void enqueue_back(ThreadHeap& heap, SmallSpan* s) {
  SmallSpan*& tail = heap.tails[s->lifetime_class][s->size_class];
  if (tail == nullptr) return enqueue_front(heap, s);
  s->prev = tail;
  s->next = nullptr;
  tail->next = s;
  tail = s;
  s->queued = 1;
}

void unlink(ThreadHeap& heap, SmallSpan* s) {
  SmallSpan*& head = heap.spans[s->lifetime_class][s->size_class];
  if (s->prev != nullptr) s->prev->next = s->next;
  else head = s->next != nullptr ? s->next : &g_empty_span;
  if (s->next != nullptr) s->next->prev = s->prev;
  else heap.tails[s->lifetime_class][s->size_class] = s->prev;
  s->next = s->prev = nullptr;
  s->queued = 0;
}

// The abandoned heap's list of parked spans (ThreadHeap::pool_parked).
void park_in_pool(ThreadHeap& heap, SmallSpan* s) {
  if (s->pool_parked) return;
  s->prev = nullptr;
  s->next = heap.pool_parked;
  if (s->next != nullptr) s->next->prev = s;
  heap.pool_parked = s;
  s->pool_parked = 1;
}

void unpark_from_pool(ThreadHeap& heap, SmallSpan* s) {
  if (!s->pool_parked) return;
  if (s->prev != nullptr) s->prev->next = s->next;
  else heap.pool_parked = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  s->next = s->prev = nullptr;
  s->pool_parked = 0;
}

// Walks an encoded list; the number of blocks and the last one. Aborts on a list longer than the span holds
// (a cycle: a block freed twice by other threads).
uint32_t list_length(const SmallSpan* s, void* head, void** last) {
  uint32_t n = 0;
  for (void* b = head; b != nullptr; b = reinterpret_cast<void*>(*static_cast<uintptr_t*>(b) ^ s->key)) {
    if (++n > s->capacity) ThreadHeapOps::bad_free(b, "double free (a span's list of freed blocks loops)");
    *last = b;
  }
  return n;
}

void set_size_span(PageHeap& global, uintptr_t start, size_t bytes, SmallSpan* s) {
  for (size_t off = 0; off < bytes; off += kBlockSpanBytes)
    global.size_span_slot(start + off)->store(s, std::memory_order_release);
}

// A span with no object handed out: every block is free or parked (span purge).
bool span_empty(const SmallSpan* s) { return s->used == s->parked; }

// The span is empty or about to be re-listed whole: its purged pages are no longer the span's to track.
void forget_purge(PageHeap& global, SmallSpan* s) {
  if (LLAMALLOC_LIKELY(s->purged_pages == 0)) return;
  global.span_purge_forgotten(s->start, size_t(__builtin_popcountll(s->purged_pages)));
  s->used -= s->parked;
  s->parked = 0;
  s->purged_pages = 0;
}

void give_back(PageHeap& global, SmallSpan* s) {
  ThreadHeapOps::check_released_list(s);
  forget_purge(global, s);
  uintptr_t start = s->start;
  set_size_span(global, start, s->span_bytes, nullptr);
  global.free_large(reinterpret_cast<void*>(start));  // may release the page and with it s's metadata
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

SmallSpan* new_span(PageHeap& global, ThreadHeap& heap, unsigned lc, unsigned sc) {
  size_t bytes = lc >= global.shared_class_min() ? long_lived_span_bytes(sc) : size_class_span_bytes(sc);
  uint8_t& taken = heap.spans_taken[lc][sc];
  bytes = grown_span_bytes(bytes, taken);
  if (taken < kSpanGrowthSteps) ++taken;
  unsigned kind = span_kind(bytes);
  uint8_t& n = heap.cache_count[lc][kind];
  if (n > 0) {
    SmallSpan* s = heap.cache[lc][kind][--n];
    heap.cache[lc][kind][n] = nullptr;
    init_span(heap, s, s->start, bytes, lc, sc);
    return s;
  }
  // The shared thread heap's spans come from the huge pages of the longest class, whatever the class of their
  // objects: it serves the long-lived objects that threads make few of, whose spans fill slowly; on pages of
  // their own class, each class would hold an open page of its own, where the spans of other objects of the
  // class come and go around them, for a few KiB of objects.
  unsigned page_class = &heap == global.shared_heap() ? global.num_classes() - 1 : lc;
  void* p = global.alloc_large(page_class, bytes, kBlockSpanBytes);
  if (p == nullptr) return nullptr;
  global.counters().block_spans_handed_out.fetch_add(1, std::memory_order_relaxed);
  uintptr_t start = reinterpret_cast<uintptr_t>(p);
  SmallSpan* s = small_span_in(global.span_of(start));
  init_span(heap, s, start, bytes, lc, sc);
  set_size_span(global, start, bytes, s);
  return s;
}

// A partially free span of size class sc from a longer lifetime class of this thread heap, for class lc, which has
// no span with a free block (HeapConfig::span_recycling): the longest class first, the first span with a free
// block among the 32 behind the head of its queue (the longer class's fast path is using the head). It moves
// to lc's queue: its holes take objects expected to die before the ones it holds, and those keep it (and its
// huge page) in use either way. Its home_class stays the longer class, whose queue or span cache it goes back
// to once it has been full or is empty (after_owner_free, drain_notify, release_span). Without this, a
// long-lived class's span keeps the holes its dead objects leave until its own class allocates again, while a
// program that overwrites long-lived values with shorter-lived ones puts the new values on pages of their own.
SmallSpan* adopt_longer_span(ThreadHeap& heap, unsigned lc, unsigned sc) {
  for (unsigned l = kMaxClasses; l-- > lc + 1;) {
    SmallSpan* head = heap.spans[l][sc];
    if (head == &g_empty_span) continue;
    unsigned looked = 0;
    for (SmallSpan* s = head->next; s != nullptr && looked < 32; s = s->next, ++looked) {
      if (s->capacity == s->used) continue;
      unlink(heap, s);
      s->lifetime_class = uint8_t(lc);
      enqueue_front(heap, s);
      return s;
    }
  }
  return nullptr;
}

// Takes a full span off its queue and marks it so that the first remote free tells the owner. false when a
// remote free came first (the span has a free block again).
bool mark_full(ThreadHeap& heap, SmallSpan* s) {
  uintptr_t x = s->xfree.load(std::memory_order_relaxed);
  for (;;) {
    if ((x & ~kXfreeStateMask) != 0) return false;
    if ((x & kXfreeStateMask) == kXfreeNotified) break;  // already on the notify list: drain re-queues it
    if (s->xfree.compare_exchange_weak(x, x | kXfreeFull, std::memory_order_acq_rel, std::memory_order_relaxed)) break;
  }
  unlink(heap, s);
  return true;
}

// A span of an abandoned thread heap that still holds objects: off the queue, marked full (any later remote free
// notifies). false when its objects are all back after all (then the caller gives it back).
bool park_abandoned(SmallSpan* s) {
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

void extend(SmallSpan* s) {
  uint32_t extended = s->extended.load(std::memory_order_relaxed);
  uint32_t n = s->capacity - extended;
  uint32_t step = uint32_t(kExtendBytes / s->block_size);
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

// Span purge: the 4 KiB pages that block i of s covers, as a mask of s's pages.
uint64_t pages_of_block(const SmallSpan* s, uint32_t i) {
  uint64_t first = uint64_t(i) * s->block_size / kSmallPageBytes;
  uint64_t last = (uint64_t(i) * s->block_size + s->block_size - 1) / kSmallPageBytes;
  return (last >= 63 ? ~uint64_t{0} : (uint64_t{2} << last) - 1) & ~((uint64_t{1} << first) - 1);
}

// The most blocks a span may have to be purged: its free blocks are marked in a bitmap on the stack. Every span
// of 16 B blocks or larger fits.
constexpr uint32_t kPurgeMaxBlocks = 1024;

}  // namespace

bool ThreadHeapOps::is_parked(const SmallSpan* s, const void* p) {
  if (s->purged_pages == 0) return false;
  uint32_t i = block_index(s, p);
  return i != ~0u && (pages_of_block(s, i) & s->purged_pages) != 0;
}

void ThreadHeapOps::unpark(PageHeap& global, SmallSpan* s) {
  // Every block on a purged page is parked (it was free when the page was purged, and only `free` hands blocks
  // out): back on the list. A block whose first word lies on a purged page reads zero unless the program wrote
  // into it after freeing it.
  uint32_t extended = s->extended.load(std::memory_order_relaxed), n = 0;
  uintptr_t link = reinterpret_cast<uintptr_t>(s->free);
  for (uint32_t i = extended; i-- > 0;) {
    if ((pages_of_block(s, i) & s->purged_pages) == 0) continue;
    uintptr_t b = s->start + uintptr_t(i) * s->block_size;
    uint64_t first_page = uint64_t(i) * s->block_size / kSmallPageBytes;
    if ((s->purged_pages >> first_page & 1) != 0 && *reinterpret_cast<const uintptr_t*>(b) != 0)
      corrupt_free_block(s, reinterpret_cast<void*>(b));
    *reinterpret_cast<uintptr_t*>(b) = link ^ s->key;
    link = b;
    ++n;
  }
  LLAMALLOC_CHECK(n == s->parked, "span purge: parked blocks miscounted");
  s->free = reinterpret_cast<void*>(link);
  forget_purge(global, s);
}

bool ThreadHeapOps::purge_span(PageHeap& global, SmallSpan* s) {
  uint32_t extended = s->extended.load(std::memory_order_relaxed);
  if (extended == 0 || s->capacity > kPurgeMaxBlocks || s->span_bytes > 64 * kSmallPageBytes) return false;
  // Free blocks: those on the list and the parked ones.
  uint64_t free_bits[kPurgeMaxBlocks / 64] = {};
  auto mark = [&](uint32_t i) { free_bits[i / 64] |= uint64_t{1} << (i % 64); };
  auto is_free = [&](uint32_t i) { return (free_bits[i / 64] >> (i % 64) & 1) != 0; };
  // One walk of the list, which is cold in a span worth purging: it counts (a list longer than the span holds
  // loops: a double free) and marks (a link to no block of the span: written after free) as it goes.
  uint32_t listed = 0;
  for (void* b = s->free; b != nullptr; b = reinterpret_cast<void*>(*static_cast<uintptr_t*>(b) ^ s->key)) {
    if (++listed > s->capacity) bad_free(b, "double free (a span's list of freed blocks loops)");
    uint32_t i = block_index(s, b);
    if (i == ~0u) corrupt_free_block(s, b);
    mark(i);
  }
  if (s->purged_pages != 0)
    for (uint32_t i = 0; i < extended; ++i)
      if ((pages_of_block(s, i) & s->purged_pages) != 0) mark(i);
  // Pages whose blocks are all free and all below `extended` (blocks put on the list later never cover a purged
  // page, so that unpark finds exactly the parked blocks).
  uint64_t purge = 0;
  size_t pages = s->span_bytes / kSmallPageBytes;
  for (size_t j = 0; j < pages; ++j) {
    if ((s->purged_pages >> j & 1) != 0) continue;
    uint32_t first = uint32_t(j * kSmallPageBytes / s->block_size);
    uint32_t last_block = uint32_t(((j + 1) * kSmallPageBytes - 1) / s->block_size);
    if (last_block >= extended) break;
    bool all_free = true;
    for (uint32_t i = first; i <= last_block && all_free; ++i) all_free = is_free(i);
    if (all_free) purge |= uint64_t{1} << j;
  }
  if (purge == 0) return false;
  // The list without the blocks on purged pages, in its order.
  uint64_t mask = s->purged_pages | purge;
  uintptr_t head = 0, tail = 0;
  uint32_t kept = 0;
  for (void* b = s->free; b != nullptr;) {
    void* next = reinterpret_cast<void*>(*static_cast<uintptr_t*>(b) ^ s->key);
    if ((pages_of_block(s, block_index(s, b)) & mask) == 0) {
      uintptr_t a = reinterpret_cast<uintptr_t>(b);
      if (tail != 0) *reinterpret_cast<uintptr_t*>(tail) = a ^ s->key;
      else head = a;
      tail = a;
      ++kept;
    }
    b = next;
  }
  if (tail != 0) *reinterpret_cast<uintptr_t*>(tail) = 0 ^ s->key;
  s->free = reinterpret_cast<void*>(head);
  s->parked += listed - kept;
  s->used += listed - kept;
  s->purged_pages = mask;
  for (size_t j = 0; j < pages;) {
    if ((purge >> j & 1) == 0) {
      ++j;
      continue;
    }
    size_t end = j;
    while (end < pages && (purge >> end & 1) != 0) ++end;
    global.purge_span_pages(s->start + j * kSmallPageBytes, (end - j) * kSmallPageBytes);
    j = end;
  }
  return true;
}

bool ThreadHeapOps::purge_if_sparse(PageHeap& global, SmallSpan* s) {
  uint64_t live = s->used - s->parked;
  return live * 100 <= uint64_t(s->capacity) * global.subrelease_percent() && global.subrelease_percent() != 0 &&
         purge_span(global, s);
}

PurgeResult ThreadHeapOps::purge_sparse_spans(PageHeap& global, ThreadHeap& heap, PurgeWhen when) {
  PurgeResult result;
  if (global.subrelease_percent() == 0) return result;
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc)
      for (SmallSpan* s = heap.spans[lc][sc]; s != &g_empty_span && s != nullptr; s = s->next) {
        // Idle: `used` unchanged since the previous look; the top bit says this count was examined already, so
        // that a span is walked once per count, not on every pass.
        uint32_t seen = s->used + 1;
        if (when != PurgeWhen::kAll && s->swept_used == (seen | kSweptExamined)) continue;
        bool idle = (s->swept_used & ~kSweptExamined) == seen;
        if (when == PurgeWhen::kIdle && !idle) {
          // A sparse span that is not idle yet is worth another look soon.
          s->swept_used = seen;
          if (uint64_t(s->used - s->parked) * 100 <= uint64_t(s->capacity) * global.subrelease_percent())
            ++result.waiting;
          continue;
        }
        if (when == PurgeWhen::kIdleOrNotHead && !idle && s->prev == nullptr) {
          s->swept_used = seen;  // the head of its queue, which the owner allocates from
          continue;
        }
        if (purge_if_sparse(global, s)) ++result.purged;
        s->swept_used = (s->used + 1) | kSweptExamined;
      }
  return result;
}

void ThreadHeapOps::bad_free(const void* p, const char* what) { fatal_pointer("free of", p, what); }

void corrupt_free_block(const SmallSpan* s, const void* block) {
  (void)s;
  fatal_pointer("malloc: freed block", block, "its link was overwritten: written after it was freed, or freed twice");
}

void ThreadHeapOps::bad_small_free(const SmallSpan* s, const void* p) {
  bad_free(p, s->cached ? "double free (its span is empty)" : "pointer not the start of an object");
}

void ThreadHeapOps::check_live(const SmallSpan* s, const void* p, const char* what) {
  if (block_index(s, p) == ~0u)
    fatal_pointer(what, p, s->cached ? "object already freed" : "pointer not the start of an object");
  uintptr_t link = *static_cast<const uintptr_t*>(p) ^ s->key;
  if ((link - s->start < s->span_bytes || link == 0) && on_free_list(s, p)) fatal_pointer(what, p, "object already freed");
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

bool ThreadHeapOps::refill_free(PageHeap& global, SmallSpan* s) {
  if (s->free != nullptr) return true;
  collect_remote(s);
  if (s->free != nullptr) return true;
  if (s->parked != 0) {
    unpark(global, s);
    if (s->free != nullptr) return true;
  }
  if (s->extended.load(std::memory_order_relaxed) < s->capacity) {
    extend(s);
    return true;
  }
  return false;
}

void ThreadHeapOps::release_span(PageHeap& global, ThreadHeap& heap, SmallSpan* s) {
  // On the notify list (a remote free after it was full, since collected): the drain gives it back.
  if (s->xfree.load(std::memory_order_acquire) & kXfreeNotified) return;
  if (s->queued) unlink(heap, s);
  s->lifetime_class = s->home_class;  // cached for the class whose huge page it is on
  size_t bytes = s->span_bytes;
  unsigned kind = span_kind(bytes), lc = s->lifetime_class;
  uint8_t& n = heap.cache_count[lc][kind];
  if (n == kSpanCacheSlots) {
    // The oldest cached span goes back to the page heap.
    give_back(global, heap.cache[lc][kind][0]);
    memmove(&heap.cache[lc][kind][0], &heap.cache[lc][kind][1], sizeof(SmallSpan*) * (kSpanCacheSlots - 1));
    --n;
  }
  check_released_list(s);
  // Kept with its size_spans entries, and extended = 0 so that any free into it is reported.
  forget_purge(global, s);
  s->free = nullptr;
  s->extended.store(0, std::memory_order_relaxed);
  s->cached = 1;
  heap.cache[lc][kind][n++] = s;
}

void ThreadHeapOps::drain_notify(PageHeap& global, ThreadHeap& heap) {
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
        give_back(global, s);
      } else {
        park_in_pool(heap, s);
      }
    } else {
      if (!s->queued) {
        s->lifetime_class = s->home_class;
        enqueue_back(heap, s);
      }
      if (span_empty(s) && heap.spans[s->lifetime_class][s->size_class] != s) release_span(global, heap, s);
    }
    s = next;
  }
}

void* ThreadHeapOps::alloc_small(PageHeap& global, ThreadHeap& heap, unsigned lc, unsigned sc) {
  SmallSpan** head = &heap.spans[lc][sc];
  if (heap.notify.load(std::memory_order_relaxed) != nullptr) drain_notify(global, heap);
  // The queue from its head: the first span with a free block (or one that comes back) serves; full ones leave
  // the queue until a free brings them back. Bounded, so a long queue of full spans costs one pass each.
  for (unsigned tries = 0; *head != &g_empty_span && tries < 16; ++tries) {
    SmallSpan* s = *head;
    if (refill_free(global, s)) return span_pop(s);
    if (!mark_full(heap, s)) {
      collect_remote(s);
      return span_pop(s);
    }
  }
  // About to take new memory: first give back what frees into exited threads' spans have emptied.
  if (reclaim_pending.load(std::memory_order_relaxed) && pool_ != nullptr) reclaim_abandoned(global, *pool_);
  if (global.span_recycling()) {
    if (SmallSpan* s = adopt_longer_span(heap, lc, sc); s != nullptr && refill_free(global, s)) return span_pop(s);
  }
  SmallSpan* s = new_span(global, heap, lc, sc);
  if (s == nullptr) return nullptr;
  enqueue_front(heap, s);
  extend(s);
  return span_pop(s);
}

void ThreadHeapOps::owner_free_slow(PageHeap& global, ThreadHeap& heap, SmallSpan* s) {
  owner_count_slow(&heap);
  // A thread that frees much and then sleeps runs no other slow path that would flush its live-byte count.
  if (tl_live_delta < -kLiveFlushBytes) flush_live_delta(global);
  after_owner_free(global, heap, s);
  owner_exit(&heap);
  if (slow_free_hook_ != nullptr) slow_free_hook_();
}

void ThreadHeapOps::after_owner_free(PageHeap& global, ThreadHeap& heap, SmallSpan* s) {
  if (!s->queued) {
    // It was full: back on the queue, and remote frees need not tell us any more.
    uintptr_t x = s->xfree.load(std::memory_order_relaxed);
    while ((x & kXfreeStateMask) == kXfreeFull &&
           !s->xfree.compare_exchange_weak(x, x & ~kXfreeFull, std::memory_order_acq_rel, std::memory_order_relaxed)) {
    }
    s->lifetime_class = s->home_class;  // an adopted span goes back to its own class's queue
    enqueue_back(heap, s);
  }
  if (span_empty(s) && heap.spans[s->lifetime_class][s->size_class] != s) release_span(global, heap, s);
}

void ThreadHeapOps::shared_free(PageHeap& global, SmallSpan* s, void* p) {
  if (LLAMALLOC_UNLIKELY(tl_live_delta < -kLiveFlushBytes)) flush_live_delta(global);
  ThreadHeap& heap = *static_cast<ThreadHeap*>(s->owner);
  LockGuard g(global.shared_lock());
  // (Before the push: once free, the block may be handed out and sampled again.)
  if (&heap == global.sampled_heap() && sampled_free_hook_ != nullptr) sampled_free_hook_(p);
  span_push(s, p);
  if (--s->used == 0 || !s->queued) after_owner_free(global, heap, s);
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

void ThreadHeapOps::owner_free_after_sweep(PageHeap& global, ThreadHeap& heap, SmallSpan* s, void* p) {
  wait_for_sweep(heap);
  // s still holds p, so the sweep kept it (it gives back only empty spans) and this heap still owns it.
  span_push(s, p);
  s->owner_freed = 1;  // (reached from the unchecked free too)
  if (--s->used == 0 || !s->queued) return owner_free_slow(global, heap, s);
  owner_exit(&heap);
}

void ThreadHeapOps::remote_free(PageHeap& global, SmallSpan* s, void* p) {
  if (LLAMALLOC_UNLIKELY(s->owner == global.shared_heap() || s->owner == global.sampled_heap()))
    return shared_free(global, s, p);
  if (LLAMALLOC_UNLIKELY(tl_live_delta < -kLiveFlushBytes)) flush_live_delta(global);
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
    if (owner->abandoned.load(std::memory_order_relaxed)) reclaim_pending.store(true, std::memory_order_relaxed);
  }
}

void ThreadHeapOps::free_checked(PageHeap& global, ThreadHeap* heap, SmallSpan* s, void* p) {
  // A free block's first word is an encoded link: inside the span (or null). A live object's first word is the
  // program's data, which matches that only by chance; then the lists are walked to be sure.
  uintptr_t link = *static_cast<uintptr_t*>(p) ^ s->key;
  if (LLAMALLOC_UNLIKELY(link - s->start < s->span_bytes || link == 0)) return free_suspicious(global, heap, s, p);
  if (s->owner != heap) return remote_free(global, s, p);
  owner_enter(heap);
  if (sweep_requested(heap)) return owner_free_after_sweep(global, *heap, s, p);
  span_push(s, p);
  if (--s->used == 0 || !s->queued) return owner_free_slow(global, *heap, s);
  owner_exit(heap);
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

void ThreadHeapOps::free_suspicious(PageHeap& global, ThreadHeap* heap, SmallSpan* s, void* p) {
  if (s->owner == heap) {
    owner_enter(heap);  // before its lists are read: a sweeper may be taking remote frees into them
    if (sweep_requested(heap)) wait_for_sweep(*heap);
    if (on_free_list(s, p)) bad_free(p, "double free, or a pointer never allocated (its block is free)");
    span_push(s, p);
    if (--s->used == 0 || !s->queued) return owner_free_slow(global, *heap, s);
    return owner_exit(heap);
  }
  if (s->owner == global.shared_heap() || s->owner == global.sampled_heap()) {
    {
      LockGuard g(global.shared_lock());  // (its lists change only under it)
      if (on_free_list(s, p)) bad_free(p, "double free, or a pointer never allocated (its block is free)");
    }
    return shared_free(global, s, p);
  }
  if (on_free_list(s, p)) bad_free(p, "double free, or a pointer never allocated (its block is free)");
  remote_free(global, s, p);
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

void* ThreadHeapOps::allocate(PageHeap& global, ThreadHeap& heap, unsigned lc, size_t size, size_t alignment) {
  unsigned sc = classify(size, alignment);
  void* p;
  if (sc != kLargeRequest) {
    if (uses_shared_heap(global, heap, lc)) {
      // A long-lived class: from the thread heap all threads share (the thread's own spans of this class stay
      // empty, so its fast path always comes here), unless this thread makes them fast (ThreadHeap::own_class).
      ThreadHeap* shared = global.shared_heap();
      LockGuard g(global.shared_lock());
      p = span_pop(shared->spans[lc][sc]);
      if (p == nullptr) {
        owner_count_slow(shared);  // (the sweeper's sign of activity, as for a thread heap)
        p = alloc_small(global, *shared, lc, sc);
      }
      if (++heap.shared_allocs[lc] >= kSharedBurst) {
        uint64_t now = global.now_ns();
        // (shared_since 0: the first window, which only starts the count, in the process and in the replay)
        if (heap.shared_since[lc] != 0 && now - heap.shared_since[lc] < kSharedBurstNs) heap.own_class[lc] = 1;
        heap.shared_since[lc] = now;
        heap.shared_allocs[lc] = 0;
      }
    } else {
      p = span_pop(heap.spans[lc][sc]);
      if (p == nullptr) p = alloc_small(global, heap, lc, sc);
    }
    if (p != nullptr) tl_live_delta += int64_t(size_class_bytes(sc));
  } else {
    p = global.alloc_large(lc, size, alignment);
    if (p != nullptr) tl_live_delta += int64_t(size);
  }
  if (p == nullptr) errno = ENOMEM;
  return p;
}

void* ThreadHeapOps::allocate_sampled(PageHeap& global, ThreadHeap& heap, unsigned lc, size_t size, size_t alignment) {
  ThreadHeap* sampled = global.sampled_heap();
  unsigned sc = classify(size, alignment);
  if (sc == kLargeRequest || sampled == nullptr || sampled == &heap) return allocate(global, heap, lc, size, alignment);
  void* p;
  {
    LockGuard g(global.shared_lock());
    p = span_pop(sampled->spans[lc][sc]);
    if (p == nullptr) {
      owner_count_slow(sampled);  // (the sweeper's sign of activity, as for a thread heap)
      p = alloc_small(global, *sampled, lc, sc);
    }
  }
  if (p != nullptr) tl_live_delta += int64_t(size_class_bytes(sc));
  else errno = ENOMEM;
  return p;
}

size_t ThreadHeapOps::deallocate(PageHeap& global, ThreadHeap* heap, void* p) {
  if (p == nullptr) return 0;
  if (SmallSpan* s = span_of(global, p)) {
    size_t bytes = free_small(global, heap, s, p);
    tl_live_delta -= int64_t(bytes);
    return bytes;
  }
  if (!global.owns(p)) fatal_pointer("free of", p, "pointer not allocated by llamalloc");
  size_t bytes = global.free_large(p);
  tl_live_delta -= int64_t(bytes);
  return bytes;
}

void ThreadHeapOps::release_all(PageHeap& global, ThreadHeap& heap) {
  drain_notify(global, heap);
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc) {
      SmallSpan* s = heap.spans[lc][sc];
      while (s != &g_empty_span && s != nullptr) {
        SmallSpan* next = s->next;
        collect_remote(s);
        if (span_empty(s) && !(s->xfree.load(std::memory_order_acquire) & kXfreeNotified)) {
          unlink(heap, s);
          give_back(global, s);
        }
        s = next;
      }
    }
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned k = 0; k < kSpanKinds; ++k) {
      while (heap.cache_count[lc][k] > 0) {
        uint8_t& n = heap.cache_count[lc][k];
        give_back(global, heap.cache[lc][k][--n]);
        heap.cache[lc][k][n] = nullptr;
      }
    }
}

void ThreadHeapOps::abandon(PageHeap& global, ThreadHeap& heap) {
  // First, so that a free that notifies from now on asks for a reclaim.
  heap.abandoned.store(1, std::memory_order_seq_cst);
  drain_notify(global, heap);
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
        if ((span_empty(s) && !notified) || !park_abandoned(s)) give_back(global, s);
        else park_in_pool(heap, s);
      }
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned k = 0; k < kSpanKinds; ++k)
      while (heap.cache_count[lc][k] > 0) {
        uint8_t& n = heap.cache_count[lc][k];
        give_back(global, heap.cache[lc][k][--n]);
        heap.cache[lc][k][n] = nullptr;
      }
  // A span that was notified between the drain above and its parking is on the list: drain again.
  drain_notify(global, heap);
}

void ThreadHeapOps::reclaim_abandoned(PageHeap& global, HeapPool& pool, bool force) {
  if (!reclaim_pending.exchange(false, std::memory_order_acquire) && !force) return;
  LockGuard g(pool.lock);
  for (ThreadHeap* h = pool.head; h != nullptr; h = h->next_free)
    if (h->notify.load(std::memory_order_acquire) != nullptr) drain_notify(global, *h);
}

void ThreadHeapOps::purge_pooled(PageHeap& global, HeapPool& pool, bool now) {
  reclaim_pending.store(false, std::memory_order_relaxed);  // (every notify list is drained below)
  LockGuard g(pool.lock);
  for (ThreadHeap* h = pool.head; h != nullptr; h = h->next_free) {
    if (h->notify.load(std::memory_order_acquire) != nullptr) drain_notify(global, *h);
    // A heap adopted within a pass of its thread's exit keeps its spans' pages for the next thread.
    if (!now && h->pool_passes++ == 0) continue;
    for (SmallSpan* s = h->pool_parked; s != nullptr; s = s->next) {
      // Notified: a remote free is about to put it on the notify list; the next drain parks it again.
      if ((s->xfree.load(std::memory_order_acquire) & kXfreeStateMask) != kXfreeFull) continue;
      uint32_t seen = (s->used + 1) | kSweptExamined;  // (purged at this count already)
      if (s->swept_used == seen) continue;
      purge_if_sparse(global, s);
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

bool ThreadHeap::check(PageHeap& global) const {
  for (unsigned sc = 0; sc < kNumSizeClasses; ++sc)
    if (spans[kMaxClasses][sc] != &g_empty_span) return false;
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc) {
      const SmallSpan* prev = nullptr;
      if ((spans[lc][sc] == &g_empty_span) != (tails[lc][sc] == nullptr)) return false;
      for (const SmallSpan* s = spans[lc][sc]; s != &g_empty_span && s != nullptr; s = s->next) {
        if (s->next == nullptr && tails[lc][sc] != s) return false;
        if (s->owner != this || !s->queued || s->cached || s->prev != prev) return false;
        if (s->size_class != sc || s->lifetime_class != lc || s->block_size != size_class_bytes(sc)) return false;
        // The list first: a double free by the owner (which free() does not look for) makes it loop, which
        // list_length reports as such, before the counts it also skews.
        void* last = nullptr;
        uint32_t listed = list_length(s, s->free, &last);
        uint32_t extended = s->extended.load(std::memory_order_relaxed);
        if (s->used > extended || extended > s->capacity) return false;
        if (ThreadHeapOps::span_of(global, reinterpret_cast<void*>(s->start + s->span_bytes - 1)) != s) return false;
        if (listed + s->used > extended) return false;
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
