// Compile-time geometry of the lifetime-class heap (the LLAMA paper, "Learning-based Memory Allocation
// for C++ Server Workloads", sections 6 and 8). Every size here is fixed at
// build time because the fast paths turn them into shifts and masks; each carries the reason for its value.
#pragma once

#include <cstddef>
#include <cstdint>

#include "vocabulary.h"  // the lifetime classes

namespace llamalloc {

// The unit the heap takes from and gives back to the OS: one x86-64 transparent huge page, so that every page
// of the heap is one TLB entry (the point of the paper).
inline constexpr size_t kHugePageShift = 21;
inline constexpr size_t kHugePageBytes = size_t{1} << kHugePageShift;

// Liveness is tracked per 8 KiB block: small enough to recycle holes, large enough that a huge page has 256
// blocks and its bitmaps fit in four 64-bit words each (the LLAMA paper, section 6.5).
inline constexpr size_t kBlockShift = 13;
inline constexpr size_t kBlockBytes = size_t{1} << kBlockShift;
inline constexpr size_t kBlocksPerHugePage = kHugePageBytes / kBlockBytes;
// Slack donation: a huge object whose last huge page would keep at least this many blocks free ends on a page
// of blocks instead, whose free blocks serve other objects (PageHeap::alloc_huge_locked).
inline constexpr size_t kMinSlackBlocks = 16;

// Size-class spans are whole 16 KiB units of M = 2 blocks (the paper's block span, section 6.1), 16 KiB aligned:
// free() finds an object's span by its unit in one table per huge page (HugePageMeta::size_spans).
inline constexpr size_t kBlockSpanShift = 14;
inline constexpr size_t kBlockSpanBytes = size_t{1} << kBlockSpanShift;
inline constexpr size_t kBlocksPerSpan = kBlockSpanBytes / kBlockBytes;
inline constexpr size_t kSpansPerHugePage = kHugePageBytes / kBlockSpanBytes;

// Every object is aligned to 16 bytes because glibc guarantees alignof(max_align_t) == 16 and SSE code
// depends on it. Small objects (up to 32 KiB) come from size-class spans (thread_heap/size_class.h).
inline constexpr size_t kMinAlignBytes = 16;

// Regions of address space of up to 16 GiB, as in the paper (section 6.1), shared by every lifetime class. They
// are aligned to their size so that the region of an address is one shift into a table covering the 47-bit user
// address space.
inline constexpr size_t kRegionShift = 34;
inline constexpr size_t kRegionBytes = size_t{1} << kRegionShift;
inline constexpr size_t kHugePagesPerRegion = kRegionBytes / kHugePageBytes;
inline constexpr size_t kAddressBits = 47;
inline constexpr size_t kRegionSlots = size_t{1} << (kAddressBits - kRegionShift);
// Region descriptors live in a fixed table (no malloc): 4096 regions is 64 TiB, half the address space.
inline constexpr size_t kMaxRegions = 4096;

inline constexpr size_t kSmallPageBytes = 4096;

static_assert(kBlocksPerHugePage == 256, "bitmaps are four 64-bit words");
static_assert(kBlocksPerSpan == 2, "the paper's M = 2");
static_assert(kSpansPerHugePage == 128);
static_assert(kRegionBytes % kHugePageBytes == 0);
static_assert(kMaxClasses <= 8);

}  // namespace llamalloc
