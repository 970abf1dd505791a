// The page heap's metadata: one HugePageMeta per 2 MiB huge page, and the Region that holds a run of them.
// Rules: the metadata lives apart from the memory it describes (the page heap never touches the memory it hands
// out); a page's metadata reads as zero (kUnused) whenever the page is free, so that a stale pointer into it is
// reported, not trusted; and it is found from an address by arithmetic alone (page_heap.h, page_meta_of).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"

namespace llamalloc {

// Huge page states (the LLAMA paper, section 6.2). A free huge page has been given back (or was never used):
// kUnused.
enum class PageState : uint8_t { kUnused = 0, kOpen = 1, kActive = 2 };
// A page holds blocks (small spans and large objects) or is part of one huge object.
enum class PageKind : uint8_t { kBlocks = 0, kHugeHead = 1, kHugeTail = 2 };

struct Region;
// A size-class span of a thread heap (thread_heap/small_span.h). The page heap only stores pointers to it and keeps
// room for it (SpanMeta); it never reads or writes one.
struct SmallSpan;

// Metadata room for one 16 KiB block span: when the span is the first of a thread heap's size-class span, the
// thread heap keeps that span's SmallSpan here (thread_heap/small_span.h checks that it fits). Opaque to the page heap,
// so that the page heap does not depend on the thread heap's types.
inline constexpr size_t kSpanMetaBytes = 192;
struct alignas(64) SpanMeta {
  unsigned char bytes[kSpanMetaBytes];
};

struct HugePageMeta {
  // For each 16 KiB span: the thread heap's size-class span it is part of, or null. Set before the span's first
  // block is handed out and cleared before its blocks go back to the page heap. First and dense (1 KiB, 8 spans
  // a cache line), as free() reads one for every object: in a SpanMeta each would take a cache line of its own.
  std::atomic<SmallSpan*> size_spans[kSpansPerHugePage];
  Bitmap256 live;         // blocks that hold objects or are handed out as spans
  Bitmap256 residual;     // live blocks predicted to match the page's class (the LLAMA paper, section 6.5)
  Bitmap256 large_start;  // first block of each large object
  Bitmap256 large_end;    // last block of each large object: free() finds the size (the LLAMA paper, section 8)
  Bitmap256 released;     // free blocks given back to the OS while the page stays in use (subrelease)
  Bitmap256 taken;        // blocks taken since the last subrelease pass (subrelease_free_blocks)
  uint64_t deadline_ns;
  HugePageMeta* active_prev;  // per class, in deadline order
  HugePageMeta* active_next;
  HugePageMeta* recyclable_prev;  // per class and fullness: active pages with at least one free block
  HugePageMeta* recyclable_next;
  Region* region;
  uint32_t index;       // in its region
  uint32_t huge_pages;  // kHugeHead: the object's length in whole huge pages (its head and tails)
  // Slack donation. kHugeHead: the object's last blocks, on the page after its tails (0: it ends on its last
  // tail). kBlocks: the first blocks of the page hold the end of the huge object on the pages before it (its head
  // says how many); the page's other blocks serve like any page's (the slack of a large allocation is donated to
  // the filler, as in the TCMalloc paper).
  uint16_t huge_tail_blocks;
  // 4 KiB pages inside the size-class spans on this page that their thread heaps gave back (span purge,
  // PageHeap::purge_span_pages); with any, the page is kept from khugepaged as with subreleased blocks.
  uint16_t span_purged_pages;
  uint64_t huge_requested_bytes;
  PageState state;
  PageKind kind;
  uint8_t lifetime_class;
  uint8_t deadline_passed;  // its deadline expired once
  uint8_t in_recyclable;   // 0: on no recyclable list; else 1 + its fullness bucket (recycle_bucket)
  uint8_t open_idle;        // open, found empty by release_empty_open_pages, and no block taken since
  uint8_t no_huge_page;     // has subreleased blocks: kept from being collapsed into a huge page again
  uint8_t huge_backed;      // collapsed into one huge page (collapse_dense_pages) and not split since
  uint8_t huge_advised;     // opened with MADV_HUGEPAGE: its class filled its previous page densely
  uint32_t dense_check_pass;  // collapse_dense_pages: not looked at again before this pass (too few resident)
  uint8_t recycled;         // kHugeHead: its pages came from the page cache, not zeroed by the kernel
  // kHugeHead: only the object's bytes (rounded to 4 KiB) are usable memory, not its last page's slack, which
  // stays reserved and charges nothing (a 5 MiB object maps 5 MiB, as glibc's mmap would, not 6).
  uint8_t tail_unbacked;
  // kHugeHead, under an address-space limit: that slack is not even reserved (a 5 MiB object holds 5 MiB of
  // the limit, not 6); it is reserved again when the object is freed.
  uint8_t tail_unreserved;
  uint32_t large_requested_bytes[kBlocksPerHugePage];  // by first block
  SpanMeta spans[kSpansPerHugePage];

  bool check(unsigned num_classes) const;
};

// The deadline_ns of a page without one: open, of the "never freed" class, or part of a huge object.
inline constexpr uint64_t kNoDeadline = ~uint64_t{0};

inline constexpr size_t kPageMetaStride =
    (sizeof(HugePageMeta) + kSmallPageBytes - 1) / kSmallPageBytes * kSmallPageBytes;
static_assert(kPageMetaStride % kSmallPageBytes == 0, "metadata of a released page is dropped page by page");

// The page heap's address space: regions of up to kRegionBytes, each at a kRegionBytes-aligned address so that
// the region of an address is one shift into a table. Without an address-space limit a region is reserved whole
// at once; under RLIMIT_AS, or when the kernel refuses, it is reserved in steps as the page heap grows
// (docs/heap.md, "Address space"). Pages of every lifetime class share the regions (a page's class is in its
// metadata); free pages, never used or given back, are reused lowest address first, so that the address range,
// the page tables and the mappings the page heap holds track what it uses.
struct Region {
  uintptr_t base;      // kRegionBytes aligned
  char* metadata;      // page i's HugePageMeta at metadata + i * kPageMetaStride
  uint64_t* used;      // a bit per page: open, active, part of a huge object, or in the page cache
  uint64_t* unreserved;  // a bit per page: its address space given back (under RLIMIT_AS), to reserve again
  uint32_t capacity;   // pages whose metadata address space is reserved: the most the region grows to
  uint32_t reserved;   // pages of address space reserved from base
  uint32_t committed;  // pages whose metadata is usable: every lookup is bounded by it
  uint32_t free_pages; // pages of [0, reserved) not used
  uint32_t search_from;  // no page below it is free

  HugePageMeta* page(size_t i) const { return reinterpret_cast<HugePageMeta*>(metadata + i * kPageMetaStride); }
  uintptr_t page_address(size_t i) const { return base + (i << kHugePageShift); }
};

}  // namespace llamalloc
