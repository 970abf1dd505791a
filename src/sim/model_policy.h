// llama-model: the real llamalloc heap (LlamaPolicy) fed with the learned model's class for every allocation,
// through the same prediction cache as in the process (src/model/trace_predictor.h). Its summary says how well
// the model did: cache hits and misses, model runs, and each prediction against the object's true class.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "sim/flat_map.h"
#include "sim/llama_policy.h"
#include "sim/trace_stacks.h"

namespace llamalloc::model {
class TracePredictor;
}

namespace llamalloc::sim {

// The files of the predictor. Its rules (re-prediction, confidence, the shortest class, unseen contexts) are the
// library's options, REPREDICT_EVERY, REPREDICT_BACKOFF, MIN_CONFIDENCE, MIN_CLASS, UNSEEN_TRIAL and
// DEFAULT_CLASS, read from the heap's options (LlamaOptions::heap_options).
struct ModelOptions {
  std::string model_path;
  std::string tokens_path;  // empty: no token tables (every frame <unsymbolized>)
  std::string predict_log;  // non-empty: "class: token ids" per context the model classifies
};

// What a confusion matrix (rows: true class, columns: the class given) says: the fractions of the objects whose
// true class is known given exactly it, a class within one of it, a longer one and a shorter one.
struct ClassAgreement {
  double exact = 0, within_one = 0, over = 0, under = 0;
};
ClassAgreement class_agreement(const std::array<std::array<uint64_t, 8>, 8>& confusion);
// The matrix as JSON, an array of rows (a replay's class_confusion and placed_class_confusion).
std::string confusion_json(const std::array<std::array<uint64_t, 8>, 8>& confusion);

class ModelClassSource final : public ClassSource {
 public:
  // Opens the model and the tables and places the trace's mappings; throws FormatError (one line naming the
  // file) for a bad model or token file. The predictor's rules come from `heap_options`, as in the process.
  // `warning` gets the line naming binaries whose frames cannot be tokenised (empty if none).
  ModelClassSource(const ModelOptions& options, const Options& heap_options, const TraceStacks& stacks,
                   std::string* warning);
  ~ModelClassSource() override;

  unsigned class_of(const ObjectAlloc& object) override;
  ModelRun last_model_run() const override { return last_run_; }
  std::vector<std::pair<std::string, double>> summary_extras() const override;
  std::vector<std::pair<std::string, std::string>> summary_json() const override;

  // confusion[true class][predicted class], objects whose true class is known.
  const std::array<std::array<uint64_t, 8>, 8>& confusion() const { return confusion_; }
  model::TracePredictor& predictor() { return *predictor_; }

 private:
  std::unique_ptr<model::TracePredictor> predictor_;
  const TraceStacks& stacks_;
  struct StackInfo {
    const uint64_t* frames;
    uint32_t depth;
    uint64_t height;  // the cache's stand-in stack height
  };
  FlatMap<StackInfo> stack_info_;  // stack id + 1 -> its frames, computed once per stack
  std::array<std::array<uint64_t, 8>, 8> confusion_{};
  uint64_t predicted_ = 0, without_stack_ = 0;
  ModelRun last_run_ = ModelRun::kNone;
  int log_fd_ = -1;
};

// The llama-model policy: LlamaPolicy with a ModelClassSource; with the heap option LEARN=1, the online learner
// over it (sim/online_policy.h), as the library runs a model under LLAMALLOC_LEARN=1.
std::unique_ptr<LlamaPolicy> make_model_policy(LlamaOptions options, const ModelOptions& model,
                                             const TraceStacks& stacks, std::string* warning);

}  // namespace llamalloc::sim
