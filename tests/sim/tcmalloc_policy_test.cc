#include "sim/tcmalloc_policy.h"

#include <gtest/gtest.h>

#include "sim/size_classes.h"
#include "test_events.h"

namespace llamalloc::sim {
namespace {

constexpr uint64_t k2M = 2 << 20;

using testing::object_alloc;

TEST(SizeClasses, RoundTripAndBounds) {
  EXPECT_EQ(size_class_block_bytes(size_class_index(0)), 16u);
  EXPECT_EQ(size_class_block_bytes(size_class_index(1)), 16u);
  EXPECT_EQ(size_class_block_bytes(size_class_index(17)), 32u);
  EXPECT_EQ(size_class_block_bytes(size_class_index(1024)), 1024u);
  EXPECT_EQ(size_class_block_bytes(size_class_index(1025)), 1280u);
  EXPECT_EQ(size_class_block_bytes(size_class_index(2049)), 2560u);
  EXPECT_EQ(size_class_block_bytes(size_class_index(200 * 1024)), 224u * 1024);
  EXPECT_EQ(size_class_index(kMaxSizeClassBytes), kSizeClassCount - 1);
  for (uint64_t size = 1; size <= kMaxSizeClassBytes; size += 61) {
    uint64_t c = size_class_block_bytes(size_class_index(size));
    ASSERT_GE(c, size);
    ASSERT_LE(c, size < 1024 ? size + 15 : size + size / 4);
  }
}

TEST(TcmallocPolicy, LifetimeAwareFillerSeparatesLowAndHighCapacitySpans) {
  // A 16-byte span has capacity 512 (> C = 16: the long-lived set); a 200 KiB object lands in a
  // 224 KiB class span of capacity 1 (the short-lived set).
  TcmallocPolicy lifetime(TcmallocOptions{true, 16});
  TcmallocPolicy plain(TcmallocOptions{false, 16});
  for (TcmallocPolicy* p : {&lifetime, &plain}) {
    p->allocate(object_alloc(0x1000, 16));
    p->allocate(object_alloc(0x2000, 200 * 1024));
  }
  EXPECT_EQ(lifetime.footprint_bytes(), 2 * k2M);
  EXPECT_EQ(lifetime.huge_pages_in_set(0), 1u);
  EXPECT_EQ(lifetime.huge_pages_in_set(1), 1u);
  EXPECT_EQ(plain.footprint_bytes(), k2M);
  // When the short-lived object goes, lifetime-aware gives its huge page back; plain still holds one.
  lifetime.free(0, 0x2000, 200 * 1024, 0);
  plain.free(0, 0x2000, 200 * 1024, 0);
  EXPECT_EQ(lifetime.footprint_bytes(), k2M);
  EXPECT_EQ(plain.footprint_bytes(), k2M);
  lifetime.free(0, 0x1000, 16, 0);
  EXPECT_EQ(lifetime.footprint_bytes(), 0u);
}

TEST(TcmallocPolicy, SpansPackIntoTheFullestHugePageAndBigObjectsTakeWholeHugePages) {
  TcmallocPolicy p(TcmallocOptions{false, 16});
  // 224 KiB spans are 28 pages: 9 fit a 256-page huge page, the 10th needs another.
  for (uint64_t i = 0; i < 10; ++i) p.allocate(object_alloc(0x100000 + i * 0x1000, 224 * 1024));
  EXPECT_EQ(p.footprint_bytes(), 2 * k2M);
  // A 3 MiB object: 2 whole huge pages of its own.
  p.allocate(object_alloc(0x900000, 3 << 20));
  EXPECT_EQ(p.footprint_bytes(), 4 * k2M);
  p.free(0, 0x900000, 3 << 20, 0);
  // Freeing the 10th span empties the second huge page.
  p.free(0, 0x100000 + 9 * 0x1000, 224 * 1024, 0);
  EXPECT_EQ(p.footprint_bytes(), k2M);
  // A new span goes back into the first huge page's free run rather than a fresh huge page.
  p.free(0, 0x100000, 224 * 1024, 0);
  p.allocate(object_alloc(0xa00000, 224 * 1024));
  EXPECT_EQ(p.footprint_bytes(), k2M);
}

TEST(TcmallocPolicy, ObjectsFillTheFullestSpanFirst) {
  TcmallocPolicy p(TcmallocOptions{true, 16});
  // 8 KiB spans of 4 KiB objects hold 2 (capacity 2 <= 16: short set). Three objects: two spans.
  p.allocate(object_alloc(0x1, 4096));
  p.allocate(object_alloc(0x2, 4096));
  p.allocate(object_alloc(0x3, 4096));
  // Free one of the first span: both spans are half full; the next object fills one of them and no
  // new span is made: one huge page throughout.
  p.free(0, 0x1, 4096, 0);
  p.allocate(object_alloc(0x4, 4096));
  EXPECT_EQ(p.footprint_bytes(), k2M);
  EXPECT_EQ(p.summary_extras()[1].second, 2.0);  // spans_allocated
}

}  // namespace
}  // namespace llamalloc::sim
