// The prediction cache of the LLAMA paper (section 7, Figure 7): a thread-local table (two-way set associative)
// keyed by a hash of the return address, the stack height and the model size bucket of the request (vocabulary.h).
// A hit returns the cached lifetime class; a miss runs the model and stores its answer. Every `repredict_every`
// hits of an entry the model runs again (0: never) and the entry keeps the longer of the old and new class (the
// allocator tolerates an under-predicted lifetime better than an over-predicted one). Header-only so that tests
// drive it with a fake.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config.h"
#include "predictor/predictor.h"

namespace llamalloc::model {

// Counters of one thread's cache. One writer (the owning thread), read by the statistics writer at exit:
// relaxed loads and stores, so the hit path is a plain increment with no locked instruction.
struct CacheCounters {
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> model_runs{0};
  std::atomic<uint64_t> prediction_ns{0};
  std::atomic<uint64_t> repredictions_changed{0};
  std::atomic<uint64_t> repredictions{0};
  std::atomic<uint64_t> shared_keys{0};  // entries found to be shared by call paths (keyed deeper since)
  std::atomic<uint64_t> unseen{0};       // misses whose context the model was not trained on (kUnseenContext)
  std::atomic<uint64_t> memo_answers{0}; // misses and ends of trials answered by the thread's memo, no model run
  std::atomic<uint64_t> token_memo_answers{0};  // model runs whose tokens the process's memo answered: no LSTM

  static void bump(std::atomic<uint64_t>& c, uint64_t by = 1) {
    c.store(c.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

// Or-ed into run_model()'s class: the context's code path is not one the model was trained on
// (ModelFile::knows_code_path: the stack, whatever the size).
// Such a context gets the trial class (lookup's unseen_class) until its entry has had about `unseen_trial` hits;
// the model's class then replaces it, as it is (not the longer of the two). The predictors pass kUnseenClass, the
// longest, where the model keeps some trained-on context apart from the default class
// (LearnedPredictor::trial_class): a rare context the profile never saw (made a few times at start-up or once per
// phase, never freed) then sits among long-lived objects instead of pinning a page of short-lived ones, and a
// frequent one gets the model's class after a few dozen allocations. A model that keeps nothing apart gets the
// default class for its trials: its trials would be the only objects of a class of their own, whose first huge
// page is 2 MiB resident for what may be a few hundred KiB (docs/prediction.md, "Contexts the model never saw").
inline constexpr unsigned kUnseenContext = 0x100;
inline constexpr unsigned kUnseenClass = kNeverFreedClass;
// The low bit of an entry's `context` tag: the entry is on its trial (the tags of call paths are even).
inline constexpr uint16_t kTrialTag = 1;

// The cache key (the heap's fast path computes the same one: predictor/predictor.h).
inline uint64_t cache_key(uintptr_t return_address, uintptr_t stack_address, unsigned size_bucket) {
  return prediction_cache_key(return_address, stack_address, size_bucket);
}

// Two-way set associative: a key may sit in either entry of its set (index_of(key) with the low bit cleared,
// and the entry after it; 32 bytes, one cache line). A newcomer takes the set's first entry and the entry it
// displaces moves to the second, so two contexts that alternate (a request's parse and its reply, redis) both
// stay. Direct-mapped, two hot keys of one slot would evict each other on every allocation, and the model would
// run on each (docs/prediction.md).
//
// Sized by use: 2^kMinLogEntries entries at first, doubled (grow_if_crowded) while misses evict live entries, up
// to 2^kLogEntries. A thread's cache is whole pages that stay resident as long as the thread allocates, and a
// key's entry lands anywhere in the table: a thread of a few dozen contexts would touch every page of a full-size
// table, 32 KiB for what fits in one page. The index is the key's top bits, so a doubling sends each set to one
// of two sets at twice its index and the entries move in place. kMinLogEntries == kLogEntries: a fixed size.
template <unsigned kLogEntries, unsigned kMinLogEntries = kLogEntries>
class PredictionCache {
 public:
  static_assert(kMinLogEntries >= 1 && kMinLogEntries <= kLogEntries, "two ways, and a minimum below the maximum");
  static constexpr unsigned kEntries = 1u << kLogEntries;  // at most
  static constexpr size_t kEntriesBytes = sizeof(PredictionCacheEntry) << kLogEntries;
  // A doubling needs this many evictions of live entries, per entry of the current size, within
  // kGrowWindowHits hits of the thread: an occasional collision of two sets' worth of keys does not grow it, a
  // set where three keys take turns (a model run or memo answer at each allocation) does.
  static constexpr unsigned kGrowEvictionsShift = 3;  // 1 in 8
  static constexpr uint64_t kGrowWindowHits = uint64_t{1} << 16;

  using Entry = PredictionCacheEntry;
  Entry* entries() { return entries_; }

  unsigned log_entries() const { return kMinLogEntries + grown_; }
  unsigned shift() const { return 64 - log_entries(); }
  unsigned index_of(uint64_t key) const { return unsigned(key >> shift()); }
  // The first entry of key's set (the fast path computes the same with the thread's view of shift(): alloc.h).
  unsigned set_of(uint64_t key) const { return index_of(key) & ~1u; }

  // The class for `key`; `run_model()` gives the model's class (called on a miss and on re-prediction).
  // max_backoff: a re-prediction that keeps the class doubles the entry's period, up to repredict_every <<
  // max_backoff (0: every repredict_every hits, the paper's rule); one that changes it starts over.
  // unseen_class: the class of a trial (kUnseenContext).
  template <typename RunModel>
  unsigned lookup(uint64_t key, uint32_t repredict_every, CacheCounters& counters, RunModel&& run_model,
                  unsigned max_backoff = 0, uint32_t unseen_trial = 0, unsigned unseen_class = kUnseenClass) {
    Entry* set = &entries_[set_of(key)];
    Entry* found = set[0].key == key ? &set[0] : set[1].key == key ? &set[1] : nullptr;
    if (__builtin_expect(found != nullptr, 1)) {
      Entry& e = *found;
      CacheCounters::bump(counters.hits);
      if (__builtin_expect(repredict_every == 0 || ++e.hits < uint64_t(repredict_every) << e.backoff, 1))
        return e.lifetime_class;
      e.hits = 0;
      CacheCounters::bump(counters.repredictions);
      unsigned fresh = run_model();
      if (fresh & kUnseenContext) {
        // An unseen context proved frequent: the model's class from now on, re-predicted with the same back-off
        // as any other entry (a class that stays doubles the period).
        fresh &= ~kUnseenContext;
        e.context &= uint16_t(~kTrialTag);
        if (fresh != e.lifetime_class) {
          e.lifetime_class = uint8_t(fresh);
          e.backoff = 0;
          CacheCounters::bump(counters.repredictions_changed);
        } else if (e.backoff < max_backoff) {
          e.backoff++;
        }
      } else if (fresh > e.lifetime_class) {
        e.lifetime_class = uint8_t(fresh);
        e.backoff = 0;
        CacheCounters::bump(counters.repredictions_changed);
      } else if (e.backoff < max_backoff) {
        e.backoff++;
      }
      return e.lifetime_class;
    }
    CacheCounters::bump(counters.misses);
    unsigned fresh = run_model();
    uint32_t hits = 0;
    uint16_t trial = 0;
    if (fresh & kUnseenContext) {
      fresh = unseen_class;
      trial = kTrialTag;
      // Re-predicted after unseen_trial more hits instead of repredict_every.
      if (repredict_every > unseen_trial) hits = repredict_every - unseen_trial;
      CacheCounters::bump(counters.unseen);
    }
    // The newcomer takes the first entry (the recent context is the likely next one); the one it displaces
    // takes the second, evicting whatever was there.
    if (kMinLogEntries < kLogEntries && set[1].key != 0) ++evictions_;
    set[1] = set[0];
    Entry& e = set[0];
    e.key = key;
    e.hits = hits;
    e.lifetime_class = uint8_t(fresh);
    e.backoff = 0;
    e.context = trial;
    return fresh;
  }

  // The entry holding `key`, or the one a newcomer with it would take (the first of its set).
  Entry& slot(uint64_t key) {
    Entry* set = &entries_[set_of(key)];
    return set[1].key == key ? set[1] : set[0];
  }
  // The entry holding `key`, or null.
  const Entry* find(uint64_t key) const {
    const Entry* set = &entries_[set_of(key)];
    return set[0].key == key ? &set[0] : set[1].key == key ? &set[1] : nullptr;
  }

  const Entry& entry(unsigned index) const { return entries_[index]; }
  // Empties the entries (the size stays).
  void clear() {
    for (Entry& e : entries_) e = Entry{};
  }
  // Back to the smallest size; the entries must be empty (cleared, or their pages dropped).
  void reset_size() {
    grown_ = 0;
    evictions_ = 0;
  }

  // Doubles the table when misses evicted at least 1 in 2^kGrowEvictionsShift of its entries within the last
  // kGrowWindowHits of `hits` (the thread's hit counter); true when it grew (shift() changed: a fast path that
  // probes with its own copy of it must take the new one). Entries move in place, each keeping its way; an
  // Entry& taken before a call that returns true may no longer hold its key.
  bool grow_if_crowded(uint64_t hits) {
    if (kMinLogEntries == kLogEntries) return false;
    if (hits - window_hits_ > kGrowWindowHits) {
      window_hits_ = hits;
      evictions_ = 0;
      return false;
    }
    if (log_entries() >= kLogEntries || evictions_ < (1u << log_entries()) >> kGrowEvictionsShift) return false;
    unsigned sets = 1u << (log_entries() - 1);
    unsigned new_shift = shift() - 1;
    // Old set S goes to set 2S or 2S+1 (entries 4S to 4S+3): from the last set down, every target is past the
    // sets not yet moved, and was emptied when its own set moved (set 0's targets are sets 0 and 1).
    for (unsigned set = sets; set-- > 0;) {
      Entry first = entries_[2 * set], second = entries_[2 * set + 1];
      entries_[2 * set] = entries_[2 * set + 1] = Entry{};
      for (const Entry& e : {first, second}) {
        if (e.key == 0) continue;
        Entry* to = &entries_[unsigned(e.key >> new_shift) & ~1u];
        to[to[0].key == 0 ? 0 : 1] = e;
      }
    }
    ++grown_;
    evictions_ = 0;
    window_hits_ = hits;
    return true;
  }

 private:
  alignas(32) Entry entries_[kEntries] = {};
  // After the entries, so that dropping their pages (zeros: empty entries) leaves the size, which the owner's
  // fast path has a copy of. All zero in fresh memory: the smallest size.
  uint8_t grown_ = 0;
  uint32_t evictions_ = 0;     // of live entries by misses, since window_hits_
  uint64_t window_hits_ = 0;
};

}  // namespace llamalloc::model
