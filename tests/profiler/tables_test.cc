// The profiler's tables (src/profiler/tables.h): interning, per-site records, the live-object table, and their
// behaviour when full, on memory of their own.
#include "tables.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace llamalloc::prof {
namespace {

TEST(StackTable, InternsEqualStacksToOneId) {
  static StackTable table;
  ASSERT_TRUE(table.init());
  uint64_t a[3] = {0x1000, 0x2000, 0x3000};
  uint64_t b[3] = {0x1000, 0x2000, 0x3001};
  bool is_new = false;
  uint32_t ia = table.intern(a, 3, &is_new);
  EXPECT_TRUE(is_new);
  uint32_t ib = table.intern(b, 3, &is_new);
  EXPECT_TRUE(is_new);
  EXPECT_NE(ia, ib);
  EXPECT_EQ(table.intern(a, 3, &is_new), ia);
  EXPECT_FALSE(is_new);
  EXPECT_NE(table.intern(a, 2, &is_new), ia) << "a prefix is another stack";
  uint32_t depth = 0;
  const uint64_t* pcs = table.pcs(ib, &depth);
  ASSERT_EQ(depth, 3u);
  EXPECT_EQ(pcs[2], 0x3001u);
  EXPECT_EQ(table.count(), 3u);
}

TEST(StackTable, ConcurrentInternsAgree) {
  static StackTable table;
  ASSERT_TRUE(table.init());
  std::vector<std::thread> threads;
  std::vector<std::vector<uint32_t>> ids(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < 2000; ++i) {
        uint64_t pcs[2] = {i, i * 7};
        bool is_new;
        ids[t].push_back(table.intern(pcs, 2, &is_new));
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(ids[t], ids[0]);
  EXPECT_EQ(table.count(), 2000u);
}

TEST(SiteTable, OneSitePerStackSizeClassAndAlignment) {
  static SiteTable table;
  ASSERT_TRUE(table.init());
  uint32_t s1 = table.find_or_insert(5, 48, 16);
  EXPECT_EQ(table.find_or_insert(5, 48, 16), s1);
  EXPECT_NE(table.find_or_insert(5, 64, 16), s1);
  EXPECT_NE(table.find_or_insert(5, 48, 256), s1);
  EXPECT_NE(table.find_or_insert(6, 48, 16), s1);
  EXPECT_EQ(table.at(s1).record.stack_id, 5u);
  EXPECT_EQ(table.at(s1).record.request_size_bytes, 48u);
  EXPECT_EQ(table.count(), 4u);
}

TEST(LiveTable, RemovesOnlyWhatWasInserted) {
  static LiveTable table;
  ASSERT_TRUE(table.init());
  LiveObject out;
  EXPECT_FALSE(table.remove(0x1000, &out)) << "empty table";
  ASSERT_TRUE(table.insert({0x1000, 11, 40, 3, nullptr}));
  ASSERT_TRUE(table.insert({0x2000, 12, 50, 4, nullptr}));
  EXPECT_FALSE(table.remove(0x3000, &out));
  ASSERT_TRUE(table.remove(0x2000, &out));
  EXPECT_EQ(out.alloc_time_ns, 12u);
  EXPECT_EQ(out.size_bytes, 50u);
  EXPECT_EQ(out.site, 4u);
  EXPECT_FALSE(table.remove(0x2000, &out)) << "already removed";
  ASSERT_TRUE(table.remove(0x1000, &out));
  EXPECT_EQ(out.site, 3u);
}

TEST(LiveTable, ManyObjectsAcrossThreads) {
  static LiveTable table;
  ASSERT_TRUE(table.init());
  constexpr uint64_t kObjects = 100000;
  std::thread producer([&] {
    for (uint64_t i = 1; i <= kObjects; ++i) ASSERT_TRUE(table.insert({i * 16, i, 16, 0, nullptr}));
  });
  producer.join();
  uint64_t removed = 0;
  std::thread consumer([&] {
    LiveObject out;
    for (uint64_t i = 1; i <= kObjects; ++i) removed += table.remove(i * 16, &out) && out.alloc_time_ns == i;
  });
  consumer.join();
  EXPECT_EQ(removed, kObjects);
}

}  // namespace
}  // namespace llamalloc::prof
