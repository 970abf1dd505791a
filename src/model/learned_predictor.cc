// The learned predictor's model run (learned_predictor.h): the prediction cache first, and on a miss the walk
// of the caller's stack (caller_stack.cc), its tokens and the LSTM. Rules: nothing here allocates or takes a
// lock; a thread's state comes from the pool (thread_state_pool.h) and its addresses from the module map
// (module_map.h).
#include "learned_predictor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "stack_walk.h"
#include "stats.h"

namespace llamalloc::model {

using stack_walk::Visit;

bool LearnedPredictor::init(const char* model_path, const char* tokens_path, uint32_t repredict_every,
                            char* error, size_t cap, unsigned repredict_backoff, unsigned default_class) {
  char why[256];
  has_model_ = model_path != nullptr && *model_path;
  default_class_ = default_class;
  if (has_model_) {
    if (!model_.open(model_path, why, sizeof why)) {
      format_message(error, cap, "%s: %s", model_path, why);
      return false;
    }
    if (tokens_path != nullptr && *tokens_path &&
        !tables_.open(tokens_path, model_.vocab_crc(), model_.vocab_size(), why, sizeof why)) {
      format_message(error, cap, "%s: %s", tokens_path, why);
      model_.close();
      return false;
    }
    thread_root_binary_ = tables_.find_binary("<thread-root>");
    // Without it every model run runs the LSTM, as it did: the memo saves time, never changes an answer.
    void* m = mmap(nullptr, sizeof(uint64_t) << kLogTokenMemo, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED) token_memo_ = static_cast<std::atomic<uint64_t>*>(m);
  }
  repredict_every_ = repredict_every;
  repredict_backoff_ = repredict_backoff;
  if (!map_thread_states()) {
    format_message(error, cap, "%s: cannot map the prediction caches", has_model_ ? model_path : "LLAMALLOC_LEARN");
    return false;
  }
  if (has_model_) modules_.refresh(tables_);
  return true;
}

LearnedPredictor::~LearnedPredictor() {
  if (token_memo_ != nullptr) munmap(token_memo_, sizeof(uint64_t) << kLogTokenMemo);
}

void LearnedPredictor::clear_token_memo() {
  if (token_memo_ != nullptr) madvise(token_memo_, sizeof(uint64_t) << kLogTokenMemo, MADV_DONTNEED);
}

bool LearnedPredictor::set_learning(const LearnRule& rule) {
  learn_ = learner_.configure(rule);
  return learn_;
}

size_t LearnedPredictor::tokens_of(const uintptr_t* pcs, size_t depth, size_t size_bytes, uint32_t* tokens,
                                   size_t max, bool thread_root) {
  size_t limit = model_.max_tokens() < max ? model_.max_tokens() : max;
  if (limit == 0) return 0;
  size_t n = 0;
  tokens[n++] = kFirstSizeToken + model_size_bucket(size_bytes);
  for (size_t i = 0; i < depth && n < limit; ++i) {
    if (i) tokens[n++] = kSeparatorToken;
    Module m;
    FrameTokens ft{nullptr, 0, false};
    bool known = false;
    if (modules_.find(pcs[i], &m) || (modules_.maybe_refresh(tables_, monotonic_ns()) && modules_.find(pcs[i], &m))) {
      // The tables are keyed by return address (stack_walk.h).
      if (m.binary >= 0 && uint32_t(m.binary) < tables_.binary_count())
        known = tables_.lookup(uint32_t(m.binary), stack_walk::return_address_of(pcs[i]) - m.vaddr_bias, &ft);
    }
    if (!known) {
      if (n < limit) tokens[n++] = kUnsymbolizedToken;
      continue;
    }
    for (uint32_t k = 0; k < ft.count && n < limit; ++k) tokens[n++] = ft.ids[k];
    if (ft.terminal) return n;
  }
  FrameTokens root;
  if (thread_root && depth > 0 && thread_root_binary_ >= 0 && n < limit &&
      tables_.lookup(uint32_t(thread_root_binary_), 1, &root)) {
    tokens[n++] = kSeparatorToken;
    for (uint32_t k = 0; k < root.count && n < limit; ++k) tokens[n++] = root.ids[k];
  }
  return n;
}

uintptr_t LearnedPredictor::stack_top_of(ThreadState* state) {
  uintptr_t stack_top = state->stack_top.load(std::memory_order_relaxed);
  if (stack_top == 0) {
    uintptr_t low = 0;
    stack_top = mapping_end(reinterpret_cast<uintptr_t>(&low), &state->main_thread, &low);
    state->stack_low.store(low, std::memory_order_relaxed);
    state->stack_top.store(stack_top, std::memory_order_relaxed);
  }
  return stack_top;
}

unsigned LearnedPredictor::run_model(const AllocationContext& context, ThreadState* state) {
  // Without a model, a context's class is the default one until online learning decides it.
  if (!has_model_) return default_class_;
  uint64_t t0 = monotonic_ns();
  uintptr_t stack_top = stack_top_of(state);
  uintptr_t pcs[kMaxFrames];
  bool broken = false;
  size_t depth = capture_stack(context, stack_top, pcs, kMaxFrames, &broken);
  // Only the model's max_tokens are read (as training cuts them): a 16 KiB kMaxTokens array would move every
  // callee below it, and each thread's stack would keep those pages resident for good.
  const size_t limit = model_.max_tokens();
  auto* tokens = static_cast<uint32_t*>(__builtin_alloca(limit * sizeof(uint32_t)));
  size_t n = tokens_of(pcs, depth, context.size_bytes, tokens, limit, broken && !state->main_thread);
  uint64_t hash = uint64_t(n) * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < n; ++i) {
    hash = (hash ^ tokens[i]) * 0x9E3779B97F4A7C15ull;
    hash ^= hash >> 29;
  }
  std::atomic<uint64_t>* slot =
      token_memo_ == nullptr ? nullptr : &token_memo_[(hash >> 16) & ((uint64_t{1} << kLogTokenMemo) - 1)];
  uint64_t held = slot == nullptr ? 0 : slot->load(std::memory_order_relaxed);
  unsigned lc;
  if (held != 0 && (held & ~kTokenMemoAnswerMask) == (hash & ~kTokenMemoAnswerMask)) {
    lc = unsigned(held & kTokenMemoAnswerMask);
    CacheCounters::bump(state->counters.token_memo_answers);
  } else {
    float logits[kNumClasses];
    lc = classify(model_, tokens, n, logits, confidence_);
    if (unseen_trial_ != 0 && repredict_every_ > unseen_trial_ && !model_.knows_code_path(tokens, n))
      lc |= kUnseenContext;
    else if (lc > longest_answered_.load(std::memory_order_relaxed))
      longest_answered_.store(uint8_t(lc), std::memory_order_relaxed);  // a racing smaller store: fixed next run
    static_assert(kUnseenContext <= kTokenMemoAnswerMask && kMaxClasses <= kTokenMemoAnswerMask, "answer fits");
    if (slot != nullptr) slot->store((hash & ~kTokenMemoAnswerMask) | lc, std::memory_order_relaxed);
  }
  if (log_fd_ >= 0) log_run(lc & ~kUnseenContext, tokens, n);
  CacheCounters::bump(state->counters.model_runs);
  CacheCounters::bump(state->counters.prediction_ns, monotonic_ns() - t0);
  release_after_run();
  return lc;
}

unsigned LearnedPredictor::model_answer(const AllocationContext& context, ThreadState* state, uint64_t key,
                                         uint64_t callers) {
  if (callers == 0) return run_model(context, state);
  uint64_t memo = OnlineLearner::context_key(context.return_address, model_size_bucket(context.size_bytes), callers);
  unsigned slot = unsigned(memo >> (64 - state->memo_log()));
  // A re-prediction (the cache holds the key) runs the model: it is there to catch another answer. But the end
  // of an entry's trial (its class the unseen paths' one) takes the memo's answer once another depth of the
  // context has ended its own trial (an answer without kUnseenContext): each depth's trial would run the model.
  const PredictionCacheEntry* entry = state->cache.find(key);
  bool miss = entry == nullptr;
  constexpr uint64_t kAnswer = ThreadState::kMemoAnswerMask;
  uint64_t held = state->memo[slot];
  if (held != 0 && (held & ~kAnswer) == (memo & ~kAnswer) &&
      (miss || ((entry->context & kTrialTag) && !(held & kUnseenContext)))) {
    CacheCounters::bump(state->counters.memo_answers);
    return unsigned(held & kAnswer);
  }
  unsigned answer = run_model(context, state);
  if (held != 0 && (held & ~kAnswer) != (memo & ~kAnswer)) ++state->memo_evictions;
  // A re-prediction that finds the context's path unseen ends its trial (PredictionCache::lookup): the context
  // proved frequent, and its next depths take the model's class at once instead of a trial each.
  static_assert(kUnseenContext <= kAnswer && kMaxClasses <= kAnswer, "an answer fits the slot's low bits");
  state->memo[slot] = (memo & ~kAnswer) | ((miss ? answer : answer & ~kUnseenContext) & kAnswer);
  return answer;
}

// In the file of predict(), which calls it on every check of the fast path and every miss.
uint64_t LearnedPredictor::deep_key(uint64_t key, const AllocationContext& context, uintptr_t stack_low,
                                    uintptr_t stack_top, uint64_t* callers) {
  uintptr_t at = context.stack_address;
  if (callers != nullptr) *callers = 0;
  if (stack_top == 0 || at < stack_low || at > stack_top - 16 || (at & 7) != 0) return 0;
  // The heap's entry frame is [saved rbp, return address into frame 0's function]; the saved rbp is that
  // function's frame (if it keeps one), whose record holds the return address into its caller, and so on. The
  // key mixes those return addresses.
  uint64_t deep = key, mixed = 0;
  int frames = 0;
  stack_walk::walk_frame_pointers(*reinterpret_cast<const uintptr_t*>(at), at + 1, stack_top,
                                  [&](uintptr_t, const uintptr_t* record) {
                                    if (frames == kDeepKeyFrames) return Visit::kStop;
                                    deep = (deep ^ record[1]) * 0x9E3779B97F4A7C15ull;
                                    deep ^= deep >> 31;
                                    mixed = (mixed ^ record[1]) * 0x9E3779B97F4A7C15ull;
                                    mixed ^= mixed >> 31;
                                    ++frames;
                                    return Visit::kNext;
                                  });
  if (callers != nullptr) *callers = mixed;
  return frames == 0 ? 0 : deep | 1;
}

void LearnedPredictor::schedule_check(ThreadState* state, PredictionCacheEntry& e, uint64_t runs_before,
                                      uint64_t misses_before) const {
  if (state->check_rng == 0)
    state->check_rng = (reinterpret_cast<uintptr_t>(state) ^ monotonic_ns() * 0x9E3779B97F4A7C15ull) | 1;
  uint32_t counted = e.hits & ~(kPredictionCheckEvery - 1);
  // The next check comes after a random number of hits (1 to kPredictionCheckEvery), not always after
  // kPredictionCheckEvery: where the call paths through one key repeat with a period that divides it (a function
  // called four times per request from four places), every check would meet the same path and the others would
  // never run the model (docs/prediction.md). The hits counter moves by less than kPredictionCheckEvery, so
  // re-predictions come as often as without the jitter.
  uint32_t after = next_check_after(state->check_rng);
  // A young thread state (its first kYoungCheckHits hits from an empty cache, when most contexts appear) checks
  // every 1 to kYoungCheckEvery hits: a rare call path behind a frequent one with the same key is found after
  // a few of its allocations instead of about 32, each of which got the frequent path's class and may pin a
  // page. The fast path counts kPredictionCheckEvery hits at each check, so the count keeps the crossing with
  // probability (mean distance) / kPredictionCheckEvery: re-predictions still come after about repredict_every
  // real hits. Not with online learning, whose sampling runs at the checks and is sized for their rate.
  if (!learn_ && state->counters.hits.load(std::memory_order_relaxed) < state->young_until) {
    bool crossed = counted != 0 && state->counters.model_runs.load(std::memory_order_relaxed) == runs_before &&
                   state->counters.misses.load(std::memory_order_relaxed) == misses_before;
    // Kept with probability (kYoungCheckEvery + 1) / 2 / kPredictionCheckEvery, from 7 random bits.
    static_assert(kPredictionCheckEvery == 64, "7 bits of a draw give the probability");
    if (crossed && (next_random(state->check_rng) >> 57) >= kYoungCheckEvery + 1) counted -= kPredictionCheckEvery;
    after = 1 + (after - 1) % kYoungCheckEvery;
  }
  uint32_t next = counted | (kPredictionCheckEvery - after);
  if (next != kDeepEntryHits) e.hits = next;
}

unsigned LearnedPredictor::predict(const AllocationContext& context) {
  ThreadState* state = this_thread_state();
  if (state == nullptr || state->busy) return has_model_ ? model_.default_class() : default_class_;
  uint64_t key = cache_key(context.return_address, context.stack_address, model_size_bucket(context.size_bytes));
  state->busy = true;
  auto& e = state->cache.slot(key);
  // Online learning keys a context by its callers, read within the thread's stack bounds: those from the start.
  if (learn_) stack_top_of(state);
  // The callers above frame 0 (0 before the thread's first model run has found its stack's bounds). Their tag
  // in the entry tells whether this allocation came by the entry's call path: the fast path comes here every
  // kPredictionCheckEvery hits, misses and re-predictions always do.
  uint64_t callers = 0;
  uint64_t deep = deep_key(key, context, state->stack_low.load(std::memory_order_relaxed),
                           state->stack_top.load(std::memory_order_relaxed), &callers);
  uint64_t runs_before = state->counters.model_runs.load(std::memory_order_relaxed);
  PredictionCacheEntry* entry = nullptr;
  // Even: the entry's low bit says whether it is on its trial (kTrialTag).
  uint16_t tag = deep == 0 ? 0 : uint16_t(((deep >> 48) & ~uint64_t(kTrialTag)) | 2);
  uint16_t entry_tag = uint16_t(e.context & ~kTrialTag);
  if (e.key == key && e.hits != kDeepEntryHits && tag != 0 && entry_tag != 0 && entry_tag != tag) {
    // Another call path with the same key: from now on each allocation with it is keyed by its callers too.
    e.hits = kDeepEntryHits;
    e.backoff = 0;
    CacheCounters::bump(state->counters.shared_keys);
  }
  unsigned lc;
  if (e.key == key && e.hits == kDeepEntryHits) {
    if (deep != 0 && deep != key) {
      lc = state->cache.lookup(deep, repredict_every_, state->counters,
                               [&] { return model_answer(context, state, deep, callers); }, repredict_backoff_,
                               unseen_trial_, trial_class());
      PredictionCacheEntry& d = state->cache.slot(deep);
      if (d.key == deep) entry = &d;
    } else {
      CacheCounters::bump(state->counters.hits);
      lc = e.lifetime_class;
    }
  } else {
    uint64_t misses_before = state->counters.misses.load(std::memory_order_relaxed);
    lc = state->cache.lookup(key, repredict_every_, state->counters,
                             [&] { return model_answer(context, state, key, callers); }, repredict_backoff_,
                             unseen_trial_, trial_class());
    if (e.key == key) {
      entry = &e;
      if ((e.context & ~kTrialTag) == 0) e.context |= tag;
      if (e.hits != kDeepEntryHits) schedule_check(state, e, runs_before, misses_before);
    }
  }
  if (learn_) lc = learn(context, state, callers, entry, lc,
                         state->counters.model_runs.load(std::memory_order_relaxed) != runs_before);
  // Last: a doubling moves the entries (`e` and `entry` above), and the fast path takes the new size from here on.
  uint64_t hits = state->counters.hits.load(std::memory_order_relaxed);
  if (state->cache.grow_if_crowded(hits) && state->view != nullptr) state->view->shift = state->cache.shift();
  grow_memo_if_crowded(state, state->counters.misses.load(std::memory_order_relaxed));
  state->busy = false;
  return lc;
}

// The memo doubles when answers overwrote another context's answer for 1 in 8 of its slots within the thread's
// last 65,536 cache misses: it is read on misses only, so its clock is theirs (against the cache's hits, a
// recursion's hundreds of contexts thrashed a 512-slot memo slowly enough never to grow it: ast-builder ran the
// model 21% more often). Slot i goes to 2i or 2i+1: from the last slot down, every target is past the slots not
// yet moved and was emptied when its own slot moved.
void LearnedPredictor::grow_memo_if_crowded(ThreadState* state, uint64_t misses) {
  using Cache = decltype(ThreadState::cache);
  if (misses - state->memo_window_misses > ThreadState::kMemoGrowWindowMisses) {
    state->memo_window_misses = misses;
    state->memo_evictions = 0;
    return;
  }
  unsigned log = state->memo_log();
  if (log >= ThreadState::kLogMemo || state->memo_evictions < (1u << log) >> Cache::kGrowEvictionsShift) return;
  for (unsigned slot = 1u << log; slot-- > 0;) {
    uint64_t held = state->memo[slot];
    state->memo[slot] = 0;
    if (held != 0) state->memo[unsigned(held >> (64 - (log + 1)))] = held;
  }
  state->memo_grown++;
  state->memo_evictions = 0;
  state->memo_window_misses = misses;
}

unsigned LearnedPredictor::learn(const AllocationContext& context, ThreadState* state, uint64_t callers,
                                 PredictionCacheEntry* entry, unsigned lc, bool model_ran) {
  // The callers' return addresses rather than the stack height of the cache's key: the same call path in
  // another thread (another stack) or at another depth of a recursion (an interpreter's) is the same context,
  // so what one thread learns serves them all, and evidence is not split by depth.
  unsigned bucket = model_size_bucket(context.size_bytes);
  int32_t slot = learner_.find_or_add(OnlineLearner::context_key(context.return_address, bucket, callers),
                                      context.return_address, bucket);
  if (slot < 0) return lc;
  if (model_ran) learner_.note_model_class(slot, lc);
  // The class without learning: the model's (as it first predicted the context), or the default one. It stands
  // until the context's evidence says a class at least the margin away (with a model, confidently); then the
  // learned class replaces it in the entry, and the base comes back if the evidence moves back within the margin.
  // With a model, nothing is replaced before the model's own class for this context is known (its first model
  // run): until then the entry's class may be another context's, one whose callers differ under the same key.
  uint8_t base = has_model_ ? learner_.model_class(slot) : uint8_t(default_class_);
  uint8_t learned = base == kNoClass ? kNoClass : learner_.learned(slot, base, has_model_);
  if (learned != kNoClass) {
    if (learned != lc) {
      if (entry != nullptr) entry->lifetime_class = learned;
      if (has_model_) learner_.note_override(slot);
      lc = learned;
    }
  } else if (!has_model_ && lc != base) {
    // (With a model its re-predictions bring its class back.)
    if (entry != nullptr) entry->lifetime_class = base;
    lc = base;
  }
  // (The thread's hit count, mixed with the slot: a random enough number that no other thread writes.)
  uint64_t r = (state->counters.hits.load(std::memory_order_relaxed) + uint64_t(slot)) * 0x9E3779B97F4A7C15ull;
  if (learner_.should_sample(slot, uint32_t(r >> 40))) {
    state->pending_sample = slot;
    lc |= kSampleAllocation;
  }
  return lc;
}

void LearnedPredictor::sampled(void* p) {
  ThreadState* state = t_thread_state;
  if (state == nullptr || state->pending_sample < 0) return;
  learner_.on_sample(state->pending_sample, reinterpret_cast<uintptr_t>(p), monotonic_ns());
  state->pending_sample = -1;
}

void LearnedPredictor::freed(void* p) {
  if (learn_) learner_.on_free(reinterpret_cast<uintptr_t>(p), monotonic_ns());
}

void LearnedPredictor::before_fork() {
  if (learn_) learner_.lock_for_fork();
}

void LearnedPredictor::after_fork(bool child) {
  if (learn_) learner_.unlock_after_fork(child);
}

bool LearnedPredictor::thread_cache(PredictionCacheView* view) {
  ThreadState* state = this_thread_state();
  if (state == nullptr) return false;
  view->shift = state->cache.shift();
  state->view = view;
  view->repredict_every = repredict_every_ == 0 ? UINT32_MAX : repredict_every_;
  view->hits = &state->counters.hits;
  // Last, with release: the sweeper reads another thread's view (whether it has a cache, and its hit count)
  // without the owner's handshake, and must find the rest of it filled in once it sees the entries.
  __atomic_store_n(&view->entries, state->cache.entries(), __ATOMIC_RELEASE);
  return true;
}

bool LearnedPredictor::drop_thread_cache(const PredictionCacheView& view) {
  return drop_thread_state_cache(view.entries);
}

void LearnedPredictor::set_log_fd(int fd) { log_fd_ = fd; }

// One line per model run, "class: token ids", written with one write(2) so that lines of threads do not mix.
void LearnedPredictor::log_run(unsigned lc, const uint32_t* tokens, size_t n) {
  char line[kMaxTokens * 11 + 16];
  size_t len = 0;
  auto put_u = [&](uint32_t v) {
    char digits[12];
    int k = 0;
    do digits[k++] = char('0' + v % 10); while ((v /= 10) != 0);
    while (k) line[len++] = digits[--k];
  };
  put_u(lc);
  line[len++] = ':';
  for (size_t i = 0; i < n; ++i) {
    line[len++] = ' ';
    put_u(tokens[i]);
  }
  line[len++] = '\n';
  ssize_t w = write(log_fd_, line, len);
  (void)w;
}

PredictionTotals LearnedPredictor::totals() const {
  PredictionTotals t;
  uint32_t used = thread_states_used();
  for (uint32_t i = 0; i < used; ++i) {
    const ThreadState* s = thread_state_at(i);
    if (s == nullptr) continue;
    const CacheCounters& c = s->counters;
    t.hits += c.hits.load(std::memory_order_relaxed);
    t.misses += c.misses.load(std::memory_order_relaxed);
    t.model_runs += c.model_runs.load(std::memory_order_relaxed);
    t.prediction_ns += c.prediction_ns.load(std::memory_order_relaxed);
    t.repredictions += c.repredictions.load(std::memory_order_relaxed);
    t.repredictions_changed += c.repredictions_changed.load(std::memory_order_relaxed);
    t.shared_keys += c.shared_keys.load(std::memory_order_relaxed);
    t.unseen += c.unseen.load(std::memory_order_relaxed);
    t.memo_answers += c.memo_answers.load(std::memory_order_relaxed);
    t.token_memo_answers += c.token_memo_answers.load(std::memory_order_relaxed);
  }
  return t;
}

void LearnedPredictor::trim() {
  drop_cold_warm_states();
  if (learn_) learner_.age(monotonic_ns());
  if (!has_model_) return;
  // A pass with fewer than kBusyRunsPerTrim model runs since the previous one drops the files' pages and makes
  // the next pass quiet (see release_after_run).
  bool busy = runs_since_trim_.exchange(0, std::memory_order_relaxed) >= kBusyRunsPerTrim;
  busy_.store(busy, std::memory_order_relaxed);
  if (busy) return;
  model_.drop_resident();
  tables_.drop_resident();
  clear_token_memo();
  if (dwarf_) drop_unwind_tables();
}

void LearnedPredictor::release_after_run() {
  // The model file's and token tables' pages stay resident only while the model runs often. A run reads a few of
  // them, but a binary search over the tables and the kernel's fault-around bring in whole 64 KiB windows: a few
  // runs in a quiet phase kept all 1.7 MiB of producer-consumer's token tables resident beside a 0.8 MiB heap.
  // So while the previous pass was quiet, each run gives its pages back when it is done (a page-cache hit to read
  // them again, microseconds), up to kBusyRunsPerTrim runs in a pass; beyond that the model is busy and its pages
  // stay until a quiet pass (trim).
  if (busy_.load(std::memory_order_relaxed)) {
    runs_since_trim_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (runs_since_trim_.fetch_add(1, std::memory_order_relaxed) >= kBusyRunsPerTrim) return;
  model_.drop_resident();
  tables_.drop_resident();
}

namespace {
void class_or_null(Out& o, uint8_t lc) {
  if (lc == kNoClass) o.put("null");
  else o.num(lc);
}
}  // namespace

size_t LearnedPredictor::describe_learning(char* buf, size_t capacity) {
  if (!learn_) return 0;
  // The most sampled contexts, chosen under the learner's lock; their sites are looked up after it.
  LearnedContext top[kDescribedContexts];
  unsigned n = 0;
  learner_.for_each([&](const LearnedContext& c) {
    if (c.samples == 0) return;
    unsigned at = n < kDescribedContexts ? n++ : kDescribedContexts;
    if (at == kDescribedContexts) {
      if (c.samples <= top[kDescribedContexts - 1].samples) return;
      at = kDescribedContexts - 1;
    }
    while (at > 0 && top[at - 1].samples < c.samples) {
      top[at] = top[at - 1];
      --at;
    }
    top[at] = c;
  });
  LearnerTotals t = learner_.totals();
  Out o{buf, capacity};
  const struct {
    const char* name;
    uint64_t value;
  } totals[] = {{"contexts", t.contexts}, {"decided", t.decided},           {"samples", t.samples},
                {"sampled_frees", t.frees}, {"live_samples", t.live_samples}, {"overrides", t.overrides}};
  o.put("\"online\": {");
  for (size_t i = 0; i < sizeof(totals) / sizeof(totals[0]); ++i) {
    o.put(i ? ", \"" : "\"");
    o.put(totals[i].name);
    o.put("\": ");
    o.num(totals[i].value);
  }
  o.put(",\n    \"most_sampled\": [");
  for (unsigned i = 0; i < n; ++i) {
    const LearnedContext& c = top[i];
    char site[512];
    // The caller's instruction (return address - 1), as profiles and addr2line name a call site.
    if (!describe_address(c.return_address - 1, site, sizeof site)) site[0] = '\0';
    o.put(i ? ",\n      {\"site\": " : "\n      {\"site\": ");
    o.string(site);
    o.put(", \"size_bucket\": ");
    o.num(c.size_bucket);
    o.put(", \"class\": ");
    class_or_null(o, c.learned);
    o.put(", \"confident\": ");
    o.put(c.confident ? "true" : "false");
    o.put(", \"model_class\": ");
    class_or_null(o, c.model_class);
    o.put(", \"samples\": ");
    o.num(c.samples);
    o.put(", \"overrides\": ");
    o.num(c.overrides);
    o.put(", \"freed\": [");
    for (unsigned k = 0; k < kMaxClasses; ++k) {
      if (k) o.put(", ");
      o.num(c.freed[k]);
    }
    o.put("], \"live\": [");
    for (unsigned k = 0; k < kMaxClasses; ++k) {
      if (k) o.put(", ");
      o.num(c.live[k]);
    }
    o.put("]}");
  }
  o.put(n ? "\n    ]}" : "]}");
  return o.used < capacity ? o.used : 0;
}

void LearnedPredictor::report(Counters& counters) {
  if (learn_) {
    LearnerTotals l = learner_.totals();
    counters.online_contexts.store(l.contexts, std::memory_order_relaxed);
    counters.online_decided.store(l.decided, std::memory_order_relaxed);
    counters.online_samples.store(l.samples, std::memory_order_relaxed);
    counters.online_sampled_frees.store(l.frees, std::memory_order_relaxed);
    counters.online_overrides.store(l.overrides, std::memory_order_relaxed);
    counters.online_dropped_samples.store(l.dropped_samples, std::memory_order_relaxed);
  }
  PredictionTotals t = totals();
  counters.prediction_cache_hits.store(t.hits, std::memory_order_relaxed);
  counters.prediction_cache_misses.store(t.misses, std::memory_order_relaxed);
  counters.model_runs.store(t.model_runs, std::memory_order_relaxed);
  counters.prediction_ns.store(t.prediction_ns, std::memory_order_relaxed);
  counters.repredictions_changed.store(t.repredictions_changed, std::memory_order_relaxed);
  counters.prediction_keys_shared.store(t.shared_keys, std::memory_order_relaxed);
  counters.prediction_unseen_contexts.store(t.unseen, std::memory_order_relaxed);
  counters.prediction_memo_answers.store(t.memo_answers, std::memory_order_relaxed);
  counters.prediction_token_memo_answers.store(t.token_memo_answers, std::memory_order_relaxed);
}

}  // namespace llamalloc::model

