// Thread-local span allocators (papers/000 sections 6.1 and 6.6): per lifetime class one primary span
// (fresh or partially free, bump allocated run of free lines by run of free lines), one overflow span for
// small objects that do not fit the current run of a partially free span, and one span for medium objects
// (>= kMediumMinTotalBytes, line aligned, placed on the slow path). The allocation fast path is a bump
// and one store; the free fast path is a header check and one atomic decrement per line the object covers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"
#include "heap/heap.h"
#include "predictor/predictor.h"

namespace llamalloc {

// 8 bytes before every small object.
struct SmallHeader {
  uint32_t requested_bytes;
  uint16_t tag;
  uint16_t unused;
};
static_assert(sizeof(SmallHeader) == kSmallHeaderBytes);

inline constexpr uint16_t kTagLive = 0x11A3;   // allocated
inline constexpr uint16_t kTagFreed = 0xF4EE;  // freed (a second free is reported)
inline constexpr uint16_t kTagPad = 0x9AD0;    // alignment padding before an aligned object
inline constexpr uint16_t kTagFreedLocal = 0xF10C;  // freed by the owner inside its current run (not counted)

// Bytes a small object of `size` occupies in its span, header included; a multiple of 16, and of a line for
// medium objects.
LLAMALLOC_FAST constexpr size_t small_total_bytes(size_t size) {
  size_t total = (size + kSmallHeaderBytes + kMinAlignBytes - 1) & ~(kMinAlignBytes - 1);
  return total < kMediumMinTotalBytes ? total : (total + kLineBytes - 1) & ~(kLineBytes - 1);
}

// The line grid of a span. Runs start kSmallHeaderBytes into their first line (headers sit at 8 mod 16), so
// line i is counted as the bytes [128 i + 8, 128 (i + 1) + 8) of the span (the last one ends at the span's
// end): a medium object placed at the start of a run then covers its own lines and no other.
LLAMALLOC_FAST constexpr size_t line_of_offset(size_t offset_in_span) {
  return (offset_in_span - kSmallHeaderBytes) >> kLineShift;
}
LLAMALLOC_FAST constexpr size_t line_start_offset(size_t line) { return (line << kLineShift) + kSmallHeaderBytes; }
LLAMALLOC_FAST constexpr size_t line_end_offset(size_t end_line) {
  return end_line >= kLinesPerSpan ? kBlockSpanBytes : line_start_offset(end_line);
}

struct SpanCursor {
  uintptr_t bump = 0;       // address of the next header; ≡ 8 (mod 16)
  uintptr_t run_end = 0;    // end of the run of free lines being filled
  uint32_t objects = 0;     // objects placed in the run (not counting un-bumped ones)
  uint32_t freed_local = 0; // of those, freed by the owner: when all are, close_run() needs no walk
  uintptr_t run_start = 0;  // first header of the run
  uintptr_t span_base = 0;
  SpanMeta* span = nullptr;
  uint32_t next_line = 0;  // first line after the current run
  bool partially_free = false;
  bool rescanned = false;  // a medium object looked for a run from the span's first line again

  bool check() const;  // invariant checker
};

struct ClassAllocator {
  SpanCursor primary;
  SpanCursor overflow;
  // Medium objects (kMediumMinTotalBytes and up) fill spans of their own: a medium object's freed lines are then
  // a hole the next one fits, instead of being pinned by small objects that were placed between them.
  SpanCursor medium;
  // The span used up last, its last run still open: the owner's frees of its recent objects stay free of
  // atomics until the next span is used up and this one is settled and closed.
  SpanCursor retired;
};

struct LocalHeap {
  // One more than the classes: the fast path indexes classes[fast_class]; when the predictor must see every
  // allocation fast_class is kMaxClasses, an allocator that never has a span, so the fast path always misses.
  ClassAllocator classes[kMaxClasses + 1];
  uint8_t fast_class = kMaxClasses;
  LocalHeap* next_free = nullptr;
  // With a context-sensitive predictor: this thread's prediction cache, probed by the fast path (null: none).
  PredictionCacheView prediction_cache;

  bool check(GlobalAllocator& global) const;
};

// The heap a thread allocates from. Starts (and after thread exit returns) at the static empty heap, whose
// cursors are all empty: the first allocation misses into the slow path, which gives the thread its own heap.
extern __thread LocalHeap* tl_heap __attribute__((tls_model("initial-exec")));
// Live bytes allocated minus freed by this thread, not yet added to the heap's gauge.
extern __thread int64_t tl_live_delta __attribute__((tls_model("initial-exec")));
extern LocalHeap g_empty_heap;

// Writes the header of an object of `size` (occupying `total` bytes) at p and bumps past it.
LLAMALLOC_FAST void* cursor_place(SpanCursor& c, uintptr_t p, size_t size, size_t total) {
  c.bump = p + total;
  c.objects++;
  *reinterpret_cast<uint64_t*>(p) = uint64_t(uint32_t(size)) | (uint64_t(kTagLive) << 32);
  return reinterpret_cast<void*>(p + kSmallHeaderBytes);
}

// A medium object: at the next line start of the run, after a padding record if the bump is mid-line.
LLAMALLOC_NOINLINE void* cursor_bump_medium(SpanCursor& c, size_t size, size_t total);

// Bump allocates a small object (not medium) in the cursor's run; nullptr when it does not fit, and always for
// a medium object (the slow path places it with its class's medium cursor).
LLAMALLOC_FAST void* cursor_bump(SpanCursor& c, size_t size) {
  size_t total = small_total_bytes(size);
  uintptr_t p = c.bump;
  if (LLAMALLOC_LIKELY(p + total <= c.run_end && total < kMediumMinTotalBytes)) return cursor_place(c, p, size, total);
  return nullptr;
}

// Operations of one thread's heap on one global allocator.
class LocalAllocator {
 public:
  // Tiny objects (section 6.6) are those that always fit a run of one free line, so that skipping to the next
  // free line is enough. A run starts kSmallHeaderBytes into its first line (headers sit at 8 mod 16, objects
  // at 0 mod 16), and an alignment above 16 may pad by up to the alignment.
  LLAMALLOC_FAST static constexpr bool fits_one_line(size_t size, size_t alignment) {
    return small_total_bytes(size) + (alignment > kMinAlignBytes ? alignment : 0) <= kLineBytes - kSmallHeaderBytes;
  }
  // A small object (size <= kSmallMaxBytes, alignment <= kMaxSmallAlignment) of the class; nullptr + ENOMEM.
  static void* alloc_small(GlobalAllocator& global, LocalHeap& heap, unsigned lc, size_t size, size_t alignment);
  // Frees a small object; `span` is its span. Reports bad and double frees. Returns the size asked for.
  LLAMALLOC_FAST static size_t free_small(GlobalAllocator& global, SpanMeta* span, void* p);
  // Gives every span of the heap back (thread exit).
  static void release_all(GlobalAllocator& global, LocalHeap& heap);
  static size_t usable_size(const void* p) {
    const SmallHeader* h = reinterpret_cast<const SmallHeader*>(static_cast<const char*>(p) - kSmallHeaderBytes);
    return small_total_bytes(h->requested_bytes) - kSmallHeaderBytes;
  }

  // Internals, exposed for tests.
  static bool open_run(GlobalAllocator& global, SpanCursor& c);
  static void close_run(SpanCursor& c);
  static bool refill(GlobalAllocator& global, SpanCursor& c, unsigned lc, bool fresh_only);
  static void release(GlobalAllocator& global, SpanCursor& c);
  // Moves a used-up cursor to the retired slot, closing the span retired before it.
  static void retire(GlobalAllocator& global, ClassAllocator& ca, SpanCursor& c);
  LLAMALLOC_SLOW static void line_emptied(GlobalAllocator& global, SpanMeta* span);
  // A free outside the owner's current run: one atomic decrement per line the object covers.
  LLAMALLOC_NOINLINE static void free_counted(GlobalAllocator& global, SpanMeta* span, SmallHeader* h);
  [[noreturn]] LLAMALLOC_SLOW static void bad_small_free(const void* p, uint16_t tag);
};

inline constexpr size_t kMaxSmallAlignment = 4096;

LLAMALLOC_FAST size_t LocalAllocator::free_small(GlobalAllocator& global, SpanMeta* span, void* p) {
  SmallHeader* h = reinterpret_cast<SmallHeader*>(static_cast<char*>(p) - kSmallHeaderBytes);
  if (LLAMALLOC_UNLIKELY(h->tag != kTagLive)) bad_small_free(p, h->tag);
  uint32_t size = h->requested_bytes;
  uintptr_t header = reinterpret_cast<uintptr_t>(h);
  // The owner freeing inside its current run: no counts were settled for the run yet, so nothing atomic is
  // needed. The last object is simply un-bumped (alloc/free pairs reuse the same bytes); others are marked,
  // and close_run() does not count them.
  auto* c = static_cast<SpanCursor*>(span->owner_cursor.load(std::memory_order_relaxed));
  if (uintptr_t(c) - uintptr_t(tl_heap) < sizeof(LocalHeap) && header >= c->run_start && header < c->bump) {
    h->tag = kTagFreedLocal;  // a second free of it is reported
    if (header + small_total_bytes(size) == c->bump) {
      c->bump = header;
      c->objects--;
    } else {
      c->freed_local++;
    }
    return size;
  }
  free_counted(global, span, h);
  return size;
}

}  // namespace llamalloc
