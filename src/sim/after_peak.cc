#include "sim/after_peak.h"

#include <algorithm>

namespace llamalloc::sim {

namespace {

uint64_t median(std::vector<uint64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : v[n / 2 - 1] + (v[n / 2] - v[n / 2 - 1]) / 2;
}

}  // namespace

AfterPeak after_peak_window(const std::vector<uint64_t>& time_ns, const std::vector<uint64_t>& live_bytes) {
  AfterPeak w;
  size_t n = std::min(time_ns.size(), live_bytes.size());
  if (n == 0) return w;
  auto top_at = std::max_element(live_bytes.begin(), live_bytes.begin() + n);  // the first sample at the maximum
  uint64_t top = *top_at;
  size_t peak_end = 0;
  for (size_t i = 0; i < n; ++i)
    if (double(live_bytes[i]) >= kPeakFraction * double(top)) peak_end = i;
  // The teardown: the first sample k from the peak's end on, with live bytes, within the last kTeardownShare of the
  // time since the first sample at the maximum, whose live bytes the rest of the timeline never comes back above
  // kTeardownFall of. later[k] = max(live[k + 1 ..]).
  size_t end = n;
  double last = double(time_ns[n - 1]);
  double limit = last - kTeardownShare * (last - double(time_ns[top_at - live_bytes.begin()]));
  std::vector<uint64_t> later(n, 0);
  for (size_t k = n - 1; k-- > 0;) later[k] = std::max(later[k + 1], live_bytes[k + 1]);
  for (size_t k = peak_end; k + 1 < n; ++k) {
    if (live_bytes[k] != 0 && double(time_ns[k]) >= limit &&
        double(later[k]) <= kTeardownFall * double(live_bytes[k])) {
      end = k + 1;
      break;
    }
  }
  w.begin = peak_end + 1;
  w.end = end;
  if (w.begin >= w.end) {  // nothing between the peak and the teardown: the peak's last sample
    w.begin = peak_end;
    w.end = peak_end + 1;
  }
  w.start_ns = time_ns[w.begin];
  w.end_ns = time_ns[w.end - 1];
  return w;
}

AfterPeak after_peak(const std::vector<TimelineSample>& timeline) {
  std::vector<uint64_t> time_ns, live;
  time_ns.reserve(timeline.size());
  live.reserve(timeline.size());
  for (const TimelineSample& s : timeline) {
    time_ns.push_back(s.time_ns);
    live.push_back(s.live_bytes);
  }
  AfterPeak w = after_peak_window(time_ns, live);
  std::vector<uint64_t> footprint, resident, kept;
  for (size_t i = w.begin; i < w.end; ++i) {
    footprint.push_back(timeline[i].footprint_bytes);
    resident.push_back(timeline[i].heap_resident_bytes);
    kept.push_back(timeline[i].live_bytes);
  }
  w.footprint_bytes = median(std::move(footprint));
  w.heap_resident_bytes = median(std::move(resident));
  w.live_bytes = median(std::move(kept));
  return w;
}

}  // namespace llamalloc::sim
