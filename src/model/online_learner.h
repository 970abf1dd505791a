// Online lifetime learning (docs/prediction.md, "Online learning"): the allocator learns each calling context's
// lifetime class in the process, from the objects it samples, as the LLAMA paper's per-site lifetime counters
// learn it offline. A sampled allocation records its context and its allocation time in a fixed table; its free
// puts its lifetime into the context's per-class counts; an object still live is aged by the sweeper's passes
// (a sampled object alive past class k's bound counts as at least class k + 1), so a context whose objects are
// never freed is learned too. Once a context has enough evidence, the label rule of training decides its
// class; the class is decided again whenever the evidence changes, and old frees weigh less than new ones (a
// phase change moves it).
//
// Rules, and why:
// - No allocation: the learner runs inside malloc and free. Its tables are mapped with mmap as they fill, so that
//   their address space follows the contexts and samples in use (a process under `ulimit -v` pays for what it
//   learns): configure() maps the contexts' index (4 KiB); the contexts are mapped 1 << kLogContextsPerChunk at a
//   time, in the order they come; the sample table starts at 1 << kLogFirstSamples entries and doubles, under the
//   lock, up to kSamples, and shrinks again at an aging pass once its live samples have fallen below an eighth of
//   its slots (after a peak), so that a quiet process does not keep a peak's table resident. An all-zero entry is
//   an empty one (fresh anonymous memory).
// - One lock for every change; lookups (the class of a context) take none: the prediction cache consults the
//   learner on every check of an entry, which must stay cheap on every thread.
// - The same code serves the process (LearnedPredictor) and the replay (src/sim, llama-online), with the time
//   given by the caller, so that both learn the same thing from the same events.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "model_file.h"
#include "options.h"
#include "vocabulary.h"

namespace llamalloc::model {

// The class of a context that is not decided yet.
inline constexpr uint8_t kNoClass = 0xff;

// The learner's thresholds: the heap's options LEARN_MIN_SAMPLES, LEARN_OVERRIDE_SAMPLES, LEARN_WINDOW and
// LEARN_SAMPLE_EVERY (options.h, where their reasons are), and the label rule that turns counts into a class.
struct LearnRule {
  uint32_t min_samples = 8;        // evidence before a context's class is decided
  uint32_t override_samples = 32;  // evidence before it overrides a model's class (at most the window)
  uint32_t window = 64;            // frees kept at full weight: counts halve once they reach twice this
  uint32_t sample_every = 16;      // once a context is confident: one in this many of its checks is sampled
  uint32_t margin = 2;             // classes a learned class must differ by to replace the base one
  unsigned long_class = 4;         // LLAMALLOC_LONG_CLASS: from here on every class is on the longest pages
  LabelRule label = kTrainLabelRule;
  unsigned shortest = 0;  // a decided class shorter than this is `fallback` (LLAMALLOC_MIN_CLASS)
  unsigned fallback = 1;  // the class without a model (LLAMALLOC_DEFAULT_CLASS)
};

// The rule from the heap's options (LEARN_MIN_SAMPLES, LEARN_OVERRIDE_SAMPLES, LEARN_WINDOW, LEARN_SAMPLE_EVERY,
// LEARN_MARGIN, LONG_CLASS), the shortest class the caller gives a prediction (MIN_CLASS as it applies it; without
// a model, at least LONG_CLASS: learning alone keeps apart only what goes on the longest class's pages), and
// the label rule of `model` (null: none): a distribution model's own, so that a context's learned class means
// what its predicted one does, else training's. The process and the replay both take their rule from here.
LearnRule learn_rule_of(const Options& options, const ModelFile* model, unsigned shortest);

// What the learner knows of one context, for the statistics and tests.
struct LearnedContext {
  uint64_t key;
  uintptr_t return_address;
  unsigned size_bucket;
  uint8_t learned;      // kNoClass: undecided
  bool confident;       // evidence >= override_samples
  uint8_t model_class;  // the model's class when it first predicted this context (kNoClass: none)
  uint32_t freed[kMaxClasses];  // frees by lifetime class (halved as the window slides)
  uint32_t live[kMaxClasses];   // sampled objects still live, by the class their age has reached
  uint64_t samples;    // objects sampled
  uint64_t overrides;  // times a cached model class was replaced by the learned one
};

struct LearnerTotals {
  uint64_t contexts = 0, decided = 0, samples = 0, frees = 0, aged = 0, overrides = 0, dropped_samples = 0,
           live_samples = 0;
};

class OnlineLearner {
 public:
  static constexpr unsigned kLogContexts = 11;  // 2,048 slots of the index, 1,536 contexts (168 KiB at most)
  static constexpr unsigned kLogSamples = 12;   // 4,096 slots for sampled objects live at once (96 KiB at most)
  // Contexts mapped together (14 KiB), and the sample table's first size (6 KiB): a process that learns a few
  // contexts maps a few pages.
  static constexpr unsigned kLogContextsPerChunk = 7;
  static constexpr unsigned kLogFirstSamples = 8;
  // A context stops being sampled while this many of its sampled objects are live: a long-lived context would
  // otherwise fill the table with objects that only confirm what it already says.
  static constexpr uint32_t kMaxLivePerContext = 64;

  OnlineLearner() = default;
  ~OnlineLearner();
  OnlineLearner(const OnlineLearner&) = delete;
  OnlineLearner& operator=(const OnlineLearner&) = delete;
  // Sets the rule and maps the contexts' index (once). false: it could not be mapped (nothing is learned).
  bool configure(const LearnRule& rule);
  bool ready() const { return index_ != nullptr; }
  const LearnRule& rule() const { return rule_; }

  // The key of a calling context that is the same in every thread: the return address, the model size bucket
  // and a hash of the return addresses of the callers above (LearnedPredictor::deep_key's).
  static uint64_t context_key(uintptr_t return_address, unsigned size_bucket, uint64_t callers);

  // The slot of a context, added when new; -1 when the table is full or its chunk cannot be mapped. Lock-free
  // when the context is known. Slots are given in the order contexts come (0, 1, 2, ...).
  int32_t find_or_add(uint64_t key, uintptr_t return_address, unsigned size_bucket);
  int32_t find(uint64_t key) const;
  // The context's learned class, kNoClass while undecided or within the rule's margin of `base`, the class it
  // has without learning (the default class, or the model's: `model`). A class one off places a context's
  // objects together all the same, and moving the rest of them elsewhere would split them over two classes'
  // pages, and open a class's pages for one context's objects.
  // Without a model: the decision from frees and survivors (decide()). With one, the model's class stands unless
  // the evidence against it is confident (override_samples): the same decision, where a live object is a
  // survivor only once it has also outlived the model's class by two classes (a hundredfold) and reached
  // long_class (an age whose objects go on the longest pages anyway). A shorter class needs that many frees; a
  // longer one is only the longest, from that many survivors: what pins pages is a model that calls long-lived
  // objects short, while objects that die a few classes later than it says are freed with their pages all the
  // same (word-count's large buffers, class 1 to the model, 1-10 s by their frees, kept 130 MiB on class-3
  // pages against 54 on the model's, and 256 when the ones still live past 1 s sent them to the longest). A few
  // relaxed loads (the counts are read without the lock: a torn view decides one check).
  uint8_t learned(int32_t slot, uint8_t base, bool model) const {
    const Context& c = context(slot);
    auto apart = [&](uint8_t lc) { return uint32_t(lc > base ? lc - base : base - lc) >= rule_.margin; };
    if (!model) {
      uint8_t state = c.state.load(std::memory_order_relaxed);
      if (state == 0) return kNoClass;
      uint8_t lc = uint8_t((state & kClassMask) - 1);
      return apart(lc) ? lc : kNoClass;
    }
    uint32_t evidence = 0, frees = 0;
    unsigned floor = unsigned(base) + 1 > rule_.long_class - 1 ? unsigned(base) + 1 : rule_.long_class - 1;
    uint8_t lc = decide(rule_, c.freed, c.live, &evidence, &frees, floor);
    if (lc == kNoClass || !apart(lc)) return kNoClass;
    if (lc < base) return frees >= confident_at_ ? lc : kNoClass;
    return lc == kLongestLifetimeClass && evidence - frees >= confident_at_ ? lc : kNoClass;
  }
  // learned() without a base: the decision from frees and survivors, kNoClass while undecided.
  uint8_t decided(int32_t slot) const {
    uint8_t state = context(slot).state.load(std::memory_order_relaxed);
    return state == 0 ? kNoClass : uint8_t((state & kClassMask) - 1);
  }
  // The model's class noted for the context (kNoClass: none yet).
  uint8_t model_class(int32_t slot) const {
    uint8_t m = context(slot).model_class.load(std::memory_order_relaxed);
    return m == 0 ? kNoClass : uint8_t(m - 1);
  }
  // Whether the allocation at this check of the context is to be sampled: every check while the context is not
  // confident, then when `random` (a number from the calling thread, uniform enough) is a multiple of
  // sample_every; never while kMaxLivePerContext of its objects are live or the sample table is three quarters
  // full. Writes nothing: checks come from every thread, and a shared counter would bounce between their caches.
  bool should_sample(int32_t slot, uint32_t random) const;
  // The model's class for this context (kept once: the first model run's), and an override of it.
  void note_model_class(int32_t slot, unsigned lc);
  void note_override(int32_t slot);

  // A sampled object of context `slot` at address p, allocated at now_ns. false when the table is full or cannot
  // grow (the object is then not sampled).
  bool on_sample(int32_t slot, uintptr_t p, uint64_t now_ns);
  // An object was freed at now_ns: if it was sampled, its lifetime goes into its context's counts (true).
  bool on_free(uintptr_t p, uint64_t now_ns);
  // Ages the live sampled objects (the sweeper's passes): one alive past class k's bound counts as class k + 1.
  void age(uint64_t now_ns);

  LearnerTotals totals() const;
  // Bytes of address space the tables take now (index, context chunks, sample table).
  size_t mapped_bytes() const;
  // Calls f(const LearnedContext&) for every context, under the lock (no allocation).
  template <typename F>
  void for_each(F&& f) const;

  // fork(): the lock is held across it (pthread_atfork) and made anew in the child.
  void lock_for_fork();
  void unlock_after_fork(bool child);

  // The context's class from its counts, kNoClass below min_samples of evidence: the label rule on the frees'
  // lifetimes, with the live objects that have outlived the class the frees decide (at least the lower of
  // rule.shortest and rule.fallback, and at least `floor`) counted as the class their age has reached (from
  // rule.long_class up, the longest); a class below rule.shortest is rule.fallback. *evidence: frees and such
  // survivors; *freed_total: frees. Public for tests.
  static uint8_t decide(const LearnRule& rule, const uint32_t* freed, const uint32_t* live, uint32_t* evidence,
                        uint32_t* freed_total = nullptr, unsigned floor = 0);

 private:
  static constexpr uint8_t kConfidentBit = 0x80;  // evidence >= override_samples
  static constexpr uint8_t kClassMask = 0x3f;
  // All zero when empty (the tables are fresh anonymous memory).
  struct Context {
    std::atomic<uint64_t> key;  // 0: empty; set last, with release, when the slot is filled
    uintptr_t return_address;
    uint32_t freed[kMaxClasses];
    uint32_t live[kMaxClasses];
    std::atomic<uint32_t> live_total;  // (read without the lock by should_sample)
    uint64_t samples;
    std::atomic<uint64_t> overrides;
    std::atomic<uint8_t> state;        // (learned class + 1) | kConfidentBit; 0: undecided
    std::atomic<uint8_t> model_class;  // model's class + 1; 0: none
    uint8_t size_bucket;
  };
  struct Sample {
    uintptr_t address;  // 0: empty
    uint64_t born_ns;
    uint16_t context;
    uint8_t aged;  // the class the object's age had reached when it was last aged
  };
  static constexpr uint32_t kContexts = 1u << kLogContexts;
  static constexpr uint32_t kMaxContexts = kContexts / 4 * 3;  // the index's probes stay short
  static constexpr uint32_t kContextsPerChunk = 1u << kLogContextsPerChunk;
  static constexpr uint32_t kContextChunks = (kMaxContexts + kContextsPerChunk - 1) / kContextsPerChunk;
  static constexpr uint32_t kSamples = 1u << kLogSamples;
  static_assert(kContexts < 65536, "a sample names its context, and the index its slot + 1, in 16 bits");
  static_assert(kLogFirstSamples <= kLogSamples && kLogContextsPerChunk <= kLogContexts, "tables grow to their sizes");
  static constexpr size_t kIndexBytes = sizeof(std::atomic<uint16_t>) * kContexts;
  static constexpr size_t kChunkBytes = sizeof(Context) * kContextsPerChunk;

  void lock();
  void unlock() { lock_.store(false, std::memory_order_release); }
  void redecide(Context& c);
  // Context `slot`, whose chunk is mapped (a slot that find() or find_or_add() gave).
  Context& context(int32_t slot) const {
    return context_chunks_[uint32_t(slot) >> kLogContextsPerChunk].load(std::memory_order_acquire)
        [uint32_t(slot) & (kContextsPerChunk - 1)];
  }
  uint32_t sample_index(uintptr_t p) const {
    return uint32_t((uint64_t(p) * 0x9E3779B97F4A7C15ull) >> (64 - log_samples_));
  }
  bool resize_samples(unsigned log);  // lock
  bool grow_samples();                 // lock
  void shrink_samples();               // lock
  void erase_sample(uint32_t i);

  LearnRule rule_;
  uint32_t confident_at_ = 32;  // override_samples, at most the window (configure)
  std::atomic<bool> lock_{false};
  uint32_t used_contexts_ = 0;  // lock
  std::atomic<uint32_t> live_samples_{0};  // written under the lock; read without it by should_sample, on_free
  uint64_t samples_ = 0, frees_ = 0, aged_ = 0, dropped_ = 0;  // lock
  // Open addressing by the key's top bits: slot + 1 of the context there (0: empty). Written under the lock,
  // read without it (release/acquire: a reader that sees a slot sees its chunk and its key).
  std::atomic<uint16_t>* index_ = nullptr;  // [kContexts]
  std::atomic<Context*> context_chunks_[kContextChunks] = {};  // each written once, under the lock
  Sample* samples_table_ = nullptr;  // [1 << log_samples_], lock
  unsigned log_samples_ = 0;         // lock
};

template <typename F>
void OnlineLearner::for_each(F&& f) const {
  if (index_ == nullptr) return;
  const_cast<OnlineLearner*>(this)->lock();
  for (uint32_t i = 0; i < used_contexts_; ++i) {
    const Context& c = context(int32_t(i));
    uint64_t key = c.key.load(std::memory_order_acquire);
    if (key == 0) continue;
    LearnedContext out{};
    out.key = key;
    out.return_address = c.return_address;
    out.size_bucket = c.size_bucket;
    uint8_t state = c.state.load(std::memory_order_relaxed);
    out.learned = state == 0 ? kNoClass : uint8_t((state & kClassMask) - 1);
    out.confident = state != 0 && (state & kConfidentBit);
    uint8_t model = c.model_class.load(std::memory_order_relaxed);
    out.model_class = model == 0 ? kNoClass : uint8_t(model - 1);
    for (unsigned k = 0; k < kMaxClasses; ++k) {
      out.freed[k] = c.freed[k];
      out.live[k] = c.live[k];
    }
    out.samples = c.samples;
    out.overrides = c.overrides.load(std::memory_order_relaxed);
    f(static_cast<const LearnedContext&>(out));
  }
  const_cast<OnlineLearner*>(this)->unlock();
}

}  // namespace llamalloc::model
