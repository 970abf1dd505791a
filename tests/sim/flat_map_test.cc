#include "sim/flat_map.h"

#include <gtest/gtest.h>

#include <unordered_map>

#include "sim/random.h"

namespace llamalloc::sim {
namespace {

TEST(FlatMap, AgreesWithUnorderedMapUnderRandomInsertsAndErases) {
  FlatMap<uint64_t> map(4);  // starts small so that it has to grow
  std::unordered_map<uint64_t, uint64_t> reference;
  Random random(7);
  for (int step = 0; step < 200000; ++step) {
    // Few distinct keys, clustered like addresses, so probe chains collide and wrap.
    uint64_t key = 0x7f0000000000 + (random.below(5000) << 4);
    if (random.below(3) == 0) {
      uint64_t removed = 0;
      bool had = reference.erase(key) > 0;
      EXPECT_EQ(map.erase(key, &removed), had);
    } else {
      map.put(key, step);
      reference[key] = step;
    }
  }
  EXPECT_EQ(map.size(), reference.size());
  for (auto [k, v] : reference) {
    ASSERT_NE(map.find(k), nullptr);
    EXPECT_EQ(*map.find(k), v);
  }
  size_t visited = 0;
  map.for_each([&](uint64_t k, uint64_t v) {
    ++visited;
    EXPECT_EQ(reference.at(k), v);
  });
  EXPECT_EQ(visited, reference.size());
}

TEST(FlatMap, KeyZeroIsNeverPresent) {
  FlatMap<int> map;
  EXPECT_EQ(map.find(0), nullptr);
  EXPECT_FALSE(map.erase(0));
}

}  // namespace
}  // namespace llamalloc::sim
