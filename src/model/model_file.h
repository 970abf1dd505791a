// The exported lifetime model (docs/formats/model.md), mapped read-only and used in place: no copy, no
// allocation. A file that is missing, truncated, corrupt or of another layout is refused with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "config.h"
#include "predictor/predictor.h"

namespace llamalloc::model {

inline constexpr unsigned kNumClasses = kMaxClasses;
inline constexpr uint32_t kPadToken = 0, kUnkToken = 1, kSeparatorToken = 2, kUnsymbolizedToken = 3;
inline constexpr uint32_t kFirstSizeToken = 4;
// Bounds the stack buffers of the inference (3 x 4H floats): a larger model is refused, not overflowed.
inline constexpr unsigned kMaxHiddenDim = 256;
inline constexpr unsigned kMaxTokens = 4096;  // llamalloc train --max-tokens allows up to this
// A distribution model's mode: a class within this percent of the most common one ties with it (the longest
// tied class wins); llamalloc.model.dataset.MODE_TIE_PERCENT.
inline constexpr uint32_t kModeTiePercent = 10;

// CRC-32 as zlib computes it (polynomial 0xEDB88320); the model and token files checksum their payload.
uint32_t crc32(uint32_t crc, const void* data, size_t size_bytes);

// A request's <size:k> token is kFirstSizeToken + model_size_bucket(size) (vocabulary.h): kModelSizeBuckets
// tokens, the buckets the heap's fast path keys its prediction cache on.

// The key of a context's token ids in section `train.token_contexts`: 64-bit FNV-1a, one u32 id a step
// (llamalloc.model.modelfile.token_context_keys).
inline uint64_t token_context_key(const uint32_t* tokens, size_t count) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < count; ++i) h = (h ^ tokens[i]) * 1099511628211ull;
  return h;
}

// A label rule (llamalloc.model.dataset.apply_rule): the class of a context from its per-class scores (object
// counts, or a distribution model's probabilities). Only comparisons of scaled sums, so scores need not sum to 1.
// The kinds are the model file's `decision` section's (docs/formats/model.md).
enum LabelKind : uint32_t { kArgmax = 0, kPercentile = 1, kMode = 2, kShare = 3 };
struct LabelRule {
  uint32_t kind = kArgmax;
  uint32_t parameter = 0;  // pNN, shareNN: NN
  uint32_t tie = 0;        // mode, shareNN: classes within this percent of the most common one tie with it
  unsigned apply(const double* score) const;
};
// `llamalloc train`'s default label rule (llamalloc.model.classes.DEFAULT_LABEL_RULE, "mode"), which the online
// learner applies to a context's counts when the model gives no rule of its own.
inline constexpr LabelRule kTrainLabelRule{kMode, 0, kModeTiePercent};

class ModelFile {
 public:
  ModelFile() = default;
  ModelFile(const ModelFile&) = delete;
  ModelFile& operator=(const ModelFile&) = delete;
  ~ModelFile() { close(); }

  // Maps and validates `path`. On failure returns false and writes a one-line reason (no file name) into
  // error[0..error_capacity). Never allocates.
  bool open(const char* path, char* error, size_t error_capacity);
  // Validates an in-memory image (tests); `data` must stay valid and 64-byte aligned.
  bool open_image(const void* data, size_t size_bytes, char* error, size_t error_capacity);
  void close();
  bool is_open() const { return base_ != nullptr; }
  const unsigned char* base() const { return base_; }
  // A file opened with open(): drops its pages from the resident set (drop_resident_pages); they come back when
  // read. Nothing for an image in memory.
  void drop_resident() const;

  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t hidden_dim() const { return hidden_dim_; }
  uint32_t max_tokens() const { return max_tokens_; }
  uint32_t default_class() const { return default_class_; }
  // [V, 4H]: embedding @ w_input + bias, one row per token (the LLAMA paper, section 10).
  const float* folded() const { return folded_; }
  const float* w_hidden() const { return w_hidden_; }  // [H, 4H]
  const float* dense_w() const { return dense_w_; }    // [H, 8]
  const float* dense_b() const { return dense_b_; }    // [8]
  // CRC-32 of the vocabulary (offsets and strings): token tables record it to detect another model's tables.
  uint32_t vocab_crc() const { return vocab_crc_; }

  // How the class is chosen from the logits (section `decision`, docs/formats/model.md). A label model (no such
  // section): the largest logit. A distribution model, trained on each context's class distribution: a label
  // rule applied to the predicted distribution, as `llamalloc train --label` applies it to a context's counts.
  bool is_distribution() const { return decision_kind_ != kArgmax; }
  // The rule decide() applies (kind kArgmax for a label model).
  LabelRule label_rule() const { return LabelRule{decision_kind_, decision_parameter_, decision_tie_}; }
  // The class for logits[kNumClasses] (what infer() returns).
  unsigned decide(const float* logits) const;

  // Whether the file lists the contexts it was trained on (section `train.token_contexts`; files written before
  // 27 Nov 2026 do not), and whether these token ids are one of them (always true without the list).
  bool has_token_contexts() const { return token_contexts_ != nullptr; }
  uint64_t token_context_count() const { return token_context_count_; }
  bool knows_context(const uint32_t* tokens, size_t count) const;
  // Whether training saw these token ids' code path, whatever their size token (tokens[0]): section
  // `train.token_stacks`, the keys of the training contexts' ids without their size token. A size the sampled
  // profile missed on a path it saw is not new code. Without the section, knows_context.
  bool knows_code_path(const uint32_t* tokens, size_t count) const;
  bool has_token_stacks() const { return token_stacks_ != nullptr; }
  // The deployed predictor's table (section `train.token_class`): the class training labelled these token ids
  // with, or -1 where the file has no table or the context is not in it.
  int table_class(const uint32_t* tokens, size_t count) const;
  bool has_table() const { return token_class_ != nullptr; }
  // The longest class of the table (0 without one): the longest class the model gives a context it was trained on.
  unsigned longest_table_class() const { return longest_table_class_; }
  // Whether a context outside the table gets the default class instead of the LSTM's (section `deploy.unseen`:
  // `train` chose it because the LSTM predicted contexts it never saw worse than that).
  bool unseen_default() const { return unseen_default_; }

 private:
  int64_t find_context(const uint32_t* tokens, size_t count) const;  // index in token_contexts_, or -1
  bool validate(char* error, size_t error_capacity);

  const unsigned char* base_ = nullptr;
  size_t size_bytes_ = 0;
  bool mapped_ = false;
  uint32_t vocab_size_ = 0, hidden_dim_ = 0, max_tokens_ = 0, default_class_ = 0, vocab_crc_ = 0;
  uint32_t decision_kind_ = kArgmax, decision_parameter_ = 0, decision_tie_ = 0;
  const float* folded_ = nullptr;
  const float* w_hidden_ = nullptr;
  const float* dense_w_ = nullptr;
  const float* dense_b_ = nullptr;
  const uint64_t* token_contexts_ = nullptr;  // sorted
  uint64_t token_context_count_ = 0;
  const unsigned char* token_class_ = nullptr;  // parallel to token_contexts_
  const uint64_t* token_stacks_ = nullptr;  // sorted
  uint64_t token_stack_count_ = 0;
  unsigned longest_table_class_ = 0;
  bool unseen_default_ = false;
};

// Logits of one token sequence (tokens[0..count), count <= max_tokens; an id >= vocab_size is read as <unk>).
// Buffers on the stack only: safe from any number of threads at once. Returns the class (model.decide): the
// first index of the largest logit for a label model.
unsigned infer(const ModelFile& model, const uint32_t* tokens, size_t count, float* logits_out);

// exp(x) in float, relative error about 2e-7 (inference's polynomial): the label rules' exponentials, without
// libm (whose expf pages a process would otherwise keep resident only for this).
float exp_float(float x);

// The softmax probability of the class `best` (the largest logit), from the logits infer() wrote.
float top_probability(const float* logits, unsigned best);
// The softmax probability of the two likeliest classes together.
float top_two_probability(const float* logits);

// "Unsure" rule (docs/prediction.md): a label model's prediction is kept only if its probability exceeds
// min_confidence_percent / 100; otherwise it is replaced by `fallback` (the class the heap gives every allocation
// without a model), so a context the model cannot tell apart keeps the no-model placement. 0: always kept;
// 100: never (every allocation is placed as without a model).
//
// `shortest` (LLAMALLOC_MIN_CLASS) then places a class shorter than it as without a model (`fallback`): the model
// keeps apart only what it expects to outlive a second. Each class in use keeps open pages and spans of its own,
// and a class of short or medium lifetimes gains little there: the heap without a model already moves a page
// whose objects outlive its deadline to a longer class (promotion), and two classes that churn side by side each
// keep room of their own at the peak (a corpus whose model split its cache between classes 2 and 3 peaked 2-4
// huge pages higher). Class-0 pages also pass their 40 ms deadline while a request still uses them.
struct ConfidenceRule {
  unsigned min_confidence_percent = 0;
  unsigned fallback = 0;
  unsigned shortest = 0;
  unsigned apply(unsigned best, const float* logits) const {
    if (min_confidence_percent == 0 || best == fallback) return best;
    return top_probability(logits, best) * 100.0f > float(min_confidence_percent) ? best : fallback;
  }
  unsigned fold(unsigned lc) const { return lc < shortest ? fallback : lc; }
  // A distribution model's probabilities are the predicted shares of a context's objects, so a context split
  // 56% / 44% between two classes is not unsure. Its prediction is kept only if the two likeliest classes hold
  // more than min_confidence_percent of the distribution: a context the model cannot place spreads it wider.
  unsigned apply_distribution(unsigned decided, const float* logits) const {
    if (min_confidence_percent == 0 || decided == fallback) return decided;
    return top_two_probability(logits) * 100.0f > float(min_confidence_percent) ? decided : fallback;
  }
};

// The class the allocator uses (docs/prediction.md, "The deployed predictor"). A context in the model's table of
// training contexts gets its class there: the table reproduces what training observed for the very same context,
// which the LSTM only approximates (the unsure rule treats it as certain). Another context gets the default class
// where the model file says the LSTM predicted unseen contexts worse than that, else infer() and then the unsure
// rule where it applies. Logits are
// written only where the LSTM ran (the others' are zero).
inline unsigned classify(const ModelFile& model, const uint32_t* tokens, size_t count, float* logits,
                         const ConfidenceRule& confidence) {
  if (model.has_table()) {
    int c = model.table_class(tokens, count);
    if (c < 0 && model.unseen_default()) c = int(model.default_class());
    if (c >= 0) {
      for (unsigned k = 0; k < kNumClasses; ++k) logits[k] = 0.0f;
      // A table class is certain: the unsure rule replaces it only at 100, where no prediction is kept.
      return confidence.fold(confidence.min_confidence_percent >= 100 ? confidence.fallback : unsigned(c));
    }
  }
  unsigned c = infer(model, tokens, count, logits);
  return confidence.fold(model.is_distribution() ? confidence.apply_distribution(c, logits)
                                                  : confidence.apply(c, logits));
}

// Formats into buf like snprintf for %s (and %.Ns)/%u/%llu only, without allocating (error messages on the init
// path).
size_t format_message(char* buf, size_t capacity, const char* fmt, ...);
// Maps the whole regular file at `path` read-only, with no heap allocation; refuses files shorter than
// `min_bytes`. On failure writes the reason to `error` and returns false. Undo with unmap_file().
bool map_readonly_file(const char* path, size_t min_bytes, const unsigned char** base, size_t* size_bytes,
                       char* error, size_t error_capacity);
void unmap_file(const unsigned char* base, size_t size_bytes);
// Drops the pages of a file mapped by map_readonly_file from the process's resident set (MADV_DONTNEED; they
// stay in the page cache and come back on the next read, unchanged): validation reads the whole file (its
// checksum), and without this every page of it would count in the program's RSS for the rest of its life, where
// predictions read a few.
void drop_resident_pages(const unsigned char* base, size_t size_bytes);
// After validation: drops the file's pages from the resident set and, where this process alone maps them, from
// the page cache (MADV_PAGEOUT), and marks the mapping random-access (MADV_RANDOM). Rule: a lookup then brings
// in the one page it reads. Reason: a read fault on a file mapping also maps the cached pages around it (the
// kernel's fault-around, 64 KiB), so that binary searches over a cached 1.7 MB token table made all of it
// resident within a few dozen predictions, 3% of a 54 MiB program's peak; with the pages out of the cache and no
// read-ahead, the pages a program's contexts reach are all that count. Kernels without MADV_PAGEOUT (before
// 5.4) keep the old behaviour.
void evict_file_pages(const unsigned char* base, size_t size_bytes);

// A T stored at p in a file image, at any alignment (the formats are little-endian, as the machines that read
// them).
template <typename T>
T load_field(const unsigned char* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}

// The checks a file of either format opens with, at h: the magic, the version this reader reads and the size of
// the header. False, with the reason into `error` (the format named as `what`: "model file", "token table"), when
// one fails.
bool check_file_start(const unsigned char* h, const char (&magic)[8], uint32_t version, uint32_t header_bytes,
                      const char* what, char* error, size_t error_capacity);

// What opening a file of either format (ModelFile, TokenTables) does: close() what was open, map `path`
// (map_readonly_file, at least min_bytes) into *base and *size_bytes, then validate(), which reads every page, and
// evict the pages so that lookups bring in only those they read. A refused file is closed again. False, with the
// reason in `error`, when the file cannot be mapped or is refused.
template <class Validate, class Close>
bool open_file(const char* path, size_t min_bytes, const unsigned char** base, size_t* size_bytes, bool* mapped,
               char* error, size_t error_capacity, Validate validate, Close close) {
  close();
  if (!map_readonly_file(path, min_bytes, base, size_bytes, error, error_capacity)) return false;
  *mapped = true;
  if (!validate()) {
    close();
    return false;
  }
  evict_file_pages(*base, *size_bytes);
  return true;
}

}  // namespace llamalloc::model
