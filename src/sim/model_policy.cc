#include "sim/model_policy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "alloc/heap_config.h"
#include "options.h"
#include "sim/online_policy.h"
#include "sim/trace_reader.h"
#include "trace_predictor.h"

namespace llamalloc::sim {

ModelClassSource::ModelClassSource(const ModelOptions& options, const Options& heap_options,
                                   const TraceStacks& stacks, std::string* warning)
    : predictor_(std::make_unique<model::TracePredictor>()), stacks_(stacks) {
  std::string error;
  if (!predictor_->init(options.model_path, options.tokens_path, uint32_t(heap_options.repredict_every), &error,
                        unsigned(heap_options.repredict_backoff))) {
    throw FormatError(error);
  }
  std::vector<model::TraceMapping> mappings;
  for (const MappingInfo& m : stacks.mappings()) {
    mappings.push_back(model::TraceMapping{m.memory_start, m.memory_limit, m.file_offset, m.path, m.build_id});
  }
  predictor_->load_mappings(mappings);
  // An unsure prediction places the object as llama-default does (the library: LLAMALLOC_DEFAULT_CLASS).
  predictor_->set_confidence_rule(model::ConfidenceRule{
      unsigned(heap_options.min_confidence), default_class_of(heap_options), unsigned(heap_options.min_class)});
  predictor_->set_unseen_trial(uint32_t(heap_options.unseen_trial));
  if (!options.predict_log.empty()) {
    log_fd_ = ::open(options.predict_log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd_ < 0) throw FormatError(options.predict_log + ": cannot write: " + std::strerror(errno));
    predictor_->set_log_fd(log_fd_);
  }
  stacks.for_each_stack([&](uint32_t, const uint64_t* frames, uint32_t depth) { predictor_->note_stack(frames, depth); });
  *warning = predictor_->warning();
}

ModelClassSource::~ModelClassSource() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

unsigned ModelClassSource::class_of(const ObjectAlloc& object) {
  uint64_t key = uint64_t{object.stack_id} + 1;
  StackInfo* info = stack_info_.find(key);
  if (info == nullptr) {
    StackInfo fresh{nullptr, 0, 0};
    // A stack the trace does not hold (the profiler's table was full) leaves only the size to the model, as a
    // walk that found no frame would.
    stacks_.stack(object.stack_id, &fresh.frames, &fresh.depth);
    fresh.height = model::TracePredictor::stack_height_stand_in(fresh.frames, fresh.depth);
    info = &stack_info_.put(key, fresh);
  }
  if (info->frames == nullptr) ++without_stack_;
  model::TracePredictionTotals before = predictor_->totals();
  unsigned lc = predictor_->predict(object.thread, info->frames, info->depth, object.size_bytes, info->height);
  model::TracePredictionTotals after = predictor_->totals();
  last_run_ = after.misses != before.misses               ? ModelRun::kMiss
              : after.repredictions != before.repredictions ? ModelRun::kRepredict
                                                            : ModelRun::kNone;
  if (lc > kNeverFreedClass) lc = kNeverFreedClass;
  ++predicted_;
  if (object.lifetime_class < kMaxClasses) ++confusion_[object.lifetime_class][lc];
  return lc;
}

std::string confusion_json(const std::array<std::array<uint64_t, 8>, 8>& confusion) {
  std::string j = "[";
  for (int truth = 0; truth < 8; ++truth) {
    j += truth ? ", [" : "[";
    for (int p = 0; p < 8; ++p) j += (p ? ", " : "") + std::to_string(confusion[truth][p]);
    j += "]";
  }
  return j + "]";
}

ClassAgreement class_agreement(const std::array<std::array<uint64_t, 8>, 8>& confusion) {
  uint64_t known = 0, exact = 0, within_one = 0, over = 0, under = 0;
  for (int truth = 0; truth < 8; ++truth) {
    for (int p = 0; p < 8; ++p) {
      uint64_t n = confusion[truth][p];
      known += n;
      if (p == truth) exact += n;
      if (p - truth <= 1 && truth - p <= 1) within_one += n;
      if (p > truth) over += n;
      if (p < truth) under += n;
    }
  }
  if (known == 0) return {};
  double k = double(known);
  return {double(exact) / k, double(within_one) / k, double(over) / k, double(under) / k};
}

std::vector<std::pair<std::string, double>> ModelClassSource::summary_extras() const {
  model::TracePredictionTotals t = predictor_->totals();
  ClassAgreement a = class_agreement(confusion_);
  auto frac = [](uint64_t x, uint64_t y) { return y ? double(x) / double(y) : 0.0; };
  uint64_t lookups = t.hits + t.misses;
  return {
      {"prediction_cache_hits", double(t.hits)},
      {"prediction_cache_misses", double(t.misses)},
      {"prediction_cache_hit_rate", frac(t.hits, lookups)},
      {"model_runs", double(t.model_runs)},
      {"repredictions", double(t.repredictions)},
      {"repredictions_changed", double(t.repredictions_changed)},
      {"repredict_every", double(predictor_->repredict_every())},
      {"repredict_backoff", double(predictor_->repredict_backoff())},
      {"unseen_trial", double(predictor_->unseen_trial())},
      {"unseen_contexts", double(t.unseen)},
      {"model_inferences", double(t.model_inferences)},
      {"prediction_caches", double(t.threads)},
      {"allocs_without_stack", double(without_stack_)},
      {"predicted_objects", double(predicted_)},
      {"accuracy_exact", a.exact},
      {"accuracy_within_one_class", a.within_one},
      {"over_predicted_fraction", a.over},
      {"under_predicted_fraction", a.under},
  };
}

std::vector<std::pair<std::string, std::string>> ModelClassSource::summary_json() const {
  // Rows: the object's true class (from the trace); columns: the class the model gave it.
  return {{"class_confusion", confusion_json(confusion_)}};
}

std::unique_ptr<LlamaPolicy> make_model_policy(LlamaOptions options, const ModelOptions& model,
                                             const TraceStacks& stacks, std::string* warning) {
  auto source = std::make_shared<ModelClassSource>(model, options.heap_options, stacks, warning);
  if (learning_on(options.heap_options, true)) {
    options.class_source = std::make_shared<OnlineClassSource>(options.heap_options, stacks, source,
                                                               &source->predictor().model());
  } else {
    options.class_source = source;
  }
  return std::make_unique<LlamaPolicy>(std::move(options));
}

}  // namespace llamalloc::sim
