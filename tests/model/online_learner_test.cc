// The online learner's rules (src/model/online_learner.h), with the time given by the test.
#include "online_learner.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace llamalloc::model {
namespace {

constexpr uint64_t kMs = 1'000'000;

std::unique_ptr<OnlineLearner> make_learner(LearnRule rule = {}) {
  auto l = std::make_unique<OnlineLearner>();
  EXPECT_TRUE(l->configure(rule));
  return l;
}

// A learner under `rule` with one context (a model key's return address and size bucket), and the context's slot.
struct LearnerWithContext {
  std::unique_ptr<OnlineLearner> learner;
  int32_t slot;
};
LearnerWithContext learner_with_context(LearnRule rule, uintptr_t return_address, unsigned size_bucket) {
  auto l = make_learner(rule);
  uint64_t key = OnlineLearner::context_key(return_address, size_bucket, 0);
  int32_t slot = l->find_or_add(key, return_address, size_bucket);
  return {std::move(l), slot};
}

// Samples `n` objects of `slot` at addresses from `base`, born at `now`.
void sample(OnlineLearner& l, int32_t slot, uintptr_t base, int n, uint64_t now) {
  for (int i = 0; i < n; ++i) ASSERT_TRUE(l.on_sample(slot, base + uintptr_t(i) * 64, now));
}

TEST(OnlineLearner, AContextIsLearnedFromTheLifetimesOfItsFreedObjects) {
  auto [l, slot] = learner_with_context({}, 0x401000, 6);
  ASSERT_GE(slot, 0);
  sample(*l, slot, 0x10000, 7, 0);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(l->on_free(0x10000 + uintptr_t(i) * 64, 500 * kMs));  // class 2 (< 1 s)
  EXPECT_EQ(l->decided(slot), kNoClass) << "below min_samples (8): undecided";
  sample(*l, slot, 0x20000, 1, 1000 * kMs);
  EXPECT_TRUE(l->on_free(0x20000, 1300 * kMs));
  EXPECT_EQ(l->decided(slot), 2u);
  EXPECT_EQ(l->learned(slot, 7, true), kNoClass) << "below override_samples (32): a model's class stands";
  EXPECT_FALSE(l->on_free(0x20000, 1400 * kMs)) << "an address freed twice is sampled once";
  EXPECT_FALSE(l->on_free(0x999999, 1400 * kMs)) << "an object never sampled";
}

TEST(OnlineLearner, AContextWhoseObjectsAreNeverFreedIsLearnedFromAgingAlone) {
  auto [l, slot] = learner_with_context({.shortest = 1}, 0x402000, 5);
  sample(*l, slot, 0x30000, 40, 0);
  l->age(5 * kMs);
  EXPECT_EQ(l->decided(slot), kNoClass) << "younger than 10 ms: no evidence yet";
  l->age(50 * kMs);
  EXPECT_EQ(l->decided(slot), kNoClass) << "within the shortest class (< 100 ms): no evidence yet";
  l->age(200 * kMs);
  // Outlived the shortest class with no free to say otherwise: evidence, as the class their age has reached.
  EXPECT_EQ(l->decided(slot), 2u);
  EXPECT_EQ(l->learned(slot, 1, true), kNoClass) << "a model's class 1 stands: only one class outlived";
  l->age(2'000 * kMs);
  EXPECT_EQ(l->decided(slot), 3u) << "past 1 s: class 3";
  l->age(20'000 * kMs);
  EXPECT_EQ(l->decided(slot), kLongestLifetimeClass) << "past 10 s (long_class 4): the longest class's pages";
  EXPECT_EQ(l->learned(slot, 1, true), kLongestLifetimeClass) << "40 objects 100x past a model's class 1 lengthen it";
  EXPECT_EQ(l->learned(slot, 3, true), kNoClass) << "a model's class 3 (< 10 s) stands at 20 s";
  EXPECT_EQ(l->totals().live_samples, 40u);
}

TEST(OnlineLearner, LiveObjectsNeverShortenAModelsClass) {
  // The model says class 5; sampled objects are live, aged to 100 ms-1 s: a lower bound, not a lifetime.
  auto [l, slot] = learner_with_context({}, 0x402800, 5);
  sample(*l, slot, 0x38000, 40, 0);
  l->age(300 * kMs);
  EXPECT_EQ(l->learned(slot, 5, true), kNoClass) << "live objects never shorten a model's class";
  EXPECT_EQ(l->decided(slot), 2u) << "(without a model they count as the class their age has reached)";
}

TEST(OnlineLearner, ObjectsNotFreedYetWhileAHeapGrowsAreNotSentToTheLongestPages) {
  // A heap's first rise: 40 objects sampled, none freed yet, aged 1-10 s. With MIN_CLASS 3 they are class 3, on
  // pages of their own, not the longest class's, where they would pin the true survivors' pages once they die;
  // the frees that follow (1-10 s) keep the context there.
  auto [l, slot] = learner_with_context({.shortest = 3}, 0x402c00, 6);
  sample(*l, slot, 0x3c000, 40, 0);
  l->age(500 * kMs);
  EXPECT_EQ(l->decided(slot), 1u) << "aged 100 ms-1 s: below MIN_CLASS, placed as without learning";
  l->age(3'000 * kMs);
  EXPECT_EQ(l->decided(slot), 3u);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(l->on_free(0x3c000 + uintptr_t(i) * 64, 4'000 * kMs));
  EXPECT_EQ(l->decided(slot), 3u) << "freed at 4 s";
}

TEST(OnlineLearner, FreesThatSayLongerThanAModelLeaveItsClass) {
  // Objects the model puts in class 1 die within 1-10 s (class 3): freed with their pages all the same, so the
  // model's class stands; only the longest class, from survivors, lengthens it (AContextWhoseObjectsAre...).
  auto [l, slot] = learner_with_context({}, 0x402a00, 17);
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(l->on_sample(slot, 0x3b000, 0));
    ASSERT_TRUE(l->on_free(0x3b000, 3000 * kMs));
  }
  EXPECT_EQ(l->decided(slot), 3u);
  EXPECT_EQ(l->learned(slot, 1, true), kNoClass);
  EXPECT_EQ(l->learned(slot, 1, false), 3u) << "without a model (the default class 1) it moves";
  EXPECT_EQ(l->learned(slot, 6, true), 3u) << "a model's longer class is shortened by confident frees";
}

TEST(OnlineLearner, ObjectsThatOutliveWhatTheFreesSayAreSurvivors) {
  // 20 objects freed within 10-100 ms (class 1); 20 more still live past 1 s: they have outlived class 1, and
  // as many as the frees, the longer class wins the mode's tie.
  auto [l, slot] = learner_with_context({}, 0x402900, 5);
  sample(*l, slot, 0x39000, 20, 0);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(l->on_free(0x39000 + uintptr_t(i) * 64, 50 * kMs));
  EXPECT_EQ(l->decided(slot), 1u);
  sample(*l, slot, 0x3a000, 20, 100 * kMs);
  l->age(150 * kMs);
  EXPECT_EQ(l->decided(slot), 1u) << "aged 50 ms: within what the frees say, no evidence";
  l->age(1500 * kMs);
  EXPECT_EQ(l->decided(slot), 3u) << "as many past 1 s as frees: the longer class wins the tie";
  l->age(15'000 * kMs);
  EXPECT_EQ(l->decided(slot), kLongestLifetimeClass);
}

// The process's and the replay's rule: learning alone keeps apart only what goes on the longest class's pages
// (LONG_CLASS and up); beside a model, MIN_CLASS as the caller applies it.
TEST(OnlineLearner, LearningAloneKeepsApartOnlyWhatGoesOnTheLongestPages) {
  Options o;
  ModelFile model;  // (not opened: an argmax model, as far as the rule is concerned)
  EXPECT_EQ(learn_rule_of(o, nullptr, 3).shortest, unsigned(o.long_class) + 1) << "frees longer than LONG_CLASS";
  EXPECT_EQ(learn_rule_of(o, &model, 3).shortest, 3u);
  EXPECT_EQ(learn_rule_of(o, nullptr, 3).fallback, unsigned(o.default_class));
  o.long_class = 8;  // every class on its own pages: the last class is the longest's
  EXPECT_EQ(learn_rule_of(o, nullptr, 3).shortest, unsigned(o.classes) - 1);
  o.long_class = 2;
  EXPECT_EQ(learn_rule_of(o, nullptr, 3).shortest, 3u) << "never below the caller's shortest class";
  // Without a model a context whose objects are never freed is then decided once they reach long_class's age.
  uint32_t freed[kMaxClasses] = {}, live[kMaxClasses] = {0, 0, 0, 20, 0, 0, 0, 0};
  Options d;
  LearnRule alone = learn_rule_of(d, nullptr, 3);
  EXPECT_EQ(OnlineLearner::decide(alone, freed, live, nullptr), unsigned(d.default_class)) << "1-10 s old";
  live[3] = 0, live[4] = 20;
  EXPECT_EQ(OnlineLearner::decide(alone, freed, live, nullptr), kLongestLifetimeClass) << "10-100 s old";
  // Frees at LONG_CLASS's lifetimes (10-100 s) turn over within a steady load: those objects stay in the default
  // class, where they fill the holes of its spans. Longer frees go on the longest pages.
  uint32_t none[kMaxClasses] = {};
  freed[4] = 20;
  EXPECT_EQ(OnlineLearner::decide(alone, freed, none, nullptr), unsigned(d.default_class)) << "freed at 10-100 s";
  freed[4] = 0, freed[5] = 20;
  EXPECT_EQ(OnlineLearner::decide(alone, freed, none, nullptr), 5u) << "freed at 100-1000 s";
}

TEST(OnlineLearner, APhaseChangeIsDecidedAgain) {
  auto [l, slot] = learner_with_context({.window = 16}, 0x403000, 7);
  uint64_t now = 0;
  for (int i = 0; i < 40; ++i) {  // phase 1: objects live 5 s (class 3)
    ASSERT_TRUE(l->on_sample(slot, 0x40000, now));
    now += 5000 * kMs;
    ASSERT_TRUE(l->on_free(0x40000, now));
  }
  EXPECT_EQ(l->learned(slot, 7, true), 3u) << "confident from frees: it shortens a model's class";
  for (int i = 0; i < 40; ++i) {  // phase 2: objects live 1 ms (class 0)
    ASSERT_TRUE(l->on_sample(slot, 0x40000, now));
    now += kMs;
    ASSERT_TRUE(l->on_free(0x40000, now));
  }
  EXPECT_EQ(l->learned(slot, 7, true), 0u) << "the window halves the old phase's counts";
}

TEST(OnlineLearner, TheShortestClassRaisesADecision) {
  LearnRule rule;
  rule.shortest = 1;
  uint32_t freed[kMaxClasses] = {20, 0, 0, 0, 0, 0, 0, 0}, live[kMaxClasses] = {};
  uint32_t evidence = 0;
  EXPECT_EQ(OnlineLearner::decide(rule, freed, live, &evidence), 1u);
  EXPECT_EQ(evidence, 20u);
}

TEST(OnlineLearner, TheLabelRuleIsTraining) {
  // Mode with ties to the longer class (train's default): 10 short and 9.5-10 long objects tie, the longer wins.
  LearnRule rule;
  uint32_t freed[kMaxClasses] = {10, 0, 0, 10, 0, 0, 0, 0}, live[kMaxClasses] = {};
  EXPECT_EQ(OnlineLearner::decide(rule, freed, live, nullptr), 3u);
  freed[3] = 5;
  EXPECT_EQ(OnlineLearner::decide(rule, freed, live, nullptr), 0u);
  rule.label = LabelRule{kShare, 20, kModeTiePercent};
  EXPECT_EQ(OnlineLearner::decide(rule, freed, live, nullptr), 3u) << "share20: a third of the objects is kept";
}

TEST(OnlineLearner, SamplingThinsOutOnceAContextIsConfident) {
  auto [l, slot] = learner_with_context({.sample_every = 16}, 0x404000, 8);
  int sampled = 0;
  for (uint32_t i = 0; i < 32; ++i) sampled += l->should_sample(slot, i);
  EXPECT_EQ(sampled, 32) << "every check while not confident";
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(l->on_sample(slot, 0x50000, 0));
    ASSERT_TRUE(l->on_free(0x50000, kMs));
  }
  sampled = 0;
  for (uint32_t i = 0; i < 160; ++i) sampled += l->should_sample(slot, i);
  EXPECT_EQ(sampled, 10);
}

TEST(OnlineLearner, ALongLivedContextStopsBeingSampledAtItsLiveCap) {
  auto [l, slot] = learner_with_context({}, 0x405000, 8);
  for (uint32_t i = 0; i < OnlineLearner::kMaxLivePerContext; ++i) ASSERT_TRUE(l->on_sample(slot, 0x60000 + i * 16, 0));
  EXPECT_FALSE(l->should_sample(slot, 0));
  EXPECT_FALSE(l->on_sample(slot, 0x70000, 0));
  EXPECT_TRUE(l->on_free(0x60000, kMs));
  EXPECT_TRUE(l->should_sample(slot, 0));
}

TEST(OnlineLearner, ContextKeysDependOnEveryPart) {
  uint64_t k = OnlineLearner::context_key(0x401000, 6, 0);
  EXPECT_NE(k, OnlineLearner::context_key(0x401001, 6, 0));
  EXPECT_NE(k, OnlineLearner::context_key(0x401000, 7, 0));
  EXPECT_NE(k, OnlineLearner::context_key(0x401000, 6, 0x1234));
  auto l = make_learner();
  int32_t slot = l->find_or_add(k, 0x401000, 6);
  EXPECT_GE(slot, 0);
  EXPECT_EQ(l->find(k), slot);
  EXPECT_EQ(l->find(k ^ 2), -1);
}

TEST(OnlineLearner, ManySamplesStayFindableThroughDeletions) {
  auto [l, slot] = learner_with_context({}, 0x406000, 8);
  // Fill, free every other one, then every remaining one must still be found (backward-shift deletion).
  for (uint32_t round = 0; round < 40; ++round) {
    for (uint32_t i = 0; i < 60; ++i) ASSERT_TRUE(l->on_sample(slot, 0x100000 + (round * 60 + i) * 4096, 0));
    for (uint32_t i = 0; i < 60; i += 2) ASSERT_TRUE(l->on_free(0x100000 + (round * 60 + i) * 4096, 1));
    for (uint32_t i = 1; i < 60; i += 2) ASSERT_TRUE(l->on_free(0x100000 + (round * 60 + i) * 4096, 1));
  }
  EXPECT_EQ(l->totals().live_samples, 0u);
  EXPECT_EQ(l->totals().frees, 2400u);
}

// The tables take address space as contexts and samples come: the index at first, a chunk of contexts per
// kContextsPerChunk contexts, a sample table that doubles from kFirstSamples entries as live samples fill it;
// every context and sample stays findable as they grow, and the limits (1,536 contexts, 3,072 live samples) hold.
TEST(OnlineLearner, TheTablesGrowWithTheContextsAndSamplesInUse) {
  auto l = make_learner();
  size_t index_bytes = l->mapped_bytes();
  EXPECT_LE(index_bytes, size_t(4096)) << "configure maps the index only";
  int32_t first = l->find_or_add(OnlineLearner::context_key(0x500000, 4, 0), 0x500000, 4);
  EXPECT_EQ(first, 0);
  size_t one_chunk = l->mapped_bytes() - index_bytes;
  EXPECT_GT(one_chunk, 0u);
  EXPECT_LE(one_chunk, size_t(16384));
  constexpr int kContexts = 300;  // three chunks of 128
  std::vector<int32_t> slots;
  for (int i = 0; i < kContexts; ++i) {
    uint64_t key = OnlineLearner::context_key(0x600000 + uintptr_t(i) * 16, 4, 0);
    slots.push_back(l->find_or_add(key, 0x600000 + uintptr_t(i) * 16, 4));
    ASSERT_EQ(slots.back(), i + 1) << "slots are given in the order contexts come";
  }
  EXPECT_EQ(l->mapped_bytes(), index_bytes + 3 * one_chunk);
  for (int i = 0; i < kContexts; ++i)
    EXPECT_EQ(l->find(OnlineLearner::context_key(0x600000 + uintptr_t(i) * 16, 4, 0)), slots[size_t(i)]);
  EXPECT_EQ(l->find(OnlineLearner::context_key(0x500000, 4, 0)), first);
  // 40 live samples in each of 50 contexts: 2,000 live, a table of 4,096 entries (96 KiB), grown from 256.
  for (int k = 0; k < 50; ++k)
    for (int j = 0; j < 40; ++j) ASSERT_TRUE(l->on_sample(slots[size_t(k)], 0x10000000 + uintptr_t(k * 40 + j) * 64, 0));
  EXPECT_EQ(l->mapped_bytes(), index_bytes + 3 * one_chunk + 4096 * 24);
  LearnerTotals t = l->totals();
  EXPECT_EQ(t.live_samples, 2000u);
  EXPECT_EQ(t.contexts, uint64_t(kContexts + 1));
  size_t visited = 0;
  l->for_each([&](const LearnedContext& c) {
    ++visited;
    if (c.return_address >= 0x600000 && c.return_address < 0x600000 + 50 * 16) {
      EXPECT_EQ(c.live[0], 40u);
    }
  });
  EXPECT_EQ(visited, size_t(kContexts + 1));
  // Every sample is still found at its free after the table moved.
  for (int n = 0; n < 2000; ++n) ASSERT_TRUE(l->on_free(0x10000000 + uintptr_t(n) * 64, 500 * kMs)) << n;
  EXPECT_EQ(l->totals().live_samples, 0u);
  // The sample table takes at most three quarters of 4,096 live samples.
  for (int k = 0; k < 60; ++k)
    for (int j = 0; j < 60; ++j) l->on_sample(slots[size_t(k)], 0x20000000 + uintptr_t(k * 60 + j) * 64, 0);
  EXPECT_EQ(l->totals().live_samples, 3072u);
  // The index takes 1,536 contexts, then no more.
  int added = kContexts + 1;
  for (int i = 0; i < 2000; ++i)
    if (l->find_or_add(OnlineLearner::context_key(0x700000 + uintptr_t(i) * 16, 5, 0), 0x700000, 5) >= 0) ++added;
  EXPECT_EQ(added, 1536);
  EXPECT_EQ(l->mapped_bytes(), index_bytes + 12 * one_chunk + 4096 * 24);
}

// After a peak the sample table does not keep the peak's size: the aging pass that finds its live samples below
// an eighth of its slots moves them into the smallest table they fill to at most three eighths, and each is still
// found at its free; a new rise grows it again.
TEST(OnlineLearner, AfterAPeakTheSampleTableShrinksAtAnAgingPass) {
  auto l = make_learner();
  std::vector<int32_t> slots;
  for (int i = 0; i < 40; ++i)
    slots.push_back(l->find_or_add(OnlineLearner::context_key(0x600000 + uintptr_t(i) * 16, 4, 0),
                                   0x600000 + uintptr_t(i) * 16, 4));
  size_t tables = l->mapped_bytes();
  auto at = [](int k, int j) { return 0x10000000 + uintptr_t(k * 50 + j) * 64; };
  for (int k = 0; k < 40; ++k)
    for (int j = 0; j < 50; ++j) ASSERT_TRUE(l->on_sample(slots[size_t(k)], at(k, j), 0));
  EXPECT_EQ(l->mapped_bytes(), tables + 4096 * 24) << "2,000 live samples";
  l->age(100 * kMs);
  EXPECT_EQ(l->mapped_bytes(), tables + 4096 * 24) << "no shrink while the samples fill the table";
  for (int k = 0; k < 40; ++k)
    for (int j = 2; j < 50; ++j) ASSERT_TRUE(l->on_free(at(k, j), 200 * kMs));
  EXPECT_EQ(l->mapped_bytes(), tables + 4096 * 24) << "frees alone do not move the table";
  l->age(300 * kMs);
  EXPECT_EQ(l->mapped_bytes(), tables + 256 * 24) << "80 live samples: the first size";
  EXPECT_EQ(l->totals().live_samples, 80u);
  for (int k = 0; k < 40; ++k) {
    ASSERT_TRUE(l->on_free(at(k, 0), 400 * kMs)) << k;
    ASSERT_TRUE(l->on_free(at(k, 1), 400 * kMs)) << k;
  }
  EXPECT_EQ(l->totals().live_samples, 0u);
  for (int k = 0; k < 40; ++k)
    for (int j = 0; j < 20; ++j) ASSERT_TRUE(l->on_sample(slots[size_t(k)], at(k, j), 500 * kMs));
  EXPECT_EQ(l->mapped_bytes(), tables + 2048 * 24) << "800 live samples grow it again";
}

}  // namespace
}  // namespace llamalloc::model
