// Size classes of the thread heaps (docs/heap.md): 16-byte steps up to 128 B, then four classes per doubling up to
// 32 KiB (jemalloc's and mimalloc's spacing: at most 25% internal waste, 12.5% on average above 128 B). A
// request's class is a few instructions, no table, so the same function serves the library's inline fast
// path, the slow path, the simulator and the tests (classify()).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"

namespace llamalloc {

inline constexpr unsigned kNumSizeClasses = 40;
inline constexpr size_t kMaxSizeClassBytes = 32 * 1024;
// Small objects (size classes) up to here; above: large objects in whole blocks of the page heap.
inline constexpr size_t kSmallMaxBytes = kMaxSizeClassBytes;
// Alignment that a size class can give: blocks are a multiple of the alignment and spans 16 KiB aligned.
inline constexpr size_t kMaxSmallAlignment = 4096;

LLAMALLOC_FAST constexpr unsigned size_class_computed(size_t size) {
  if (size <= 128) return size <= 16 ? 0 : unsigned((size - 1) >> 4);
  size_t s = size - 1;
  unsigned b = 63u - unsigned(__builtin_clzll(s));  // floor(log2(s)) >= 7
  return 8u + (b - 7u) * 4u + unsigned((s >> (b - 2u)) & 3u);
}

// Up to 1 KiB the class is one table load by 16-byte granule (the fast path's common case, no branch on the
// size's magnitude); above, computed.
struct SizeClassTable {
  uint8_t by_granule[1024 / 16 + 1];
};
inline constexpr SizeClassTable kSizeClassTable = [] {
  SizeClassTable t{};
  for (size_t g = 0; g <= 1024 / 16; ++g) t.by_granule[g] = uint8_t(size_class_computed(g * 16));
  return t;
}();

LLAMALLOC_FAST constexpr unsigned size_class_of(size_t size) {
  if (LLAMALLOC_LIKELY(size <= 1024)) return kSizeClassTable.by_granule[(size + 15) >> 4];
  return size_class_computed(size);
}

LLAMALLOC_FAST constexpr size_t size_class_bytes(unsigned sc) {
  if (sc < 8) return size_t(sc + 1) * 16;
  unsigned group = (sc - 8) / 4, sub = (sc - 8) % 4;
  size_t base = size_t{128} << group;
  return base + (base / 4) * (sub + 1);
}

// The span a class is served from: at least 64 objects up to 256 B (16 KiB spans), 8 up to 8 KiB (64 KiB),
// then 128 KiB up to 16 KiB and 256 KiB up to 32 KiB (at most 12.5% of a span left over at its end). Larger
// spans mean fewer trips to the slow path (a 16 KiB span of 1 KiB objects sends every 16th allocation there);
// smaller ones less memory held per thread and size class.
LLAMALLOC_FAST constexpr size_t size_class_span_bytes(unsigned sc) {
  size_t b = size_class_bytes(sc);
  return b <= 256 ? 16 * 1024 : b <= 8192 ? 64 * 1024 : b <= 16384 ? 128 * 1024 : 256 * 1024;
}

// The span of a class for objects predicted to live 1 s or longer (HeapConfig::shared_class_min and up): 16 KiB
// (at least 8 objects) up to 2 KiB, else as above. Such classes hold few objects per size class, and their
// spans stay where they are for as long as the objects live: with 64 KiB spans, a few hundred KiB of "never
// freed" objects spread over dozens of mostly empty spans and more huge pages. 16 KiB is also the smallest span
// kind, so the thread heap's cache of empty spans (by kind) never hands one size for the other.
LLAMALLOC_FAST constexpr size_t long_lived_span_bytes(unsigned sc) {
  return size_class_bytes(sc) <= 2048 ? 16 * 1024 : size_class_span_bytes(sc);
}

// A thread's spans of a size class whose span is 64 KiB or more are smaller while it holds few of them: a quarter
// of the span, then half, then the whole from its third on (ThreadHeap::spans_taken counts the spans it holds).
// A server's many threads each use dozens of size classes, most of them lightly; 64 KiB each from the start made
// a thread's spans a few MiB of mostly free memory on huge pages (every byte of which is resident), 15% of
// image-server's pages in use at its peak.
inline constexpr uint8_t kSpanGrowthSteps = 2;
LLAMALLOC_FAST constexpr size_t grown_span_bytes(size_t span_bytes, unsigned spans_taken) {
  return span_bytes >= 64 * 1024 && spans_taken < kSpanGrowthSteps ? span_bytes >> (kSpanGrowthSteps - spans_taken)
                                                                   : span_bytes;
}

// The kinds of span size, for the thread's cache of empty spans: one per size, so that a cached span is reused
// only at its own size.
inline constexpr unsigned kSpanKinds = 5;
LLAMALLOC_FAST constexpr unsigned span_kind(size_t span_bytes) {
  return span_bytes <= 16 * 1024   ? 0
         : span_bytes <= 32 * 1024 ? 1
         : span_bytes <= 64 * 1024 ? 2
         : span_bytes <= 128 * 1024 ? 3
                                    : 4;
}

inline constexpr unsigned kLargeRequest = ~0u;

// The one classification of a request (library, simulator, tests): its size class, or kLargeRequest for whole
// blocks (or huge pages). Alignment is a power of two; a size class serves it when its block size is a multiple
// of it (every power of two up to 32 KiB is a class, and spans are 16 KiB aligned).
LLAMALLOC_FAST constexpr unsigned classify(size_t size, size_t alignment) {
  if (LLAMALLOC_LIKELY(alignment <= kMinAlignBytes)) return size <= kSmallMaxBytes ? size_class_of(size) : kLargeRequest;
  if (alignment > kMaxSmallAlignment || size > kSmallMaxBytes) return kLargeRequest;
  unsigned sc = size_class_of(size < alignment ? alignment : size);
  while (sc < kNumSizeClasses && (size_class_bytes(sc) & (alignment - 1)) != 0) ++sc;
  return sc < kNumSizeClasses ? sc : kLargeRequest;
}

static_assert(size_class_of(16) == 0 && size_class_of(17) == 1 && size_class_of(128) == 7);
static_assert(size_class_of(129) == 8 && size_class_bytes(8) == 160 && size_class_bytes(11) == 256);
static_assert(size_class_of(256) == 11 && size_class_of(257) == 12 && size_class_bytes(12) == 320);
static_assert(size_class_bytes(kNumSizeClasses - 1) == kMaxSizeClassBytes);
static_assert(size_class_of(kMaxSizeClassBytes) == kNumSizeClasses - 1);
static_assert(classify(100, 64) == size_class_of(128));
static_assert(classify(16 * 1024 + 1, 16) == size_class_of(20 * 1024));
static_assert(size_class_span_bytes(kNumSizeClasses - 1) % kBlockSpanBytes == 0);
static_assert(long_lived_span_bytes(size_class_of(2048)) / 2048 == 8 && long_lived_span_bytes(size_class_of(2049)) == 64 * 1024);

}  // namespace llamalloc
