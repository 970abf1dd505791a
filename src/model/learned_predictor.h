// The learned predictor, the model run of the LLAMA paper ("Learning-based Memory Allocation for C++ Server
// Workloads", section 7): prediction cache -> on a miss, a walk of the caller's stack (caller_stack.cc, the
// profiler's walker), token tables, the LSTM -> lifetime class. Rules: everything it needs is mapped at init;
// the allocation path never allocates, takes no lock of its own and calls nothing that takes the loader's lock
// (libgcc's unwinder finds frames with the lock-free _dl_find_object; its one lock guards frames registered at
// run time: docs/prediction.md, step 2). The module map (module_map.h) and the per-thread states
// (thread_state_pool.h) are its own files.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "model_file.h"
#include "module_map.h"
#include "online_learner.h"
#include "options.h"
#include "prediction_cache.h"
#include "predictor/predictor.h"
#include "thread_state_pool.h"
#include "token_table.h"

namespace llamalloc::model {

inline constexpr unsigned kMaxFrames = 64;
// Most frames between the predictor and the program's caller (predictor, heap slow path, entry point, ...).
inline constexpr int kMaxHeapFrames = 16;
// Callers' return addresses in the key of a shared entry (deep_key): redis's allocations return into
// ztrymalloc_usable_internal, called by zmalloc, called by the function that wants the memory.
inline constexpr int kDeepKeyFrames = 4;

// The settings of a predictor that is not told otherwise: the defaults of the heap's options table (options.h:
// REPREDICT_EVERY, REPREDICT_BACKOFF, UNSEEN_TRIAL, MIN_CONFIDENCE, DEFAULT_CLASS, MIN_CLASS), the one place
// they are written.
inline constexpr Options kOptionDefaults{};
inline constexpr uint32_t kDefaultRepredictEvery = uint32_t(kOptionDefaults.repredict_every);
inline constexpr unsigned kDefaultRepredictBackoff = unsigned(kOptionDefaults.repredict_backoff);
inline constexpr uint32_t kDefaultUnseenTrial = uint32_t(kOptionDefaults.unseen_trial);
inline constexpr ConfidenceRule kDefaultConfidenceRule{unsigned(kOptionDefaults.min_confidence),
                                                       unsigned(kOptionDefaults.default_class),
                                                       unsigned(kOptionDefaults.min_class)};

// Unmaps the pages of every loaded object's unwind tables (.eh_frame_hdr to the end of its read-only segment)
// that a model run's DWARF walk mapped; a later read maps them again from the page cache (caller_stack.cc). It
// takes the loader's lock (dl_iterate_phdr), as the DWARF walk itself may: called only by Predictor::trim, at
// the sweeper's passes (or the inline passes of a process without a sweeper), holding no lock of the heap.
void drop_unwind_tables();

struct PredictionTotals {
  uint64_t hits = 0, misses = 0, model_runs = 0, prediction_ns = 0, repredictions = 0, repredictions_changed = 0,
           shared_keys = 0, unseen = 0, memo_answers = 0, token_memo_answers = 0;
};

// The class of an unseen-path trial (prediction_cache.h, kUnseenContext): kUnseenClass, the longest, where the
// model keeps some context it was trained on apart from the placement without a model (its table's longest class,
// as MIN_CLASS folds it, or `longest_answered`, the longest a model run gave such a context so far, above
// LLAMALLOC_DEFAULT_CLASS); otherwise that placement, so that trials never open a class of their own. The
// process's predictor and the replay's both decide it here.
inline unsigned unseen_trial_class(const ModelFile& model, const ConfidenceRule& rule, unsigned longest_answered) {
  unsigned table = model.has_table() ? rule.fold(model.longest_table_class()) : 0;
  return longest_answered > rule.fallback || table > rule.fallback ? kUnseenClass : rule.fallback;
}

class LearnedPredictor final : public Predictor {
 public:
  LearnedPredictor() = default;
  ~LearnedPredictor();
  LearnedPredictor(const LearnedPredictor&) = delete;
  LearnedPredictor& operator=(const LearnedPredictor&) = delete;
  // Maps the model and the token tables (tokens_path may be null: every frame is then <unsymbolized>, the
  // model sees only the size). model_path null or empty: no model, every context gets `default_class` until
  // online learning (set_learning) decides it. On failure: false and a reason naming the file in `error`.
  bool init(const char* model_path, const char* tokens_path, uint32_t repredict_every, char* error,
            size_t error_capacity, unsigned repredict_backoff = kDefaultRepredictBackoff,
            unsigned default_class = kDefaultConfidenceRule.fallback);
  // Online learning (online_learner.h, docs/prediction.md): on every check and miss of the prediction cache the
  // context's learned class replaces the cached one once decided (with a model: once confident), and some
  // allocations are sampled. false: the learner's tables could not be mapped.
  bool set_learning(const LearnRule& rule);
  bool learning() const { return learn_; }
  bool has_model() const { return has_model_; }
  OnlineLearner& learner() { return learner_; }
  void sampled(void* p) override;
  void freed(void* p) override;
  bool samples() const override { return learn_; }
  void before_fork() override;
  void after_fork(bool child) override;
  // The statistics' "online" object (online learning's totals and its contexts, most sampled first, at most
  // kDescribedContexts), formatted into buf without allocating; its length (0: learning is off or it does not
  // fit).
  size_t describe_learning(char* buf, size_t capacity);
  static constexpr unsigned kDescribedContexts = 40;

  Consult consult() const override { return Consult::kEveryAllocation; }
  unsigned predict(const AllocationContext& context) override;
  // When no model ran since the previous call: the model's and the token tables' pages leave the resident set
  // (clean file pages: the page cache keeps them, the next model run reads them back). A server in its steady
  // state rarely misses the prediction cache, and the tables are often as large as its objects after a peak.
  void trim() override;
  // Stores totals() into the heap's prediction counters (at exit, before the statistics file is written).
  void report(Counters& counters) override;
  bool thread_cache(PredictionCacheView* view) override;
  // The cache's pages leave the resident set (they read back as empty entries).
  bool drop_thread_cache(const PredictionCacheView& view) override;

  // Sum over every thread that ever predicted (exited threads included).
  PredictionTotals totals() const;

  // The pieces of a model run, public for tests and benchmarks.
  // The pcs of the caller's stack (src/common/stack_walk.h: return address - 1), innermost first: the caller's
  // (context.return_address - 1), then its callers', from the DWARF unwinder (set_dwarf_unwind) or else the
  // frame-pointer chain above the frame that returns to it (see docs/prediction.md). Must be called from the
  // allocation path itself (its own frames lead to the caller). *broken: the frame-pointer walk ended before
  // `max` frames (never set by the DWARF walk).
  size_t capture_stack(const AllocationContext& context, uintptr_t stack_top, uintptr_t* pcs, size_t max,
                       bool* broken = nullptr);
  // The DWARF unwinder (libgcc's, from the .eh_frame tables) for the walk of a model run, as the profiler and
  // tracer unwind: without it the walk follows frame pointers only and skips each caller of code built
  // without them (LLAMALLOC_PREDICT_DWARF, docs/prediction.md). On by default.
  void set_dwarf_unwind(bool on) { dwarf_ = on; }
  // Whether a model run for an allocation returning to `return_address` may use the DWARF unwinder.
  bool dwarf_allowed(uintptr_t return_address);
  // Tokens of a context as training encodes it: <size:k>, then each frame's tokens separated by '@'. `pcs` as
  // capture_stack gives them (and as profiles record them).
  // `thread_root`: the walk broke in a thread's outermost frames (code without frame pointers, such as
  // libstdc++'s thread trampoline): the thread root frames of the tables (start_thread @ __clone3) follow.
  size_t tokens_of(const uintptr_t* pcs, size_t depth, size_t size_bytes, uint32_t* tokens, size_t max,
                   bool thread_root = false);
  unsigned run_model(const AllocationContext& context, ThreadState* state);
  // run_model's answer for the cache key `key`: on a miss, the thread's memo of the context's answer (callers:
  // the return addresses above frame 0, mixed; 0 when unknown, then the model runs), else a run, remembered. A
  // re-prediction runs the model, but for the end of a trial whose context has ended one at another depth
  // (ThreadState::memo says why).
  unsigned model_answer(const AllocationContext& context, ThreadState* state, uint64_t key, uint64_t callers);
  // Doubles the thread's memo when its answers keep overwriting each other (ThreadState::memo_log).
  static void grow_memo_if_crowded(ThreadState* state, uint64_t misses);
  // After a model run: gives the model file's and token tables' pages back while the model runs rarely.
  void release_after_run();
  // Sets the low bits of entry e's hit count so that the fast path comes back for its next check after a random
  // number of hits; runs_before and misses_before: the thread's counters before this visit's lookup.
  void schedule_check(ThreadState* state, PredictionCacheEntry& e, uint64_t runs_before, uint64_t misses_before) const;
  // The key of an allocation whose cache entry is shared by call paths: `key` mixed with the return addresses
  // of up to kDeepKeyFrames callers above frame 0 (the frame chain from context.stack_address, within the
  // thread's stack); 0 when no caller's frame can be read.
  // *callers (optional): the same return addresses mixed without `key` (0 when none), the online learner's
  // part of a context that every thread shares.
  static uint64_t deep_key(uint64_t key, const AllocationContext& context, uintptr_t stack_low, uintptr_t stack_top,
                           uint64_t* callers = nullptr);

  // Appends "class: tokens" per model run to fd (tests of the token path); -1: off.
  void set_log_fd(int fd);
  // Predictions below this confidence become `fallback` (LLAMALLOC_MIN_CONFIDENCE, model_file.h).
  void set_confidence_rule(ConfidenceRule rule) {
    confidence_ = rule;
    clear_token_memo();
  }
  // LLAMALLOC_UNSEEN_TRIAL (prediction_cache.h, kUnseenContext); 0: off. Off as well without re-predictions or
  // without the model file's list of training contexts.
  void set_unseen_trial(uint32_t hits) {
    unseen_trial_ = hits;
    clear_token_memo();
  }
  // The class of an unseen-path trial (unseen_trial_class).
  unsigned trial_class() const {
    return unseen_trial_class(model_, confidence_, longest_answered_.load(std::memory_order_relaxed));
  }
  // The answers of the token memo go (its pages read back as empty slots), so that the next run of each token
  // sequence runs the LSTM: the settings they depend on changed (the setters above), or the model ran too rarely
  // in a sweep period for them to earn their pages (trim).
  void clear_token_memo();
  const ModelFile& model() const { return model_; }
  const TokenTables& tables() const { return tables_; }
  ModuleMap& modules() { return modules_; }

 private:
  void log_run(unsigned lc, const uint32_t* tokens, size_t n);
  // The thread's stack mapping, read once per thread (/proc/self/maps): its top.
  static uintptr_t stack_top_of(ThreadState* state);
  // Online learning at a check or miss whose cached class is lc (entry: the cache entry that holds it, or null):
  // the learned class, with kSampleAllocation when the allocation is to be sampled.
  unsigned learn(const AllocationContext& context, ThreadState* state, uint64_t callers, PredictionCacheEntry* entry,
                 unsigned lc, bool model_ran);

  ModelFile model_;
  ConfidenceRule confidence_ = kDefaultConfidenceRule;
  TokenTables tables_;
  ModuleMap modules_;
  uint32_t repredict_every_ = kDefaultRepredictEvery;
  unsigned repredict_backoff_ = kDefaultRepredictBackoff;
  uint32_t unseen_trial_ = kDefaultUnseenTrial;
  int log_fd_ = -1;
  bool dwarf_ = true;
  bool has_model_ = false;
  bool learn_ = false;
  unsigned default_class_ = kDefaultConfidenceRule.fallback;
  OnlineLearner learner_;
  int thread_root_binary_ = -1;  // the "<thread-root>" record of the token tables, if any
  // The model's and token tables' pages stay resident only while the model runs at least this many times
  // between two trims (passes of the sweeper); otherwise they leave after each run (release_after_run).
  static constexpr uint64_t kBusyRunsPerTrim = 64;
  std::atomic<uint64_t> runs_since_trim_{0};
  std::atomic<bool> busy_{false};  // the previous pass had kBusyRunsPerTrim runs or more
  std::atomic<uint8_t> longest_answered_{0};  // the longest class of a model run on a trained-on path
  // The process's memo of run_model's answers by token sequence. The answer is a function of the tokens alone
  // (the model, the confidence rule and the unseen-path trial are fixed while the program runs; their setters
  // clear it), so a sequence met again takes it without the LSTM, which is most of a model run's time. The
  // thread's memo by context (ThreadState::memo) misses where a recursion reaches one call path through many
  // combinations of its four callers: ast-builder with its model ran the LSTM 19,856 times for 2,438 sequences
  // and took 4.1 times as long as without a model. Shared by all threads, as their contexts are the same code;
  // direct-mapped by bits 16 to 27 of the sequence's hash, each slot that hash's top 48 bits and the answer
  // (with kUnseenContext) in its low 16, 0: empty; a racing store loses one answer, never mixes two (one word).
  // 32 KiB mapped (not resident) at init with a model, touched as used, given back when the model runs rarely.
  static constexpr unsigned kLogTokenMemo = 12;
  static constexpr uint64_t kTokenMemoAnswerMask = 0xFFFF;
  std::atomic<uint64_t>* token_memo_ = nullptr;
};

}  // namespace llamalloc::model

// Called by the heap at init when a model (LLAMALLOC_MODEL, or the one LLAMALLOC_MODEL_DIR holds for this build)
// or LLAMALLOC_LEARN is set (the heap declares it weak), with the model's token tables (LLAMALLOC_TOKENS, or the
// directory's). Reads LLAMALLOC_REPREDICT_EVERY and the rest of the predictor's options; on a bad file prints one
// warning line and returns null (with LLAMALLOC_LEARN: a predictor that learns without the model).
extern "C" llamalloc::Predictor* llamalloc_make_model_predictor(const char* model_path, const char* tokens_path);
// Called by the heap at init when LLAMALLOC_MODEL_DIR is set and LLAMALLOC_MODEL is not (model_dir.h): true with
// the model and token tables prepared in `dir` for this executable's build; false after one warning line.
extern "C" bool llamalloc_model_of_directory(const char* dir, const char** model_path, const char** tokens_path);
