// The model file and token tables, validated on in-memory images; the confidence rule.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "model_file.h"
#include "test_images.h"
#include "token_table.h"

using namespace llamalloc::model;
using namespace llamalloc::model::test;

namespace {

// ---------------------------------------------------------------- model file validation (in-memory images)

// A model or token file that the process opens costs its RSS only the pages its lookups read: validation reads
// every page, and a read fault would map the cached pages around it (64 KiB), so open() evicts what it read and
// marks the mapping random-access. (tmpfs has no backing file to evict to: skipped there.)
TEST(ModelFile, AnOpenedFileKeepsOnlyThePagesItsLookupsRead) {
  static Image img;
  build_model(img, 48);  // about 80 KiB: more than one fault-around window
  ASSERT_GT(img.size, size_t(72 << 10));
  std::string path = ::testing::TempDir() + "/evict." + std::to_string(getpid()) + ".model";
  struct statfs fs;
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fwrite(img.bytes, 1, img.size, f), img.size);
  fflush(f);
  fsync(fileno(f));  // (dirty pages cannot be evicted; train and prepare write their files durably)
  fclose(f);
  if (statfs(path.c_str(), &fs) == 0 && fs.f_type == 0x01021994 /* TMPFS_MAGIC */) {
    unlink(path.c_str());
    GTEST_SKIP() << "the test folder is on tmpfs";
  }
  ModelFile m;
  char err[256];
  ASSERT_TRUE(m.open(path.c_str(), err, sizeof err)) << err;
  EXPECT_EQ(resident_kib(m.base()), 0) << "validation's pages are not left resident";
  volatile unsigned char b = m.base()[40 << 10];  // one lookup in the middle of the file
  (void)b;
  EXPECT_LE(resident_kib(m.base()), 8) << "a read brings in its page, not the 64 KiB around it";
  m.close();
  unlink(path.c_str());
}

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

// Section train.token_stacks: the keys of the training contexts' token ids without their size token. The rule for
// contexts the model never saw asks whether their code path is known: a size the profile did not sample on a known
// path is not new code; without the section, the whole context is asked.
TEST(ModelFile, KnowsTheCodePathsItWasTrainedOnWhateverTheSize) {
  const uint32_t a[] = {4 + 6, 60, 2, 53}, a_other_size[] = {4 + 11, 60, 2, 53}, c[] = {4 + 6, 62};
  uint64_t contexts[] = {token_context_key(a, 4)};
  uint64_t stacks[] = {token_context_key(a + 1, 3)};
  static Image img;
  ModelFile m;
  char err[256];
  build_model(img, 4, contexts, 1, nullptr, -1, stacks, 1);
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_TRUE(m.has_token_stacks());
  EXPECT_FALSE(m.knows_context(a_other_size, 4)) << "another size is another context";
  EXPECT_TRUE(m.knows_code_path(a_other_size, 4)) << "but not another code path";
  EXPECT_TRUE(m.knows_code_path(a, 4));
  EXPECT_FALSE(m.knows_code_path(c, 2));
  EXPECT_FALSE(m.knows_code_path(a, 3)) << "a prefix is another path";
  // Without the section: the contexts' list decides.
  build_model(img, 4, contexts, 1);
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_FALSE(m.has_token_stacks());
  EXPECT_FALSE(m.knows_code_path(a_other_size, 4));
  EXPECT_TRUE(m.knows_code_path(a, 4));
  // Unsorted keys: refused with a reason.
  uint64_t unsorted[] = {stacks[0], stacks[0]};
  build_model(img, 4, contexts, 1, nullptr, -1, unsorted, 2);
  EXPECT_FALSE(m.open_image(img.bytes, img.size, err, sizeof err));
  EXPECT_NE(std::string(err).find("train.token_stacks is not sorted"), std::string::npos) << err;
}

// The deployed predictor: a context in the table (train.token_class) gets the class training gave it, without
// running the LSTM; another gets the LSTM's class, or the default class where deploy.unseen says so.
TEST(ModelFile, TheTablePredictsTheContextsTrainingSaw) {
  const uint32_t a[] = {4 + 6, 60, 2, 53}, b[] = {4 + 9, 61}, c[] = {4 + 9, 62};
  uint64_t keys[] = {token_context_key(a, 4), token_context_key(b, 2)};
  uint8_t classes[] = {5, 1};
  if (keys[0] > keys[1]) std::swap(keys[0], keys[1]), std::swap(classes[0], classes[1]);
  const unsigned class_a = keys[0] == token_context_key(a, 4) ? classes[0] : classes[1];
  const unsigned class_b = keys[0] == token_context_key(b, 2) ? classes[0] : classes[1];
  static Image img;
  ModelFile m;
  char err[256];
  float logits[8];
  const ConfidenceRule keep{};
  build_model(img, 4, keys, 2);  // no table: the LSTM everywhere
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  const unsigned lstm_c = infer(m, c, 2, logits);
  EXPECT_FALSE(m.has_table());
  EXPECT_EQ(m.longest_table_class(), 0u);
  EXPECT_EQ(m.table_class(a, 4), -1);
  EXPECT_EQ(classify(m, c, 2, logits, keep), lstm_c);
  build_model(img, 4, keys, 2, classes);
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  ASSERT_TRUE(m.has_table());
  EXPECT_EQ(m.longest_table_class(), 5u) << "whether unseen-path trials go to the longest class";
  EXPECT_EQ(m.table_class(a, 4), int(class_a));
  EXPECT_EQ(m.table_class(b, 2), int(class_b));
  EXPECT_EQ(m.table_class(c, 2), -1);
  EXPECT_EQ(classify(m, a, 4, logits, keep), class_a);
  EXPECT_EQ(classify(m, b, 2, logits, keep), class_b);
  EXPECT_EQ(classify(m, c, 2, logits, keep), lstm_c) << "an unseen context runs the LSTM";
  // A table class is certain: kept below a 100% threshold, replaced by the fallback at 100 (no prediction kept);
  // the shortest-class rule places it as without a model when it is shorter.
  EXPECT_EQ(classify(m, b, 2, logits, ConfidenceRule{99, 3, 0}), class_b);
  EXPECT_EQ(classify(m, b, 2, logits, ConfidenceRule{100, 3, 0}), 3u);
  EXPECT_EQ(classify(m, b, 2, logits, ConfidenceRule{0, 1, 4}), class_b < 4 ? 1u : class_b);
  build_model(img, 4, keys, 2, classes, 1);
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_TRUE(m.unseen_default());
  EXPECT_EQ(classify(m, c, 2, logits, keep), m.default_class()) << "deploy.unseen 1: the default class";
  EXPECT_EQ(classify(m, a, 4, logits, keep), class_a);
  build_model(img, 4, keys, 2, classes, 0);
  ASSERT_TRUE(m.open_image(img.bytes, img.size, err, sizeof err)) << err;
  EXPECT_FALSE(m.unseen_default());
  // Refused with a reason: a class out of range, a table without its keys, an unknown deploy.unseen value.
  uint8_t bad[] = {9, 1};
  build_model(img, 4, keys, 2, bad);
  EXPECT_FALSE(m.open_image(img.bytes, img.size, err, sizeof err));
  EXPECT_NE(std::string(err).find("train.token_class holds a class out of range"), std::string::npos) << err;
  build_model(img, 4, keys, 2, classes, 2);
  EXPECT_FALSE(m.open_image(img.bytes, img.size, err, sizeof err));
  EXPECT_NE(std::string(err).find("deploy.unseen"), std::string::npos) << err;
  build_model(img, 4, nullptr, 2, classes);
  EXPECT_FALSE(m.open_image(img.bytes, img.size, err, sizeof err));
  EXPECT_NE(std::string(err).find("does not match train.token_contexts"), std::string::npos) << err;
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

// LLAMALLOC_MIN_CLASS: a class shorter than `shortest`, whichever rule decided it, is placed as without a model
// (the fallback); a class at least `shortest` is kept as it is.
TEST(ConfidenceRule, AClassShorterThanTheShortestIsPlacedAsWithoutAModel) {
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
  unsigned other = own == 5 ? 6 : 5;
  if (own < 7) EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{0, other, own + 1}), other);
  EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{100, 1, 3}), 1u) << "the unsure rule's class, kept";
  EXPECT_EQ(classify(m, tokens, 4, logits, ConfidenceRule{100, 4, 3}), 4u) << "a longer fallback stays";
  ConfidenceRule rule{0, 1, 3};
  EXPECT_EQ(rule.fold(0), 1u);
  EXPECT_EQ(rule.fold(2), 1u);
  EXPECT_EQ(rule.fold(3), 3u);
  EXPECT_EQ(rule.fold(7), 7u);
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
  put_file_start(h, "LLATOKEN", 64);
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

}  // namespace
