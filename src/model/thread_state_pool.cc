// The pool of per-thread prediction states (thread_state_pool.h): claimed and released without a lock, warm
// caches of exited threads kept for the next thread on the same stack.
#include "thread_state_pool.h"

#include <pthread.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstring>

#include "module_map.h"

namespace llamalloc::model {

__thread ThreadState* t_thread_state = nullptr;

namespace {

// An exited thread's warm cache is dropped after this many trim passes (the sweeper's: about a second at the
// default LLAMALLOC_SWEEP_MS, as an idle thread's).
constexpr uint8_t kWarmPasses = 4;
// After a chunk could not be mapped (address space or data limit), this many claims that need a new chunk fail
// without trying again: a thread without a state asks for one at each of its allocations, and an mmap that fails
// at each would be a system call per allocation.
constexpr uint32_t kMapRetryAfterClaims = 1024;
constexpr size_t kChunkBytes = sizeof(ThreadState) * kThreadStatesPerChunk;
// The chunks, each mapped when the first of its states is claimed (MAP_NORESERVE: pages cost only when a thread
// touches them; zero pages are valid empty states) and kept for the life of the process, so that a state
// pointer stays valid after its thread exits. Published with a compare-and-swap (release): a reader that loads a
// chunk's pointer (acquire) sees the mapping.
std::atomic<ThreadState*> g_chunks[kThreadStateChunks];
std::atomic<uint32_t> g_chunks_mapped{0};
std::atomic<uint32_t> g_map_retry_in{0};  // claims needing a chunk left to fail after a failed mapping
std::atomic<uint64_t> g_claimed[kMaxThreads / 64];
// States whose thread exited with its cache warm (set before the claimed bit is cleared, cleared by whoever
// claims the state next).
std::atomic<uint64_t> g_warm[kMaxThreads / 64];
std::atomic<uint32_t> g_states_used{0};  // high-water mark, for thread_states_used()
pthread_key_t g_state_key;
bool g_key_ok = false;  // written once, before chunk 0 is published
// The memo starts the state and the cache's entries follow it: [state, end of the entries) is what
// drop_cache_pages gives back, and the sizes after the entries stay.
static_assert(offsetof(ThreadState, memo) == 0 && offsetof(ThreadState, cache) == sizeof(ThreadState::memo) &&
                  offsetof(ThreadState, cache) % 4096 == 0,
              "the memo must be whole pages at the start of the state, and the cache must start a page");
constexpr size_t kDroppedBytes = offsetof(ThreadState, cache) + decltype(ThreadState::cache)::kEntriesBytes;
static_assert(kDroppedBytes % 4096 == 0, "the cache's entries must be whole pages");

// State i, whose chunk is mapped (it is claimed, warm or below the high-water mark of a mapped chunk).
ThreadState& state(unsigned i) {
  return g_chunks[i / kThreadStatesPerChunk].load(std::memory_order_acquire)[i % kThreadStatesPerChunk];
}

// Maps chunk c unless it is; false when it is not mapped and cannot be. Two threads may map it at once: the one
// whose compare-and-swap loses unmaps its copy, untouched, and both use the winner's.
bool map_chunk(unsigned c) {
  if (g_chunks[c].load(std::memory_order_acquire) != nullptr) return true;
  uint32_t skip = g_map_retry_in.load(std::memory_order_relaxed);
  while (skip != 0) {
    if (g_map_retry_in.compare_exchange_weak(skip, skip - 1, std::memory_order_relaxed)) return false;
  }
  void* p = mmap(nullptr, kChunkBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    g_map_retry_in.store(kMapRetryAfterClaims, std::memory_order_relaxed);
    return false;
  }
  ThreadState* expected = nullptr;
  if (!g_chunks[c].compare_exchange_strong(expected, static_cast<ThreadState*>(p), std::memory_order_acq_rel)) {
    munmap(p, kChunkBytes);
    return true;
  }
  g_chunks_mapped.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// The index of state s, or -1 when it is no state of the pool.
int index_of(const void* s) {
  uintptr_t at = reinterpret_cast<uintptr_t>(s);
  for (unsigned c = 0; c < kThreadStateChunks; ++c) {
    uintptr_t base = reinterpret_cast<uintptr_t>(g_chunks[c].load(std::memory_order_acquire));
    if (base == 0 || at < base || at >= base + kChunkBytes) continue;
    if ((at - base) % sizeof(ThreadState) != 0) return -1;
    return int(c * kThreadStatesPerChunk + (at - base) / sizeof(ThreadState));
  }
  return -1;
}

// The cache's and the memo's pages leave the resident set and read back as zeros: empty entries (key 0). Where
// madvise fails, the entries are cleared instead. shrink: both go back to their smallest size, for a state that
// no thread uses now (an idle thread's drop leaves the sizes: its owner may be predicting meanwhile, with its
// fast path's copy of the cache's size).
void drop_cache_pages(ThreadState* s, bool shrink) {
  if (madvise(s, kDroppedBytes, MADV_DONTNEED) != 0) {
    s->cache.clear();
    memset(s->memo, 0, sizeof s->memo);
  }
  if (shrink) {
    s->cache.reset_size();
    s->memo_grown = 0;
    s->memo_evictions = 0;
  }
}

void release_state(void* arg) {
  auto* s = static_cast<ThreadState*>(arg);
  int found = index_of(s);
  if (found < 0) return;  // (cannot happen: the key holds states of the pool only)
  size_t i = size_t(found);
  if (t_thread_state == s) t_thread_state = nullptr;
  s->view = nullptr;  // (the exiting thread's heap goes back to the heap pool)
  // The cache stays as it is for the next thread on the same stack (its keys hold this stack's frame addresses,
  // so they mean the same call paths there): a program that starts a thread per task would otherwise run the
  // model on every context of every new thread. drop_cold_warm_states() drops it if no such thread comes within
  // about a second. A thread that never ran the model has nothing worth keeping.
  if (s->stack_top.load(std::memory_order_relaxed) != 0) {
    s->warm_passes = 0;
    g_warm[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_relaxed);
  } else {
    drop_cache_pages(s, true);
  }
  g_claimed[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_release);
}

// Takes state i if it is unclaimed; true when taken. Its chunk must be mapped, so that every state below the
// high-water mark that was ever claimed can be read.
bool try_claim(unsigned i) {
  uint64_t bit = uint64_t{1} << (i % 64);
  uint64_t bits = g_claimed[i / 64].load(std::memory_order_relaxed);
  while ((bits & bit) == 0) {
    if (g_claimed[i / 64].compare_exchange_weak(bits, bits | bit, std::memory_order_acquire)) {
      uint32_t used = g_states_used.load(std::memory_order_relaxed);
      while (used < i + 1 && !g_states_used.compare_exchange_weak(used, i + 1)) {
      }
      return true;
    }
  }
  return false;
}

// State i, just claimed, for a new thread whose stack holds `here`: kept as it is when it is warm from a thread
// that ran on the very mapping this thread's stack is (read again from /proc/self/maps, as the thread's first
// model run would: stale bounds would let the frame walks read past the stack); otherwise from an empty cache
// (a warm one dropped) and no stack bounds yet.
ThreadState* start_state(unsigned i, uintptr_t here) {
  ThreadState& s = state(i);
  s.busy = false;
  s.view = nullptr;  // (set by the new thread's LearnedPredictor::thread_cache)
  bool warm = (g_warm[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_relaxed) >> (i % 64) & 1) != 0;
  if (warm) {
    uintptr_t low = 0;
    bool main_thread = false;
    uintptr_t top = mapping_end(here, &main_thread, &low);
    if (top != 0 && top == s.stack_top.load(std::memory_order_relaxed) &&
        low == s.stack_low.load(std::memory_order_relaxed) && main_thread == s.main_thread)
      return &s;
    drop_cache_pages(&s, true);
  }
  s.stack_low.store(0, std::memory_order_relaxed);
  s.stack_top.store(0, std::memory_order_relaxed);
  s.main_thread = false;
  // Every context of an empty cache is new: its first hits are checked densely (schedule_check).
  s.young_until = s.counters.hits.load(std::memory_order_relaxed) + kYoungCheckHits;
  return &s;
}

// A claimed state for a new thread whose stack holds `here`. First a warm state of an exited thread that ran on
// the same stack mapping (glibc reuses the stacks of joined threads, and a new mapping usually lands where the
// old one was): its cache and stack bounds are kept. Otherwise the first free state, from an empty cache: never
// used, or dropped (an exited thread's warm cache from another stack is dropped here; clearing a never-used one
// would make all 32 KiB resident). The counters are kept (they are totals of the process).
ThreadState* claim_state(uintptr_t here) {
  if (g_chunks[0].load(std::memory_order_relaxed) == nullptr) return nullptr;  // (not started)
  for (unsigned w = 0; w < kMaxThreads / 64; ++w) {
    uint64_t warm = g_warm[w].load(std::memory_order_relaxed) & ~g_claimed[w].load(std::memory_order_relaxed);
    while (warm != 0) {
      unsigned i = w * 64 + unsigned(__builtin_ctzll(warm));
      warm &= warm - 1;
      ThreadState& s = state(i);
      if (here < s.stack_low.load(std::memory_order_relaxed) || here >= s.stack_top.load(std::memory_order_relaxed))
        continue;
      if (!try_claim(i)) continue;
      // Ours now; still the warm state we matched unless it was claimed, used and released between the two.
      return start_state(i, here);
    }
  }
  // A cold state first, so that the warm ones stay for their stacks' next threads; a warm one only if all are.
  // The lowest free one, so that chunks fill in order and a new chunk is mapped only when those before it are
  // full; where it cannot be mapped, the thread goes without a state.
  for (bool take_warm : {false, true}) {
    for (unsigned w = 0; w < kMaxThreads / 64; ++w) {
      uint64_t skip = g_claimed[w].load(std::memory_order_relaxed) |
                      (take_warm ? 0 : g_warm[w].load(std::memory_order_relaxed));
      while (~skip != 0) {
        unsigned i = w * 64 + unsigned(__builtin_ctzll(~skip));
        skip |= uint64_t{1} << (i % 64);
        if (!map_chunk(i / kThreadStatesPerChunk)) return nullptr;
        if (!try_claim(i)) continue;
        return start_state(i, here);
      }
    }
  }
  return nullptr;
}

}  // namespace

// Drops the caches of exited threads that no new thread took within kWarmPasses calls (the sweeper's passes).
// Each is claimed while it is dropped, so a thread being created cannot take it half-dropped.
void drop_cold_warm_states() {
  uint32_t used = g_states_used.load(std::memory_order_acquire);
  for (unsigned w = 0; w * 64 < used; ++w) {
    uint64_t warm = g_warm[w].load(std::memory_order_relaxed) & ~g_claimed[w].load(std::memory_order_relaxed);
    while (warm != 0) {
      unsigned i = w * 64 + unsigned(__builtin_ctzll(warm));
      warm &= warm - 1;
      if (!try_claim(i)) continue;
      ThreadState& s = state(i);
      if ((g_warm[w].load(std::memory_order_relaxed) >> (i % 64) & 1) != 0 && ++s.warm_passes >= kWarmPasses) {
        g_warm[w].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_relaxed);
        drop_cache_pages(&s, true);
        s.stack_low.store(0, std::memory_order_relaxed);
        s.stack_top.store(0, std::memory_order_relaxed);
      }
      g_claimed[w].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_release);
    }
  }
}

bool map_thread_states() {
  // The key before the first chunk: a thread can claim a state once chunk 0 is there, and its state must go
  // back at its exit. (pthread_once: two predictors starting at once make one key.)
  static pthread_once_t key_once = PTHREAD_ONCE_INIT;
  pthread_once(&key_once, [] { g_key_ok = pthread_key_create(&g_state_key, release_state) == 0; });
  return map_chunk(0);
}

ThreadState* claim_thread_state(uintptr_t here) {
  ThreadState* s = claim_state(here);
  if (s == nullptr) return nullptr;
  t_thread_state = s;
  if (g_key_ok) pthread_setspecific(g_state_key, s);
  return s;
}

const ThreadState* thread_state_at(uint32_t i) {
  if (i >= kMaxThreads) return nullptr;
  const ThreadState* chunk = g_chunks[i / kThreadStatesPerChunk].load(std::memory_order_acquire);
  return chunk == nullptr ? nullptr : &chunk[i % kThreadStatesPerChunk];
}

uint32_t thread_states_used() { return g_states_used.load(std::memory_order_acquire); }

uint32_t thread_state_chunks_mapped() { return g_chunks_mapped.load(std::memory_order_relaxed); }

bool drop_thread_state_cache(const void* entries) {
  if (entries == nullptr) return false;
  int i = index_of(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(entries) - offsetof(ThreadState, cache)));
  if (i < 0) return false;  // not one of ours
  drop_cache_pages(&state(unsigned(i)), false);
  return true;
}

}  // namespace llamalloc::model
