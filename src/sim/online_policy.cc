#include "sim/online_policy.h"

#include <stdexcept>

#include "alloc/heap_config.h"
#include "common/stack_walk.h"
#include "predictor/predictor.h"
#include "trace_predictor.h"

namespace llamalloc::sim {

namespace {

// The check generator's seed of a trace thread: fixed, so that a replay gives the same figures every time.
uint64_t check_seed(uint32_t thread) { return ((uint64_t{thread} + 1) * 0x9E3779B97F4A7C15ull) | 1; }

}  // namespace

model::LearnRule replay_learn_rule(const Options& heap_options, const model::ModelFile* model) {
  // As the process applies it: MIN_CLASS at most class 6 (the replay has all eight classes).
  unsigned shortest = unsigned(heap_options.min_class);
  return model::learn_rule_of(heap_options, model, shortest + 2 > kMaxClasses ? kMaxClasses - 2 : shortest);
}

uint64_t OnlineClassSource::callers_of(const uint64_t* frames, uint32_t depth) {
  uint64_t mixed = 0;
  for (uint32_t i = 1; i < depth && i <= uint32_t(model::kDeepKeyFrames); ++i) {
    mixed = (mixed ^ stack_walk::return_address_of(uintptr_t(frames[i]))) * 0x9E3779B97F4A7C15ull;
    mixed ^= mixed >> 31;
  }
  return mixed;
}

OnlineClassSource::OnlineClassSource(const Options& heap_options, const TraceStacks& stacks,
                                     std::shared_ptr<ClassSource> model, const model::ModelFile* model_file)
    : learner_(std::make_unique<model::OnlineLearner>()),
      stacks_(stacks),
      model_(std::move(model)),
      default_class_(default_class_of(heap_options)),
      repredict_every_(uint32_t(heap_options.repredict_every)),
      repredict_backoff_(unsigned(heap_options.repredict_backoff)),
      stack_info_(1024),
      thread_index_(64),
      shadows_(4096),
      thread_rng_(64) {
  if (!learner_->configure(replay_learn_rule(heap_options, model_file)))
    throw std::runtime_error("llama-online: cannot map the online learner's tables");
  if (model_ == nullptr && heap_options.learn_from_mib != 0) {
    learn_from_bytes_ = uint64_t(heap_options.learn_from_mib) << 20;
    learning_ = false;
  }
}

OnlineClassSource::~OnlineClassSource() = default;

// The fast path's test, then at a visit the predictor's lookup with the default class for the model's and the
// jitter of the next check: heap_malloc (alloc/alloc.h) and LearnedPredictor::predict without a model.
unsigned OnlineClassSource::visit_without_model(uint32_t thread, uint64_t key, bool* visited, uint8_t** held) {
  uint32_t index;
  if (const uint32_t* found = thread_index_.find(uint64_t{thread} + 1)) {
    index = *found;
  } else {
    index = uint32_t(threads_.size());
    threads_.push_back(std::make_unique<ThreadCache>());
    thread_index_.put(uint64_t{thread} + 1, index);
  }
  ThreadCache& t = *threads_[index];
  PredictionCacheEntry& e = t.cache.slot(key);
  uint32_t every = repredict_every_ == 0 ? UINT32_MAX : repredict_every_;
  uint32_t n = e.hits + 1;
  if (e.key == key && n % kPredictionCheckEvery != 0 && n < uint64_t(every) << e.backoff) {
    e.hits++;
    model::CacheCounters::bump(t.counters.hits);
    *visited = false;
    return e.lifetime_class;
  }
  *visited = true;
  unsigned lc = t.cache.lookup(key, repredict_every_, t.counters, [&] { return default_class_; },
                               repredict_backoff_);
  PredictionCacheEntry& f = t.cache.slot(key);  // (a miss put the key in its set's first entry)
  if (t.check_rng == 0) t.check_rng = check_seed(thread);
  uint32_t low = kPredictionCheckEvery - next_check_after(t.check_rng);
  uint32_t jittered = (f.hits & ~(kPredictionCheckEvery - 1)) | low;
  if (jittered != kDeepEntryHits) f.hits = jittered;
  *held = &f.lifetime_class;
  return lc;
}

// llama-model's class, and what the process's entry holds instead of it.
unsigned OnlineClassSource::visit_with_model(const ObjectAlloc& object, uint64_t key, bool* visited,
                                             bool* model_ran, uint8_t** held, unsigned* model_class) {
  unsigned base = model_->class_of(object);
  *model_class = base;
  ModelRun run = model_->last_model_run();
  uint64_t& rng = thread_rng_.get_or_insert(uint64_t{object.thread} + 1);
  if (rng == 0) rng = check_seed(object.thread);
  uint64_t shadow_key = (key ^ (uint64_t{object.thread} * 0x9E3779B97F4A7C15ull)) | 1;
  Shadow* s = shadows_.find(shadow_key);
  if (s == nullptr) {
    // The thread's first allocation with this key misses llama-model's cache too.
    s = &shadows_.put(shadow_key, Shadow{model::kNoClass, 0});
    *visited = true;
  } else if (run == ModelRun::kMiss) {
    s->lifetime_class = model::kNoClass;  // llama-model's cache lost the entry: it comes back with the model's class
    *visited = true;
  } else if (run == ModelRun::kRepredict) {
    if (s->lifetime_class != model::kNoClass && base > s->lifetime_class) s->lifetime_class = model::kNoClass;
    *visited = true;
  } else {
    *visited = --s->until_visit == 0;
  }
  *model_ran = run != ModelRun::kNone;
  unsigned lc = s->lifetime_class == model::kNoClass ? base : s->lifetime_class;
  if (*visited) {
    s->until_visit = uint8_t(next_check_after(rng));
    *held = &s->lifetime_class;
  }
  return lc;
}

unsigned OnlineClassSource::class_of(const ObjectAlloc& object) {
  if (object.time_ns > now_ns_) now_ns_ = object.time_ns;
  if (!learning_) {
    if (object.lifetime_class < kMaxClasses) ++confusion_[object.lifetime_class][default_class_];
    return default_class_;
  }
  StackInfo* info = stack_info_.find(uint64_t{object.stack_id} + 1);
  if (info == nullptr) {
    const uint64_t* frames = nullptr;
    uint32_t depth = 0;
    stacks_.stack(object.stack_id, &frames, &depth);  // (a stack the trace lacks: no frames, as in llama-model)
    StackInfo fresh{depth > 0 ? stack_walk::return_address_of(uintptr_t(frames[0])) : 0,
                    model::TracePredictor::stack_height_stand_in(frames, depth), callers_of(frames, depth)};
    info = &stack_info_.put(uint64_t{object.stack_id} + 1, fresh);
  }
  unsigned bucket = model_size_bucket(object.size_bytes);
  uint64_t cache_key = model::cache_key(info->return_address, uintptr_t(info->height), bucket);
  bool visited = false, model_ran = false;
  uint8_t* held = nullptr;
  unsigned base = default_class_;  // the class without learning: the model's or the default
  unsigned lc = model_ ? visit_with_model(object, cache_key, &visited, &model_ran, &held, &base)
                       : visit_without_model(object.thread, cache_key, &visited, &held);
  bool sample = false;
  int32_t slot = -1;
  if (visited) {
    // LearnedPredictor::learn: the context's learned class replaces the entry's once decided (with a model, once
    // confident), and the learner says whether to sample this allocation.
    ++checks_;
    slot = learner_->find_or_add(model::OnlineLearner::context_key(info->return_address, bucket, info->callers),
                                 info->return_address, bucket);
    if (slot >= 0) {
      if (model_ran) learner_->note_model_class(slot, lc);
      uint8_t base = model_ ? learner_->model_class(slot) : uint8_t(default_class_);
      uint8_t learned = base == model::kNoClass ? model::kNoClass : learner_->learned(slot, base, model_ != nullptr);
      if (learned != model::kNoClass) {
        if (learned != lc) {
          *held = learned;
          if (model_) learner_->note_override(slot);
          lc = learned;
        }
      } else if (!model_ && lc != base) {
        *held = base;
        lc = base;
      }
      // (The process draws from its thread's hit count; the replay from its count of checks.)
      uint64_t r = (checks_ + uint64_t(slot)) * 0x9E3779B97F4A7C15ull;
      sample = learner_->should_sample(slot, uint32_t(r >> 40));
    }
  }
  if (lc != base) ++given_learned_;
  // The replay's object is known by its trace address until its free: the sampled object's address.
  if (sample && learner_->on_sample(slot, object.address, now_ns_)) ++sampled_;
  if (lc > kNeverFreedClass) lc = kNeverFreedClass;
  if (object.lifetime_class < kMaxClasses) ++confusion_[object.lifetime_class][lc];
  return lc;
}

void OnlineClassSource::on_free(uint64_t time_ns, uint64_t address) {
  if (time_ns > now_ns_) now_ns_ = time_ns;
  learner_->on_free(address, now_ns_);
}

void OnlineClassSource::on_sweep(uint64_t time_ns, uint64_t footprint_bytes) {
  if (time_ns > now_ns_) now_ns_ = time_ns;
  if (!learning_ && footprint_bytes >= learn_from_bytes_) learning_ = true;
  learner_->age(now_ns_);
}

std::vector<std::pair<std::string, double>> OnlineClassSource::summary_extras() const {
  std::vector<std::pair<std::string, double>> e;
  if (model_) e = model_->summary_extras();
  model::LearnerTotals t = learner_->totals();
  const model::LearnRule& rule = learner_->rule();
  ClassAgreement a = class_agreement(confusion_);
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
      {"learn_started", learning_ ? 1.0 : 0.0},
      {"learn_allocs_learned_class", double(given_learned_)},
      {"learn_min_samples", double(rule.min_samples)},
      {"learn_override_samples", double(rule.override_samples)},
      {"learn_window", double(rule.window)},
      {"learn_sample_every", double(rule.sample_every)},
      {"placed_accuracy_exact", a.exact},
      {"placed_accuracy_within_one_class", a.within_one},
      {"placed_over_predicted_fraction", a.over},
      {"placed_under_predicted_fraction", a.under},
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
  // Rows: the object's true class (from the trace); columns: the class the heap got.
  json.emplace_back("placed_class_confusion", confusion_json(confusion_));
  return json;
}

}  // namespace llamalloc::sim
