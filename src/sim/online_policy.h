// Online lifetime learning replayed (docs/simulator.md, "llama-online"): the process's OnlineLearner
// (src/model/online_learner.h), the same code, fed with the trace's allocations, frees and clock as
// LearnedPredictor feeds it in the process under LLAMALLOC_LEARN=1.
//
// - llama-online: no model. Each allocation's class is its context's learned class once the learner has decided
//   it, else DEFAULT_CLASS (the class the heap uses without a model).
// - llama-model with --option LEARN=1: the model's class (ModelClassSource) until the context's own evidence
//   is confident (LEARN_OVERRIDE_SAMPLES) and disagrees.
//
// What the process does, and the replay with it:
// - The fast path probes the thread's prediction cache on every allocation and goes to the predictor (a visit) on
//   a miss, every 1 to 64 hits of an entry (the distance drawn afresh at each visit by LearnedPredictor::predict)
//   and at a re-prediction. At each visit the predictor consults the learner.
//   Without a model the replay runs that cache itself: one PredictionCache per traced thread, probed with the fast
//   path's test, looked up at a visit with the default class as the model's, and jittered as predict jitters it.
//   With a model the cache is llama-model's (TracePredictor, which looks up every allocation and does not jitter):
//   the replay keeps, per thread and cache key, the class the process's entry holds instead of the model's and the
//   allocations left to the next visit, drawn as predict draws them; a miss of the model's cache is a visit that
//   refills the entry with the model's class, a re-prediction a visit after which the entry holds the longer of the
//   model's class and its own.
// - At a visit the entry takes the context's learned class when there is one and it differs (with a model: only a
//   confident one, counted as an override; the model's class is noted at its first run for the context), and the
//   learner says whether this allocation is sampled.
// - A freed object goes to the learner (on_free); the sweeper's passes, every LLAMALLOC_SWEEP_MS of trace time, age
//   the live sampled objects (age).
// The learner's context is the process's: the return address of frame 0, the model size bucket and a hash of the
// return addresses of up to kDeepKeyFrames callers (LearnedPredictor::deep_key's), here from the trace's stack; the
// same in every thread. The cache's key is llama-model's: the stand-in stack height (a hash of all the callers,
// TracePredictor::stack_height_stand_in) in place of the stack address.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "online_learner.h"
#include "options.h"
#include "prediction_cache.h"
#include "thread_state_pool.h"
#include "sim/flat_map.h"
#include "sim/llama_policy.h"
#include "sim/model_policy.h"
#include "sim/trace_stacks.h"

namespace llamalloc::sim {

// The learner's rule as the process sets it from the heap's options (model::learn_rule_of), with MIN_CLASS as the
// replay applies it to a model's predictions (`model`: null without one).
model::LearnRule replay_learn_rule(const Options& heap_options, const model::ModelFile* model);

class OnlineClassSource final : public ClassSource {
 public:
  // `model`: the model's classes (llama-model with LEARN=1), or null (llama-online: DEFAULT_CLASS before evidence);
  // `model_file`: its file, whose label rule the learner takes (null: training's).
  OnlineClassSource(const Options& heap_options, const TraceStacks& stacks, std::shared_ptr<ClassSource> model,
                    const model::ModelFile* model_file);
  ~OnlineClassSource() override;

  std::string name() const override { return model_ ? model_->name() : "llama-online"; }
  unsigned class_of(const ObjectAlloc& object) override;
  void on_free(uint64_t time_ns, uint64_t address) override;
  void on_sweep(uint64_t time_ns, uint64_t footprint_bytes) override;
  // Learning alone waits, as the process does, until a pass finds the footprint at LLAMALLOC_LEARN_FROM_MIB
  // (alloc/init.cc, maybe_start_learning): until then every allocation gets DEFAULT_CLASS, unvisited.
  bool learning() const { return learning_; }
  std::vector<std::pair<std::string, double>> summary_extras() const override;
  std::vector<std::pair<std::string, std::string>> summary_json() const override;

  const model::OnlineLearner& learner() const { return *learner_; }
  // Visits: allocations that went to the predictor (a miss, a jittered check of an entry, a re-prediction).
  uint64_t checks() const { return checks_; }
  // confusion[true class][class given to the heap], objects whose true class is known.
  const std::array<std::array<uint64_t, 8>, 8>& confusion() const { return confusion_; }

  // The learner's hash of a trace stack's callers: the return addresses of frames 1 to kDeepKeyFrames, mixed as
  // LearnedPredictor::deep_key mixes those of the process's frame chain (0 without callers).
  static uint64_t callers_of(const uint64_t* frames, uint32_t depth);

 private:
  struct StackInfo {
    uintptr_t return_address;
    uint64_t height;   // the stand-in stack height (the cache's key)
    uint64_t callers;  // callers_of (the learner's key)
  };
  // Without a model: one traced thread's prediction cache, as the process's.
  struct ThreadCache {
    model::PredictionCache<model::ThreadState::kLogCacheEntries> cache;
    model::CacheCounters counters;
    uint64_t check_rng = 0;  // next_check_after()'s generator (seeded from the thread: replays repeat)
  };
  // With a model: what the process's entry of one thread and cache key holds beside llama-model's cache.
  struct Shadow {
    uint8_t lifetime_class;  // the learned class it holds instead of the model's (kNoClass: the model's)
    uint8_t until_visit;     // allocations until the next visit (the next one is a visit at 1)
  };

  // The class the entry gives this allocation; *visited: it went to the predictor, and *held then points at the
  // class its entry holds (which the learner may replace).
  unsigned visit_without_model(uint32_t thread, uint64_t cache_key, bool* visited, uint8_t** held);
  // The same beside llama-model's cache; *model_ran: the model ran for it (a miss or a re-prediction),
  // *model_class: the model's class (llama-model's).
  unsigned visit_with_model(const ObjectAlloc& object, uint64_t cache_key, bool* visited, bool* model_ran,
                            uint8_t** held, unsigned* model_class);

  std::unique_ptr<model::OnlineLearner> learner_;
  const TraceStacks& stacks_;
  std::shared_ptr<ClassSource> model_;
  unsigned default_class_;
  uint32_t repredict_every_;
  unsigned repredict_backoff_;
  FlatMap<StackInfo> stack_info_;                   // stack id + 1
  FlatMap<uint32_t> thread_index_;                  // thread + 1 -> index in threads_
  std::vector<std::unique_ptr<ThreadCache>> threads_;
  FlatMap<Shadow> shadows_;                         // hash of (thread, cache key)
  FlatMap<uint64_t> thread_rng_;                    // thread + 1 -> its next_check_after() generator (with a model)
  uint64_t now_ns_ = 0;
  uint64_t checks_ = 0, sampled_ = 0, given_learned_ = 0;
  uint64_t learn_from_bytes_ = 0;
  bool learning_ = true;
  std::array<std::array<uint64_t, 8>, 8> confusion_{};
};

}  // namespace llamalloc::sim
