// Pure functions of the profiler: the byte-countdown sampler.
// No OS calls, so tests/profiler/sampling_test.cc checks them directly.
#pragma once

#include <cmath>
#include <cstdint>

#include "vocabulary.h"
#include "trace_format.h"

namespace llamalloc::prof {

// The lifetime classes (llamalloc::lifetime_class_of) and the profile's size bucket
// (llamalloc::profile_size_bucket) are the shared vocabulary of vocabulary.h.

// TCMalloc's sampler: the bytes until the next sample are drawn from an exponential distribution of mean
// sample_bytes, so every byte has the same chance 1/sample_bytes of being sampled whatever the allocation
// pattern. A sampled allocation of s bytes stands for 1 / (1 - exp(-s / sample_bytes)) allocations.
class Sampler {
 public:
  void init(uint64_t sample_bytes, uint64_t seed) {
    sample_bytes_ = sample_bytes;
    rng_ = seed | 1;
    bytes_until_sample_ = next_interval();
  }

  // The fast path: counts the allocation down and returns true when it is not to be sampled; false means
  // "maybe sampled" (also for a sampler not initialised yet), and record_allocation must decide.
  bool try_count_down(uint64_t size_bytes) {
    if (bytes_until_sample_ > static_cast<int64_t>(size_bytes)) {
      bytes_until_sample_ -= static_cast<int64_t>(size_bytes);
      return true;
    }
    return false;
  }

  // True when this allocation is to be sampled.
  bool record_allocation(uint64_t size_bytes) {
    if (sample_bytes_ <= 1) return true;
    if (try_count_down(size_bytes)) return false;
    bytes_until_sample_ = next_interval();
    return true;
  }

  static double weight(uint64_t size_bytes, uint64_t sample_bytes) {
    if (sample_bytes <= 1) return 1.0;
    double s = size_bytes == 0 ? 1.0 : static_cast<double>(size_bytes);
    return 1.0 / (-std::expm1(-s / static_cast<double>(sample_bytes)));
  }

 private:
  int64_t next_interval() {
    // xorshift64*; 53 random bits give u in (0, 1].
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    uint64_t r = rng_ * 0x2545F4914F6CDD1DULL;
    double u = (static_cast<double>(r >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double interval = -std::log(u) * static_cast<double>(sample_bytes_);
    if (interval > 1e15) interval = 1e15;
    return static_cast<int64_t>(interval) + 1;
  }

  // No initialisers: the sampler lives in zero-initialised thread-local storage and init() runs on first use.
  uint64_t sample_bytes_;
  uint64_t rng_;
  int64_t bytes_until_sample_;
};

}  // namespace llamalloc::prof
