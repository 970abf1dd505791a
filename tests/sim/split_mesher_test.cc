#include "sim/split_mesher.h"

#include <gtest/gtest.h>

#include <set>

namespace llamalloc::sim {
namespace {

SlotBitmap slot_range(unsigned first, unsigned end) {
  SlotBitmap b;
  for (unsigned s = first; s < end; ++s) b.set(s);
  return b;
}

TEST(SlotBitmap, NthClearSkipsLiveSlots) {
  SlotBitmap b = slot_range(0, 3);
  b.set(5);
  EXPECT_EQ(b.nth_clear(0, 256), 3u);
  EXPECT_EQ(b.nth_clear(1, 256), 4u);
  EXPECT_EQ(b.nth_clear(2, 256), 6u);
  EXPECT_EQ(b.nth_clear(251, 256), 255u);  // the last of 252 clear slots
  EXPECT_EQ(b.count(), 4u);
  SlotBitmap full = slot_range(0, 100);
  EXPECT_EQ(full.nth_clear(0, 101), 100u);
}

TEST(SplitMesher, PairsComplementaryHalvesWhateverTheShuffle) {
  // Two "low half" and two "high half" pages: the best matching frees 2 pages. Every split of the
  // four into two halves puts a meshable pair across it, so SplitMesher must find both.
  std::vector<SlotBitmap> pages = {slot_range(0, 128), slot_range(128, 256), slot_range(0, 100), slot_range(200, 256)};
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    Random random(seed);
    auto matches = split_mesher_match(pages, random);
    ASSERT_EQ(matches.size(), 2u) << "seed " << seed;
    std::set<uint32_t> used;
    for (auto [a, b] : matches) {
      EXPECT_FALSE(pages[a].overlaps(pages[b]));
      used.insert(a);
      used.insert(b);
    }
    EXPECT_EQ(used.size(), 4u);
  }
}

TEST(SplitMesher, NothingMeshesWhenEveryPageUsesSlotZero) {
  std::vector<SlotBitmap> pages;
  for (unsigned i = 0; i < 40; ++i) {
    SlotBitmap b = slot_range(0, 1);
    b.set(1 + i);
    pages.push_back(b);
  }
  Random random(3);
  EXPECT_TRUE(split_mesher_match(pages, random).empty());
  EXPECT_EQ(mesh_pages_freed(pages, random, 8), 0u);
}

TEST(SplitMesher, RepeatedRoundsMeshThreeDisjointThirdsIntoOnePage) {
  std::vector<SlotBitmap> pages = {slot_range(0, 85), slot_range(85, 170), slot_range(170, 256)};
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Random random(seed);
    EXPECT_EQ(mesh_pages_freed(pages, random, 8), 2u) << "seed " << seed;
    Random once(seed);
    EXPECT_EQ(mesh_pages_freed(pages, once, 1), 1u) << "one pass meshes one pair";
  }
}

TEST(SplitMesher, FindsMostOfAPerfectMatchingOfSparseRandomPages) {
  // 200 pages with 8 random live slots of 256 each: almost every pair is meshable, so a maximum
  // matching has 100 pairs; SplitMesher's guarantee is half of it, in practice nearly all.
  Random fill(11);
  std::vector<SlotBitmap> pages(200);
  for (auto& p : pages) {
    for (int k = 0; k < 8; ++k) p.set(static_cast<unsigned>(fill.below(256)));
  }
  Random random(5);
  auto matches = split_mesher_match(pages, random);
  EXPECT_GE(matches.size(), 50u);
  EXPECT_LE(matches.size(), 100u);
  for (auto [a, b] : matches) EXPECT_FALSE(pages[a].overlaps(pages[b]));
}

}  // namespace
}  // namespace llamalloc::sim
