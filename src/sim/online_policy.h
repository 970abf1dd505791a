// Online lifetime learning replayed (docs/simulator.md, "llama-online"): the process's OnlineLearner
// (src/model/online_learner.h), the same code, fed with the trace's allocations, frees and clock as
// LearnedPredictor feeds it in the process under LLAMALLOC_LEARN=1.
//
// - llama-online: no model. Each allocation's class is its context's learned class once the learner has decided
//   it, else DEFAULT_CLASS (the class the heap uses without a model).
// - llama-model with --heap-option LEARN=1: the model's class (ModelClassSource) until the context's own evidence
//   is confident (LEARN_OVERRIDE_SAMPLES) and disagrees.
//
// What the process does, and the replay with it:
// - The fast path probes the thread's prediction cache on every allocation and goes to the predictor (a check) on
//   a miss and every 1 to 64 hits of an entry, jittered as LearnedPredictor::predict jitters them. The replay keeps
//   one such entry per thread and context: its first allocation in the thread is the miss, each check draws the
//   distance to the next one from the thread's hit count and the key, as predict does. With a model, a miss or a
//   re-prediction of the model's own cache (TracePredictor) is a check too: the process's entry is then refilled
//   with the model's class (a miss) or keeps the longer of it and the class it had (a re-prediction).
// - At a check the entry takes the context's learned class when there is one and it differs (with a model: only
//   a confident one, counted as an override), and the learner says whether this allocation is sampled.
// - A freed object goes to the learner (on_free); the sweeper's passes, every LLAMALLOC_SWEEP_MS of trace time, age
//   the live sampled objects (age).
// The replay's context: the return address of the trace stack's frame 0, the stand-in stack height (a hash of all
// the callers, as llama-model keys its cache: TracePredictor::stack_height_stand_in) and the model size bucket.
// The stand-in already names the call path, so the callers' hash of the process's key is 0 here.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "online_learner.h"
#include "options.h"
#include "sim/flat_map.h"
#include "sim/llama_policy.h"
#include "sim/model_policy.h"
#include "sim/trace_stacks.h"

namespace llamalloc::sim {

// The learner's rule as the process sets it from the heap's options: LEARN_MIN_SAMPLES, LEARN_OVERRIDE_SAMPLES,
// LEARN_WINDOW, LEARN_SAMPLE_EVERY, MIN_CLASS as the shortest class (a model's prediction is raised to it too), and
// `label`: a distribution model's label rule, else training's (kTrainLabelRule).
model::LearnRule learn_rule_of(const Options& heap_options, const model::LabelRule& label);
// The label rule of `model` as the learner takes it (null: no model, training's rule).
model::LabelRule learn_label_of(const model::ModelFile* model);

class OnlineClassSource final : public ClassSource {
 public:
  // `model`: the model's classes (llama-model with LEARN=1), or null (llama-online: DEFAULT_CLASS before evidence).
  OnlineClassSource(const Options& heap_options, const TraceStacks& stacks, std::shared_ptr<ClassSource> model,
                    const model::LabelRule& label);
  ~OnlineClassSource() override;

  std::string name() const override { return model_ ? model_->name() : "llama-online"; }
  unsigned class_of(const ObjectAlloc& object) override;
  void on_free(uint64_t time_ns, uint64_t address) override;
  void on_sweep(uint64_t time_ns) override;
  std::vector<std::pair<std::string, double>> summary_extras() const override;
  std::vector<std::pair<std::string, std::string>> summary_json() const override;

  const model::OnlineLearner& learner() const { return *learner_; }
  // Checks: allocations that went to the predictor (a miss or a jittered check of an entry).
  uint64_t checks() const { return checks_; }
  // confusion[true class][class given to the heap], objects whose true class is known.
  const std::array<std::array<uint64_t, 8>, 8>& confusion() const { return confusion_; }

 private:
  struct StackInfo {
    uintptr_t return_address;
    uint64_t height;  // the stand-in stack height
  };
  // One thread's prediction cache entry of one context.
  struct Entry {
    int32_t slot;         // the learner's context (-1: its table is full, not learned)
    uint8_t lifetime_class;  // the class the entry holds instead of the model's or the default (kNoClass: none)
    uint8_t until_check;     // allocations until the next check (the next one is a check at 1)
  };

  std::unique_ptr<model::OnlineLearner> learner_;
  const TraceStacks& stacks_;
  std::shared_ptr<ClassSource> model_;
  unsigned default_class_;
  FlatMap<StackInfo> stack_info_;  // stack id + 1
  FlatMap<Entry> entries_;         // hash of (thread, context key)
  FlatMap<uint64_t> thread_hits_;  // thread + 1 -> hits of its cache (the jitter's seed, as in predict)
  uint64_t now_ns_ = 0;
  uint64_t checks_ = 0, sampled_ = 0, given_learned_ = 0;
  std::array<std::array<uint64_t, 8>, 8> confusion_{};
};

}  // namespace llamalloc::sim
