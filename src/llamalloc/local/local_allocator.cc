#include <errno.h>

#include <cstring>

#include "local/local.h"

namespace llamalloc {

__thread LocalHeap* tl_heap __attribute__((tls_model("initial-exec"))) = &g_empty_heap;
__thread int64_t tl_live_delta __attribute__((tls_model("initial-exec"))) = 0;
constinit LocalHeap g_empty_heap;

// The next run of free lines of the span at or after c.next_line. The owner adds kLineBias to each of its
// lines, so that frees of objects placed there cannot bring a count to zero before close_run() settles it.
bool LocalAllocator::open_run(GlobalAllocator& global, SpanCursor& c) {
  SpanMeta* s = c.span;
  size_t line = c.next_line;
  while (line < kLinesPerSpan && s->line_objects[line].load(std::memory_order_acquire) != 0) ++line;
  if (line == kLinesPerSpan) {
    c.bump = c.run_end = c.run_start = 0;
    c.next_line = kLinesPerSpan;
    return false;
  }
  size_t end = line;
  // A line with count zero in a span this thread owns has no objects, so nobody else writes its count.
  while (end < kLinesPerSpan && s->line_objects[end].load(std::memory_order_acquire) == 0) {
    s->line_objects[end].store(kLineBias, std::memory_order_relaxed);
    ++end;
  }
  s->live_lines.fetch_add(int32_t(end - line), std::memory_order_acq_rel);
  if (c.partially_free) global.counters().lines_recycled.fetch_add(end - line, std::memory_order_relaxed);
  c.run_start = c.bump = c.span_base + line_start_offset(line);
  c.run_end = c.span_base + line_end_offset(end);
  c.objects = c.freed_local = 0;
  c.next_line = uint32_t(end);
  return true;
}

// Settles the line counts of the run: walks the objects placed in it (their headers survive free) and
// replaces each line's bias by the number of objects that overlap it.
void LocalAllocator::close_run(SpanCursor& c) {
  if (c.run_end == 0) return;
  SpanMeta* s = c.span;
  size_t first_line = line_of_offset(c.run_start - c.span_base);
  size_t end_line = line_of_offset(c.run_end - c.span_base - 1) + 1;
  uint8_t counts[kLinesPerSpan];
  memset(counts + first_line, 0, end_line - first_line);
  // Every object of the run freed by the owner (the common case for short-lived objects): all counts are zero.
  uintptr_t walk_end = c.objects == c.freed_local ? c.run_start : c.bump;
  for (uintptr_t h = c.run_start; h < walk_end;) {
    const SmallHeader* header = reinterpret_cast<const SmallHeader*>(h);
    // Relaxed atomic: another thread may be marking the object freed right now (live and freed count alike).
    uint16_t tag = __atomic_load_n(&header->tag, __ATOMIC_RELAXED);
    // A padding record covers exactly its gap (a multiple of 16; never rounded to lines like a medium object).
    size_t total = tag == kTagPad ? header->requested_bytes + kSmallHeaderBytes : small_total_bytes(header->requested_bytes);
    if (tag != kTagPad && tag != kTagFreedLocal) {
      size_t a = line_of_offset(h - c.span_base), b = line_of_offset(h + total - 1 - c.span_base);
      for (size_t l = a; l <= b; ++l) counts[l]++;
    }
    h += total;
  }
  // Per line, subtract (bias - objects counted). Eight line counts are settled with one 64-bit atomic: no
  // byte can borrow from its neighbour, because each holds bias - (remote frees of its counted objects)
  // >= bias - objects counted. (The counts are std::atomic<uint8_t>, laid out as plain bytes; x86 keeps
  // mixed-size atomic accesses to one cache line coherent.)
  int32_t emptied = 0;
  for (size_t word = first_line / 8; word * 8 < end_line; ++word) {
    uint64_t subtract = 0, in_run = 0;
    for (size_t b = 0; b < 8; ++b) {
      size_t l = word * 8 + b;
      if (l < first_line || l >= end_line) continue;
      subtract |= uint64_t(uint8_t(kLineBias - counts[l])) << (8 * b);
      in_run |= uint64_t{0xFF} << (8 * b);
    }
    uint64_t* counts_word = reinterpret_cast<uint64_t*>(&s->line_objects[word * 8]);
    uint64_t after = __atomic_sub_fetch(counts_word, subtract, __ATOMIC_ACQ_REL);
    for (size_t b = 0; b < 8; ++b)
      if (((in_run >> (8 * b)) & 0xFF) && ((after >> (8 * b)) & 0xFF) == 0) ++emptied;
  }
  // The owner still holds its reference, so this cannot reach zero here.
  if (emptied) s->live_lines.fetch_sub(emptied, std::memory_order_acq_rel);
  c.bump = c.run_end = c.run_start = 0;
  c.objects = c.freed_local = 0;
}

bool LocalAllocator::refill(GlobalAllocator& global, SpanCursor& c, unsigned lc, bool fresh_only) {
  SpanGrant grant;
  if (!global.acquire_span(lc, fresh_only, &grant)) return false;
  c.span = grant.span;
  c.span_base = grant.address;
  c.next_line = 0;
  c.partially_free = grant.partially_free;
  c.rescanned = false;
  c.span->owner_cursor.store(&c, std::memory_order_relaxed);
  if (!open_run(global, c)) {
    // A partially free span always has a free line when queued; lines only become free afterwards.
    fatal("invariant: a span handed out without a free line");
  }
  return true;
}

void LocalAllocator::release(GlobalAllocator& global, SpanCursor& c) {
  if (c.span == nullptr) return;
  close_run(c);
  c.span->owner_cursor.store(nullptr, std::memory_order_relaxed);
  global.close_span(c.span);
  c = SpanCursor{};
}

void LocalAllocator::free_counted(GlobalAllocator& global, SpanMeta* span, SmallHeader* h) {
  __atomic_store_n(&h->tag, kTagFreed, __ATOMIC_RELAXED);  // the owner's close_run() may be reading it
  uintptr_t offset = reinterpret_cast<uintptr_t>(h) & (kBlockSpanBytes - 1);
  size_t first = line_of_offset(offset);
  size_t last = line_of_offset(offset + small_total_bytes(h->requested_bytes) - 1);
  if (LLAMALLOC_UNLIKELY(last >= kLinesPerSpan)) bad_small_free(h + 1, 0);
  for (size_t line = first; line <= last; ++line) {
    uint8_t before = span->line_objects[line].fetch_sub(1, std::memory_order_acq_rel);
    if (LLAMALLOC_UNLIKELY(before <= 1)) {
      if (before == 0) fatal_pointer("free of", h + 1, "double free (line object count already zero)");
      line_emptied(global, span);
    }
  }
}

void LocalAllocator::retire(GlobalAllocator& global, ClassAllocator& ca, SpanCursor& c) {
  release(global, ca.retired);
  ca.retired = c;
  c = SpanCursor{};
  if (ca.retired.span != nullptr) ca.retired.span->owner_cursor.store(&ca.retired, std::memory_order_relaxed);
}

void LocalAllocator::line_emptied(GlobalAllocator& global, SpanMeta* span) {
  int32_t before = span->live_lines.fetch_sub(1, std::memory_order_acq_rel);
  if (before == 1) {
    global.free_span(span);
  } else if (int32_t free_after = int32_t(kLinesPerSpan) - (before - 1);
             free_after == 1 || (free_after > 0 && free_after % int32_t(kLinesPerSpan / GlobalAllocator::kPartialBuckets) == 0)) {
    // A closed span that was full has its first free line. Its page's deadline may already have passed (then
    // the deadline scan that queues partially free spans has come and gone), so it is queued now; otherwise it
    // would wait for the page's next deadline, which after a few promotions is minutes away. (An owned span
    // with 127 live lines plus its owner's reference also counts 128 here: the global allocator checks.)
    // A queued span whose free lines reach 32, 64 or 96 moves to the list of the emptier spans.
    global.span_partially_freed(span);
  }
}

void LocalAllocator::bad_small_free(const void* p, uint16_t tag) {
  if (tag == kTagFreed || tag == kTagFreedLocal) fatal_pointer("free of", p, "double free (object already freed)");
  fatal_pointer("free of", p, "pointer not allocated by llamalloc (no object header)");
}

void* cursor_bump_medium(SpanCursor& c, size_t size, size_t total) {
  if (c.run_end == 0) return nullptr;
  uintptr_t p = c.bump;
  size_t offset = p - c.span_base, line = line_of_offset(offset);
  uintptr_t start = c.span_base + (offset == line_start_offset(line) ? offset : line_start_offset(line + 1));
  if (start + total > c.run_end) return nullptr;
  if (start != p) {
    // A padding record over the rest of the line, so that close_run() can walk past it (a multiple of 16).
    *reinterpret_cast<uint64_t*>(p) = uint64_t(uint32_t(start - p - kSmallHeaderBytes)) | (uint64_t(kTagPad) << 32);
  }
  return cursor_place(c, start, size, total);
}

namespace {

// Places an object with `alignment` > 16 in the current run, padding before it; nullptr if it does not fit.
void* cursor_bump_aligned(SpanCursor& c, size_t size, size_t alignment) {
  if (c.run_end == 0) return nullptr;
  uintptr_t user = (c.bump + kSmallHeaderBytes + alignment - 1) & ~(uintptr_t(alignment) - 1);
  uintptr_t header = user - kSmallHeaderBytes;
  size_t total = small_total_bytes(size);
  if (header + total > c.run_end) return nullptr;
  if (header > c.bump) {
    // A padding record so that close_run() can walk past the gap (a multiple of 16 bytes).
    *reinterpret_cast<uint64_t*>(c.bump) =
        uint64_t(uint32_t(header - c.bump - kSmallHeaderBytes)) | (uint64_t(kTagPad) << 32);
  }
  // Placed as it is (a medium object with a large alignment keeps its alignment, not a line of its own).
  return cursor_place(c, header, size, total);
}

void* bump(SpanCursor& c, size_t size, size_t alignment) {
  if (alignment > kMinAlignBytes) return cursor_bump_aligned(c, size, alignment);
  size_t total = small_total_bytes(size);
  return total >= kMediumMinTotalBytes ? cursor_bump_medium(c, size, total) : cursor_bump(c, size);
}

}  // namespace

void* LocalAllocator::alloc_small(GlobalAllocator& global, LocalHeap& heap, unsigned lc, size_t size,
                                  size_t alignment) {
  ClassAllocator& ca = heap.classes[lc];
  bool tiny = fits_one_line(size, alignment);
  bool medium = alignment <= kMinAlignBytes && small_total_bytes(size) >= kMediumMinTotalBytes;
  // Partially free spans looked through for a run that fits this (not tiny) object before it overflows.
  constexpr int kMaxPartialSpansTried = 4;
  int partial_spans_tried = 0;
  for (;;) {
    SpanCursor& p = medium ? ca.medium : ca.primary;
    if (p.span != nullptr) {
      if (void* r = bump(p, size, alignment)) return r;
      if (!tiny && p.partially_free) {
        // A later run of this span may be long enough: look through the rest of it (at most 128 line counts;
        // the lines skipped are free again when the run closes, for the span's next recycling). Immix sends
        // such an object straight to the overflow span, which suits rare medium objects; in a server whose
        // bytes are mostly 1 KiB values (redis) the partially free spans then only ever took tiny objects
        // and every value went to fresh memory.
        // Once per span the search starts again from its first line: lines behind the cursor are free again
        // when the objects placed there died young.
        bool placed = false;
        void* r = nullptr;
        for (;;) {
          while (p.next_line < kLinesPerSpan) {
            close_run(p);
            if (!open_run(global, p)) break;
            if ((r = bump(p, size, alignment)) != nullptr) {
              placed = true;
              break;
            }
          }
          if (placed || p.rescanned) break;
          close_run(p);
          p.next_line = 0;
          p.rescanned = true;
        }
        if (placed) return r;
        // The span is used up for objects of this size: the next partially free span may have a long enough
        // run (a few are tried; then the object overflows).
        if (++partial_spans_tried < kMaxPartialSpansTried || medium) {
          // A medium object never overflows: after a few partially free spans its cursor takes a fresh one.
          retire(global, ca, p);
          if (!refill(global, p, lc, /*fresh_only=*/partial_spans_tried >= kMaxPartialSpansTried)) return nullptr;
          continue;
        }
        // Overflow allocation (section 6.6): no run of the span fits, so the object goes to a completely free
        // overflow span.
        if (ca.overflow.span != nullptr) {
          if (void* r = bump(ca.overflow, size, alignment)) {
            global.counters().overflow_allocations.fetch_add(1, std::memory_order_relaxed);
            return r;
          }
          retire(global, ca, ca.overflow);
        }
        if (!refill(global, ca.overflow, lc, /*fresh_only=*/true)) return nullptr;
        global.counters().overflow_allocations.fetch_add(1, std::memory_order_relaxed);
        if (void* r = bump(ca.overflow, size, alignment)) return r;
        fatal("invariant: a small object does not fit a fresh overflow span");
      }
      // Tiny objects skip to the next free line(s), which always have room.
      if (p.next_line < kLinesPerSpan) {
        close_run(p);
        if (open_run(global, p)) continue;
        release(global, p);  // the lines after the run were all live
      } else {
        retire(global, ca, p);
      }
      if (!medium && ca.overflow.span != nullptr) {
        // Fill the overflow span before asking for a new one.
        p = ca.overflow;
        ca.overflow = SpanCursor{};
        p.partially_free = false;
        p.span->owner_cursor.store(&p, std::memory_order_relaxed);
        continue;
      }
    }
    if (!refill(global, p, lc, /*fresh_only=*/false)) return nullptr;
  }
}

void LocalAllocator::release_all(GlobalAllocator& global, LocalHeap& heap) {
  for (ClassAllocator& ca : heap.classes) {
    release(global, ca.primary);
    release(global, ca.overflow);
    release(global, ca.medium);
    release(global, ca.retired);
  }
}

bool SpanCursor::check() const {
  if (span == nullptr) return bump == 0 && run_end == 0;
  if (!span->owned || !span->small.load(std::memory_order_relaxed)) return false;
  if (span->live_lines.load(std::memory_order_relaxed) < 1) return false;
  if (run_end == 0) return true;
  if ((bump & (kMinAlignBytes - 1)) != kSmallHeaderBytes) return false;
  if (bump < run_start || bump > run_end + kSmallHeaderBytes) return false;
  if (run_start < span_base || run_end > span_base + kBlockSpanBytes) return false;
  // Lines of the current run carry the owner's bias.
  for (size_t l = line_of_offset(run_start - span_base); l <= line_of_offset(run_end - span_base - 1); ++l)
    if (span->line_objects[l].load(std::memory_order_relaxed) == 0) return false;
  return true;
}

bool LocalHeap::check(GlobalAllocator&) const {
  for (const ClassAllocator& ca : classes)
    if (!ca.primary.check() || !ca.overflow.check() || !ca.medium.check() || !ca.retired.check()) return false;
  return classes[kMaxClasses].primary.span == nullptr;
}

}  // namespace llamalloc
