#include "sim/page_policy.h"

#include <gtest/gtest.h>

#include "sim/engine.h"
#include "test_events.h"

namespace llamalloc::sim {
namespace {

using testing::alloc_event;
using testing::free_event;
using testing::kMs;

constexpr uint64_t k4K = 4096;
constexpr uint64_t k2M = 2 << 20;

// Replays events one by one and returns the policy's footprint after each.
std::vector<uint64_t> footprint_after_each(Policy& policy, const std::vector<Event>& events) {
  Engine engine(policy, EngineOptions{});
  std::vector<uint64_t> out;
  for (const Event& e : events) {
    engine.process(e);
    out.push_back(policy.footprint_bytes());
  }
  return out;
}

TEST(PagePolicy, CountsEveryPageAnObjectTouches4K) {
  const uint64_t base = 0x10000000;  // 2 MiB aligned
  std::vector<Event> events = {
      alloc_event(0, base + 100, 50),            // page 0
      alloc_event(1, base + 4000, 200),          // straddles pages 0 and 1
      alloc_event(2, base + 3 * k4K, 3 * k4K),   // pages 3, 4, 5 exactly
      free_event(3, base + 100),                 // page 0 still holds the straddler
      free_event(4, base + 4000),                // pages 0 and 1 empty
      alloc_event(5, base + k2M + 8, 0),         // zero bytes: no page
      free_event(6, base + 3 * k4K),
  };
  PagePolicy policy(12);
  EXPECT_EQ(footprint_after_each(policy, events),
            (std::vector<uint64_t>{1 * k4K, 2 * k4K, 5 * k4K, 5 * k4K, 3 * k4K, 3 * k4K, 0}));
}

TEST(PagePolicy, OneSmallObjectHoldsAWholeHugePage) {
  const uint64_t base = 0x40000000;
  std::vector<Event> events = {
      alloc_event(0, base, 64),
      alloc_event(1, base + k2M - 32, 64),   // straddles huge pages 0 and 1
      alloc_event(2, base + 5 * k2M, 3 * k2M),  // huge pages 5, 6, 7
      free_event(3, base),                   // huge page 0 still holds the straddler
      free_event(4, base + k2M - 32),
      free_event(5, base + 5 * k2M),
  };
  PagePolicy policy(21);
  EXPECT_EQ(footprint_after_each(policy, events),
            (std::vector<uint64_t>{k2M, 2 * k2M, 5 * k2M, 5 * k2M, 3 * k2M, 0}));
}

TEST(PagePolicy, SummaryHasPeakFinalAndFragmentation) {
  // 10 ms samples. Two 64-byte objects on different huge pages; one is freed at 25 ms.
  const uint64_t base = 0x40000000;
  VectorEventSource source({alloc_event(0, base, 64), alloc_event(1 * kMs, base + 4 * k2M, 64), free_event(25 * kMs, base),
                            alloc_event(31 * kMs, base + 4 * k2M + 64, 64)});
  PagePolicy policy(21);
  RunResult r = replay(source, policy, EngineOptions{10 * kMs});
  EXPECT_EQ(r.summary.peak_footprint_bytes, 2 * k2M);
  EXPECT_EQ(r.summary.final_footprint_bytes, k2M);
  EXPECT_EQ(r.summary.final_live_bytes, 128u);
  EXPECT_EQ(r.summary.peak_live_bytes, 128u);
  EXPECT_DOUBLE_EQ(r.summary.final_fragmentation_ratio, double(k2M) / 128);
  // Samples at 0, 10, 20, 30 ms and the final one at 31 ms.
  ASSERT_EQ(r.timeline.size(), 5u);
  EXPECT_EQ(r.timeline[0].time_ns, 0u);
  EXPECT_EQ(r.timeline[0].live_bytes, 0u);  // the state before the first event
  EXPECT_EQ(r.timeline[1].footprint_bytes, 2 * k2M);
  EXPECT_EQ(r.timeline[3].time_ns, 30 * kMs);
  EXPECT_EQ(r.timeline[3].footprint_bytes, k2M);
  EXPECT_EQ(r.timeline[3].live_bytes, 64u);
  EXPECT_EQ(r.timeline[4].time_ns, 31 * kMs);
  EXPECT_EQ(r.timeline[4].live_bytes, 128u);
  // Mean over samples with live > 0 of footprint/live: (4M/128, 4M/128, 2M/64, 2M/128) / 4.
  double expected = (2 * double(2 * k2M) / 128 + double(k2M) / 64 + double(k2M) / 128) / 4;
  EXPECT_NEAR(r.summary.average_fragmentation_ratio, expected, 1e-9);
}

}  // namespace
}  // namespace llamalloc::sim
