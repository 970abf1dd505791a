// Span purge (docs/heap-memory.md, "Span purge"): the 4 KiB pages of a sparse span whose blocks are all free go
// back to the OS while the span stays in use. Rules: only spans with at most the subrelease percentage of their
// blocks in use, of at most kPurgeMaxBlocks blocks and 64 pages; only pages whose blocks are all free and below
// `extended`; the blocks on a purged page are parked (off the free list, counted in `parked`, not in `used`) and
// go back on the list all together when the list runs dry (unpark), each checked to read zero as a purged page
// does; a span is walked once per count of blocks in use (kSweptExamined); a span that empties or is re-listed
// whole forgets its purged pages (forget_purge), so that the page heap's gauges stay right.
#include "thread_heap/thread_heap_internal.h"

namespace llamalloc {

using namespace thread_heap_internal;

namespace {

// The most blocks a span may have to be purged: its free blocks are marked in a bitmap on the stack. Every span
// of 16 B blocks or larger fits.
constexpr uint32_t kPurgeMaxBlocks = 1024;

}  // namespace

void thread_heap_internal::forget_purge(PageHeap& page_heap, SmallSpan* s) {
  if (LLAMALLOC_LIKELY(s->purged_pages == 0)) return;
  page_heap.span_purge_forgotten(s->start, size_t(__builtin_popcountll(s->purged_pages)));
  s->parked = 0;
  s->purged_pages = 0;
}

bool ThreadHeapOps::is_parked(const SmallSpan* s, const void* p) {
  if (s->purged_pages == 0) return false;
  uint32_t i = block_index(s, p);
  return i != ~0u && (pages_of_block(s, i) & s->purged_pages) != 0;
}

void ThreadHeapOps::unpark(PageHeap& page_heap, SmallSpan* s) {
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
  forget_purge(page_heap, s);
}

bool ThreadHeapOps::purge_span(PageHeap& page_heap, SmallSpan* s) {
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
  s->purged_pages = mask;
  for (size_t j = 0; j < pages;) {
    if ((purge >> j & 1) == 0) {
      ++j;
      continue;
    }
    size_t end = j;
    while (end < pages && (purge >> end & 1) != 0) ++end;
    page_heap.purge_span_pages(s->start + j * kSmallPageBytes, (end - j) * kSmallPageBytes);
    j = end;
  }
  return true;
}

bool ThreadHeapOps::purge_if_sparse(PageHeap& page_heap, SmallSpan* s) {
  unsigned percent = page_heap.span_purge_percent();
  return percent != 0 && uint64_t(s->used) * 100 <= uint64_t(s->capacity) * percent && purge_span(page_heap, s);
}

PurgeResult ThreadHeapOps::purge_sparse_spans(PageHeap& page_heap, ThreadHeap& heap, PurgeWhen when) {
  PurgeResult result;
  // The bound of this pass: higher once the heap is quiet (Subrelease::span_purge_percent).
  unsigned percent = page_heap.span_purge_percent();
  if (percent == 0) return result;
  auto sparse = [&](const SmallSpan* s) {
    return uint64_t(s->used) * 100 <= uint64_t(s->capacity) * percent;
  };
  for (unsigned lc = 0; lc < kMaxClasses; ++lc)
    for (unsigned sc = 0; sc < kNumSizeClasses; ++sc)
      for (SmallSpan* s = heap.tails[lc][sc] != nullptr ? heap.spans[lc][sc] : nullptr; s != &g_empty_span && s != nullptr;
           s = s->next) {
        // Idle: `used` unchanged since the previous look; the top bit says this count was examined already, so
        // that a span is walked once per count, not on every pass.
        uint32_t seen = s->used + 1;
        if (when != PurgeWhen::kAll && s->swept_used == (seen | kSweptExamined)) continue;
        bool idle = (s->swept_used & ~kSweptExamined) == seen;
        if (when == PurgeWhen::kIdle && !idle) {
          // A sparse span that is not idle yet is worth another look soon.
          s->swept_used = seen;
          if (sparse(s)) ++result.waiting;
          continue;
        }
        if (when == PurgeWhen::kIdleOrNotHead && !idle && s->prev == nullptr) {
          s->swept_used = seen;  // the head of its queue, which the owner allocates from
          continue;
        }
        // A span above the bound is not marked examined: the bound rises when the heap goes quiet, and the span
        // is looked at again then (a comparison per pass until it is).
        if (!sparse(s)) {
          s->swept_used = seen;
          continue;
        }
        if (purge_span(page_heap, s)) ++result.purged;
        s->swept_used = (s->used + 1) | kSweptExamined;
      }
  return result;
}

}  // namespace llamalloc
