#include "sim/after_peak.h"

#include <gtest/gtest.h>

#include <vector>

namespace llamalloc::sim {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kMiB = 1 << 20;

// One sample every 10 ms: `peak` samples at 100 MiB, one at 40 MiB on the way down, `quiet` samples at `kept`
// MiB, then `teardown` samples at `after` MiB (the exit's frees).
std::vector<TimelineSample> timeline(int peak, int quiet, uint64_t kept, int teardown, uint64_t after) {
  std::vector<TimelineSample> t;
  auto add = [&](uint64_t live, uint64_t footprint) {
    TimelineSample s;
    s.time_ns = 10 * kMs * t.size();
    s.live_bytes = live;
    s.footprint_bytes = footprint;
    t.push_back(s);
  };
  for (int i = 0; i < peak; ++i) add(100 * kMiB, 110 * kMiB);
  add(40 * kMiB, 110 * kMiB);
  for (int i = 0; i < quiet; ++i) add(kept, 20 * kMiB);
  for (int i = 0; i < teardown; ++i) add(after, 2 * kMiB);
  return t;
}

TEST(AfterPeak, AQuietPhaseThatKeepsFivePercentIsInTheWindowAndTheExitTeardownIsNot) {
  // The 10% rule of before ended the window where live fell below 10 MiB: at the drop, so the quiet phase's
  // 20 MiB of footprint was never seen.
  auto t = timeline(50, 400, 5 * kMiB + kMiB / 2, 2, kMiB / 8);
  AfterPeak a = after_peak(t);
  EXPECT_EQ(a.begin, 50u);          // the drop's sample: the first one below 90% of the peak
  EXPECT_EQ(a.end, 50u + 1 + 400);  // the quiet phase's last sample; the teardown's two are out
  EXPECT_EQ(a.start_ns, 500 * kMs);
  EXPECT_EQ(a.end_ns, 4500 * kMs);
  EXPECT_EQ(a.footprint_bytes, 20 * kMiB);
  EXPECT_EQ(a.live_bytes, 5 * kMiB + kMiB / 2);
}

TEST(AfterPeak, ATraceThatEndsInItsQuietPhaseHasNoTeardown) {
  auto t = timeline(50, 400, 5 * kMiB, 0, 0);
  AfterPeak a = after_peak(t);
  EXPECT_EQ(a.begin, 50u);
  EXPECT_EQ(a.end, t.size());
  EXPECT_EQ(a.footprint_bytes, 20 * kMiB);
}

TEST(AfterPeak, AFallThatTakesLongerThanTheTeardownShareIsAPhaseOfTheProgram) {
  // 100 quiet samples, then 100 at a tenth of that: the second phase is a tenth of the time after the peak and
  // more, so it is kept.
  auto t = timeline(10, 100, 10 * kMiB, 100, kMiB);
  AfterPeak a = after_peak(t);
  EXPECT_EQ(a.end, t.size());
}

TEST(AfterPeak, AFallFromThePeakStraightIntoTheTeardownLeavesThePeaksLastSample) {
  // An allocator that keeps 95% of its peak resident through the quiet phase, then gives memory back at exit.
  std::vector<TimelineSample> t(112);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i].time_ns = i * 10 * kMs;
    t[i].live_bytes = (i < 10 ? 100 : i < 110 ? 95 : 30) * kMiB;
    t[i].footprint_bytes = t[i].live_bytes;
  }
  AfterPeak a = after_peak(t);
  EXPECT_EQ(a.begin, 109u);
  EXPECT_EQ(a.end, 110u);
  EXPECT_EQ(a.footprint_bytes, 95 * kMiB);
}

TEST(AfterPeak, NothingAfterThePeakIsThePeaksLastSample) {
  std::vector<TimelineSample> t(5);
  for (size_t i = 0; i < t.size(); ++i) {
    t[i].time_ns = i * 10 * kMs;
    t[i].live_bytes = (i + 1) * kMiB;
    t[i].footprint_bytes = 2 * (i + 1) * kMiB;
  }
  AfterPeak a = after_peak(t);
  EXPECT_EQ(a.begin, 4u);
  EXPECT_EQ(a.end, 5u);
  EXPECT_EQ(a.footprint_bytes, 10 * kMiB);
  EXPECT_EQ(after_peak(std::vector<TimelineSample>{}).end, 0u);
}

TEST(AfterPeak, AnEvenWindowsMedianIsTheMeanOfItsMiddleTwoRoundedDown) {
  std::vector<uint64_t> times = {0, 1, 2, 3}, live = {10, 5, 5, 5};
  AfterPeak w = after_peak_window(times, live);
  EXPECT_EQ(w.begin, 1u);
  EXPECT_EQ(w.end, 4u);
  std::vector<TimelineSample> t(5);
  uint64_t foot[] = {9, 3, 4, 6, 1};
  for (size_t i = 0; i < t.size(); ++i) {
    t[i].time_ns = i;
    t[i].live_bytes = i == 0 ? 10 : 5;
    t[i].footprint_bytes = foot[i];
  }
  EXPECT_EQ(after_peak(t).footprint_bytes, 3u);  // 1, 3, 4, 6: (3 + 4) / 2 rounded down
}

}  // namespace
}  // namespace llamalloc::sim
