#include "sim/engine.h"

#include <gtest/gtest.h>

#include "sim/page_policy.h"
#include "test_events.h"

namespace llamalloc::sim {
namespace {

using testing::alloc_event;
using testing::free_event;
using testing::kMs;
using testing::realloc_event;

// Records what the engine hands to a policy.
class RecordingPolicy final : public Policy {
 public:
  std::string name() const override { return "recording"; }
  bool needs_lifetime_classes() const override { return true; }
  void allocate(const ObjectAlloc& o) override { allocs.push_back(o); live += o.size_bytes; }
  void free(uint64_t, uint64_t address, uint64_t size_bytes, uint32_t) override {
    frees.push_back({address, size_bytes});
    live -= size_bytes;
  }
  uint64_t footprint_bytes() const override { return live; }
  std::vector<ObjectAlloc> allocs;
  std::vector<std::pair<uint64_t, uint64_t>> frees;
  uint64_t live = 0;
};

TEST(Engine, FreesOfUnknownAddressesAreCountedNotFatal) {
  VectorEventSource source({alloc_event(0, 0x1000, 10), free_event(1, 0x2000), free_event(2, 0x1000), free_event(3, 0x1000), free_event(4, 0)});
  RecordingPolicy policy;
  RunResult r = replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.unknown_frees, 2u);  // 0x2000 never allocated, 0x1000 freed twice
  EXPECT_EQ(r.summary.null_frees, 1u);
  EXPECT_EQ(r.summary.frees, 4u);
  ASSERT_EQ(policy.frees.size(), 1u);
  EXPECT_EQ(policy.frees[0], std::make_pair(uint64_t{0x1000}, uint64_t{10}));
  EXPECT_EQ(r.summary.final_live_bytes, 0u);
}

TEST(Engine, FreeCarriesTheAllocatedSizeAndReallocMovesTheObject) {
  VectorEventSource source({alloc_event(0, 0x1000, 10), realloc_event(1, 0x1000, 0x5000, 300), free_event(2, 0x5000)});
  RecordingPolicy policy;
  RunResult r = replay(source, policy, EngineOptions{});
  ASSERT_EQ(policy.allocs.size(), 2u);
  EXPECT_EQ(policy.allocs[1].address, 0x5000u);
  EXPECT_EQ(policy.allocs[1].size_bytes, 300u);
  ASSERT_EQ(policy.frees.size(), 2u);
  EXPECT_EQ(policy.frees[0].second, 10u);
  EXPECT_EQ(policy.frees[1].second, 300u);
  EXPECT_EQ(r.summary.peak_live_bytes, 300u);
}

TEST(Engine, AllocationOfALiveAddressEndsTheOldObject) {
  VectorEventSource source({alloc_event(0, 0x1000, 10), alloc_event(1, 0x1000, 20)});
  RecordingPolicy policy;
  RunResult r = replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.reused_live_addresses, 1u);
  EXPECT_EQ(r.summary.final_live_bytes, 20u);
}

TEST(Engine, OracleClassesComeFromTheObjectsOwnFreeTimes) {
  VectorEventSource source({
      alloc_event(0, 0x1000, 8),              // freed after 5 ms: class 0
      alloc_event(0, 0x2000, 8),              // freed after 50 ms: class 1
      alloc_event(1 * kMs, 0x3000, 8),        // freed after 2 s: class 3
      alloc_event(2 * kMs, 0x4000, 8),        // never freed: class 7
      free_event(5 * kMs, 0x1000),
      alloc_event(6 * kMs, 0x1000, 8),        // same address again, freed after 1000 s: class 6
      free_event(50 * kMs, 0x2000),
      free_event(2001 * kMs, 0x3000),
      free_event(1000006 * kMs, 0x1000),
  });
  std::vector<uint8_t> classes = compute_lifetime_classes(source);
  EXPECT_EQ(classes, (std::vector<uint8_t>{0, 1, 3, 7, 6}));
  RecordingPolicy policy;
  replay(source, policy, EngineOptions{});
  ASSERT_EQ(policy.allocs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(policy.allocs[i].lifetime_class, classes[i]);
}

// Keeps a realloc in place when the new size fits in the old one, as a heap with size classes would.
class InPlacePolicy final : public Policy {
 public:
  std::string name() const override { return "in-place"; }
  bool needs_lifetime_classes() const override { return true; }
  bool realloc_in_place(uint64_t old_size_bytes, uint64_t new_size_bytes) const override {
    return new_size_bytes <= old_size_bytes;
  }
  void allocate(const ObjectAlloc& o) override { allocs.push_back(o); }
  void free(uint64_t, uint64_t address, uint64_t size_bytes, uint32_t) override { frees.push_back({address, size_bytes}); }
  uint64_t footprint_bytes() const override { return 0; }
  std::vector<ObjectAlloc> allocs;
  std::vector<std::pair<uint64_t, uint64_t>> frees;
};

TEST(Engine, AReallocThePolicyKeepsInPlaceContinuesTheObjectUnderItsFirstAddress) {
  VectorEventSource source({
      alloc_event(0, 0x1000, 100),
      realloc_event(1 * kMs, 0x1000, 0x2000, 80),   // the traced allocator moved it; the policy keeps it
      alloc_event(2 * kMs, 0x1000, 50),             // the traced allocator reuses the first address
      realloc_event(3 * kMs, 0x2000, 0x3000, 90),   // still within the 100 bytes first allocated
      realloc_event(4 * kMs, 0x3000, 0x4000, 200),  // grows: moves
      free_event(5 * kMs, 0x1000),
      free_event(2000 * kMs, 0x4000),
  });
  InPlacePolicy policy;
  RunResult r = replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.reallocs, 3u);
  EXPECT_EQ(r.summary.reallocs_in_place, 2u);
  EXPECT_EQ(r.summary.unknown_frees, 0u);
  EXPECT_EQ(r.summary.reused_live_addresses, 0u);
  ASSERT_EQ(policy.allocs.size(), 3u);
  EXPECT_EQ(policy.allocs[0].address, 0x1000u);
  // The policy still holds the first object under 0x1000: the new object there gets another id.
  EXPECT_NE(policy.allocs[1].address, 0x1000u);
  EXPECT_EQ(policy.allocs[2].address, 0x4000u);
  EXPECT_EQ(policy.allocs[2].size_bytes, 200u);
  ASSERT_EQ(policy.frees.size(), 3u);
  // The grow frees the object the policy placed first, with the size it placed.
  EXPECT_EQ(policy.frees[0], std::make_pair(uint64_t{0x1000}, uint64_t{100}));
  EXPECT_EQ(policy.frees[1], std::make_pair(policy.allocs[1].address, uint64_t{50}));
  EXPECT_EQ(policy.frees[2], std::make_pair(uint64_t{0x4000}, uint64_t{200}));
  EXPECT_EQ(r.summary.peak_live_bytes, 250u);  // 200 + 50 after the grow
  EXPECT_EQ(r.summary.final_live_bytes, 0u);
  // The oracle's lifetimes follow the same objects: the first lives 4 ms (class 0) until the grow moves it.
  std::vector<uint8_t> classes = compute_lifetime_classes(source, &policy);
  EXPECT_EQ(classes, (std::vector<uint8_t>{0, 0, 3}));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(policy.allocs[i].lifetime_class, classes[i]);
  // Without a policy that keeps reallocs in place, every realloc is a new object.
  EXPECT_EQ(compute_lifetime_classes(source).size(), 5u);
}

TEST(Engine, LifetimeClassBoundaries) {
  EXPECT_EQ(lifetime_class_of(0), 0);
  EXPECT_EQ(lifetime_class_of(9'999'999), 0);
  EXPECT_EQ(lifetime_class_of(10'000'000), 1);
  EXPECT_EQ(lifetime_class_of(999'999'999), 2);
  EXPECT_EQ(lifetime_class_of(1'000'000'000), 3);
  EXPECT_EQ(lifetime_class_of(999'999'999'999), 5);
  EXPECT_EQ(lifetime_class_of(1'000'000'000'000), 6);
}

TEST(Engine, TimelineFillsEveryIntervalOfAGap) {
  VectorEventSource source({alloc_event(5 * kMs, 0x1000, 100), free_event(47 * kMs, 0x1000)});
  PagePolicy policy(12);
  RunResult r = replay(source, policy, EngineOptions{10 * kMs});
  // Samples at 0 (before the alloc at 5 ms), 10, 20, 30, 40 and the final 47 ms.
  ASSERT_EQ(r.timeline.size(), 6u);
  EXPECT_EQ(r.timeline[0].live_bytes, 0u);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(r.timeline[i].time_ns, i * 10 * kMs);
    EXPECT_EQ(r.timeline[i].live_bytes, 100u);
    EXPECT_EQ(r.timeline[i].footprint_bytes, 4096u);
  }
  EXPECT_EQ(r.timeline[5].time_ns, 47 * kMs);
  EXPECT_EQ(r.timeline[5].footprint_bytes, 0u);
}

}  // namespace
}  // namespace llamalloc::sim
