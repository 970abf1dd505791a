// Online lifetime learning (online_learner.h has the rules).
#include "online_learner.h"

#include <sched.h>
#include <sys/mman.h>

namespace llamalloc::model {

namespace {
// Anonymous memory for a table: zero pages are empty entries, and MAP_NORESERVE charges no swap for pages not
// touched. null when it cannot be mapped.
void* map_table(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
}  // namespace

LearnRule learn_rule_of(const Options& o, const ModelFile* model, unsigned shortest) {
  LearnRule rule;
  rule.min_samples = uint32_t(o.learn_min_samples);
  rule.override_samples = uint32_t(o.learn_override_samples);
  rule.window = uint32_t(o.learn_window);
  rule.sample_every = uint32_t(o.learn_sample_every);
  rule.margin = uint32_t(o.learn_margin);
  rule.long_class = unsigned(o.long_class);
  rule.label = model != nullptr && model->is_distribution() ? model->label_rule() : kTrainLabelRule;
  rule.shortest = shortest;
  // Learning alone keeps apart only what goes on the longest class's pages (LONG_CLASS, 10 s, and up; at most
  // the last class): shorter lifetimes are what the heap's promotion of pages whose objects outlive their deadline
  // already separates, page by page, and a context moved to a class of its own while the program runs leaves
  // the free room of the pages it filled before to the other contexts alone. frag-micro at default scale, its
  // 64 B objects learned as class 3 (1-10 s) on their first rise: peak RSS 1.12x and time 1.08x those without
  // learning; kept in the default class, 1.00x and 0.95x. With a model, MIN_CLASS alone applies (the model
  // places from the first allocation, before any page filled).
  // And of those, the frees must say more than LONG_CLASS itself (10-100 s): a context whose objects are freed
  // after 10 to 100 s turns over within a steady load, and kept apart its objects only open a second span of
  // each size on the longest pages beside the default class's, whose holes they would have filled; they pin
  // pages only for the seconds they outlive a fall. image-server at default scale, learning alone, 25 s in (its
  // quiet phase, medians of 3): the heap's resident bytes 2,952 KiB with such contexts on the longest pages, 2,852
  // without, 2,676 without learning. Objects that are not freed still count as the longest class from
  // LONG_CLASS's age (decide()), so a context of survivors is kept apart as soon as before.
  unsigned classes = unsigned(o.classes);
  unsigned longest_pages = unsigned(o.long_class) + 1 < classes ? unsigned(o.long_class) + 1 : classes - 1;
  if (model == nullptr && rule.shortest < longest_pages) rule.shortest = longest_pages;
  rule.fallback = unsigned(o.default_class) < unsigned(o.classes) ? unsigned(o.default_class) : unsigned(o.classes) - 1;
  return rule;
}

bool OnlineLearner::configure(const LearnRule& rule) {
  rule_ = rule;
  // (A window below override_samples caps the evidence of frees near twice the window, halved to the window:
  // the window is then enough.)
  confident_at_ = rule.window != 0 && rule.window < rule.override_samples ? rule.window : rule.override_samples;
  if (index_ != nullptr) return true;
  void* p = map_table(kIndexBytes);
  if (p == nullptr) return false;
  index_ = static_cast<std::atomic<uint16_t>*>(p);
  return true;
}

OnlineLearner::~OnlineLearner() {
  if (index_ != nullptr) munmap(index_, kIndexBytes);
  for (auto& chunk : context_chunks_)
    if (Context* c = chunk.load(std::memory_order_relaxed)) munmap(c, kChunkBytes);
  if (samples_table_ != nullptr) munmap(samples_table_, sizeof(Sample) << log_samples_);
}

size_t OnlineLearner::mapped_bytes() const {
  if (index_ == nullptr) return 0;
  const_cast<OnlineLearner*>(this)->lock();
  size_t bytes = kIndexBytes;
  for (const auto& chunk : context_chunks_)
    if (chunk.load(std::memory_order_relaxed) != nullptr) bytes += kChunkBytes;
  if (samples_table_ != nullptr) bytes += sizeof(Sample) << log_samples_;
  const_cast<OnlineLearner*>(this)->unlock();
  return bytes;
}

uint64_t OnlineLearner::context_key(uintptr_t return_address, unsigned size_bucket, uint64_t callers) {
  uint64_t k = uint64_t(return_address) * 0x9E3779B97F4A7C15ull;
  k ^= (uint64_t(size_bucket) << 56) * 0xC2B2AE3D27D4EB4Full;
  k ^= k >> 29;
  k = (k ^ callers) * 0xBF58476D1CE4E5B9ull;
  k ^= k >> 32;
  return k | 1;
}

void OnlineLearner::lock() {
  while (lock_.exchange(true, std::memory_order_acquire))
    while (lock_.load(std::memory_order_relaxed)) sched_yield();
}

void OnlineLearner::lock_for_fork() { lock(); }
void OnlineLearner::unlock_after_fork(bool child) {
  (void)child;  // the child's copy of the flag is the parent's: held by the thread that forked, which is this one
  unlock();
}

int32_t OnlineLearner::find(uint64_t key) const {
  if (index_ == nullptr) return -1;
  uint32_t mask = kContexts - 1;
  for (uint32_t n = 0, i = uint32_t(key >> (64 - kLogContexts)); n < kContexts; ++n, i = (i + 1) & mask) {
    uint16_t at = index_[i].load(std::memory_order_acquire);
    if (at == 0) return -1;
    if (context(at - 1).key.load(std::memory_order_relaxed) == key) return at - 1;
  }
  return -1;
}

int32_t OnlineLearner::find_or_add(uint64_t key, uintptr_t return_address, unsigned size_bucket) {
  int32_t found = find(key);
  if (found >= 0 || index_ == nullptr) return found;
  lock();
  // Open addressing without removal: the index keeps at most three quarters of its slots, so probes stay short;
  // a context that finds it full, or whose chunk cannot be mapped, is not learned (it keeps the model's or the
  // default class).
  int32_t slot = -1;
  uint32_t mask = kContexts - 1;
  uint32_t i = uint32_t(key >> (64 - kLogContexts));
  for (;; i = (i + 1) & mask) {
    uint16_t at = index_[i].load(std::memory_order_relaxed);
    if (at == 0) break;
    if (context(at - 1).key.load(std::memory_order_relaxed) == key) {
      slot = at - 1;  // (added by another thread since the lookup)
      break;
    }
  }
  if (slot < 0 && used_contexts_ < kMaxContexts) {
    uint32_t n = used_contexts_;
    std::atomic<Context*>& chunk = context_chunks_[n >> kLogContextsPerChunk];
    if (chunk.load(std::memory_order_relaxed) == nullptr) {
      if (void* p = map_table(kChunkBytes)) chunk.store(static_cast<Context*>(p), std::memory_order_release);
    }
    if (chunk.load(std::memory_order_relaxed) != nullptr) {
      Context& c = context(int32_t(n));
      c.return_address = return_address;
      c.size_bucket = uint8_t(size_bucket);
      c.key.store(key, std::memory_order_relaxed);
      // Last: a lookup that finds the slot finds the context whole.
      index_[i].store(uint16_t(n + 1), std::memory_order_release);
      used_contexts_ = n + 1;
      slot = int32_t(n);
    }
  }
  unlock();
  return slot;
}

bool OnlineLearner::should_sample(int32_t slot, uint32_t random) const {
  const Context& c = context(slot);
  bool confident = c.state.load(std::memory_order_relaxed) & kConfidentBit;  // (either kind)
  if (confident && rule_.sample_every > 1 && random % rule_.sample_every != 0) return false;
  // Unlocked reads: a stale value admits or refuses one sample, which on_sample checks again.
  return c.live_total < kMaxLivePerContext && live_samples_ < kSamples / 4 * 3;
}

void OnlineLearner::note_model_class(int32_t slot, unsigned lc) {
  uint8_t none = 0;
  context(slot).model_class.compare_exchange_strong(none, uint8_t(lc + 1), std::memory_order_relaxed);
}

void OnlineLearner::note_override(int32_t slot) {
  context(slot).overrides.fetch_add(1, std::memory_order_relaxed);
}

// Maps the sample table at 1 << log entries and moves the live samples into it; false (the old table stays) where
// it cannot be mapped.
bool OnlineLearner::resize_samples(unsigned log) {
  auto* table = static_cast<Sample*>(map_table(sizeof(Sample) << log));
  if (table == nullptr) return false;
  Sample* old = samples_table_;
  uint32_t old_size = old == nullptr ? 0 : 1u << log_samples_;
  samples_table_ = table;
  log_samples_ = log;  // (before the moves: sample_index hashes to the new size)
  uint32_t mask = (1u << log) - 1;
  for (uint32_t j = 0; j < old_size; ++j) {
    if (old[j].address == 0) continue;
    uint32_t i = sample_index(old[j].address);
    while (table[i].address != 0) i = (i + 1) & mask;
    table[i] = old[j];
  }
  if (old != nullptr) munmap(old, sizeof(Sample) * old_size);
  return true;
}

// The sample table at twice its size (kFirstSamples the first time). false: it is as large as it gets, or the new
// table cannot be mapped.
bool OnlineLearner::grow_samples() {
  unsigned log = samples_table_ == nullptr ? kLogFirstSamples : log_samples_ + 1;
  return log <= kLogSamples && resize_samples(log);
}

// Moves the live samples into a table of the smallest size (at least kFirstSamples) that they fill to at most
// three eighths, when that is at most a quarter of the present size: half of the three quarters at which it
// doubles, so that a table does not shrink and grow back on each small rise. Where the new table cannot be
// mapped, the old one stays.
void OnlineLearner::shrink_samples() {
  if (samples_table_ == nullptr || log_samples_ <= kLogFirstSamples) return;
  unsigned log = kLogFirstSamples;
  while (uint64_t(live_samples_) * 8 > uint64_t(3) << log) ++log;
  if (log + 2 <= log_samples_) resize_samples(log);
}

bool OnlineLearner::on_sample(int32_t slot, uintptr_t p, uint64_t now_ns) {
  if (p == 0 || slot < 0) return false;
  lock();
  Context& c = context(slot);
  bool kept = false;
  // The table keeps at most three quarters of its slots, so probes stay short: it doubles when it has that many
  // live samples, and at kSamples (or where a larger one cannot be mapped) it takes no more.
  uint32_t size = samples_table_ == nullptr ? 0 : 1u << log_samples_;
  if (c.live_total < kMaxLivePerContext && live_samples_ >= size / 4 * 3 && grow_samples())
    size = 1u << log_samples_;
  if (c.live_total < kMaxLivePerContext && live_samples_ < size / 4 * 3) {
    uint32_t mask = size - 1;
    uint32_t i = sample_index(p);
    // A block that is handed out again while still in the table was freed unseen (a free the hook missed
    // cannot happen for a block of the sampled heap, but the entry is replaced rather than trusted).
    while (samples_table_[i].address != 0 && samples_table_[i].address != p) i = (i + 1) & mask;
    Sample& s = samples_table_[i];
    if (s.address == p) {
      Context& old = context(s.context);
      old.live[s.aged]--;
      old.live_total--;
      --live_samples_;
    }
    s.address = p;
    s.born_ns = now_ns;
    s.context = uint16_t(slot);
    s.aged = 0;
    c.live[0]++;
    c.live_total++;
    c.samples++;
    ++live_samples_;
    ++samples_;
    kept = true;
  } else {
    ++dropped_;
  }
  unlock();
  return kept;
}

void OnlineLearner::erase_sample(uint32_t i) {
  // Backward-shift deletion keeps linear probing's chains unbroken without tombstones.
  uint32_t mask = (1u << log_samples_) - 1;
  uint32_t hole = i;
  for (uint32_t j = (i + 1) & mask; samples_table_[j].address != 0; j = (j + 1) & mask) {
    uint32_t home = sample_index(samples_table_[j].address);
    // j's entry may move into the hole when its home is not in (hole, j] (cyclically).
    bool between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!between) {
      samples_table_[hole] = samples_table_[j];
      hole = j;
    }
  }
  samples_table_[hole] = Sample{};
}

bool OnlineLearner::on_free(uintptr_t p, uint64_t now_ns) {
  if (live_samples_ == 0) return false;  // (also when not configured)  // (unlocked: a sample being added is of a block not yet handed out)
  lock();
  // (live_samples_ > 0 under the lock: the sample table is mapped.)
  uint32_t mask = (1u << log_samples_) - 1;
  uint32_t i = sample_index(p);
  while (samples_table_[i].address != 0 && samples_table_[i].address != p) i = (i + 1) & mask;
  bool found = samples_table_[i].address == p;
  if (found) {
    Sample s = samples_table_[i];
    erase_sample(i);
    Context& c = context(s.context);
    c.live[s.aged]--;
    c.live_total--;
    --live_samples_;
    c.freed[lifetime_class_of(now_ns > s.born_ns ? now_ns - s.born_ns : 0)]++;
    ++frees_;
    // The window: once the frees reach twice `window`, every count halves, so the evidence of a past phase
    // weighs half as much as the present's each time another window of frees comes in.
    uint32_t total = 0;
    for (unsigned k = 0; k < kMaxClasses; ++k) total += c.freed[k];
    if (rule_.window != 0 && total >= 2 * rule_.window)
      for (unsigned k = 0; k < kMaxClasses; ++k) c.freed[k] /= 2;
    redecide(c);
  }
  unlock();
  return found;
}

void OnlineLearner::age(uint64_t now_ns) {
  if (live_samples_ == 0 && log_samples_ <= kLogFirstSamples) return;
  lock();
  uint32_t size = samples_table_ == nullptr ? 0 : 1u << log_samples_;
  for (uint32_t i = 0; i < size; ++i) {
    Sample& s = samples_table_[i];
    if (s.address == 0) continue;
    unsigned reached = lifetime_class_of(now_ns > s.born_ns ? now_ns - s.born_ns : 0);
    if (reached <= s.aged) continue;
    Context& c = context(s.context);
    c.live[s.aged]--;
    c.live[reached]++;
    s.aged = uint8_t(reached);
    ++aged_;
    redecide(c);
  }
  shrink_samples();
  unlock();
}

uint8_t OnlineLearner::decide(const LearnRule& rule, const uint32_t* freed, const uint32_t* live,
                              uint32_t* evidence, uint32_t* freed_total, unsigned floor) {
  double score[kMaxClasses];
  uint32_t frees = 0;
  for (unsigned k = 0; k < kMaxClasses; ++k) {
    score[k] = double(freed[k]);
    frees += freed[k];
  }
  // A live object's age is only a lower bound on its lifetime, so it is evidence only once it has outlived what
  // the frees say (the class they decide, at least the class a short one is placed in; with a model, the floor
  // the caller gives). It then counts as the class its age has reached, and from long_class up as the longest
  // class, whose pages those classes share. Not as the longest at once: objects that merely have not been
  // freed yet while a heap grows to its first peak are 100 ms to a few seconds old, and sent to the longest
  // pages they pin them among the true survivors once they die (frag-micro at default scale learned its 64 B
  // objects, which die within 1-10 s, as the longest class during its first rise: 133 of that class's huge pages
  // held after the peak for 6 MiB live, against 3 without learning). Counted by age, a context whose objects are
  // never freed keeps the class it has without learning (a class below `shortest` is the fallback) until its
  // objects reach `shortest`'s age; without a model, long_class's (learn_rule_of), so the longest pages.
  unsigned said = frees > 0 ? rule.label.apply(score) : 0;
  unsigned floor_said = rule.shortest < rule.fallback ? rule.shortest : rule.fallback;
  if (said < floor_said) said = floor_said;
  unsigned outlived = said > floor ? said : floor;
  uint32_t survivors = 0;
  for (unsigned k = outlived + 1; k < kMaxClasses; ++k) {
    survivors += live[k];
    score[k >= rule.long_class ? kLongestLifetimeClass : k] += double(live[k]);
  }
  uint32_t n = frees + survivors;
  if (evidence != nullptr) *evidence = n;
  if (freed_total != nullptr) *freed_total = frees;
  if (n == 0 || n < rule.min_samples) return kNoClass;
  unsigned lc = survivors == 0 ? said : rule.label.apply(score);
  if (lc < rule.shortest) lc = rule.fallback;
  return uint8_t(lc);
}

void OnlineLearner::redecide(Context& c) {
  uint32_t evidence = 0, frees = 0;
  uint8_t lc = decide(rule_, c.freed, c.live, &evidence, &frees);
  c.state.store(lc == kNoClass ? 0 : uint8_t((lc + 1) | (evidence >= confident_at_ ? kConfidentBit : 0)),
                std::memory_order_relaxed);
}

LearnerTotals OnlineLearner::totals() const {
  LearnerTotals t;
  if (index_ == nullptr) return t;
  const_cast<OnlineLearner*>(this)->lock();
  t.contexts = used_contexts_;
  t.samples = samples_;
  t.frees = frees_;
  t.aged = aged_;
  t.dropped_samples = dropped_;
  t.live_samples = live_samples_;
  for (uint32_t i = 0; i < used_contexts_; ++i) {
    const Context& c = context(int32_t(i));
    if (c.state.load(std::memory_order_relaxed) != 0) ++t.decided;
    t.overrides += c.overrides.load(std::memory_order_relaxed);
  }
  const_cast<OnlineLearner*>(this)->unlock();
  return t;
}

}  // namespace llamalloc::model
