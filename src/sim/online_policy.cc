#include "sim/online_policy.h"

#include "alloc/heap_config.h"
#include "predictor/predictor.h"
#include "common/stack_walk.h"
#include "trace_predictor.h"

namespace llamalloc::sim {

model::LabelRule learn_label_of(const model::ModelFile* model) {
  // A distribution model places a context by a label rule of its class shares; the learner decides a context by
  // the same rule, so that its class and the model's mean the same. A label model (one class per context) was
  // trained on training's rule.
  return model != nullptr && model->is_distribution() ? model->label_rule() : model::kTrainLabelRule;
}

model::LearnRule learn_rule_of(const Options& heap_options, const model::LabelRule& label) {
  model::LearnRule rule;
  rule.min_samples = uint32_t(heap_options.learn_min_samples);
  rule.override_samples = uint32_t(heap_options.learn_override_samples);
  rule.window = uint32_t(heap_options.learn_window);
  rule.sample_every = uint32_t(heap_options.learn_sample_every);
  rule.label = label;
  rule.shortest = unsigned(heap_options.min_class);
  return rule;
}

OnlineClassSource::OnlineClassSource(const Options& heap_options, const TraceStacks& stacks,
                                     std::shared_ptr<ClassSource> model, const model::LabelRule& label)
    : learner_(std::make_unique<model::OnlineLearner>()),
      stacks_(stacks),
      model_(std::move(model)),
      default_class_(default_class_of(heap_options)),
      stack_info_(1024),
      entries_(4096),
      thread_hits_(64) {
  learner_->configure(learn_rule_of(heap_options, label));
}

OnlineClassSource::~OnlineClassSource() = default;

unsigned OnlineClassSource::class_of(const ObjectAlloc& object) {
  if (object.time_ns > now_ns_) now_ns_ = object.time_ns;
  // The model's class (its prediction cache as in llama-model), or the heap's default without one.
  unsigned base = model_ ? model_->class_of(object) : default_class_;
  ModelRun run = model_ ? model_->last_model_run() : ModelRun::kNone;

  StackInfo* info = stack_info_.find(uint64_t{object.stack_id} + 1);
  if (info == nullptr) {
    const uint64_t* frames = nullptr;
    uint32_t depth = 0;
    stacks_.stack(object.stack_id, &frames, &depth);  // (a stack the trace lacks: no frames, as in llama-model)
    StackInfo fresh{depth > 0 ? stack_walk::return_address_of(uintptr_t(frames[0])) : 0,
                    model::TracePredictor::stack_height_stand_in(frames, depth)};
    info = &stack_info_.put(uint64_t{object.stack_id} + 1, fresh);
  }
  unsigned bucket = model_size_bucket(object.size_bytes);
  uint64_t key = model::OnlineLearner::context_key(info->return_address, uintptr_t(info->height), bucket, 0);
  uint64_t& hits = thread_hits_.get_or_insert(uint64_t{object.thread} + 1);

  uint64_t entry_key = (key ^ (uint64_t{object.thread} * 0x9E3779B97F4A7C15ull)) | 1;
  Entry* e = entries_.find(entry_key);
  bool miss = false, check;
  if (e == nullptr) {
    e = &entries_.put(entry_key, Entry{learner_->find_or_add(key, info->return_address, bucket), model::kNoClass, 0});
    miss = check = true;
  } else if (run == ModelRun::kMiss) {
    // The model's cache lost the entry: it comes back with the model's class.
    e->lifetime_class = model::kNoClass;
    miss = check = true;
  } else if (run == ModelRun::kRepredict) {
    // A re-prediction keeps the longer of the model's class and the entry's.
    if (e->lifetime_class != model::kNoClass && base > e->lifetime_class) e->lifetime_class = model::kNoClass;
    check = true;
  } else {
    check = --e->until_check == 0;
  }
  if (!miss) ++hits;
  bool sample = false;
  if (check) {
    ++checks_;
    if (e->slot >= 0) {
      if (miss && model_) learner_->note_model_class(e->slot, base);
      uint8_t learned = learner_->learned(e->slot, /*need_confidence=*/model_ != nullptr);
      unsigned held = e->lifetime_class == model::kNoClass ? base : e->lifetime_class;
      if (learned != model::kNoClass && learned != held) {
        e->lifetime_class = learned;
        if (model_) learner_->note_override(e->slot);
      }
      sample = learner_->should_sample(e->slot);
    }
    // The next check after 1 to kPredictionCheckEvery allocations, drawn as LearnedPredictor::predict draws it.
    uint64_t r = (hits ^ key) * 0x9E3779B97F4A7C15ull;
    uint32_t low = uint32_t(r >> 58) & (kPredictionCheckEvery - 1);
    e->until_check = uint8_t(kPredictionCheckEvery - low);
  }
  unsigned lc = e->lifetime_class == model::kNoClass ? base : e->lifetime_class;
  if (lc != base) ++given_learned_;
  // The replay's object is known by its trace address until its free: the sampled object's address.
  if (sample && learner_->on_sample(e->slot, object.address, now_ns_)) ++sampled_;
  if (lc > kNeverFreedClass) lc = kNeverFreedClass;
  if (object.lifetime_class < kMaxClasses) ++confusion_[object.lifetime_class][lc];
  return lc;
}

void OnlineClassSource::on_free(uint64_t time_ns, uint64_t address) {
  if (time_ns > now_ns_) now_ns_ = time_ns;
  learner_->on_free(address, now_ns_);
}

void OnlineClassSource::on_sweep(uint64_t time_ns) {
  if (time_ns > now_ns_) now_ns_ = time_ns;
  learner_->age(now_ns_);
}

std::vector<std::pair<std::string, double>> OnlineClassSource::summary_extras() const {
  std::vector<std::pair<std::string, double>> e;
  if (model_) e = model_->summary_extras();
  model::LearnerTotals t = learner_->totals();
  const model::LearnRule& rule = learner_->rule();
  uint64_t known = 0, exact = 0, within_one = 0, over = 0, under = 0;
  for (int truth = 0; truth < 8; ++truth) {
    for (int p = 0; p < 8; ++p) {
      uint64_t n = confusion_[truth][p];
      known += n;
      if (p == truth) exact += n;
      if (p - truth <= 1 && truth - p <= 1) within_one += n;
      if (p > truth) over += n;
      if (p < truth) under += n;
    }
  }
  auto frac = [](uint64_t a, uint64_t b) { return b ? double(a) / double(b) : 0.0; };
  std::vector<std::pair<std::string, double>> own = {
      {"learn_contexts", double(t.contexts)},
      {"learn_decided", double(t.decided)},
      {"learn_samples", double(t.samples)},
      {"learn_frees", double(t.frees)},
      {"learn_aged", double(t.aged)},
      {"learn_overrides", double(t.overrides)},
      {"learn_dropped_samples", double(t.dropped_samples)},
      {"learn_live_samples", double(t.live_samples)},
      {"learn_checks", double(checks_)},
      {"learn_allocs_learned_class", double(given_learned_)},
      {"learn_min_samples", double(rule.min_samples)},
      {"learn_override_samples", double(rule.override_samples)},
      {"learn_window", double(rule.window)},
      {"learn_sample_every", double(rule.sample_every)},
      {"placed_accuracy_exact", frac(exact, known)},
      {"placed_accuracy_within_one_class", frac(within_one, known)},
      {"placed_over_predicted_fraction", frac(over, known)},
      {"placed_under_predicted_fraction", frac(under, known)},
  };
  for (auto& kv : own) e.push_back(std::move(kv));
  return e;
}

std::vector<std::pair<std::string, std::string>> OnlineClassSource::summary_json() const {
  std::vector<std::pair<std::string, std::string>> json;
  if (model_) json = model_->summary_json();
  // The learner's contexts: each one's class (null: undecided), the model's, its evidence and overrides.
  std::string contexts = "[";
  bool first = true;
  learner_->for_each([&](const model::LearnedContext& c) {
    uint64_t freed = 0, live = 0;
    for (unsigned k = 0; k < kMaxClasses; ++k) {
      freed += c.freed[k];
      live += c.live[k];
    }
    contexts += first ? "\n        " : ",\n        ";
    first = false;
    auto cls = [](uint8_t lc) { return lc == model::kNoClass ? std::string("null") : std::to_string(lc); };
    contexts += "{\"return_address\": " + std::to_string(c.return_address) +
                ", \"size_bucket\": " + std::to_string(c.size_bucket) + ", \"learned\": " + cls(c.learned) +
                ", \"confident\": " + (c.confident ? "true" : "false") + ", \"model_class\": " + cls(c.model_class) +
                ", \"samples\": " + std::to_string(c.samples) + ", \"freed\": " + std::to_string(freed) +
                ", \"live\": " + std::to_string(live) + ", \"overrides\": " + std::to_string(c.overrides) + "}";
  });
  contexts += first ? "]" : "\n      ]";
  json.emplace_back("learned_contexts", contexts);
  std::string j = "[";
  for (int truth = 0; truth < 8; ++truth) {
    j += truth ? ", [" : "[";
    for (int p = 0; p < 8; ++p) j += (p ? ", " : "") + std::to_string(confusion_[truth][p]);
    j += "]";
  }
  j += "]";
  // Rows: the object's true class (from the trace); columns: the class the heap got.
  json.emplace_back("placed_class_confusion", j);
  return json;
}

}  // namespace llamalloc::sim
