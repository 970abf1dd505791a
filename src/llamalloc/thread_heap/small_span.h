// A thread heap's size-class span: a run of whole 8 KiB blocks, 16 KiB aligned, that serves one size class of one
// lifetime class for one thread heap, mimalloc style (docs/heap.md). The page heap hands its blocks out as a large
// object and never looks inside; the thread heap owns every field. It lives in the page heap's metadata room of
// its first 16 KiB span (SpanMeta), and the page's size_spans entry of every 16 KiB span it covers points at it,
// so free() finds it in two dependent loads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "page_heap/page_meta.h"

namespace llamalloc {

struct alignas(64) SmallSpan {
  // --- read by every thread that frees into the span; written by the owner only when (re)initialised --------
  uintptr_t key;         // link encoding (a corrupted or double-freed block is told apart from a free one)
  uintptr_t start;       // address of block 0
  void* owner;           // the ThreadHeap (never freed: thread heaps are pooled)
  uint32_t block_size;
  uint32_t reciprocal;   // ceil(2^32 / block_size): an offset's block index without a division
  uint32_t span_bytes;
  uint32_t capacity;     // blocks that fit the span
  // Blocks 0 .. extended-1 have been put on a list; the rest are untouched memory. Written by the owner, read
  // by freeing threads (relaxed: a plain load and store on x86).
  std::atomic<uint32_t> extended;
  uint8_t size_class;
  uint8_t lifetime_class;
  uint8_t queued;        // in the owner's queue of its (lifetime class, size class)
  uint8_t cached;        // empty, kept in the owner's span cache
  // Blocks may be waiting on `xfree`: set by the remote free that finds that list empty, cleared by the owner
  // just before it takes the list. The owner's free reads this instead of `xfree`, whose line other threads
  // write; while it is set, the owner's free takes the checked path (ThreadHeapOps::free_block). A remote free
  // sets it just before its push onto an empty list (after it, the owner may take the list and give the span
  // back); the owner clears it just before its take. Clear with blocks waiting only when a take falls between
  // a remote free's store and its push: then only a second free of that block by the owner goes unchecked at
  // free, and the take of the list finds it (it loops, or holds more blocks than were handed out).
  std::atomic<uint8_t> remote_pending;
  // On its abandoned thread heap's list of parked spans (ThreadHeap::pool_parked, linked by next and prev, which
  // a span off its queue does not use otherwise).
  uint8_t pool_parked;
  // --- the owner thread's hot fields (no atomics), on their own cache line -----------------------------------
  // Blocks to hand out: a list whose links are xor-ed with `key`. The owner's frees go on top (span_push).
  alignas(64) void* free;
  uint32_t used;         // blocks handed out and not yet back on `free` (collected remote frees count)
  // The class whose queue it goes back to when it comes back from full or is emptied: lifetime_class, unless a
  // shorter class has adopted it (HeapConfig::span_recycling).
  uint8_t home_class;
  // The owner's free (which does not read the block) has pushed a block since the span was set up: its blocks
  // are scanned before the span is cached or given back (ThreadHeapOps::check_released_list). Written beside
  // `free`, whose line that free writes anyway.
  uint8_t owner_freed;
  SmallSpan* next;       // queue links (owner)
  SmallSpan* prev;
  // Copies of key, start, span_bytes and block_size, set with them: malloc's pop and the owner's free read this
  // line only, not also the line above (two cache lines a call where mimalloc's page takes one; glibc-simple's
  // malloc spent a third of its samples waiting on the two).
  uintptr_t own_key;
  uintptr_t own_start;
  uint32_t own_span_bytes;
  uint32_t own_block_size;
  // --- written by other threads -------------------------------------------------------------------------
  // Frees by other threads: the head of a list (links encoded like `free`) with the state in the low 2 bits:
  // kXfreeFull = the owner took the span off its queue because it was full, and the first remote free must
  // tell it (push the span on the owner's notify list and set kXfreeNotified).
  alignas(64) std::atomic<uintptr_t> xfree;
  SmallSpan* notify_next;
  // --- the owner's and sweeper's, off the paths of malloc and free ----------------------------------------
  // Span purge (ThreadHeapOps::purge_sparse_spans): the 4 KiB pages of the span given back to the OS (bit i: the
  // page at start + i x 4 KiB), and the free blocks on them, taken off `free` (parked), so that no link is ever
  // read from a page that reads as zero. They come back (unpark) when `free` runs dry. Not counted in `used`: the
  // owner's free that hands back the last object of a purged span sees `used` reach 0 and gives the span back at
  // once, as for any span (counted, such spans waited for the sweeper's next pass, and a single thread that freed
  // a 1 GiB peak kept up to 600 MiB resident for that long).
  uint64_t purged_pages;
  uint32_t parked;
  // `used` + 1 when the sweeper last looked at the span (0: never): a span whose count has not moved for a
  // whole sweep period is idle.
  uint32_t swept_used;
};
static_assert(offsetof(SmallSpan, own_block_size) < offsetof(SmallSpan, free) + 64,
              "the fields malloc's pop reads share the owner's cache line");

inline constexpr uintptr_t kXfreeFull = 1;
inline constexpr uintptr_t kXfreeNotified = 2;
inline constexpr uintptr_t kXfreeStateMask = 3;

static_assert(sizeof(SmallSpan) <= sizeof(SpanMeta) && alignof(SmallSpan) <= alignof(SpanMeta),
              "a size-class span fits the page heap's metadata room of its first 16 KiB span (kSpanMetaBytes)");

// The size-class span whose first 16 KiB span's metadata room is m (the page heap's span_of).
inline SmallSpan* small_span_in(SpanMeta* m) { return reinterpret_cast<SmallSpan*>(m->bytes); }

}  // namespace llamalloc
