#include "sim/engine.h"

#include <gtest/gtest.h>

#include "sim/page_policy.h"
#include "test_events.h"

namespace llamalloc::sim {
namespace {

using testing::Alloc;
using testing::Free;
using testing::kMs;
using testing::Realloc;

// Records what the engine hands to a policy.
class RecordingPolicy final : public Policy {
 public:
  std::string name() const override { return "recording"; }
  bool needs_lifetime_classes() const override { return true; }
  void Allocate(const ObjectAlloc& o) override { allocs.push_back(o); live += o.size_bytes; }
  void Free(uint64_t, uint64_t address, uint64_t size_bytes, uint32_t) override {
    frees.push_back({address, size_bytes});
    live -= size_bytes;
  }
  uint64_t footprint_bytes() const override { return live; }
  std::vector<ObjectAlloc> allocs;
  std::vector<std::pair<uint64_t, uint64_t>> frees;
  uint64_t live = 0;
};

TEST(Engine, FreesOfUnknownAddressesAreCountedNotFatal) {
  VectorEventSource source({Alloc(0, 0x1000, 10), Free(1, 0x2000), Free(2, 0x1000), Free(3, 0x1000), Free(4, 0)});
  RecordingPolicy policy;
  RunResult r = Replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.unknown_frees, 2u);  // 0x2000 never allocated, 0x1000 freed twice
  EXPECT_EQ(r.summary.null_frees, 1u);
  EXPECT_EQ(r.summary.frees, 4u);
  ASSERT_EQ(policy.frees.size(), 1u);
  EXPECT_EQ(policy.frees[0], std::make_pair(uint64_t{0x1000}, uint64_t{10}));
  EXPECT_EQ(r.summary.final_live_bytes, 0u);
}

TEST(Engine, FreeCarriesTheAllocatedSizeAndReallocMovesTheObject) {
  VectorEventSource source({Alloc(0, 0x1000, 10), Realloc(1, 0x1000, 0x5000, 300), Free(2, 0x5000)});
  RecordingPolicy policy;
  RunResult r = Replay(source, policy, EngineOptions{});
  ASSERT_EQ(policy.allocs.size(), 2u);
  EXPECT_EQ(policy.allocs[1].address, 0x5000u);
  EXPECT_EQ(policy.allocs[1].size_bytes, 300u);
  ASSERT_EQ(policy.frees.size(), 2u);
  EXPECT_EQ(policy.frees[0].second, 10u);
  EXPECT_EQ(policy.frees[1].second, 300u);
  EXPECT_EQ(r.summary.peak_live_bytes, 300u);
}

TEST(Engine, AllocationOfALiveAddressEndsTheOldObject) {
  VectorEventSource source({Alloc(0, 0x1000, 10), Alloc(1, 0x1000, 20)});
  RecordingPolicy policy;
  RunResult r = Replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.reused_live_addresses, 1u);
  EXPECT_EQ(r.summary.final_live_bytes, 20u);
}

TEST(Engine, OracleClassesComeFromTheObjectsOwnFreeTimes) {
  VectorEventSource source({
      Alloc(0, 0x1000, 8),              // freed after 5 ms: class 0
      Alloc(0, 0x2000, 8),              // freed after 50 ms: class 1
      Alloc(1 * kMs, 0x3000, 8),        // freed after 2 s: class 3
      Alloc(2 * kMs, 0x4000, 8),        // never freed: class 7
      Free(5 * kMs, 0x1000),
      Alloc(6 * kMs, 0x1000, 8),        // same address again, freed after 1000 s: class 6
      Free(50 * kMs, 0x2000),
      Free(2001 * kMs, 0x3000),
      Free(1000006 * kMs, 0x1000),
  });
  std::vector<uint8_t> classes = ComputeLifetimeClasses(source);
  EXPECT_EQ(classes, (std::vector<uint8_t>{0, 1, 3, 7, 6}));
  RecordingPolicy policy;
  Replay(source, policy, EngineOptions{});
  ASSERT_EQ(policy.allocs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(policy.allocs[i].lifetime_class, classes[i]);
}

// Keeps a realloc in place when the new size fits in the old one, as a heap with size classes would.
class InPlacePolicy final : public Policy {
 public:
  std::string name() const override { return "in-place"; }
  bool needs_lifetime_classes() const override { return true; }
  bool ReallocInPlace(uint64_t old_size_bytes, uint64_t new_size_bytes) const override {
    return new_size_bytes <= old_size_bytes;
  }
  void Allocate(const ObjectAlloc& o) override { allocs.push_back(o); }
  void Free(uint64_t, uint64_t address, uint64_t size_bytes, uint32_t) override { frees.push_back({address, size_bytes}); }
  uint64_t footprint_bytes() const override { return 0; }
  std::vector<ObjectAlloc> allocs;
  std::vector<std::pair<uint64_t, uint64_t>> frees;
};

TEST(Engine, AReallocThePolicyKeepsInPlaceContinuesTheObjectUnderItsFirstAddress) {
  VectorEventSource source({
      Alloc(0, 0x1000, 100),
      Realloc(1 * kMs, 0x1000, 0x2000, 80),   // the traced allocator moved it; the policy keeps it
      Alloc(2 * kMs, 0x1000, 50),             // the traced allocator reuses the first address
      Realloc(3 * kMs, 0x2000, 0x3000, 90),   // still within the 100 bytes first allocated
      Realloc(4 * kMs, 0x3000, 0x4000, 200),  // grows: moves
      Free(5 * kMs, 0x1000),
      Free(2000 * kMs, 0x4000),
  });
  InPlacePolicy policy;
  RunResult r = Replay(source, policy, EngineOptions{});
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
  std::vector<uint8_t> classes = ComputeLifetimeClasses(source, &policy);
  EXPECT_EQ(classes, (std::vector<uint8_t>{0, 0, 3}));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(policy.allocs[i].lifetime_class, classes[i]);
  // Without a policy that keeps reallocs in place, every realloc is a new object.
  EXPECT_EQ(ComputeLifetimeClasses(source).size(), 5u);
}

TEST(Engine, LifetimeClassBoundaries) {
  EXPECT_EQ(LifetimeClassOf(0), 0);
  EXPECT_EQ(LifetimeClassOf(9'999'999), 0);
  EXPECT_EQ(LifetimeClassOf(10'000'000), 1);
  EXPECT_EQ(LifetimeClassOf(999'999'999), 2);
  EXPECT_EQ(LifetimeClassOf(1'000'000'000), 3);
  EXPECT_EQ(LifetimeClassOf(999'999'999'999), 5);
  EXPECT_EQ(LifetimeClassOf(1'000'000'000'000), 6);
}

TEST(Engine, TimelineFillsEveryIntervalOfAGap) {
  VectorEventSource source({Alloc(5 * kMs, 0x1000, 100), Free(47 * kMs, 0x1000)});
  PagePolicy policy(12);
  RunResult r = Replay(source, policy, EngineOptions{10 * kMs});
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
