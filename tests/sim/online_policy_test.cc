// llama-online and llama-model with LEARN=1 (sim/online_policy.h): the process's online learner on a trace.
#include "sim/online_policy.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "learned_predictor.h"
#include "sim/engine.h"
#include "sim/heap_options.h"
#include "sim/policies.h"
#include "test_events.h"

namespace llamalloc::sim {
namespace {

using testing::alloc_event;
using testing::free_event;
using testing::kMs;

constexpr uint32_t kKeptStack = 1;   // its objects are never freed
constexpr uint32_t kBriefStack = 2;  // its objects die at once
constexpr uint64_t kObjectBytes = 2048;

VectorTraceStacks two_contexts() {
  VectorTraceStacks stacks;
  stacks.add(kKeptStack, {0x401233, 0x402000, 0x403000});
  stacks.add(kBriefStack, {0x401456, 0x402000, 0x403000});
  return stacks;
}

const uint64_t* stacks_frames(const TraceStacks& stacks, uint32_t id) {
  const uint64_t* frames = nullptr;
  uint32_t depth = 0;
  stacks.stack(id, &frames, &depth);
  return frames;
}

Event at(Event e, uint32_t stack) {
  e.stack_id = stack;
  return e;
}

// A server's shape: for `learn_ms`, each millisecond one object that is kept and one that dies at once (the
// learner's evidence); then a burst of 10,240 short-lived objects with one kept object after every 32 of them, all
// the short ones freed 1 ms later; then a quiet second of short-lived objects. Everything is 2 KiB, so that the
// kept objects share the burst's pages when both contexts are in one class.
std::vector<Event> burst_trace(uint64_t learn_ms) {
  std::vector<Event> events;
  uint64_t next = 0x10000000;
  for (uint64_t ms = 0; ms < learn_ms; ++ms) {
    events.push_back(at(alloc_event(ms * kMs, next, kObjectBytes), kKeptStack));
    next += 0x1000;
    events.push_back(at(alloc_event(ms * kMs + 1, next, kObjectBytes), kBriefStack));
    events.push_back(free_event(ms * kMs + 2, next));
    next += 0x1000;
  }
  uint64_t burst = learn_ms * kMs;
  std::vector<uint64_t> brief;
  for (int i = 0; i < 10240; ++i) {
    events.push_back(at(alloc_event(burst + uint64_t(i), next, kObjectBytes), kBriefStack));
    brief.push_back(next);
    next += 0x1000;
    if (i % 32 == 31) {
      events.push_back(at(alloc_event(burst + uint64_t(i), next, kObjectBytes), kKeptStack));
      next += 0x1000;
    }
  }
  for (uint64_t a : brief) events.push_back(free_event(burst + 1 * kMs, a));
  for (uint64_t ms = 10; ms <= 1000; ms += 10) {
    events.push_back(at(alloc_event(burst + ms * kMs, next, kObjectBytes), kBriefStack));
    events.push_back(free_event(burst + ms * kMs + 1, next));
    next += 0x1000;
  }
  return events;
}

std::unique_ptr<Policy> policy_named(const std::string& name, const TraceStacks& stacks, Options heap_options = {}) {
  PolicySettings settings;
  settings.stacks = &stacks;
  settings.heap_options = heap_options;
  return make_policy(name, settings);
}

uint8_t learned_class(const model::OnlineLearner& learner, uintptr_t return_address) {
  uint8_t found = model::kNoClass;
  learner.for_each([&](const model::LearnedContext& c) {
    if (c.return_address == return_address) found = c.learned;
  });
  return found;
}

// The heap's options with learning from the first allocation (LEARN_FROM_MIB=0): these traces keep a few MiB.
Options learning_from_start() {
  Options o;
  o.learn_from_mib = 0;
  return o;
}

// The class source of llama-online (no model) or of llama-model under LEARN=1 (a model).
std::shared_ptr<OnlineClassSource> learner_over(const TraceStacks& stacks, std::shared_ptr<ClassSource> model,
                                                const Options& heap_options = learning_from_start()) {
  return std::make_shared<OnlineClassSource>(heap_options, stacks, std::move(model), nullptr);
}

// As in the process (LLAMALLOC_LEARN_FROM_MIB), learning alone starts at the first pass that finds the footprint
// at the mark; before it every allocation gets DEFAULT_CLASS and the learner sees nothing.
TEST(OnlinePolicy, LearningAloneWaitsForTheFootprintAsTheProcessDoes) {
  VectorTraceStacks stacks = two_contexts();
  std::vector<Event> events = burst_trace(1500);
  for (unsigned from_mib : {1024u, 2u}) {
    Options heap_options;
    heap_options.learn_from_mib = from_mib;
    LlamaOptions options;
    options.heap_options = heap_options;
    options.class_source = learner_over(stacks, nullptr, heap_options);
    auto& source = static_cast<OnlineClassSource&>(*options.class_source);
    LlamaPolicy policy(options);
    VectorEventSource trace(events);
    replay(trace, policy, EngineOptions{});
    if (from_mib == 1024) {
      EXPECT_FALSE(source.learning());
      EXPECT_EQ(source.checks(), 0u);
      EXPECT_EQ(source.learner().totals().samples, 0u);
    } else {
      EXPECT_TRUE(source.learning());
      EXPECT_GT(source.learner().totals().samples, 0u);
    }
  }
}

TEST(OnlinePolicy, ContextsOfDifferentLifetimesAreLearnedApartAndTheFootprintShrinks) {
  VectorTraceStacks stacks = two_contexts();
  // 3 s of history: the kept context's samples (the first 64, taken over about 2 s) are then past 1 s.
  std::vector<Event> events = burst_trace(3000);
  auto named = policy_named("llama-online", stacks);
  EXPECT_EQ(named->name(), "llama-online");
  EXPECT_TRUE(named->needs_lifetime_classes()) << "its summary compares its classes with the true ones";

  // LONG_CLASS 3: learning alone keeps apart what goes on the longest class's pages, here from 1 s of age.
  Options heap_options = learning_from_start();
  heap_options.long_class = 3;
  LlamaOptions options;
  options.heap_options = heap_options;
  options.class_source = learner_over(stacks, nullptr, heap_options);
  auto& source = static_cast<OnlineClassSource&>(*options.class_source);
  LlamaPolicy online(options);
  VectorEventSource trace(events);
  RunResult learned = replay(trace, online, EngineOptions{});
  auto fixed_policy = policy_named("llama-default", stacks);
  VectorEventSource again(events);
  RunResult fixed = replay(again, *fixed_policy, EngineOptions{});

  // The kept context's objects have lived past 1 s (class 3 at least: younger, a class below LONG_CLASS, they
  // would be placed in DEFAULT_CLASS); the brief one's class 0 is below it, so it is DEFAULT_CLASS.
  uint8_t kept = learned_class(source.learner(), 0x401234), brief = learned_class(source.learner(), 0x401457);
  EXPECT_GE(kept, 3u);
  EXPECT_NE(kept, model::kNoClass);
  EXPECT_EQ(brief, Options{}.default_class);
  EXPECT_GT(source.learner().totals().samples, 16u);
  // Checks come every 1 to 64 allocations of a context (2 contexts, one thread).
  uint64_t allocs = learned.summary.allocs;
  EXPECT_GE(source.checks(), allocs / 64);
  EXPECT_LE(source.checks(), allocs / 8);
  // The burst's 320 kept objects come after the kept context is decided: all of them are above the default class,
  // and the brief context's objects are all in it.
  const auto& confusion = source.confusion();
  uint64_t kept_apart = 0, brief_elsewhere = 0;
  for (unsigned c = 0; c < kMaxClasses; ++c) {
    if (c > Options{}.default_class) kept_apart += confusion[kNeverFreedClass][c];
    if (c != Options{}.default_class) brief_elsewhere += confusion[0][c];
  }
  EXPECT_GE(kept_apart, 320u);
  EXPECT_EQ(brief_elsewhere, 0u);

  EXPECT_EQ(learned.summary.final_live_bytes, fixed.summary.final_live_bytes);
  // llama-default: the kept objects of the burst pin its ten pages; llama-online keeps them on pages of their own.
  EXPECT_GE(fixed.summary.final_footprint_bytes, 10u * (2 << 20));
  EXPECT_LE(learned.summary.final_footprint_bytes * 2, fixed.summary.final_footprint_bytes)
      << learned.summary.final_footprint_bytes << " vs " << fixed.summary.final_footprint_bytes;
}

// A model that says every context's objects live forever, through a cache that misses once per thread and stack.
class EverythingLivesForever final : public ClassSource {
 public:
  unsigned class_of(const ObjectAlloc& object) override {
    uint64_t key = (uint64_t{object.thread} << 32 | object.stack_id) + 1;
    last_ = seen_.find(key) == nullptr ? ModelRun::kMiss : ModelRun::kNone;
    seen_.put(key, 1);
    return kNeverFreedClass;
  }
  ModelRun last_model_run() const override { return last_; }
  std::vector<std::pair<std::string, double>> summary_extras() const override { return {{"model_figure", 1}}; }

 private:
  FlatMap<int> seen_;
  ModelRun last_ = ModelRun::kNone;
};

TEST(OnlinePolicy, AModelsWrongClassIsOverriddenOnceTheEvidenceIsConfident) {
  VectorTraceStacks stacks = two_contexts();
  std::vector<Event> events = burst_trace(3000);
  for (uint64_t override_samples : {uint64_t{32}, uint64_t{1000}}) {
    SCOPED_TRACE("LEARN_OVERRIDE_SAMPLES=" + std::to_string(override_samples));
    Options heap_options;
    heap_options.learn = 1;
    heap_options.learn_override_samples = override_samples;
    heap_options.learn_window = 0;  // (a window below the override threshold would make the window enough)
    LlamaOptions options;
    options.heap_options = heap_options;
    options.class_source = learner_over(stacks, std::make_shared<EverythingLivesForever>(), heap_options);
    auto& source = static_cast<OnlineClassSource&>(*options.class_source);
    LlamaPolicy policy(options);
    EXPECT_EQ(policy.name(), "llama-model");
    VectorEventSource trace(events);
    RunResult r = replay(trace, policy, EngineOptions{});
    uint64_t brief_in_learned = source.confusion()[0][Options{}.default_class];
    uint64_t brief_in_model = source.confusion()[0][kNeverFreedClass];
    uint8_t brief = learned_class(source.learner(), 0x401457);
    EXPECT_EQ(brief, Options{}.default_class) << "decided either way";
    double overrides = -1, model_figure = -1;
    for (const auto& [name, value] : r.extras) {
      if (name == "learn_overrides") overrides = value;
      if (name == "model_figure") model_figure = value;
    }
    EXPECT_EQ(model_figure, 1) << "the model's own figures stay in the summary";
    if (override_samples == 32) {
      // After 32 samples (about 32 checks of 1 to 64 allocations) the brief context's entry takes the learned
      // class: the burst's 10,240 short-lived objects are all in it, the model's class had the first ones.
      EXPECT_GT(brief_in_learned, 10240u);
      EXPECT_GT(brief_in_model, 0u);
      EXPECT_GE(overrides, 1);
    } else {
      // Below the override threshold the model's class stands, decided or not.
      EXPECT_EQ(brief_in_learned, 0u);
      EXPECT_EQ(overrides, 0);
    }
    source.learner().for_each([&](const model::LearnedContext& c) {
      EXPECT_EQ(c.model_class, kNeverFreedClass) << "the model's class is noted at the context's miss";
    });
  }
}

TEST(OnlinePolicy, LlamaModelLearnsOnlineUnderTheHeapOptionLearn) {
  VectorTraceStacks stacks = two_contexts();
  Options heap_options = parse_heap_options({"LEARN=1", "LEARN_MIN_SAMPLES=4", "LEARN_OVERRIDE_SAMPLES=16",
                                             "LEARN_WINDOW=32", "LEARN_SAMPLE_EVERY=8"},
                                            [](const std::string& line) { FAIL() << line; });
  model::LearnRule rule = replay_learn_rule(heap_options, nullptr);
  EXPECT_EQ(rule.min_samples, 4u);
  EXPECT_EQ(rule.override_samples, 16u);
  EXPECT_EQ(rule.window, 32u);
  EXPECT_EQ(rule.sample_every, 8u);
  EXPECT_EQ(rule.shortest, Options{}.long_class + 1u)
      << "learning alone: what goes on the longest class's pages, by frees longer than LONG_CLASS";
  EXPECT_EQ(rule.label.kind, model::kTrainLabelRule.kind);
  EXPECT_EQ(policy_named("llama-online", stacks, heap_options)->name(), "llama-online");
}

// The learner's context is the process's: frame 0's return address, the size bucket and up to kDeepKeyFrames
// callers, the same in every thread; deeper callers (another stack height, a recursion) do not split it.
TEST(OnlinePolicy, AContextIsItsCallSiteAndNearestCallersInEveryThread) {
  VectorTraceStacks stacks;
  stacks.add(1, {0x401233, 0x402000, 0x403000, 0x404000, 0x405000, 0x406000});
  stacks.add(2, {0x401233, 0x402000, 0x403000, 0x404000, 0x405000, 0x407000, 0x408000});  // deeper callers differ
  stacks.add(3, {0x401233, 0x402000, 0x403000, 0x404000, 0x409000, 0x406000});            // the 4th differs
  ASSERT_EQ(model::kDeepKeyFrames, 4);
  EXPECT_EQ(OnlineClassSource::callers_of(stacks_frames(stacks, 1), 6),
            OnlineClassSource::callers_of(stacks_frames(stacks, 2), 7));
  EXPECT_NE(OnlineClassSource::callers_of(stacks_frames(stacks, 1), 6),
            OnlineClassSource::callers_of(stacks_frames(stacks, 3), 6));
  EXPECT_EQ(OnlineClassSource::callers_of(stacks_frames(stacks, 1), 1), 0u) << "no callers";
  std::vector<Event> events;
  uint64_t address = 0x10000000;
  for (uint32_t thread : {1u, 2u})
    for (uint32_t stack : {1u, 2u, 3u})
      for (int i = 0; i < 100; ++i) {
        Event e = at(alloc_event(uint64_t(i) * kMs, address, 64), stack);
        e.thread = thread;
        events.push_back(e);
        address += 0x100;
      }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_ns < b.time_ns; });
  LlamaOptions options;
  options.class_source = learner_over(stacks, nullptr);
  auto& source = static_cast<OnlineClassSource&>(*options.class_source);
  LlamaPolicy policy(options);
  VectorEventSource trace(events);
  replay(trace, policy, EngineOptions{});
  EXPECT_EQ(source.learner().totals().contexts, 2u);
  // Each thread's cache has an entry per stack (three keys): each one's first allocation is a visit.
  EXPECT_GE(source.checks(), 6u);
}

}  // namespace
}  // namespace llamalloc::sim
