#include "sim/mesh_policy.h"

#include <gtest/gtest.h>

#include "test_events.h"

namespace llamalloc::sim {
namespace {

constexpr uint64_t k4K = 4096;
constexpr uint64_t k2M = 2 << 20;

using testing::object_alloc;

MeshOptions Options(bool huge) {
  MeshOptions o;
  o.account_huge_pages = huge;
  o.mesh_period_ns = UINT64_MAX / 2;  // the tests mesh by hand
  return o;
}

TEST(MeshPolicy, SpansFillBeforeANewPageIsBacked) {
  MeshPolicy mesh(Options(false));
  // 256 objects of 16 bytes fill one 4 KiB span; the 257th needs a second.
  for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(0x1000 + 16 * i, 16));
  EXPECT_EQ(mesh.footprint_bytes(), k4K);
  mesh.allocate(object_alloc(0x100000, 16));
  EXPECT_EQ(mesh.footprint_bytes(), 2 * k4K);
  // A 48-byte object is another size class: another span.
  mesh.allocate(object_alloc(0x200000, 48));
  EXPECT_EQ(mesh.footprint_bytes(), 3 * k4K);
  // A 20 KiB object gets 5 pages of its own.
  mesh.allocate(object_alloc(0x300000, 20 * 1024));
  EXPECT_EQ(mesh.footprint_bytes(), 8 * k4K);
  mesh.free(0, 0x300000, 20 * 1024, 0);
  EXPECT_EQ(mesh.footprint_bytes(), 3 * k4K);
  // Emptying the first (detached) span gives its page back.
  for (uint64_t i = 0; i < 256; ++i) mesh.free(0, 0x1000 + 16 * i, 16, 0);
  EXPECT_EQ(mesh.footprint_bytes(), 2 * k4K);
}

TEST(MeshPolicy, MeshesTwoSpansWithDisjointSlotsAndReleasesOnePage) {
  for (bool huge : {false, true}) {
    MeshPolicy mesh(Options(huge));
    // Fill span A (addresses a+16i) and span B (b+16i) completely: random slots.
    const uint64_t a = 0x100000, b = 0x200000;
    for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(a + 16 * i, 16));
    for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(b + 16 * i, 16));
    // A third span is attached (and not meshable) after this allocation.
    mesh.allocate(object_alloc(0x300000, 16));
    EXPECT_EQ(mesh.physical_pages(), 3u);
    // Leave A only its low-slot objects and B only its high-slot ones: they no longer overlap.
    for (uint64_t i = 0; i < 256; ++i) {
      if (mesh.slot_of(a + 16 * i) >= 100) mesh.free(0, a + 16 * i, 16, 0);
      if (mesh.slot_of(b + 16 * i) < 200) mesh.free(0, b + 16 * i, 16, 0);
    }
    EXPECT_EQ(mesh.physical_pages(), 3u);
    mesh.mesh_now();
    EXPECT_EQ(mesh.physical_pages(), 2u);
    EXPECT_EQ(mesh.virtual_pages(), 3u);  // meshing keeps both virtual spans
    EXPECT_EQ(mesh.footprint_bytes(), huge ? k2M : 2 * k4K);  // all in one huge page
    // Freeing everything left on A and B releases the group: both virtual spans and the one page.
    for (uint64_t i = 0; i < 256; ++i) {
      if (mesh.slot_of(a + 16 * i) >= 0) mesh.free(0, a + 16 * i, 16, 0);
      if (mesh.slot_of(b + 16 * i) >= 0) mesh.free(0, b + 16 * i, 16, 0);
    }
    EXPECT_EQ(mesh.physical_pages(), 1u);
    EXPECT_EQ(mesh.virtual_pages(), 1u);
  }
}

TEST(MeshPolicy, AMeshedGroupKeepsServingAllocations) {
  MeshPolicy mesh(Options(false));
  const uint64_t a = 0x100000, b = 0x200000, c = 0x300000;
  for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(a + 16 * i, 16));
  for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(b + 16 * i, 16));
  mesh.allocate(object_alloc(c, 16));  // the third span is attached
  for (uint64_t i = 0; i < 256; ++i) {
    if (mesh.slot_of(a + 16 * i) >= 100) mesh.free(0, a + 16 * i, 16, 0);
    if (mesh.slot_of(b + 16 * i) < 200) mesh.free(0, b + 16 * i, 16, 0);
  }
  mesh.mesh_now();
  ASSERT_EQ(mesh.physical_pages(), 2u);
  // Fill the attached span (255 more), then 100 more objects: they fit in the group's 100 free slots, so
  // no new page is backed.
  for (uint64_t i = 1; i < 256 + 100; ++i) mesh.allocate(object_alloc(c + 16 * i, 16));
  EXPECT_EQ(mesh.physical_pages(), 2u);
  mesh.allocate(object_alloc(0x900000, 16));
  EXPECT_EQ(mesh.physical_pages(), 3u);
}

TEST(MeshPolicy, OverlappingSpansDoNotMesh) {
  MeshPolicy mesh(Options(false));
  const uint64_t a = 0x100000, b = 0x200000;
  for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(a + 16 * i, 16));
  for (uint64_t i = 0; i < 256; ++i) mesh.allocate(object_alloc(b + 16 * i, 16));
  mesh.allocate(object_alloc(0x300000, 16));
  // Both keep slot 0..9: overlap.
  for (uint64_t i = 0; i < 256; ++i) {
    if (mesh.slot_of(a + 16 * i) >= 10) mesh.free(0, a + 16 * i, 16, 0);
    if (mesh.slot_of(b + 16 * i) >= 10) mesh.free(0, b + 16 * i, 16, 0);
  }
  mesh.mesh_now();
  EXPECT_EQ(mesh.physical_pages(), 3u);
}

TEST(MeshPolicy, HugePageAccountingKeepsAHugePageWhileAnyPageOfItIsBacked) {
  MeshPolicy mesh(Options(true));
  // 513 pages of 20 KiB objects (5 pages each): 103 objects span two huge pages.
  for (uint64_t i = 0; i < 103; ++i) mesh.allocate(object_alloc(0x10000000 + i * 0x10000, 20 * 1024));
  EXPECT_EQ(mesh.footprint_bytes(), 2 * k2M);
  // Free all but the last object of the first huge page's range: it still pins huge page 0.
  for (uint64_t i = 0; i < 100; ++i) mesh.free(0, 0x10000000 + i * 0x10000, 20 * 1024, 0);
  EXPECT_EQ(mesh.footprint_bytes(), 2 * k2M);
  EXPECT_EQ(mesh.physical_pages(), 15u);
}

}  // namespace
}  // namespace llamalloc::sim
