// The profiler's pure parts: lifetime classes, request size classes, the sampler's intervals and weights.
#include "sampling.h"

#include <gtest/gtest.h>

#include <cmath>

namespace llamalloc::prof {
namespace {

TEST(LifetimeClass, FollowsTheArchitectureTable) {
  EXPECT_EQ(LifetimeClass(0), 0);
  EXPECT_EQ(LifetimeClass(9'999'999), 0);
  EXPECT_EQ(LifetimeClass(10'000'000), 1);
  EXPECT_EQ(LifetimeClass(99'999'999), 1);
  EXPECT_EQ(LifetimeClass(100'000'000), 2);
  EXPECT_EQ(LifetimeClass(1'000'000'000), 3);
  EXPECT_EQ(LifetimeClass(10'000'000'000), 4);
  EXPECT_EQ(LifetimeClass(100'000'000'000), 5);
  EXPECT_EQ(LifetimeClass(999'999'999'999), 5);
  EXPECT_EQ(LifetimeClass(1'000'000'000'000), 6);
  EXPECT_EQ(LifetimeClass(UINT64_MAX), 6);
}

TEST(RequestSizeClass, RoundsUpToTheClassBound) {
  EXPECT_EQ(RequestSizeClass(0), 16u);
  EXPECT_EQ(RequestSizeClass(1), 16u);
  EXPECT_EQ(RequestSizeClass(40), 48u);
  EXPECT_EQ(RequestSizeClass(1024), 1024u);
  EXPECT_EQ(RequestSizeClass(1025), 1280u);
  EXPECT_EQ(RequestSizeClass(5000), 5120u);
  EXPECT_EQ(RequestSizeClass(8192), 8192u);
  for (uint64_t s = 1; s < (1u << 22); s = s * 3 / 2 + 1) {
    uint64_t c = RequestSizeClass(s);
    EXPECT_GE(c, s);
    EXPECT_LE(c, s <= 1024 ? s + 15 : s + s / 4) << s;
    EXPECT_EQ(RequestSizeClass(c), c) << "a class bound is its own class";
  }
}

TEST(Sampler, EveryAllocationAtOneByte) {
  Sampler s;
  s.Init(1, 42);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(s.RecordAllocation(1 + i));
  EXPECT_DOUBLE_EQ(Sampler::Weight(40, 1), 1.0);
}

TEST(Sampler, SamplesOnePerMeanIntervalOfBytes) {
  constexpr uint64_t kMean = 64 * 1024;
  Sampler s;
  s.Init(kMean, 7);
  constexpr int kAllocs = 2'000'000;
  constexpr uint64_t kSize = 128;
  double estimated = 0;
  int sampled = 0;
  for (int i = 0; i < kAllocs; ++i) {
    if (s.RecordAllocation(kSize)) {
      ++sampled;
      estimated += Sampler::Weight(kSize, kMean);
    }
  }
  double expected_samples = double(kAllocs) * kSize / kMean;  // 3906
  EXPECT_NEAR(sampled, expected_samples, 5 * std::sqrt(expected_samples));
  EXPECT_NEAR(estimated, kAllocs, kAllocs * 0.1);
}

TEST(Sampler, LargeAllocationsAreAlwaysSampledWithWeightOne) {
  Sampler s;
  s.Init(512 * 1024, 3);
  int sampled = 0;
  for (int i = 0; i < 100; ++i) sampled += s.RecordAllocation(64 << 20);
  EXPECT_EQ(sampled, 100);
  EXPECT_NEAR(Sampler::Weight(64 << 20, 512 * 1024), 1.0, 1e-9);
}

}  // namespace
}  // namespace llamalloc::prof
