// The profiler's pure parts: lifetime classes, the profile's size buckets, the sampler's intervals and weights.
#include "sampling.h"

#include <gtest/gtest.h>

#include <cmath>

namespace llamalloc::prof {
namespace {

TEST(LifetimeClassOf, FollowsTheArchitectureTable) {
  EXPECT_EQ(lifetime_class_of(0), 0u);
  EXPECT_EQ(lifetime_class_of(9'999'999), 0u);
  EXPECT_EQ(lifetime_class_of(10'000'000), 1u);
  EXPECT_EQ(lifetime_class_of(99'999'999), 1u);
  EXPECT_EQ(lifetime_class_of(100'000'000), 2u);
  EXPECT_EQ(lifetime_class_of(1'000'000'000), 3u);
  EXPECT_EQ(lifetime_class_of(10'000'000'000), 4u);
  EXPECT_EQ(lifetime_class_of(100'000'000'000), 5u);
  EXPECT_EQ(lifetime_class_of(999'999'999'999), 5u);
  EXPECT_EQ(lifetime_class_of(1'000'000'000'000), 6u);
  EXPECT_EQ(lifetime_class_of(UINT64_MAX), 6u);
}

TEST(ProfileSizeBucket, RoundsUpToTheBucketBound) {
  EXPECT_EQ(profile_size_bucket(0), 16u);
  EXPECT_EQ(profile_size_bucket(1), 16u);
  EXPECT_EQ(profile_size_bucket(40), 48u);
  EXPECT_EQ(profile_size_bucket(1024), 1024u);
  EXPECT_EQ(profile_size_bucket(1025), 1280u);
  EXPECT_EQ(profile_size_bucket(5000), 5120u);
  EXPECT_EQ(profile_size_bucket(8192), 8192u);
  for (uint64_t s = 1; s < (1u << 22); s = s * 3 / 2 + 1) {
    uint64_t c = profile_size_bucket(s);
    EXPECT_GE(c, s);
    EXPECT_LE(c, s <= 1024 ? s + 15 : s + s / 4) << s;
    EXPECT_EQ(profile_size_bucket(c), c) << "a bucket bound is its own bucket";
  }
}

TEST(Sampler, EveryAllocationAtOneByte) {
  Sampler s;
  s.init(1, 42);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(s.record_allocation(1 + i));
  EXPECT_DOUBLE_EQ(Sampler::weight(40, 1), 1.0);
}

TEST(Sampler, SamplesOnePerMeanIntervalOfBytes) {
  constexpr uint64_t kMean = 64 * 1024;
  Sampler s;
  s.init(kMean, 7);
  constexpr int kAllocs = 2'000'000;
  constexpr uint64_t kSize = 128;
  double estimated = 0;
  int sampled = 0;
  for (int i = 0; i < kAllocs; ++i) {
    if (s.record_allocation(kSize)) {
      ++sampled;
      estimated += Sampler::weight(kSize, kMean);
    }
  }
  double expected_samples = double(kAllocs) * kSize / kMean;  // 3906
  EXPECT_NEAR(sampled, expected_samples, 5 * std::sqrt(expected_samples));
  EXPECT_NEAR(estimated, kAllocs, kAllocs * 0.1);
}

TEST(Sampler, LargeAllocationsAreAlwaysSampledWithWeightOne) {
  Sampler s;
  s.init(512 * 1024, 3);
  int sampled = 0;
  for (int i = 0; i < 100; ++i) sampled += s.record_allocation(64 << 20);
  EXPECT_EQ(sampled, 100);
  EXPECT_NEAR(Sampler::weight(64 << 20, 512 * 1024), 1.0, 1e-9);
}

}  // namespace
}  // namespace llamalloc::prof
