// The pool of per-thread prediction states: one ThreadState per thread that predicts, from an array mapped once.
// Rules: never malloc (the pool serves the allocator itself); no lock (a state is claimed with a compare-and-swap
// on a bitmap and handed back by a pthread key destructor), so fork is safe; a state's cache is whole pages, so
// it can be given back with MADV_DONTNEED and read back as empty. An exited thread's warm cache is kept for the
// next thread that runs on the same stack, since its keys hold that stack's frame addresses.
#pragma once

#include <atomic>
#include <cstdint>

#include "prediction_cache.h"

namespace llamalloc::model {

// Per-thread state, from a pool mapped once (never malloc): the cache and its counters. Page-aligned, so that the
// cache is whole pages that can be given back (MADV_DONTNEED, reading back as an empty cache) when the thread
// stays idle (drop_thread_cache) and about a second after it exits (trim); the counters and the rest are on the
// page after it. An exited thread's cache stays warm for that second and goes to the next thread that runs on
// the same stack (docs/prediction.md).
// A thread state's first this many prediction cache hits from an empty cache are young: its entries are checked
// every 1 to kYoungCheckEvery hits instead of every 1 to kPredictionCheckEvery (LearnedPredictor::schedule_check).
inline constexpr uint64_t kYoungCheckHits = uint64_t{1} << 16;
inline constexpr uint32_t kYoungCheckEvery = 8;

struct alignas(4096) ThreadState {
  static constexpr unsigned kLogCacheEntries = 11;  // 2048 entries x 16 B = 32 KiB per thread
  PredictionCache<kLogCacheEntries> cache;
  CacheCounters counters;
  // The mapping holding this thread's stack, [stack_low, stack_top); 0 until its first model run. Atomic (relaxed)
  // because a thread being created reads them in states it has not claimed yet, to find its stack's warm cache.
  std::atomic<uintptr_t> stack_low{0}, stack_top{0};
  bool main_thread = false; // its stack is the process's [stack]
  bool busy = false;        // a prediction is running (a signal handler that allocates gets the default)
  uint8_t warm_passes = 0;  // trim passes since its thread exited with the cache warm
  int32_t pending_sample = -1;  // online learning: the context whose allocation predict() asked to sample
  uint64_t check_rng = 0;       // next_check_after()'s generator (seeded at the first check: 0 is not a seed)
  uint64_t young_until = 0;     // counters.hits below this: young (set when a thread starts from an empty cache)
};

// Most threads that hold a state at once.
inline constexpr unsigned kMaxThreads = 4096;

// Maps the pool (once; later calls return true). false: the mapping failed.
bool map_thread_states();
// The calling thread's state: one initial-exec TLS load once claimed; null when the pool is not mapped or full.
extern __thread ThreadState* t_thread_state __attribute__((tls_model("initial-exec")));
ThreadState* claim_thread_state(uintptr_t here);
inline ThreadState* this_thread_state() {
  ThreadState* s = t_thread_state;
  if (__builtin_expect(s != nullptr, 1)) return s;
  return claim_thread_state(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
}
// Every state ever claimed (threads that exited included): [0, thread_states_used()).
const ThreadState* thread_states();
uint32_t thread_states_used();
// Drops the cache of the state whose cache starts at `entries`; false when it is no state of the pool.
bool drop_thread_state_cache(const void* entries);
// Drops the caches of exited threads that no new thread took within a few calls (the sweeper's passes).
void drop_cold_warm_states();

}  // namespace llamalloc::model
