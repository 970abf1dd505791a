#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <thread>
#include <vector>

#include "learned_predictor.h"
#include "model_file.h"
#include "prediction_cache.h"
#include "stack_walk.h"
#include "token_table.h"

using namespace llamalloc::model;

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

TEST(PredictionCache, MissRunsTheModelOnceThenHits) {
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model{3};
  uint64_t key = cache_key(0x401000, 0x7ffc0000, 5);
  EXPECT_EQ(cache.lookup(key, 1000, counters, [&] { return model(); }), 3u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(cache.lookup(key, 1000, counters, [&] { return model(); }), 3u);
  EXPECT_EQ(model.runs, 1);
  EXPECT_EQ(counters.misses.load(), 1u);
  EXPECT_EQ(counters.hits.load(), 10u);
}

TEST(PredictionCache, KeyDependsOnReturnAddressStackHeightAndSizeClass) {
  uint64_t base = cache_key(0x401000, 0x7ffc1000, 5);
  EXPECT_NE(base, cache_key(0x401008, 0x7ffc1000, 5));
  EXPECT_NE(base, cache_key(0x401000, 0x7ffc1010, 5));
  EXPECT_NE(base, cache_key(0x401000, 0x7ffc1000, 6));
  EXPECT_EQ(base, cache_key(0x401000, 0x7ffc1000, 5));
  EXPECT_NE(base, 0u);
  // Sizes of one size class share an entry: the model cannot tell them apart.
  EXPECT_EQ(size_class(100), size_class(128));
  EXPECT_NE(size_class(128), size_class(129));
  // Up to 16 bytes, one class: a profile records such requests as 16 (src/profiler/sampling.h), so training
  // gives them <size:4> and so must the process (llamalloc.model.classes.size_class).
  EXPECT_EQ(size_class(1), 4u);
  EXPECT_EQ(size_class(7), 4u);
  EXPECT_EQ(size_class(16), 4u);
  EXPECT_EQ(size_class(17), 5u);
}

TEST(PredictionCache, DistinctContextsGetTheirOwnClasses) {
  PredictionCache<8> cache;
  CacheCounters counters;
  FakeModel a{1}, b{6};
  uint64_t ka = cache_key(0x401000, 0x7ffc0000, 5), kb = cache_key(0x402000, 0x7ffc0000, 5);
  ASSERT_NE(PredictionCache<8>::index_of(ka), PredictionCache<8>::index_of(kb));
  EXPECT_EQ(cache.lookup(ka, 1000, counters, [&] { return a(); }), 1u);
  EXPECT_EQ(cache.lookup(kb, 1000, counters, [&] { return b(); }), 6u);
  EXPECT_EQ(cache.lookup(ka, 1000, counters, [&] { return b(); }), 1u);
  EXPECT_EQ(cache.lookup(kb, 1000, counters, [&] { return a(); }), 6u);
}

// Keys of one set (the cache is two-way set associative), other than `key` and each other.
std::vector<uint64_t> keys_of_the_set_of(uint64_t key, size_t count) {
  std::vector<uint64_t> out;
  for (uintptr_t ra = 0x401001; out.size() < count; ++ra) {
    uint64_t k = cache_key(ra, 0x7ffc0000, 3);
    if (PredictionCache<2>::set_of(k) == PredictionCache<2>::set_of(key) && k != key) out.push_back(k);
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
  EXPECT_EQ(cache.find(k1), &cache.entry(PredictionCache<2>::set_of(k1)));
}

TEST(PredictionCache, EveryNHitsPredictsAgainAndKeepsTheLongerClass) {
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model{2};
  uint64_t key = cache_key(0x401000, 0x7ffc0000, 5);
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

TEST(PredictionCache, AReconfirmedClassDoublesTheEntrysPeriodAndAChangedOneStartsOver) {
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model{2};
  uint64_t key = cache_key(0x401000, 0x7ffc0000, 5);
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

TEST(PredictionCache, AnUnseenContextIsLongLivedUntilItProvesFrequentThenGetsTheModelsClass) {
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model{1 | kUnseenContext};  // the model says "< 100 ms" for a context it was not trained on
  uint64_t key = cache_key(0x401000, 0x7ffc0000, 5);
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

TEST(PredictionCache, ZeroMeansNeverPredictAgain) {
  PredictionCache<4> cache;
  CacheCounters counters;
  FakeModel model{1};
  uint64_t key = cache_key(1, 2, 3);
  for (int i = 0; i < 5000; ++i) cache.lookup(key, 0, counters, [&] { return model(); });
  EXPECT_EQ(model.runs, 1);
}

// ---------------------------------------------------------------- model file validation (in-memory images)

// A minimal valid model image: V = 52 + 2 words, E = 4, H = 4, built as docs/formats/model.md says.
struct Image {
  alignas(64) unsigned char bytes[1 << 16];
  size_t size = 0;
};

void put32(unsigned char* p, uint32_t v) { memcpy(p, &v, 4); }
void put64(unsigned char* p, uint64_t v) { memcpy(p, &v, 8); }

// With token_contexts: also a section train.token_contexts of those keys, in the order given.
void build_model(Image& img, uint32_t hidden = 4, const uint64_t* token_contexts = nullptr, uint32_t contexts = 0) {
  memset(img.bytes, 0, sizeof img.bytes);
  const uint32_t V = 54, E = 4, H = hidden;
  struct Sec {
    const char* name;
    uint32_t dtype, ndim, s0, s1;
    uint64_t bytes;
  };
  // vocabulary strings: "<pad>\0..." simplified to one byte + NUL per token (the C++ reader checks structure)
  Sec secs[] = {{"vocab.offsets", 3, 1, V + 1, 0, 4ull * (V + 1)}, {"vocab.strings", 2, 1, 2 * V, 0, 2ull * V},
                {"lstm.folded", 1, 2, V, 4 * H, 4ull * V * 4 * H},   {"lstm.w_hidden", 1, 2, H, 4 * H, 4ull * H * 4 * H},
                {"dense.w", 1, 2, H, 8, 4ull * H * 8},              {"dense.b", 1, 1, 8, 0, 32},
                {"train.token_contexts", 4, 1, contexts, 0, 8ull * contexts}};
  const uint32_t n = token_contexts != nullptr ? 7 : 6;
  uint64_t off = 128 + 64 * n;
  off = (off + 63) / 64 * 64;
  unsigned char* h = img.bytes;
  memcpy(h, "LLAMODEL", 8);
  put32(h + 8, 1);
  put32(h + 12, 128);
  put32(h + 28, n);
  put32(h + 32, 8);
  put32(h + 36, V);
  put32(h + 40, E);
  put32(h + 44, H);
  put32(h + 48, 16);
  put32(h + 52, 48);
  put32(h + 56, 4);
  put32(h + 60, 1);
  put32(h + 64, 0);
  put32(h + 68, 2);
  put32(h + 72, 3);
  put32(h + 76, 0);
  uint64_t bound = 10000000ull;
  for (int k = 0; k < 6; ++k, bound *= 10) put64(h + 80 + 8 * k, bound);
  for (uint32_t s = 0; s < n; ++s) {
    unsigned char* e = h + 128 + 64 * s;
    strncpy(reinterpret_cast<char*>(e), secs[s].name, 24);
    put32(e + 24, secs[s].dtype);
    put32(e + 28, secs[s].ndim);
    put32(e + 32, secs[s].s0);
    put32(e + 36, secs[s].s1);
    put64(e + 48, off);
    put64(e + 56, secs[s].bytes);
    unsigned char* data = h + off;
    if (s == 0)
      for (uint32_t i = 0; i <= V; ++i) put32(data + 4 * i, 2 * i);
    if (s == 1)
      for (uint32_t i = 0; i < V; ++i) data[2 * i] = 'a';
    if (s == 6) memcpy(data, token_contexts, 8ull * contexts);
    if (s >= 2 && s < 6) {
      float* f = reinterpret_cast<float*>(data);
      for (uint64_t i = 0; i < secs[s].bytes / 4; ++i) f[i] = float((i * 37 % 101) - 50) / 50.0f;
    }
    off = (off + secs[s].bytes + 63) / 64 * 64;
  }
  img.size = off;
  put64(h + 16, img.size);
  put32(h + 24, crc32(0, h + 128, img.size - 128));
}

void reseal(Image& img) { put32(img.bytes + 24, crc32(0, img.bytes + 128, img.size - 128)); }

TEST(ModelFile, AValidImageOpensAndInfers) {
  static Image img;
  build_model(img);
  ModelFile m;
  char err[256];
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_EQ(m.hidden_dim(), 4u);
  uint32_t tokens[] = {6, 60, 2, 53, 1000000};  // out-of-vocabulary ids are read as <unk>, not out of bounds
  float logits[8];
  unsigned lc = infer(m, tokens, 5, logits);
  EXPECT_LT(lc, 8u);
  for (float l : logits) EXPECT_TRUE(std::isfinite(l));
}

// Section train.token_contexts: the keys (FNV-1a over the token ids, as llamalloc.model.modelfile computes them)
// of the contexts the model was trained on.
TEST(ModelFile, KnowsTheContextsItWasTrainedOn) {
  const uint32_t a[] = {4 + 6, 60, 2, 53}, b[] = {4 + 9, 61}, c[] = {4 + 9, 62};
  // llamalloc.model.modelfile.token_context_keys gives the same keys (FNV-1a's offset basis for no token).
  EXPECT_EQ(token_context_key(b, 2), 0x083c8707b4f3c2bfull);
  EXPECT_EQ(token_context_key(b, 0), 0xcbf29ce484222325ull);
  uint64_t keys[] = {token_context_key(a, 4), token_context_key(b, 2)};
  if (keys[0] > keys[1]) std::swap(keys[0], keys[1]);
  static Image img;
  build_model(img, 4, keys, 2);
  ModelFile m;
  char err[256];
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_TRUE(m.has_token_contexts());
  EXPECT_EQ(m.token_context_count(), 2u);
  EXPECT_TRUE(m.knows_context(a, 4));
  EXPECT_TRUE(m.knows_context(b, 2));
  EXPECT_FALSE(m.knows_context(c, 2));
  EXPECT_FALSE(m.knows_context(a, 3));  // a prefix is another context
  // Unsorted keys: refused with a reason.
  std::swap(keys[0], keys[1]);
  build_model(img, 4, keys, 2);
  EXPECT_FALSE(m.open_image(img.bytes, img.size, err, sizeof err));
  EXPECT_NE(std::string(err).find("train.token_contexts is not sorted"), std::string::npos) << err;
  // A file without the list (written before it existed) knows every context: the rule is off.
  build_model(img);
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_FALSE(m.has_token_contexts());
  EXPECT_TRUE(m.knows_context(c, 2));
}

// Resident KiB of the mapping that contains `address` (/proc/self/smaps), -1 if none.
long resident_kib(const void* address) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  bool in = false;
  long kib = -1;
  uintptr_t a = reinterpret_cast<uintptr_t>(address);
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = a >= lo && a < hi;
    else if (in && strncmp(line, "Rss:", 4) == 0) kib = atol(line + 4);
  }
  if (f) fclose(f);
  return kib;
}

// Opening a model file reads all of it (its checksum); then its pages leave the resident set, and come back only
// as they are read (drop_resident, which LearnedPredictor::trim also calls when no model ran in a period).
TEST(ModelFile, AMappedFileDoesNotStayResidentAfterValidation) {
  static Image img;
  build_model(img, 48);  // large enough to span several pages
  ASSERT_GT(img.size, size_t{24 * 1024});
  std::string path = ::testing::TempDir() + "/resident.model";
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fwrite(img.bytes, 1, img.size, f), img.size);
  fclose(f);
  ModelFile m;
  char err[256];
  ASSERT_TRUE(m.open(path.c_str(), err, sizeof err)) << err;
  const void* base = m.base();
  EXPECT_LE(resident_kib(base), 4) << "validation's pages stayed resident";
  uint32_t tokens[] = {6, 60, 2, 53};
  float logits[8];
  infer(m, tokens, 4, logits);  // reads its weights back
  EXPECT_GT(resident_kib(base), 8);
  m.drop_resident();
  EXPECT_LE(resident_kib(base), 4);
  EXPECT_EQ(infer(m, tokens, 4, logits), infer(m, tokens, 4, logits)) << "the same file after the drop";
  unlink(path.c_str());
}

// LLAMALLOC_MIN_CONFIDENCE: the softmax probability of the best class decides whether the model's class or the
// placement without a model is used.
TEST(ConfidenceRule, UnsurePredictionsGetTheFallbackClass) {
  float flat[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 1/8 each
  EXPECT_NEAR(top_probability(flat, 5), 0.125f, 1e-6f);
  float sure[8] = {0, 0, 0, 0, 0, 0, 0, 9};
  double want = 1.0 / (1.0 + 7.0 * std::exp(-9.0));
  EXPECT_NEAR(top_probability(sure, 7), want, 1e-6);
  float two_way[8] = {-20, -20, -20, -20, 0.2f, -20, -20, 0};  // 0.55 against 0.45
  EXPECT_NEAR(top_probability(two_way, 4), 1.0 / (1.0 + std::exp(-0.2)), 1e-5);

  ConfidenceRule rule{60, 2};
  EXPECT_EQ(rule.apply(5, flat), 2u);
  EXPECT_EQ(rule.apply(7, sure), 7u);
  EXPECT_EQ(rule.apply(4, two_way), 2u) << "55% is below 60%";
  EXPECT_EQ((ConfidenceRule{50, 2}.apply(4, two_way)), 4u);
  EXPECT_EQ((ConfidenceRule{0, 2}.apply(5, flat)), 5u) << "0: the model's class, however unsure";
  EXPECT_EQ((ConfidenceRule{100, 2}.apply(7, sure)), 2u) << "100: never the model's class";
}

// A distribution model's softmax is the predicted share of a context's objects per class: a context split
// between two classes is placed by its rule, one spread over many classes (a context the model cannot place)
// gets the fallback.
TEST(ConfidenceRule, ADistributionModelIsUnsureOnlyWhereTheTwoLikeliestClassesHoldLittle) {
  float two_way[8] = {-20, -20, -20, -20, 0.2f, -20, -20, 0};  // 0.55 and 0.45
  EXPECT_NEAR(top_two_probability(two_way), 1.0, 1e-5);
  float flat[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_NEAR(top_two_probability(flat), 0.25, 1e-6);
  float three_way[8] = {0, -20, 0, -20, 0, -20, -20, -20};  // a third each
  EXPECT_NEAR(top_two_probability(three_way), 2.0 / 3.0, 1e-5);
  ConfidenceRule rule{60, 0};
  EXPECT_EQ(rule.apply(4, two_way), 0u) << "the label rule: 55% is below 60%";
  EXPECT_EQ(rule.apply_distribution(7, two_way), 7u) << "a 55/45 split is not unsure";
  EXPECT_EQ(rule.apply_distribution(7, flat), 0u);
  EXPECT_EQ(rule.apply_distribution(4, three_way), 4u) << "67% in two classes";
  EXPECT_EQ((ConfidenceRule{70, 0}.apply_distribution(4, three_way)), 0u);
  EXPECT_EQ((ConfidenceRule{0, 0}.apply_distribution(7, flat)), 7u);
}

// LLAMALLOC_MIN_CLASS: the class the allocator uses is never shorter than `shortest`, whichever rule decided it;
// a longer class is kept as it is.
TEST(ConfidenceRule, AClassShorterThanTheShortestIsRaisedToIt) {
  static Image img;
  build_model(img);
  ModelFile m;
  char err[256];
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  uint32_t tokens[] = {6, 60, 2, 53};
  float logits[8];
  unsigned own = infer(m, tokens, 4, logits);
  EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{0, 0, 0}), own) << "0: the model's class as it is";
  EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{0, 0, own}), own);
  if (own < 7) EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{0, 0, own + 1}), own + 1);
  EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{100, 0, 1}), 1u) << "the unsure rule's class 0, raised";
  EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{100, 3, 1}), 3u) << "a longer fallback stays";
  ConfidenceRule rule{0, 0, 1};
  EXPECT_EQ(rule.raise(0), 1u);
  EXPECT_EQ(rule.raise(1), 1u);
  EXPECT_EQ(rule.raise(7), 7u);
}

TEST(ModelFile, DamagedImagesAreRefusedWithAReason) {
  static Image img;
  char err[256];
  ModelFile m;
  struct Case {
    void (*damage)(Image&);
    const char* reason;
  } cases[] = {
      {[](Image& i) { i.bytes[0] = 'X'; }, "bad magic"},
      {[](Image& i) { put32(i.bytes + 8, 9); }, "version 9"},
      {[](Image& i) { i.size -= 64; }, "truncated"},
      {[](Image& i) { i.bytes[i.size - 1] ^= 1; }, "checksum"},
      {[](Image& i) { put32(i.bytes + 44, 100000); reseal(i); }, "dimensions"},
      {[](Image& i) { put32(i.bytes + 36, 60); reseal(i); }, "wrong type or shape"},
      {[](Image& i) { put64(i.bytes + 128 + 48, 1u << 30); reseal(i); }, "out of bounds"},
      {[](Image& i) { memcpy(i.bytes + 128 + 64 * 3, "lstm.w_hiddeX", 13); reseal(i); }, "missing"},
      {[](Image& i) { put32(i.bytes + 56, 5); reseal(i); }, "layout"},
      {[](Image& i) { put32(i.bytes + 28, 1u << 20); reseal(i); }, "section table"},
  };
  for (const Case& c : cases) {
    build_model(img);
    c.damage(img);
    EXPECT_FALSE(m.open_image(img.bytes, img.size, err, sizeof err)) << c.reason;
    EXPECT_NE(strstr(err, c.reason), nullptr) << err << " / wanted: " << c.reason;
    EXPECT_FALSE(m.is_open());
  }
}

// ---------------------------------------------------------------- token tables

struct TokenImage {
  alignas(64) unsigned char bytes[4096];
  size_t size = 0;
};

// One binary "/bin/test-binary": sites at 0x1010 (tokens 60 61, terminal) and 0x1020 (tokens 62), functions
// [0x1000, 0x1100) (63) and [0x2000, 0x2010) (64 2 65).
void build_tokens(TokenImage& img, uint32_t vocab_crc, uint32_t vocab_size) {
  memset(img.bytes, 0, sizeof img.bytes);
  unsigned char* h = img.bytes;
  memcpy(h, "LLATOKEN", 8);
  put32(h + 8, 1);
  put32(h + 12, 64);
  put32(h + 28, 1);
  put32(h + 32, vocab_crc);
  put32(h + 36, vocab_size);
  unsigned char* r = h + 64;
  strcpy(reinterpret_cast<char*>(r), "/bin/test-binary");
  put32(r + 320, 1);
  put64(r + 360, 0x1000);  // segment: file offset 0x1000, vaddr 0x1000, 0x2000 bytes
  put64(r + 368, 0x1000);
  put64(r + 376, 0x2000);
  uint64_t sites = 64 + 512, funcs = sites + 32, toks = funcs + 48;
  put64(r + 456, sites);
  put64(r + 464, funcs);
  put64(r + 472, toks);
  put32(r + 480, 2);
  put32(r + 484, 2);
  put32(r + 488, 7);
  put64(h + sites, 0x1010);
  put32(h + sites + 8, 0);
  put32(h + sites + 12, 2 | 0x80000000u);
  put64(h + sites + 16, 0x1020);
  put32(h + sites + 24, 2);
  put32(h + sites + 28, 1);
  put64(h + funcs, 0x1000);
  put64(h + funcs + 8, 0x1100);
  put32(h + funcs + 16, 3);
  put32(h + funcs + 20, 1);
  put64(h + funcs + 24, 0x2000);
  put64(h + funcs + 32, 0x2010);
  put32(h + funcs + 40, 4);
  put32(h + funcs + 44, 3);
  uint32_t pool[] = {60, 61, 62, 63, 64, 2, 65};
  memcpy(h + toks, pool, sizeof pool);
  img.size = toks + sizeof pool;
  put64(h + 16, img.size);
  put32(h + 24, crc32(0, h + 64, img.size - 64));
}

TEST(TokenTables, LookupPrefersTheCallSiteThenTheFunction) {
  static TokenImage img;
  build_tokens(img, 0xabcd, 100);
  TokenTables t;
  char err[256];
  ASSERT_TRUE(t.open_image(img.bytes, img.size, 0xabcd, 100, err, sizeof err)) << err;
  ASSERT_EQ(t.find_binary("/bin/test-binary"), 0);
  EXPECT_EQ(t.find_binary("/bin/other"), -1);
  FrameTokens ft;
  ASSERT_TRUE(t.lookup(0, 0x1010, &ft));
  EXPECT_EQ(ft.count, 2u);
  EXPECT_EQ(ft.ids[0], 60u);
  EXPECT_TRUE(ft.terminal);
  ASSERT_TRUE(t.lookup(0, 0x1020, &ft));
  EXPECT_EQ(ft.count, 1u);
  EXPECT_EQ(ft.ids[0], 62u);
  EXPECT_FALSE(ft.terminal);
  ASSERT_TRUE(t.lookup(0, 0x1050, &ft));  // no call site there: the function
  EXPECT_EQ(ft.ids[0], 63u);
  ASSERT_TRUE(t.lookup(0, 0x1100, &ft));  // return address just past the function's end: its last call
  EXPECT_EQ(ft.ids[0], 63u);
  ASSERT_TRUE(t.lookup(0, 0x2005, &ft));
  EXPECT_EQ(ft.count, 3u);
  EXPECT_FALSE(t.lookup(0, 0x1800, &ft));  // between functions: unknown
  EXPECT_FALSE(t.lookup(0, 0x1000, &ft));  // vaddr - 1 is before the first function
}

TEST(TokenTables, AnotherModelsOrDamagedTablesAreRefused) {
  static TokenImage img;
  TokenTables t;
  char err[256];
  build_tokens(img, 0xabcd, 100);
  EXPECT_FALSE(t.open_image(img.bytes, img.size, 0x1234, 100, err, sizeof err));
  EXPECT_NE(strstr(err, "another model"), nullptr) << err;
  EXPECT_FALSE(t.open_image(img.bytes, img.size - 4, 0xabcd, 100, err, sizeof err));
  EXPECT_NE(strstr(err, "truncated"), nullptr) << err;
  EXPECT_FALSE(t.open_image(img.bytes, img.size, 0xabcd, 64, err, sizeof err));  // ids beyond a smaller vocabulary
  build_tokens(img, 0xabcd, 60);
  EXPECT_FALSE(t.open_image(img.bytes, img.size, 0xabcd, 60, err, sizeof err));
  EXPECT_NE(strstr(err, "token id"), nullptr) << err;
  build_tokens(img, 0xabcd, 100);
  img.bytes[img.size - 1] ^= 1;
  EXPECT_FALSE(t.open_image(img.bytes, img.size, 0xabcd, 100, err, sizeof err));
  EXPECT_NE(strstr(err, "checksum"), nullptr) << err;
  build_tokens(img, 0xabcd, 100);
  put64(img.bytes + 64 + 456, 1u << 20);  // sites beyond the file
  put32(img.bytes + 24, crc32(0, img.bytes + 64, img.size - 64));
  EXPECT_FALSE(t.open_image(img.bytes, img.size, 0xabcd, 100, err, sizeof err));
  EXPECT_NE(strstr(err, "out of bounds"), nullptr) << err;
  build_tokens(img, 0xabcd, 100);
  put64(img.bytes + 64 + 512 + 16, 0x1000);  // second site before the first
  put32(img.bytes + 24, crc32(0, img.bytes + 64, img.size - 64));
  EXPECT_FALSE(t.open_image(img.bytes, img.size, 0xabcd, 100, err, sizeof err));
  EXPECT_NE(strstr(err, "not sorted"), nullptr) << err;
}

// ---------------------------------------------------------------- the stack walk

uintptr_t g_expected[4];

__attribute__((noinline)) size_t fake_malloc_walk(LearnedPredictor& p, uintptr_t* pcs) {
  // As the heap calls the predictor: the caller's return address and the heap function's own frame.
  llamalloc::AllocationContext ctx{reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                                   reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), 64};
  uintptr_t top = mapping_end(ctx.stack_address);
  return p.capture_stack(ctx, top, pcs, kMaxFrames);
}

__attribute__((noinline)) size_t level2(LearnedPredictor& p, uintptr_t* pcs) {
  size_t n = fake_malloc_walk(p, pcs);
  g_expected[0] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return n;
}

__attribute__((noinline)) size_t level1(LearnedPredictor& p, uintptr_t* pcs) {
  size_t n = level2(p, pcs);
  asm volatile("" ::: "memory");
  return n;
}

TEST(StackWalk, FollowsTheFramePointersOfTheCallersInnermostFirst) {
  static LearnedPredictor p;  // no model: only the module map is needed for the walk
  p.modules().refresh(p.tables());
  uintptr_t pcs[kMaxFrames];
  size_t n = level1(p, pcs);
  ASSERT_GE(n, 3u);
  // pcs[0] is in level2 (the caller of the fake malloc), pcs[1] in level1 (at level2's return address - 1: the
  // pc convention of src/common/stack_walk.h, as profiles record them).
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[0]));
  EXPECT_LE(n, size_t(kMaxFrames));
  for (size_t i = 0; i < n; ++i) {
    Module m;
    EXPECT_TRUE(p.modules().find(pcs[i], &m));
  }
}

// A function built without a frame pointer between the program and the allocator, as libstdc++'s and glibc's
// internals are: it keeps rbp as its caller left it, so the frame-pointer chain goes from the allocator's
// frame straight to its caller's caller.
__attribute__((noinline, optimize("omit-frame-pointer"))) size_t level2_without_frame_pointer(LearnedPredictor& p,
                                                                                              uintptr_t* pcs) {
  size_t n = fake_malloc_walk(p, pcs);
  g_expected[1] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return n;
}

__attribute__((noinline)) size_t level1_above_frameless(LearnedPredictor& p, uintptr_t* pcs) {
  size_t n = level2_without_frame_pointer(p, pcs);
  g_expected[2] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return n;
}

TEST(StackWalk, TheDwarfWalkKeepsTheCallerOfAFunctionWithoutFramePointer) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  uintptr_t pcs[kMaxFrames];
  size_t n = level1_above_frameless(p, pcs);  // the default: the DWARF unwinder, as the profiler's
  ASSERT_GE(n, 3u);
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[1]));  // level1_above_frameless, the frameless
                                                                   // function's caller
  EXPECT_EQ(pcs[2], llamalloc::stack_walk::pc_of(g_expected[2]));
  p.set_dwarf_unwind(false);
  n = level1_above_frameless(p, pcs);
  p.set_dwarf_unwind(true);
  ASSERT_GE(n, 2u);
  // Frame pointers alone skip it: the frame record after the allocator's is its caller's.
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[2]));
}

// One call site for both walks.
__attribute__((noinline)) size_t walk_with(LearnedPredictor& p, bool dwarf, uintptr_t* pcs) {
  p.set_dwarf_unwind(dwarf);
  size_t n = level1(p, pcs);
  asm volatile("" ::: "memory");
  return n;
}

TEST(StackWalk, TheFramePointerWalkGivesTheSameStackWhereEveryFrameKeepsOne) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  uintptr_t walks[2][kMaxFrames];
  size_t n[2] = {walk_with(p, true, walks[0]), walk_with(p, false, walks[1])};
  p.set_dwarf_unwind(true);
  const uintptr_t* dwarf = walks[0];
  const uintptr_t* fp = walks[1];
  size_t n_dwarf = n[0], n_fp = n[1];
  // The test's own frames (level2, level1, walk_with) are the same; past them GoogleTest's and libc's frames
  // may lack frame pointers.
  ASSERT_GE(n_dwarf, 3u);
  ASSERT_GE(n_fp, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(dwarf[i], fp[i]) << "frame " << i;
}

TEST(StackWalk, NoFrameGivesOnlyTheReturnAddress) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  uintptr_t pcs[kMaxFrames];
  llamalloc::AllocationContext ctx{0x401000, 0, 16};
  EXPECT_EQ(p.capture_stack(ctx, 0, pcs, kMaxFrames), 1u);
  uintptr_t garbage[4] = {0x10, 0x20, 0, 0};  // a "frame" whose saved rbp is no frame pointer
  ctx.stack_address = reinterpret_cast<uintptr_t>(garbage);
  EXPECT_EQ(p.capture_stack(ctx, mapping_end(ctx.stack_address), pcs, kMaxFrames), 1u);
}

TEST(ModuleMap, KnowsThisProgramsCodeAndNotItsData) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  Module m;
  EXPECT_TRUE(p.modules().find(reinterpret_cast<uintptr_t>(&fake_malloc_walk), &m));
  EXPECT_EQ(m.binary, -1);  // no token tables loaded
  static int data_word;
  EXPECT_FALSE(p.modules().find(reinterpret_cast<uintptr_t>(&data_word), &m));
  EXPECT_FALSE(p.modules().find(0x10, &m));
}

// ---------------------------------------------------------------- the per-thread caches' memory

// A predictor with a small model file (no token tables: every frame is <unsymbolized>).
LearnedPredictor& cache_test_predictor() {
  static LearnedPredictor p;
  static bool ready = [] {
    static Image img;
    build_model(img);
    std::string path = ::testing::TempDir() + "/caches." + std::to_string(getpid()) + ".model";
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr || fwrite(img.bytes, 1, img.size, f) != img.size) return false;
    fclose(f);
    char err[256];
    return p.init(path.c_str(), nullptr, 0, err, sizeof err);
  }();
  EXPECT_TRUE(ready);
  return p;
}

// Predicts 4096 contexts (distinct return addresses): enough to touch every page of the 2,048-entry cache.
void predict_many(LearnedPredictor& p) {
  for (uintptr_t i = 0; i < 4096; ++i) p.predict({0x401000 + 16 * i, 0, 64});
}

// Runs fn on a thread whose stack is `stack` (bytes), and joins it.
void run_on_stack(void* stack, size_t bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstack(&attr, stack, bytes), 0);
  pthread_t t;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, &attr, trampoline, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

// A thread's cache outlives it for the next thread on the same stack (a program that starts a thread per task
// would otherwise run the model on every context of every new thread), and leaves the resident set after
// four trims (the sweeper's passes, about a second) if no such thread comes. A thread on another stack starts
// from an empty cache and does not take it.
TEST(PredictionCaches, AnExitedThreadsCacheGoesToTheNextThreadOnItsStackThenLeavesTheResidentSet) {
  LearnedPredictor& p = cache_test_predictor();
  constexpr size_t kStack = 1 << 20;
  void* stacks = mmap(nullptr, 2 * kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(stacks, MAP_FAILED);
  // Two mappings, so that each stack is a mapping of its own (as glibc's thread stacks are).
  ASSERT_EQ(mprotect(static_cast<char*>(stacks) + kStack, 4096, PROT_NONE), 0);
  void* stack_a = stacks;
  void* stack_b = static_cast<char*>(stacks) + kStack + 4096;
  // Contexts with a stack height inside stack A, as the heap's entry point gives them.
  auto predict_on_a = [&] {
    for (uintptr_t i = 0; i < 256; ++i) p.predict({0x401000 + 16 * i, reinterpret_cast<uintptr_t>(stack_a) + 4096, 64});
  };
  llamalloc::PredictionCacheEntry* first = nullptr;
  uint64_t runs_first = 0, runs_again = 0;
  run_on_stack(stack_a, kStack, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();
    runs_first = p.totals().model_runs - before;
    // Again on the same thread: what misses now are the contexts that evict each other in the direct-mapped cache.
    before = p.totals().model_runs;
    predict_on_a();
    runs_again = p.totals().model_runs - before;
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    first = view.entries;
  });
  ASSERT_EQ(runs_first, 256u);
  ASSERT_LT(runs_again, 64u);
  long warm = resident_kib(first);
  EXPECT_GE(warm, 32) << "the exited thread's cache stays resident for now";

  run_on_stack(stack_b, kStack - 4096, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();  // the same keys, from a thread on another stack
    EXPECT_EQ(p.totals().model_runs - before, 256u) << "a thread on another stack starts from an empty cache";
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    EXPECT_NE(view.entries, first) << "it does not take the warm cache of stack A";
  });
  run_on_stack(stack_a, kStack, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();
    EXPECT_EQ(p.totals().model_runs - before, runs_again)
        << "the next thread on stack A finds its contexts cached, as its previous thread would have";
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    EXPECT_EQ(view.entries, first);
  });
  for (int pass = 0; pass < 3; ++pass) p.trim();
  EXPECT_GE(resident_kib(first), 32) << "three trims: still warm";
  p.trim();
  long after = resident_kib(first);
  // (What stays is the counters' page of each state used, A's and B's.)
  EXPECT_LT(after, 32) << "resident KiB of the caches' pool: " << warm << " -> " << after;
  run_on_stack(stack_a, kStack, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();
    EXPECT_EQ(p.totals().model_runs - before, 256u) << "after the drop the contexts miss again";
  });
  munmap(stacks, 2 * kStack);
}

// ---------------------------------------------------------------- keys shared by call paths

// An allocation entry point as the heap's: the caller's return address and this function's own frame.
#define LLAMALLOC_FRAMED __attribute__((noinline, optimize("no-omit-frame-pointer")))
volatile int g_path_a, g_path_b;

LLAMALLOC_FRAMED unsigned fake_entry(LearnedPredictor& p, size_t size) {
  unsigned lc = p.predict({reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                           reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), size});
  asm volatile("" ::: "memory");
  return lc;
}
// A wrapper (redis's zmalloc): every allocation returns into it, at the same stack height from both paths.
LLAMALLOC_FRAMED unsigned wrapper(LearnedPredictor& p, size_t size) {
  unsigned lc = fake_entry(p, size);
  asm volatile("" ::: "memory");
  return lc;
}
LLAMALLOC_FRAMED unsigned path_a(LearnedPredictor& p, size_t size) {
  g_path_a = 1;
  unsigned lc = wrapper(p, size);
  asm volatile("" ::: "memory");
  return lc;
}
LLAMALLOC_FRAMED unsigned path_b(LearnedPredictor& p, size_t size) {
  g_path_b = 2;
  unsigned lc = wrapper(p, size);
  asm volatile("" ::: "memory");
  return lc;
}

// Path a or b, always from the same two call sites (a call site is part of a context).
LLAMALLOC_FRAMED unsigned step(LearnedPredictor& p, bool b, size_t size) {
  unsigned lc = b ? path_b(p, size) : path_a(p, size);
  asm volatile("" ::: "memory");
  return lc;
}

// Paths a (0) and b (1) in turn, each from the same call sites whichever test line asks: the key of a shared entry
// takes kDeepKeyFrames (4) callers' return addresses, here path_x, step, steps_inner and steps.
LLAMALLOC_FRAMED void steps_inner(LearnedPredictor& p, const int* paths, size_t n, size_t size) {
  for (size_t i = 0; i < n; ++i) step(p, paths[i] != 0, size);
  asm volatile("" ::: "memory");
}
LLAMALLOC_FRAMED void steps(LearnedPredictor& p, std::initializer_list<int> paths, size_t size) {
  steps_inner(p, paths.begin(), paths.size(), size);
  asm volatile("" ::: "memory");
}

// Two call paths of the same depth through a wrapper share one cache key (return address, stack height, size
// class): the first path's class answered for both. The predictor (every miss, re-prediction, and every
// kPredictionCheckEvery-th hit on the fast path) compares the callers' tag of the entry with the allocation's:
// another path marks the key shared, and from then on each path is keyed with its callers too, so each gets its
// own model run and entry. One path alone never marks its key shared.
TEST(PredictionCaches, AKeySharedByTwoCallPathsIsKeyedByTheirCallers) {
  static LearnedPredictor p;
  cache_test_predictor();  // writes the model file
  std::string path = ::testing::TempDir() + "/caches." + std::to_string(getpid()) + ".model";
  char err[256];
  ASSERT_TRUE(p.init(path.c_str(), nullptr, /*repredict_every=*/0, err, sizeof err)) << err;
  std::thread t([&] {
    auto runs = [&] { return p.totals().model_runs; };
    auto shared = [&] { return p.totals().shared_keys; };
    // One path: one model run, then hits; never shared.
    uint64_t r0 = runs(), s0 = shared();
    steps(p, {0, 0, 0, 0, 0, 0}, 256);
    EXPECT_EQ(runs() - r0, 1u);
    EXPECT_EQ(shared() - s0, 0u);
    // Two paths, another size class: a's miss; b comes with other callers, so the key is shared and b gets its
    // own entry (a model run).
    r0 = runs();
    steps(p, {0, 1}, 64);
    EXPECT_EQ(runs() - r0, 2u) << "b is not served a's entry";
    EXPECT_EQ(shared() - s0, 1u) << "the key was found shared";
    steps(p, {0, 1}, 64);
    EXPECT_EQ(runs() - r0, 3u) << "a gets its own entry too";
    steps(p, {0, 1, 0, 1}, 64);
    EXPECT_EQ(runs() - r0, 3u) << "each path hits its own entry";
    EXPECT_EQ(shared() - s0, 1u);
  });
  t.join();
}

// Bytes of `stack` (filled with 0xA5 before the thread ran) that the thread wrote: from the lowest changed
// byte to the top.
size_t stack_used(const unsigned char* stack, size_t bytes) {
  size_t i = 0;
  while (i < bytes && stack[i] == 0xA5) ++i;
  return bytes - i;
}

// A model run needs little stack below the allocation that asked for it (the DWARF walk, the tokens, the LSTM),
// so that a thread with a small stack can allocate: the token array and the LSTM buffers are sized by the model
// in use, not by the largest model (4,096 tokens, 16 KiB; a 6 KiB hidden state).
TEST(PredictionCaches, AModelRunNeedsLittleStack) {
  LearnedPredictor& p = cache_test_predictor();
  constexpr size_t kStack = 1 << 20;
  uintptr_t first_address = 0x9a1000;  // contexts no other test predicts, new for each thread
  auto used = [&](bool predict) {
    void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) {
      ADD_FAILURE() << "mmap of a " << kStack << "-byte stack failed";
      return size_t(0);
    }
    memset(stack, 0xA5, kStack);
    uint64_t runs = 0;
    run_on_stack(stack, kStack, [&] {
      if (!predict) return;
      uint64_t before = p.totals().model_runs;
      for (uintptr_t i = 0; i < 64; ++i) p.predict({first_address + 16 * i, 0, 64});
      runs = p.totals().model_runs - before;
    });
    first_address += 0x10000;
    if (predict) EXPECT_GE(runs, 32u) << "the contexts ran the model";
    size_t bytes = stack_used(static_cast<const unsigned char*>(stack), kStack);
    munmap(stack, kStack);
    return bytes;
  };
  size_t idle = used(false);
  for (bool dwarf : {false, true}) {
    p.set_dwarf_unwind(dwarf);
    size_t predicting = used(true);
    EXPECT_LE(predicting, idle + 16 * 1024) << (dwarf ? "DWARF walk" : "frame pointers") << ": a thread that only "
                                            << "starts writes " << idle << " bytes of its stack, with model runs "
                                            << predicting;
  }
  p.set_dwarf_unwind(true);  // the predictor's default, which the other tests expect
}

// drop_thread_cache (the sweeper, for an idle thread): the pages go, the cache reads as empty (the next
// prediction of a context runs the model again), and the thread goes on using it.
TEST(PredictionCaches, ADroppedCacheIsEmptyAndNotResident) {
  LearnedPredictor& p = cache_test_predictor();
  std::thread t([&] {
    predict_many(p);
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    const llamalloc::AllocationContext context{0x400000, 0, 64};  // (not among predict_many's)
    p.predict(context);
    uint64_t runs = p.totals().model_runs;
    p.predict(context);
    EXPECT_EQ(p.totals().model_runs, runs) << "a context seen before is a hit";
    long before = resident_kib(view.entries);
    EXPECT_TRUE(p.drop_thread_cache(view));
    long after = resident_kib(view.entries);
    EXPECT_GE(before - after, 32) << "resident KiB of the caches' pool: " << before << " -> " << after;
    for (unsigned i = 0; i < 2048; ++i) EXPECT_EQ(view.entries[i].key, 0u);
    p.predict(context);
    EXPECT_EQ(p.totals().model_runs, runs + 1) << "after the drop the context misses";
    p.predict(context);
    EXPECT_EQ(p.totals().model_runs, runs + 1) << "and is cached again";
    static llamalloc::PredictionCacheEntry not_ours[2048];
    llamalloc::PredictionCacheView foreign = view;
    foreign.entries = not_ours;
    EXPECT_FALSE(p.drop_thread_cache(foreign));
  });
  t.join();
}

}  // namespace
