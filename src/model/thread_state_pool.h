// The pool of per-thread prediction states: one ThreadState per thread that predicts, from chunks of
// kThreadStatesPerChunk states mapped as threads claim them.
// Rules: never malloc (the pool serves the allocator itself); no lock (a state is claimed with a compare-and-swap
// on a bitmap and handed back by a pthread key destructor, a chunk is published with a compare-and-swap), so
// fork is safe; address space grows with the threads in use, not with kMaxThreads (a process under `ulimit -v`
// pays for the threads it has); a state's cache and memo are whole pages, so they can be given back with
// MADV_DONTNEED and read back as empty. An exited thread's warm cache is kept for the next thread that runs on the same stack,
// since its keys hold that stack's frame addresses.
#pragma once

#include <atomic>
#include <cstdint>

#include "prediction_cache.h"

namespace llamalloc::model {

// Per-thread state, from the pool's chunks (never malloc): the memo, the cache and their counters. Page-aligned,
// so that the memo and the cache's entries are whole pages that can be given back (MADV_DONTNEED, reading back
// as empty) when the thread stays idle (drop_thread_cache) and about a second after it exits (trim); their sizes,
// the counters and the rest are on the page after them. An exited thread's cache stays warm for that second and
// goes to the next thread that runs on the same stack (docs/prediction.md).
// Both tables start at one page and double while they overflow (PredictionCache::grow_if_crowded,
// LearnedPredictor::grow_memo_if_crowded): a thread of a few dozen contexts keeps a few pages resident, not 64 KiB.
// A thread state's first this many prediction cache hits from an empty cache are young: its entries are checked
// every 1 to kYoungCheckEvery hits instead of every 1 to kPredictionCheckEvery (LearnedPredictor::schedule_check).
inline constexpr uint64_t kYoungCheckHits = uint64_t{1} << 16;
inline constexpr uint32_t kYoungCheckEvery = 8;

struct alignas(4096) ThreadState {
  // The model's answers by context (return address, size bucket, callers: OnlineLearner::context_key), not by
  // the cache's key, which holds the stack height: a recursion (an AST builder, a parser, an interpreter)
  // allocates from one call path at hundreds of depths, each a miss of the cache whose entry also went through
  // the trial of an unseen path, and each of those ran the model on its deep stack (ast-builder with its model:
  // 287,000 runs, 22 s against 0.6 s without). A miss whose context is here takes its answer, and so does the
  // end of a trial once another depth of the context has ended its own (LearnedPredictor::model_answer).
  // Direct-mapped by the key's top memo_log() bits: 512 contexts (one page) at first, doubled while answers
  // overwrite others, up to 4,096 (32 KiB); touched as used, dropped with the cache. A slot is the context key's
  // top 48 bits and the answer in its low 16 (kMemoAnswerMask), one page for both; 0: empty.
  static constexpr unsigned kLogMemo = 12, kMinLogMemo = 9;
  static constexpr uint64_t kMemoAnswerMask = 0xFFFF;
  uint64_t memo[1u << kLogMemo];
  // 256 entries (one page) at first, up to 2,048 (32 KiB).
  static constexpr unsigned kLogCacheEntries = 11, kMinLogCacheEntries = 8;
  PredictionCache<kLogCacheEntries, kMinLogCacheEntries> cache;
  CacheCounters counters;
  uint8_t memo_grown = 0;        // memo_log() - kMinLogMemo
  uint32_t memo_evictions = 0;   // answers that overwrote another context's, since memo_window_misses
  uint64_t memo_window_misses = 0;
  static constexpr uint64_t kMemoGrowWindowMisses = uint64_t{1} << 16;
  unsigned memo_log() const { return kMinLogMemo + memo_grown; }
  // The fast path's copy of the cache's size (the owning heap's PredictionCacheView), set by
  // LearnedPredictor::thread_cache and kept up to date when the cache grows; null until then.
  PredictionCacheView* view = nullptr;
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
// States mapped together when the first of them is claimed: 32 x 68 KiB = 2.1 MiB of address space, so a
// process of a few threads maps one chunk, and one of 4,096 maps 128 (one mmap per 32 threads).
inline constexpr unsigned kThreadStatesPerChunk = 32;
inline constexpr unsigned kThreadStateChunks = kMaxThreads / kThreadStatesPerChunk;
static_assert(kMaxThreads % kThreadStatesPerChunk == 0 && 64 % kThreadStatesPerChunk == 0,
              "a chunk is whole and lies within one word of the claim bitmap");

// Maps the pool's first chunk (once; later calls return true), so that a predictor that starts has states for
// its first threads. false: the mapping failed.
bool map_thread_states();
// The calling thread's state: one initial-exec TLS load once claimed; null when the pool is not mapped, full,
// or a new chunk could not be mapped (the thread then predicts without a state, as when the pool is full).
extern __thread ThreadState* t_thread_state __attribute__((tls_model("initial-exec")));
ThreadState* claim_thread_state(uintptr_t here);
inline ThreadState* this_thread_state() {
  ThreadState* s = t_thread_state;
  if (__builtin_expect(s != nullptr, 1)) return s;
  return claim_thread_state(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
}
// Every state ever claimed (threads that exited included) is one of thread_state_at(i) for i in
// [0, thread_states_used()); null where i's chunk is not mapped (a chunk skipped while another was mapped).
const ThreadState* thread_state_at(uint32_t i);
uint32_t thread_states_used();
// Chunks mapped so far (at most kThreadStateChunks).
uint32_t thread_state_chunks_mapped();
// Drops the cache of the state whose cache starts at `entries`; false when it is no state of the pool.
bool drop_thread_state_cache(const void* entries);
// Drops the caches of exited threads that no new thread took within a few calls (the sweeper's passes).
void drop_cold_warm_states();

}  // namespace llamalloc::model
