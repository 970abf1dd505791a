// Lifetime predictions for a recorded trace (the simulator's llama-model policy, docs/simulator.md): the
// in-process predictor's token path (LearnedPredictor::tokens_of over the same token tables), its model and its
// prediction cache (PredictionCache, cache_key, every-N re-prediction keeping the longer class), fed with the
// trace's stacks and executable mappings instead of a frame-pointer walk of the live stack.
//
// Not on an allocation path: it may allocate (std containers), unlike the in-process predictor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "learned_predictor.h"

namespace llamalloc::model {

// One executable mapping of the traced process (a MAPPING record of the trace, docs/formats/trace.md).
struct TraceMapping {
  uint64_t memory_start = 0, memory_limit = 0, file_offset = 0;
  std::string path;      // as the traced process named it (the loader's name; may be a symbolic link)
  std::string build_id;  // raw GNU build id bytes; empty if the object had none
};

struct TracePredictionTotals {
  uint64_t hits = 0, misses = 0, model_runs = 0, repredictions = 0, repredictions_changed = 0;
  uint64_t unseen = 0;  // misses whose context the model was not trained on
  // Distinct (stack, model size bucket) contexts whose tokens went through the LSTM: the replay computes each once
  // (the model is deterministic), model_runs counts what the process would have run.
  uint64_t model_inferences = 0;
  uint64_t threads = 0;  // prediction caches (one per traced thread that allocated)
};

class TracePredictor {
 public:
  TracePredictor();
  ~TracePredictor();
  TracePredictor(const TracePredictor&) = delete;
  TracePredictor& operator=(const TracePredictor&) = delete;

  // Maps the model and the token tables (tokens_path empty: no tables, every frame is <unsymbolized>, the model
  // sees only the size). On failure: false and one line "FILE: problem" in *error.
  // repredict_every and repredict_backoff: as LLAMALLOC_REPREDICT_EVERY and LLAMALLOC_REPREDICT_BACKOFF.
  bool init(const std::string& model_path, const std::string& tokens_path, uint32_t repredict_every,
            std::string* error, unsigned repredict_backoff = kDefaultRepredictBackoff);

  // Places the trace's executable mappings over the binaries of the token tables: a frame's ELF virtual
  // address is found as the process's module map finds it (path, then the PT_LOAD segment holding the mapping's
  // file offset). A binary that is missing on this machine, absent from the tables, changed since its table was
  // prepared (size, mtime) or whose build id differs from the traced one keeps its frames <unsymbolized>.
  void load_mappings(const std::vector<TraceMapping>& mappings);

  // Counts the frames of one trace stack that fall in a mapping whose binary is unusable (for warning()).
  void note_stack(const uint64_t* frames, uint32_t depth);
  // One line naming the unusable binaries that frames of the noted stacks fall in, and why; empty if none.
  std::string warning() const;

  // The lifetime class of one allocation of traced thread `thread`, as the in-process predictor would give it.
  // `frames`: the trace's stack, innermost first, each a pc (src/common/stack_walk.h: return address - 1; frame
  // 0 is the allocator's caller). The cache key is cache_key(return address of frame 0, stand-in stack height,
  // model size bucket): a trace has no stack height, so the stand-in is a hash of the return addresses of the
  // whole stack (the frames that make the height in the process; see docs/simulator.md).
  unsigned predict(uint32_t thread, const uint64_t* frames, uint32_t depth, uint64_t size_bytes) {
    return predict(thread, frames, depth, size_bytes, stack_height_stand_in(frames, depth));
  }
  // The same with the stand-in height computed once per stack by the caller.
  unsigned predict(uint32_t thread, const uint64_t* frames, uint32_t depth, uint64_t size_bytes, uint64_t height);

  // The token ids of one trace stack and size, as training encodes them (tests).
  size_t tokens(const uint64_t* frames, uint32_t depth, uint64_t size_bytes, uint32_t* out, size_t max);
  // The model's class for a stack and size, without the cache (tests); with `known`, also whether the model file
  // lists the context's code path among those it was trained on (ModelFile::knows_code_path).
  unsigned classify(const uint64_t* frames, uint32_t depth, uint64_t size_bytes, bool* known = nullptr);

  // Appends "class: token ids" for each context the model classifies (each distinct stack and model size bucket once),
  // as LLAMALLOC_PREDICT_LOG does in the process; -1: off.
  void set_log_fd(int fd) { log_fd_ = fd; }
  // As the process's LLAMALLOC_MIN_CONFIDENCE and LLAMALLOC_DEFAULT_CLASS (model_file.h).
  void set_confidence_rule(ConfidenceRule rule) { confidence_ = rule; }
  // As the process's LLAMALLOC_UNSEEN_TRIAL (prediction_cache.h, kUnseenContext); 0: off.
  void set_unseen_trial(uint32_t hits) { unseen_trial_ = hits; }
  uint32_t unseen_trial() const { return unseen_trial_; }

  TracePredictionTotals totals() const;
  uint32_t repredict_every() const { return repredict_every_; }
  unsigned repredict_backoff() const { return repredict_backoff_; }
  const ModelFile& model() const { return predictor_->model(); }

  // The stand-in stack height of a trace stack (exposed for tests).
  static uint64_t stack_height_stand_in(const uint64_t* frames, uint32_t depth);

 private:
  using Cache = PredictionCache<ThreadState::kLogCacheEntries>;
  struct Placed {
    uint64_t start, end;
    int32_t problem;  // index in problems_, or -1
  };

  std::unique_ptr<LearnedPredictor> predictor_;  // model, token tables, the trace's module map, tokens_of
  uint32_t repredict_every_ = kDefaultRepredictEvery;
  ConfidenceRule confidence_ = kDefaultConfidenceRule;
  unsigned repredict_backoff_ = kDefaultRepredictBackoff;
  uint32_t unseen_trial_ = kDefaultUnseenTrial;
  CacheCounters counters_;
  uint64_t inferences_ = 0, threads_ = 0;
  unsigned longest_answered_ = 0;  // the longest class of a classify() on a trained-on path
  unsigned trial_class() const { return unseen_trial_class(predictor_->model(), confidence_, longest_answered_); }
  int log_fd_ = -1;
  // Traced thread id -> its cache, kept to the end: Linux hands out thread ids in sequence, so an id that comes
  // back is the same thread (a new thread, with a new id, starts with an empty cache as in the process).
  std::unordered_map<uint32_t, std::unique_ptr<Cache>> caches_;
  uint32_t last_thread_ = 0;  // a thread allocates in runs: its cache is found without the map
  Cache* last_cache_ = nullptr;
  std::unordered_map<uint64_t, uint16_t> memo_;  // stack hash ^ model size bucket -> model class | kUnseenContext
  std::vector<Placed> placed_;                                    // sorted by start
  std::vector<std::string> problems_;                             // "path (reason)"
  std::vector<uint64_t> problem_frames_;
  uint64_t noted_frames_ = 0;
};

}  // namespace llamalloc::model
