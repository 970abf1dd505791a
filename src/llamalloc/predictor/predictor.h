// The one predictor interface: where the lifetime class of an allocation comes from (the LLAMA paper, section 7).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "vocabulary.h"

#define LLAMALLOC_PREDICTOR_INLINE inline __attribute__((always_inline))

namespace llamalloc {

struct Counters;

// What the allocation path knows about an allocation without unwinding: the caller's return address, the
// stack height (the frame address) and the size. The learned predictor hashes these into its cache (the LLAMA
// paper, Figure 7).
struct AllocationContext {
  uintptr_t return_address;
  uintptr_t stack_address;
  size_t size_bytes;
};

// How often the heap consults the predictor.
enum class Consult : uint8_t {
  // Once per slow-path entry of a thread (a span is used up, a large object): the class it
  // returns is kept by the thread and used by the fast path until the next slow path. No per-allocation cost.
  kOnRefill,
  // On every allocation (a context-sensitive model with its own per-thread cache): the fast path hands each
  // allocation to the predictor first.
  kEveryAllocation,
};

// One entry of a context-sensitive predictor's per-thread prediction cache (the LLAMA paper, Figure 7), laid out
// for the allocation fast path, which probes it inline (see heap_malloc) and only calls the predictor on a miss
// or when an entry is due for re-prediction.
struct PredictionCacheEntry {
  uint64_t key;  // prediction_cache_key(); 0 = empty
  uint32_t hits;  // since the last model run for this entry; kDeepEntryHits: a key of several call paths
  uint8_t lifetime_class;
  uint8_t backoff;  // the entry is re-predicted every repredict_every << backoff hits
  uint16_t context;  // an even tag of the callers above frame 0 (0: not known yet), to find keys shared by call
                    // paths; the low bit: on an unseen-path trial (model/prediction_cache.h)
};

// `hits` of an entry whose key two call paths were found to share (a wrapper such as redis's zmalloc: the same
// return address at the same stack height). hits + 1 wraps to 0, which fails the fast path's test, so each
// allocation with that key goes to the predictor, which keys it again with its callers' return addresses
// (docs/prediction.md).
inline constexpr uint32_t kDeepEntryHits = UINT32_MAX;
// Every this many hits of an entry the fast path goes to the predictor, which checks that the allocation came
// by the entry's call path (a few loads up the frame chain, no model run).
inline constexpr uint32_t kPredictionCheckEvery = 64;

// A per-thread xorshift64* generator's next draw (`state`: any nonzero seed).
inline uint64_t next_random(uint64_t& state) {
  uint64_t x = state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

// Hits until an entry's next check, 1 to kPredictionCheckEvery. The draws must be independent of the allocation
// sequence: a draw computed from the thread's hit count and the key is a fixed function of the position, and for
// some keys such checks fall into step with a call path that comes every 201 allocations and miss it for 60,000
// allocations, where independent draws meet it after about 6,500 (docs/prediction.md).
inline uint32_t next_check_after(uint64_t& state) {
  return kPredictionCheckEvery - uint32_t((next_random(state) >> 58) & (kPredictionCheckEvery - 1));
}

// What the fast path needs to probe a thread's cache: the two entries of the set at (key >> shift) & ~1 (at least
// two entries, 32-byte aligned), the re-prediction period
// (UINT32_MAX: never; an entry's own period is this << its backoff) and the thread's hit counter (one writer,
// relaxed).
struct PredictionCacheView {
  PredictionCacheEntry* entries = nullptr;
  uint32_t shift = 64;
  uint32_t repredict_every = UINT32_MAX;
  std::atomic<uint64_t>* hits = nullptr;
};

// The cache key: a 64-bit mix of the return address, the stack height and the request's model size bucket
// (model_size_bucket, vocabulary.h; never 0). The size enters as its bucket because the model only sees the bucket.
LLAMALLOC_PREDICTOR_INLINE uint64_t prediction_cache_key(uintptr_t return_address, uintptr_t stack_address,
                                                         unsigned size_bucket) {
  uint64_t k = uint64_t(return_address) * 0x9E3779B97F4A7C15ull;
  k ^= (uint64_t(stack_address) + (uint64_t(size_bucket) << 56)) * 0xC2B2AE3D27D4EB4Full;
  k ^= k >> 29;
  k *= 0xBF58476D1CE4E5B9ull;
  k ^= k >> 32;
  return k | 1;
}


// Or-ed into predict()'s class: sample this allocation (online learning, docs/prediction.md). The heap then
// allocates it from the sampled heap, whose frees all come to freed(), and hands its address to sampled().
inline constexpr unsigned kSampleAllocation = 0x10000;

class Predictor {
 public:
  virtual Consult consult() const = 0;
  // The lifetime class for an allocation. Called from any thread, possibly concurrently; must not allocate,
  // take a lock held by the heap, or unwind while the heap holds its lock (it is never called with it held).
  virtual unsigned predict(const AllocationContext& context) = 0;
  // Stores the predictor's own counters (cache hits and misses, model runs, ...) into the heap's, before the
  // statistics are written. Not on the allocation path.
  virtual void report(Counters&) {}
  // kEveryAllocation predictors with a prediction cache: the calling thread's cache, for the fast path to
  // probe inline. Called from the allocation slow path (never with the heap's lock held); false: none.
  virtual bool thread_cache(PredictionCacheView*) { return false; }
  // Called by the sweeper's passes (every LLAMALLOC_SWEEP_MS, never with the heap's lock held): a predictor may
  // drop what it keeps resident and has not needed since the previous call.
  virtual void trim() {}
  // Called by the sweeper for a thread whose cache (handed out by thread_cache) has had no hit and whose heap no
  // slow path for a while, while that thread is outside the allocator (the sweep handshake): the cache's memory
  // may be given back; it must read as empty afterwards. Returns whether it was.
  virtual bool drop_thread_cache(const PredictionCacheView&) { return false; }
  // Online learning: the allocation that predict() asked to sample (kSampleAllocation) is at p; an object that
  // may have been sampled was freed (every free from the sampled heap, every large object's). Never with the
  // page heap's lock held; freed() may be called under the shared heap's lock.
  virtual void sampled(void* /*p*/) {}
  virtual void freed(void* /*p*/) {}
  // Whether predict() may ask for samples (the heap then makes its sampled heap).
  virtual bool samples() const { return false; }
  // fork(): the predictor's own locks are held across it and made anew in the child (pthread_atfork order: after
  // the shared heap's lock, which freed() may be called under).
  virtual void before_fork() {}
  virtual void after_fork(bool /*child*/) {}

 protected:
  ~Predictor() = default;
};

// Without a model: every allocation gets one configured class (LLAMALLOC_DEFAULT_CLASS). With a short class the
// heap starts from the assumption that objects die young; huge pages whose objects outlive their deadline are
// promoted class by class (the LLAMA paper, section 6.4), so long-lived data finds its class by itself, while
// the short-lived majority of a server's allocations is freed with its huge pages.
class DefaultPredictor final : public Predictor {
 public:
  constexpr explicit DefaultPredictor(unsigned lifetime_class) : lifetime_class_(lifetime_class) {}
  Consult consult() const override { return Consult::kOnRefill; }
  unsigned predict(const AllocationContext&) override { return lifetime_class_; }
  void set_class(unsigned lifetime_class) { lifetime_class_ = lifetime_class; }

 private:
  unsigned lifetime_class_;
};

}  // namespace llamalloc
