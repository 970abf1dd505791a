// After the peak: the one window of a timeline in which the simulator measures what a program keeps after its
// peak (docs/bench.md, "After the peak"). It is the window of every figure named after_peak (the summary's, and
// llama-oracle-best's objective); `llamalloc.after_peak.window` is the same rule in Python, for the tools that read
// a timeline or a run's samples.
//
// It starts after the peak: at the first sample after the last one whose live bytes are at least kPeakFraction of
// their maximum. It runs to the end of the program's quiet phase, whatever that phase keeps (5% of the peak is a
// quiet phase, not the end of the program); only the exit teardown is left out. The teardown is the final fall: the
// first sample k from the peak's end on, with live bytes, within the last kTeardownShare of the time since the first
// sample at the maximum, after which live bytes never come back above kTeardownFall of live[k] (the program frees
// at least half of what it held, and ends); the window ends with k. A fall followed by a longer phase than that is
// a phase of the program and stays in the window. When nothing is left between the peak and the teardown (live
// peaks at the end, or falls from its peak straight into the teardown): the peak's last sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/engine.h"

namespace llamalloc::sim {

inline constexpr double kPeakFraction = 0.9;
inline constexpr double kTeardownFall = 0.5;
inline constexpr double kTeardownShare = 0.1;

struct AfterPeak {
  size_t begin = 0, end = 0;    // the samples [begin, end) of the timeline; empty for an empty timeline
  uint64_t start_ns = 0;        // the time of its first sample
  uint64_t end_ns = 0;          // the time of its last sample
  uint64_t footprint_bytes = 0; // medians over the window (an even count: the mean of the middle two, rounded down)
  uint64_t heap_resident_bytes = 0;
  uint64_t live_bytes = 0;
};

// The window over a timeline given by its sample times and live bytes (equal lengths, times non-decreasing).
AfterPeak after_peak_window(const std::vector<uint64_t>& time_ns, const std::vector<uint64_t>& live_bytes);

// The window of a run's timeline, with the median footprint, heap-resident and live bytes over it.
AfterPeak after_peak(const std::vector<TimelineSample>& timeline);

}  // namespace llamalloc::sim
