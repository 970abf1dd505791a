// The quiet phase after a load peak, shared by the workloads (docs/workloads.md, "Steady state"): the program
// keeps its long-lived state live, does what an idle server does (the caller's `tick`), and samples its memory
// several times a second: RSS and AnonHugePages from /proc/self/smaps_rollup and, when the process runs under
// libllamalloc.so (llamalloc_stats_json found with dlsym, so the program runs under any allocator), llamalloc's
// own footprint and live bytes. The means go into the workload's JSON under "steady_state".
//
// Sampling allocates nothing: /proc is read with read(2) into a stack buffer and llamalloc's statistics are
// written into another, so the samples do not disturb the heap they measure.
#ifndef LLAMALLOC_WORKLOADS_STEADY_STATE_H
#define LLAMALLOC_WORKLOADS_STEADY_STATE_H

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace steady_state {

struct Resident {
  std::uint64_t rss_bytes = 0;
  std::uint64_t anon_huge_pages_bytes = 0;
};

// "Key:   <n> kB" of /proc/self/smaps_rollup, in bytes; 0 when absent.
inline std::uint64_t kib_field(const char* text, const char* key) {
  const char* at = std::strstr(text, key);
  if (at == nullptr) return 0;
  return std::strtoull(at + std::strlen(key), nullptr, 10) * 1024;
}

inline Resident read_resident() {
  Resident resident;
  char buffer[8192];
  int fd = ::open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return resident;
  std::size_t used = 0;
  for (;;) {
    ssize_t n = ::read(fd, buffer + used, sizeof(buffer) - 1 - used);
    if (n <= 0) break;
    used += static_cast<std::size_t>(n);
    if (used == sizeof(buffer) - 1) break;
  }
  ::close(fd);
  buffer[used] = '\0';
  resident.rss_bytes = kib_field(buffer, "\nRss:");
  resident.anon_huge_pages_bytes = kib_field(buffer, "\nAnonHugePages:");
  return resident;
}

// A top-level number of llamalloc's statistics JSON ("\"live_bytes\": 123"); -1 when absent.
inline long double json_number(const char* json, const char* quoted_key) {
  const char* at = std::strstr(json, quoted_key);
  if (at == nullptr) return -1;
  at += std::strlen(quoted_key);
  while (*at == ' ' || *at == ':') ++at;
  char* end = nullptr;
  unsigned long long value = std::strtoull(at, &end, 10);
  return end == at ? -1 : static_cast<long double>(value);
}

class QuietPhase {
 public:
  using StatsJson = std::size_t (*)(char*, std::size_t);

  explicit QuietPhase(double seconds, double interval_seconds = 0.2)
      : seconds_(seconds), interval_seconds_(interval_seconds) {
    stats_json_ = reinterpret_cast<StatsJson>(dlsym(RTLD_DEFAULT, "llamalloc_stats_json"));
  }

  bool enabled() const { return seconds_ > 0; }

  // Runs the phase: every interval, `tick()` (the idle server's work; returns the workload's own live bytes, or
  // a negative number when it has no such figure), then one sample. The first sample is taken at once.
  template <typename Tick>
  void run(Tick&& tick) {
    if (!enabled()) return;
    const auto start = std::chrono::steady_clock::now();
    const auto interval = std::chrono::duration<double>(interval_seconds_);
    for (std::uint64_t i = 0;; ++i) {
      const auto due = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval * double(i));
      if (due - start > std::chrono::duration<double>(seconds_)) break;
      std::this_thread::sleep_until(due);
      const double workload_live = static_cast<double>(tick());
      sample(workload_live);
    }
    elapsed_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  void run() {
    run([] { return -1.0; });
  }

  // The "steady_state" object (without the key), with `extra` ("\"key\": value, ...") appended; "null" when the
  // phase was disabled.
  std::string json(const std::string& extra = "") const {
    if (!enabled() || samples_ == 0) return "null";
    char text[1024];
    const double n = static_cast<double>(samples_);
    int used = std::snprintf(text, sizeof text,
                             "{\"seconds\": %.3f, \"interval_seconds\": %.3f, \"samples\": %" PRIu64
                             ", \"rss_bytes\": %.0f, \"anon_huge_pages_bytes\": %.0f, \"max_rss_bytes\": %" PRIu64
                             ", \"last_rss_bytes\": %" PRIu64,
                             elapsed_, interval_seconds_, samples_, rss_sum_ / n, anon_sum_ / n, max_rss_,
                             last_rss_);
    std::string out(text, static_cast<std::size_t>(used));
    if (llamalloc_samples_ > 0) {
      const double m = static_cast<double>(llamalloc_samples_);
      used = std::snprintf(text, sizeof text,
                           ", \"llamalloc_footprint_bytes\": %.0f, \"llamalloc_live_bytes\": %.0f, "
                           "\"llamalloc_samples\": %" PRIu64,
                           footprint_sum_ / m, live_sum_ / m, llamalloc_samples_);
      out.append(text, static_cast<std::size_t>(used));
    }
    if (workload_samples_ > 0) {
      used = std::snprintf(text, sizeof text, ", \"workload_live_bytes\": %.0f",
                           workload_live_sum_ / static_cast<double>(workload_samples_));
      out.append(text, static_cast<std::size_t>(used));
    }
    if (!extra.empty()) out += ", " + extra;
    out += "}";
    return out;
  }

 private:
  void sample(double workload_live) {
    const Resident resident = read_resident();
    ++samples_;
    rss_sum_ += static_cast<double>(resident.rss_bytes);
    anon_sum_ += static_cast<double>(resident.anon_huge_pages_bytes);
    if (resident.rss_bytes > max_rss_) max_rss_ = resident.rss_bytes;
    last_rss_ = resident.rss_bytes;
    if (workload_live >= 0) {
      ++workload_samples_;
      workload_live_sum_ += workload_live;
    }
    if (stats_json_ != nullptr) {
      std::size_t n = stats_json_(stats_buffer_, sizeof(stats_buffer_) - 1);
      if (n > 0) {
        stats_buffer_[n] = '\0';
        const long double footprint = json_number(stats_buffer_, "\"footprint_bytes\"");
        const long double live = json_number(stats_buffer_, "\"live_bytes\"");
        if (footprint >= 0 && live >= 0) {
          ++llamalloc_samples_;
          footprint_sum_ += static_cast<double>(footprint);
          live_sum_ += static_cast<double>(live);
        }
      }
    }
  }

  double seconds_;
  double interval_seconds_;
  double elapsed_ = 0;
  StatsJson stats_json_ = nullptr;
  char stats_buffer_[16384];
  std::uint64_t samples_ = 0, llamalloc_samples_ = 0, workload_samples_ = 0;
  std::uint64_t max_rss_ = 0, last_rss_ = 0;
  double rss_sum_ = 0, anon_sum_ = 0, footprint_sum_ = 0, live_sum_ = 0, workload_live_sum_ = 0;
};

// Parses the value of --quiet-seconds: a non-negative number of seconds; false when it is not one.
inline bool parse_seconds(const char* text, double& out) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || !(value >= 0) || value > 86400) return false;
  out = value;
  return true;
}

}  // namespace steady_state

#endif  // LLAMALLOC_WORKLOADS_STEADY_STATE_H
