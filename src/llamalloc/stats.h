// Statistics: every counter is declared once, here (as mimalloc's MI_STAT_FIELDS). The JSON file of
// DESIGN.md is written from these at exit (LLAMALLOC_STATS=path) without calling malloc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"

namespace llamalloc {

// Event counters (name, meaning). Prediction counters are filled by the learned predictor; the default
// predictor never runs a model, so they stay zero.
#define LLAMALLOC_COUNTERS(X)                                                                   \
  X(block_spans_handed_out, "block spans given to thread-local allocators")                     \
  X(blocks_recycled, "free blocks of active longer-lived huge pages reused for a shorter class") \
  X(lines_recycled, "free lines reused in partially free block spans")                          \
  X(overflow_allocations, "small objects placed in an overflow span")                           \
  X(deadlines_expired, "huge page deadlines that expired")                                      \
  X(promotions, "huge pages moved to the next longer lifetime class")                           \
  X(demotions, "huge pages moved to the next shorter lifetime class")                           \
  X(huge_pages_released, "huge pages returned to the OS")                                       \
  X(prediction_cache_hits, "predictions answered from the prediction cache")                    \
  X(prediction_cache_misses, "predictions that missed the cache")                               \
  X(model_runs, "runs of the lifetime model")                                                   \
  X(prediction_ns, "time spent in model runs (stack walk, tokens, model), ns")                  \
  X(repredictions_changed, "periodic re-predictions that changed a cached class")

struct Counters {
#define LLAMALLOC_DECLARE_COUNTER(name, help) std::atomic<uint64_t> name{0};
  LLAMALLOC_COUNTERS(LLAMALLOC_DECLARE_COUNTER)
#undef LLAMALLOC_DECLARE_COUNTER
};

// Gauges of one heap: footprint is kept by the global allocator under its lock; live bytes are summed from
// per-thread deltas, flushed on a slow path once they exceed kLiveFlushBytes (and at thread exit), so
// peak_live_bytes may miss a peak by about that much per thread.
struct Gauges {
  std::atomic<int64_t> live_bytes{0};
  std::atomic<int64_t> peak_live_bytes{0};
  uint64_t footprint_bytes = 0;       // global lock
  uint64_t peak_footprint_bytes = 0;  // global lock
  uint64_t huge_pages_by_class[kMaxClasses] = {};
};

inline constexpr int64_t kLiveFlushBytes = 256 * 1024;

inline void add_live_bytes(Gauges& g, int64_t delta) {
  int64_t now = g.live_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = g.peak_live_bytes.load(std::memory_order_relaxed);
  while (now > peak && !g.peak_live_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

class GlobalAllocator;

// Formats the statistics JSON of `heap` (and this process's RSS) into buf; returns its length, or 0 when it
// does not fit. No allocation.
size_t format_stats_json(GlobalAllocator& heap, char* buf, size_t capacity);
// Writes the JSON to `path` through a temporary file and rename(2). false (and errno) on failure. "%p" in the
// path becomes the process id (every process that inherits LLAMALLOC_STATS writes the file at its exit).
bool write_stats_file(GlobalAllocator& heap, const char* path);
// Writes the JSON, and a newline, to stderr (llamalloc_stats_print). No allocation.
void print_stats(GlobalAllocator& heap);
// `pattern` with %p replaced by the process id; false if it does not fit.
bool expand_stats_path(const char* pattern, char* out, size_t capacity);

}  // namespace llamalloc
