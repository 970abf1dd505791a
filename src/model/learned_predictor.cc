// The learned predictor's model run (learned_predictor.h): the prediction cache first, and on a miss the walk
// of the caller's stack (caller_stack.cc), its tokens and the LSTM. Rules: nothing here allocates or takes a
// lock; a thread's state comes from the pool (thread_state_pool.h) and its addresses from the module map
// (module_map.h).
#include "learned_predictor.h"

#include <unistd.h>

#include <cstring>

#include "stack_walk.h"
#include "stats.h"

namespace llamalloc::model {

using stack_walk::Visit;

bool LearnedPredictor::init(const char* model_path, const char* tokens_path, uint32_t repredict_every,
                            char* error, size_t cap, unsigned repredict_backoff) {
  char why[256];
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
  repredict_every_ = repredict_every;
  repredict_backoff_ = repredict_backoff;
  thread_root_binary_ = tables_.find_binary("<thread-root>");
  if (!map_thread_states()) {
    format_message(error, cap, "%s: cannot map the prediction caches", model_path);
    return false;
  }
  modules_.refresh(tables_);
  return true;
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

unsigned LearnedPredictor::run_model(const AllocationContext& context, ThreadState* state) {
  uint64_t t0 = monotonic_ns();
  uintptr_t stack_top = state->stack_top.load(std::memory_order_relaxed);
  if (stack_top == 0) {
    uintptr_t low = 0;
    stack_top = mapping_end(reinterpret_cast<uintptr_t>(&t0), &state->main_thread, &low);
    state->stack_low.store(low, std::memory_order_relaxed);
    state->stack_top.store(stack_top, std::memory_order_relaxed);
  }
  uintptr_t pcs[kMaxFrames];
  bool broken = false;
  size_t depth = capture_stack(context, stack_top, pcs, kMaxFrames, &broken);
  // Only the model's max_tokens are read (as training cuts them): a 16 KiB kMaxTokens array would move every
  // callee below it, and each thread's stack would keep those pages resident for good.
  const size_t limit = model_.max_tokens();
  auto* tokens = static_cast<uint32_t*>(__builtin_alloca(limit * sizeof(uint32_t)));
  size_t n = tokens_of(pcs, depth, context.size_bytes, tokens, limit, broken && !state->main_thread);
  float logits[kNumClasses];
  unsigned lc = classify(model_, tokens, n, logits, confidence_);
  if (log_fd_ >= 0) log_run(lc, tokens, n);
  if (unseen_trial_ != 0 && repredict_every_ > unseen_trial_ && !model_.knows_context(tokens, n)) lc |= kUnseenContext;
  CacheCounters::bump(state->counters.model_runs);
  CacheCounters::bump(state->counters.prediction_ns, monotonic_ns() - t0);
  return lc;
}

// In the file of predict(), which calls it on every check of the fast path and every miss.
uint64_t LearnedPredictor::deep_key(uint64_t key, const AllocationContext& context, uintptr_t stack_low,
                                    uintptr_t stack_top) {
  uintptr_t at = context.stack_address;
  if (stack_top == 0 || at < stack_low || at > stack_top - 16 || (at & 7) != 0) return 0;
  // The heap's entry frame is [saved rbp, return address into frame 0's function]; the saved rbp is that
  // function's frame (if it keeps one), whose record holds the return address into its caller, and so on. The
  // key mixes those return addresses.
  uint64_t deep = key;
  int frames = 0;
  stack_walk::walk_frame_pointers(*reinterpret_cast<const uintptr_t*>(at), at + 1, stack_top,
                                  [&](uintptr_t, const uintptr_t* record) {
                                    if (frames == kDeepKeyFrames) return Visit::kStop;
                                    deep = (deep ^ record[1]) * 0x9E3779B97F4A7C15ull;
                                    deep ^= deep >> 31;
                                    ++frames;
                                    return Visit::kNext;
                                  });
  return frames == 0 ? 0 : deep | 1;
}

unsigned LearnedPredictor::predict(const AllocationContext& context) {
  ThreadState* state = this_thread_state();
  if (state == nullptr || state->busy) return model_.default_class();
  uint64_t key = cache_key(context.return_address, context.stack_address, model_size_bucket(context.size_bytes));
  state->busy = true;
  auto& e = state->cache.slot(key);
  // The callers above frame 0 (0 before the thread's first model run has found its stack's bounds). Their tag
  // in the entry tells whether this allocation came by the entry's call path: the fast path comes here every
  // kPredictionCheckEvery hits, misses and re-predictions always do.
  uint64_t deep = deep_key(key, context, state->stack_low.load(std::memory_order_relaxed),
                           state->stack_top.load(std::memory_order_relaxed));
  uint16_t tag = deep == 0 ? 0 : uint16_t((deep >> 48) | 1);
  if (e.key == key && e.hits != kDeepEntryHits && tag != 0 && e.context != 0 && e.context != tag) {
    // Another call path with the same key: from now on each allocation with it is keyed by its callers too.
    e.hits = kDeepEntryHits;
    e.backoff = 0;
    CacheCounters::bump(state->counters.shared_keys);
  }
  unsigned lc;
  if (e.key == key && e.hits == kDeepEntryHits) {
    if (deep != 0 && deep != key) {
      lc = state->cache.lookup(deep, repredict_every_, state->counters, [&] { return run_model(context, state); },
                               repredict_backoff_, unseen_trial_);
    } else {
      CacheCounters::bump(state->counters.hits);
      lc = e.lifetime_class;
    }
  } else {
    lc = state->cache.lookup(key, repredict_every_, state->counters, [&] { return run_model(context, state); },
                             repredict_backoff_, unseen_trial_);
    if (e.key == key) {
      if (e.context == 0) e.context = tag;
      // The next check comes after a random number of hits (1 to kPredictionCheckEvery), not always after
      // kPredictionCheckEvery: where the call paths through one key repeat with a period that divides it (a
      // function called four times per request from four places), every check would meet the same path and the
      // others would never run the model (docs/prediction.md). The hits counter moves by less than
      // kPredictionCheckEvery, so re-predictions come as often as without the jitter.
      if (e.hits != kDeepEntryHits) {
        uint64_t r = (state->counters.hits.load(std::memory_order_relaxed) ^ key) * 0x9E3779B97F4A7C15ull;
        uint32_t low = uint32_t(r >> 58) & (kPredictionCheckEvery - 1);
        uint32_t jittered = (e.hits & ~(kPredictionCheckEvery - 1)) | low;
        if (jittered != kDeepEntryHits) e.hits = jittered;
      }
    }
  }
  state->busy = false;
  return lc;
}

bool LearnedPredictor::thread_cache(PredictionCacheView* view) {
  ThreadState* state = this_thread_state();
  if (state == nullptr) return false;
  view->entries = state->cache.entries();
  view->shift = ThreadState::kLogCacheEntries == 0 ? 64 : 64 - ThreadState::kLogCacheEntries;
  view->repredict_every = repredict_every_ == 0 ? UINT32_MAX : repredict_every_;
  view->hits = &state->counters.hits;
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
  const ThreadState* states = thread_states();
  uint32_t used = thread_states_used();
  for (uint32_t i = 0; i < used; ++i) {
    const CacheCounters& c = states[i].counters;
    t.hits += c.hits.load(std::memory_order_relaxed);
    t.misses += c.misses.load(std::memory_order_relaxed);
    t.model_runs += c.model_runs.load(std::memory_order_relaxed);
    t.prediction_ns += c.prediction_ns.load(std::memory_order_relaxed);
    t.repredictions += c.repredictions.load(std::memory_order_relaxed);
    t.repredictions_changed += c.repredictions_changed.load(std::memory_order_relaxed);
    t.shared_keys += c.shared_keys.load(std::memory_order_relaxed);
    t.unseen += c.unseen.load(std::memory_order_relaxed);
  }
  return t;
}

void LearnedPredictor::trim() {
  drop_cold_warm_states();
  uint64_t runs = totals().model_runs;
  if (runs_at_trim_.exchange(runs, std::memory_order_relaxed) != runs) return;  // (ran since: still in use)
  model_.drop_resident();
  tables_.drop_resident();
}

void LearnedPredictor::report(Counters& counters) {
  PredictionTotals t = totals();
  counters.prediction_cache_hits.store(t.hits, std::memory_order_relaxed);
  counters.prediction_cache_misses.store(t.misses, std::memory_order_relaxed);
  counters.model_runs.store(t.model_runs, std::memory_order_relaxed);
  counters.prediction_ns.store(t.prediction_ns, std::memory_order_relaxed);
  counters.repredictions_changed.store(t.repredictions_changed, std::memory_order_relaxed);
  counters.prediction_keys_shared.store(t.shared_keys, std::memory_order_relaxed);
  counters.prediction_unseen_contexts.store(t.unseen, std::memory_order_relaxed);
}

}  // namespace llamalloc::model

