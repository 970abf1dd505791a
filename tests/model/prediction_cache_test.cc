// The prediction cache (the LLAMA paper, section 7), driven with a fake model: hits, set associativity,
// re-prediction and its back-off, unseen contexts.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "model_file.h"
#include "prediction_cache.h"

using namespace llamalloc::model;
using llamalloc::model_size_bucket;

namespace {

// ---------------------------------------------------------------- prediction cache (the LLAMA paper, section 7)

struct FakeModel {
  unsigned answer = 0;
  int runs = 0;
  unsigned operator()() {
    ++runs;
    return answer;
  }
};

// A cache of 4-way sets, its counters, a fake model and one key.
class PredictionCacheOfOneKey : public ::testing::Test {
 protected:
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model;
  uint64_t key = cache_key(0x401000, 0x7ffc0000, 5);
};

TEST_F(PredictionCacheOfOneKey, MissRunsTheModelOnceThenHits) {
  model.answer = 3;
  EXPECT_EQ(cache.lookup(key, 1000, counters, [&] { return model(); }), 3u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(cache.lookup(key, 1000, counters, [&] { return model(); }), 3u);
  EXPECT_EQ(model.runs, 1);
  EXPECT_EQ(counters.misses.load(), 1u);
  EXPECT_EQ(counters.hits.load(), 10u);
}

TEST(PredictionCache, KeyDependsOnReturnAddressStackHeightAndSizeBucket) {
  uint64_t base = cache_key(0x401000, 0x7ffc1000, 5);
  EXPECT_NE(base, cache_key(0x401008, 0x7ffc1000, 5));
  EXPECT_NE(base, cache_key(0x401000, 0x7ffc1010, 5));
  EXPECT_NE(base, cache_key(0x401000, 0x7ffc1000, 6));
  EXPECT_EQ(base, cache_key(0x401000, 0x7ffc1000, 5));
  EXPECT_NE(base, 0u);
  // Sizes of one model size bucket share an entry: the model cannot tell them apart.
  EXPECT_EQ(model_size_bucket(100), model_size_bucket(128));
  EXPECT_NE(model_size_bucket(128), model_size_bucket(129));
  // Up to 16 bytes, one bucket: a profile records such requests as 16 (src/profiler/sampling.h), so training
  // gives them <size:4> and so must the process (llamalloc.model.classes.model_size_bucket).
  EXPECT_EQ(model_size_bucket(1), 4u);
  EXPECT_EQ(model_size_bucket(7), 4u);
  EXPECT_EQ(model_size_bucket(16), 4u);
  EXPECT_EQ(model_size_bucket(17), 5u);
}

TEST(PredictionCache, DistinctContextsGetTheirOwnClasses) {
  PredictionCache<8> cache;
  CacheCounters counters;
  FakeModel a{1}, b{6};
  uint64_t ka = cache_key(0x401000, 0x7ffc0000, 5), kb = cache_key(0x402000, 0x7ffc0000, 5);
  ASSERT_NE(cache.index_of(ka), cache.index_of(kb));
  EXPECT_EQ(cache.lookup(ka, 1000, counters, [&] { return a(); }), 1u);
  EXPECT_EQ(cache.lookup(kb, 1000, counters, [&] { return b(); }), 6u);
  EXPECT_EQ(cache.lookup(ka, 1000, counters, [&] { return b(); }), 1u);
  EXPECT_EQ(cache.lookup(kb, 1000, counters, [&] { return a(); }), 6u);
}

// Keys of one set (the cache is two-way set associative), other than `key` and each other.
std::vector<uint64_t> keys_of_the_set_of(uint64_t key, size_t count) {
  const PredictionCache<2> cache;
  std::vector<uint64_t> out;
  for (uintptr_t ra = 0x401001; out.size() < count; ++ra) {
    uint64_t k = cache_key(ra, 0x7ffc0000, 3);
    if (cache.set_of(k) == cache.set_of(key) && k != key) out.push_back(k);
  }
  return out;
}

TEST(PredictionCache, TwoContextsOfOneSetThatAlternateBothStay) {
  PredictionCache<2> cache;  // 4 entries, 2 sets: collisions are easy to find
  CacheCounters counters;
  uint64_t k1 = cache_key(0x401000, 0x7ffc0000, 3);
  uint64_t k2 = keys_of_the_set_of(k1, 1)[0];
  FakeModel m1{2}, m2{5};
  // A request's two allocations, again and again (redis: its parse and its reply): direct-mapped, each evicted
  // the other and every allocation ran the model.
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(cache.lookup(k1, 1000, counters, [&] { return m1(); }), 2u);
    EXPECT_EQ(cache.lookup(k2, 1000, counters, [&] { return m2(); }), 5u);
  }
  EXPECT_EQ(m1.runs, 1);
  EXPECT_EQ(m2.runs, 1);
  EXPECT_EQ(counters.misses.load(), 2u);
  ASSERT_NE(cache.find(k1), nullptr);
  ASSERT_NE(cache.find(k2), nullptr);
  EXPECT_EQ(&cache.slot(k1), cache.find(k1));
}

TEST(PredictionCache, AThirdKeyOfTheSetEvictsTheOneUsedLongestAgo) {
  PredictionCache<2> cache;
  CacheCounters counters;
  uint64_t k1 = cache_key(0x401000, 0x7ffc0000, 3);
  std::vector<uint64_t> others = keys_of_the_set_of(k1, 2);
  uint64_t k2 = others[0], k3 = others[1];
  FakeModel m1{2}, m2{5}, m3{6};
  EXPECT_EQ(cache.lookup(k1, 1000, counters, [&] { return m1(); }), 2u);
  EXPECT_EQ(cache.lookup(k2, 1000, counters, [&] { return m2(); }), 5u);
  EXPECT_EQ(cache.lookup(k3, 1000, counters, [&] { return m3(); }), 6u);  // k1, inserted first, goes
  EXPECT_EQ(cache.find(k1), nullptr);
  EXPECT_EQ(cache.lookup(k2, 1000, counters, [&] { return m2(); }), 5u);
  EXPECT_EQ(cache.lookup(k1, 1000, counters, [&] { return m1(); }), 2u);  // evicted: the model runs again
  EXPECT_EQ(m1.runs, 2);
  EXPECT_EQ(m2.runs, 1);
  EXPECT_EQ(counters.misses.load(), 4u);
  EXPECT_EQ(counters.hits.load(), 1u);
  // A newcomer's slot is the first entry of its set: what the fast path probes first.
  EXPECT_EQ(cache.find(k1), &cache.entry(cache.set_of(k1)));
}

TEST_F(PredictionCacheOfOneKey, EveryNHitsPredictsAgainAndKeepsTheLongerClass) {
  model.answer = 2;
  const uint32_t n = 10;
  cache.lookup(key, n, counters, [&] { return model(); });  // miss: class 2
  model.answer = 1;  // a shorter class now: the entry keeps 2
  for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(cache.lookup(key, n, counters, [&] { return model(); }), 2u);
  EXPECT_EQ(model.runs, 2);  // the n-th hit predicted again
  EXPECT_EQ(counters.repredictions_changed.load(), 0u);
  model.answer = 5;  // a longer class: taken at the next re-prediction, not before
  for (uint32_t i = 0; i < n - 1; ++i) EXPECT_EQ(cache.lookup(key, n, counters, [&] { return model(); }), 2u);
  EXPECT_EQ(cache.lookup(key, n, counters, [&] { return model(); }), 5u);
  EXPECT_EQ(model.runs, 3);
  EXPECT_EQ(counters.repredictions_changed.load(), 1u);
  EXPECT_EQ(counters.repredictions.load(), 2u);
  model.answer = 0;
  for (uint32_t i = 0; i < 3 * n; ++i) EXPECT_EQ(cache.lookup(key, n, counters, [&] { return model(); }), 5u);
  EXPECT_EQ(model.runs, 6);
}

TEST_F(PredictionCacheOfOneKey, AReconfirmedClassDoublesTheEntrysPeriodAndAChangedOneStartsOver) {
  model.answer = 2;
  const uint32_t n = 10;
  auto lookup = [&] { return cache.lookup(key, n, counters, [&] { return model(); }, /*max_backoff=*/2); };
  lookup();  // miss: class 2, period n
  auto hits_until_run = [&] {
    int before = model.runs, hits = 0;
    while (model.runs == before) {
      lookup();
      ++hits;
    }
    return hits;
  };
  EXPECT_EQ(hits_until_run(), 10);  // same class: the period doubles
  EXPECT_EQ(hits_until_run(), 20);
  EXPECT_EQ(hits_until_run(), 40);  // capped at n << 2
  EXPECT_EQ(hits_until_run(), 40);
  model.answer = 4;  // a longer class: taken, and the period starts over
  EXPECT_EQ(hits_until_run(), 40);
  EXPECT_EQ(cache.find(key)->lifetime_class, 4u);
  EXPECT_EQ(hits_until_run(), 10);
  // The fast path's view of the same entry: re-predicted after n << backoff hits.
  EXPECT_EQ(cache.find(key)->backoff, 1u);
}

TEST_F(PredictionCacheOfOneKey, AnUnseenContextIsLongLivedUntilItProvesFrequentThenGetsTheModelsClass) {
  model.answer = 1 | kUnseenContext;  // the model says "< 100 ms" for a context it was not trained on
  const uint32_t every = 1000, trial = 64;
  auto lookup = [&] { return cache.lookup(key, every, counters, [&] { return model(); }, 10, trial); };
  EXPECT_EQ(lookup(), kUnseenClass);  // miss: the longest class
  EXPECT_EQ(counters.unseen.load(), 1u);
  int hits = 0;
  while (model.runs == 1) {
    unsigned lc = lookup();
    ++hits;
    if (model.runs == 1) ASSERT_EQ(lc, kUnseenClass);
    else EXPECT_EQ(lc, 1u);  // proved frequent: the model's own class, although shorter
  }
  EXPECT_EQ(hits, int(trial));
  EXPECT_EQ(counters.repredictions_changed.load(), 1u);
  // From then on an ordinary entry: its class, re-predicted every `every` hits, and a class that stays doubles the
  // period (without the back-off a program of many unseen contexts ran the model 13 times as often).
  auto hits_until_run = [&] {
    int before = model.runs, n = 0;
    while (model.runs == before) {
      EXPECT_EQ(lookup(), 1u);
      ++n;
    }
    return n;
  };
  EXPECT_EQ(hits_until_run(), int(every));
  EXPECT_EQ(hits_until_run(), int(2 * every));
  EXPECT_EQ(counters.repredictions_changed.load(), 1u);
  // A context the model was trained on keeps the model's class from its first allocation.
  uint64_t seen = cache_key(0x402000, 0x7ffc0000, 5);
  FakeModel trained{1};
  EXPECT_EQ(cache.lookup(seen, every, counters, [&] { return trained(); }, 10, trial), 1u);
  EXPECT_EQ(counters.unseen.load(), 1u);
}

TEST_F(PredictionCacheOfOneKey, ATrialTakesTheClassItIsGivenAndIsMarkedUntilItEnds) {
  // The predictors pass the default class where the model keeps nothing apart from it (here 3, where
  // kUnseenClass is 7).
  model.answer = 1 | kUnseenContext;
  const uint32_t every = 1000, trial = 16;
  auto lookup = [&] { return cache.lookup(key, every, counters, [&] { return model(); }, 10, trial, 3); };
  EXPECT_EQ(lookup(), 3u);
  ASSERT_NE(cache.find(key), nullptr);
  EXPECT_EQ(cache.find(key)->context & kTrialTag, kTrialTag);  // on its trial
  for (uint32_t i = 1; i < trial; ++i) EXPECT_EQ(lookup(), 3u);
  EXPECT_EQ(lookup(), 1u);  // the trial's end: the model's class
  EXPECT_EQ(cache.find(key)->context & kTrialTag, 0u);
  // A context the model was trained on is never marked.
  uint64_t seen = cache_key(0x402000, 0x7ffc0000, 5);
  FakeModel trained{5};
  EXPECT_EQ(cache.lookup(seen, every, counters, [&] { return trained(); }, 10, trial, 3), 5u);
  EXPECT_EQ(cache.find(seen)->context, 0u);
}

TEST(PredictionCache, ZeroMeansNeverPredictAgain) {
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model{1};
  uint64_t key = cache_key(1, 2, 3);
  for (int i = 0; i < 5000; ++i) cache.lookup(key, 0, counters, [&] { return model(); });
  EXPECT_EQ(model.runs, 1);
}

// ---------------------------------------------------------------- sized by use

// A cache of at most 2^6 entries that starts at 2^3: small enough to fill by hand.
using GrowingCache = PredictionCache<6, 3>;

TEST(PredictionCacheSize, AFewContextsStayInTheSmallestTableAndKeepTheirClasses) {
  GrowingCache cache;
  CacheCounters counters;
  // Four keys of distinct sets: no miss evicts a live entry, however often they come.
  std::vector<uint64_t> keys;
  std::vector<unsigned> sets;
  for (uintptr_t ra = 0x401001; keys.size() < 4; ++ra) {
    uint64_t k = cache_key(ra, 0x7ffc0000, 3);
    unsigned set = cache.set_of(k);
    bool taken = false;
    for (unsigned s : sets) taken |= s == set;
    if (!taken) keys.push_back(k), sets.push_back(set);
  }
  for (int round = 0; round < 1000; ++round)
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(cache.lookup(keys[i], 0, counters, [&] { return unsigned(i); }), i);
      EXPECT_FALSE(cache.grow_if_crowded(counters.hits.load()));
    }
  EXPECT_EQ(cache.log_entries(), 3u);
  EXPECT_EQ(counters.misses.load(), 4u);
}

TEST(PredictionCacheSize, MissesThatEvictLiveEntriesDoubleItAndEveryEntryStaysFindable) {
  GrowingCache cache;
  CacheCounters counters;
  // 40 contexts over 8 entries: every miss after the first few evicts one.
  std::vector<uint64_t> keys;
  for (uintptr_t ra = 0x401001; keys.size() < 40; ++ra) keys.push_back(cache_key(ra, 0x7ffc0000, 3));
  unsigned grew = 0;
  for (int round = 0; round < 50; ++round)
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(cache.lookup(keys[i], 0, counters, [&] { return unsigned(i % 7); }), i % 7);
      if (cache.grow_if_crowded(counters.hits.load())) {
        ++grew;
        // Every key still present sits in its set under the new size, with its class.
        for (size_t j = 0; j < keys.size(); ++j)
          if (const auto* e = cache.find(keys[j])) EXPECT_EQ(e->lifetime_class, j % 7);
        unsigned live = 0;
        for (unsigned x = 0; x < (1u << cache.log_entries()); ++x) {
          const auto& e = cache.entry(x);
          if (e.key == 0) continue;
          ++live;
          EXPECT_EQ(cache.set_of(e.key), x & ~1u) << "entry " << x << " after growing to " << cache.log_entries();
        }
        EXPECT_GT(live, 0u);
      }
    }
  EXPECT_EQ(cache.log_entries(), 6u) << "grew to the largest size";
  EXPECT_EQ(grew, 3u);
  EXPECT_FALSE(cache.grow_if_crowded(counters.hits.load()));
  // At 64 entries most of the 40 stay: the last round hit far more than it missed.
  uint64_t misses = counters.misses.load();
  for (size_t i = 0; i < keys.size(); ++i) cache.lookup(keys[i], 0, counters, [&] { return unsigned(i % 7); });
  EXPECT_LT(counters.misses.load() - misses, 25u);
  cache.clear();
  cache.reset_size();
  EXPECT_EQ(cache.log_entries(), 3u);
}

TEST(PredictionCacheSize, EvictionsSpreadOverManyHitsDoNotGrowIt) {
  using Cache = PredictionCache<10, 8>;  // a doubling needs 32 evictions within a window
  Cache cache;
  CacheCounters counters;
  uint64_t k1 = cache_key(0x401000, 0x7ffc0000, 3);
  // Three keys of one set: each of the third key's visits evicts one, but only once per window of hits.
  std::vector<uint64_t> keys = {k1};
  for (uintptr_t ra = 0x401001; keys.size() < 3; ++ra) {
    uint64_t k = cache_key(ra, 0x7ffc0000, 3);
    if (cache.set_of(k) == cache.set_of(k1) && k != k1) keys.push_back(k);
  }
  for (int window = 0; window < 20; ++window) {
    for (uint64_t h = 0; h < Cache::kGrowWindowHits / 2; ++h) cache.lookup(keys[0], 0, counters, [] { return 1u; });
    cache.lookup(keys[1], 0, counters, [] { return 1u; });
    cache.lookup(keys[2], 0, counters, [] { return 1u; });
    EXPECT_FALSE(cache.grow_if_crowded(counters.hits.load()));
  }
  EXPECT_EQ(cache.log_entries(), 8u);
  // The same evictions without the hits between them do grow it.
  for (int i = 0; i < 40; ++i) cache.lookup(keys[i % 3], 0, counters, [] { return 1u; });
  EXPECT_TRUE(cache.grow_if_crowded(counters.hits.load()));
  EXPECT_EQ(cache.log_entries(), 9u);
}

TEST(PredictionCacheSize, AFixedSizeCacheNeverGrows) {
  PredictionCache<2> cache;
  CacheCounters counters;
  for (uintptr_t ra = 0x401001; ra < 0x401001 + 1000; ++ra)
    cache.lookup(cache_key(ra, 0x7ffc0000, 3), 0, counters, [] { return 1u; });
  EXPECT_FALSE(cache.grow_if_crowded(counters.hits.load()));
  EXPECT_EQ(cache.log_entries(), 2u);
}

}  // namespace
