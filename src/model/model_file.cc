#include "model_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdarg>
#include <cstring>

#include "config.h"

namespace llamalloc::model {

namespace {

struct CrcTable {
  uint32_t v[256];
  constexpr CrcTable() : v() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      v[i] = c;
    }
  }
};
constexpr CrcTable kCrcTable;

constexpr char kMagic[8] = {'L', 'L', 'A', 'M', 'O', 'D', 'E', 'L'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 128;
constexpr uint32_t kSectionBytes = 64;
constexpr uint32_t kMaxSections = 4096;

enum Dtype : uint32_t { kF32 = 1, kU8 = 2, kU32 = 3, kU64 = 4 };

}  // namespace

uint32_t crc32(uint32_t crc, const void* data, size_t size_bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size_bytes; ++i) crc = kCrcTable.v[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

size_t format_message(char* buf, size_t capacity, const char* fmt, ...) {
  if (capacity == 0) return 0;
  va_list ap;
  va_start(ap, fmt);
  size_t n = 0;
  auto put = [&](char c) {
    if (n + 1 < capacity) buf[n] = c;
    ++n;
  };
  for (const char* f = fmt; *f; ++f) {
    if (*f != '%') {
      put(*f);
      continue;
    }
    ++f;
    size_t precision = ~size_t{0};  // %.Ns: at most N bytes of the string
    if (*f == '.') {
      precision = 0;
      while (f[1] >= '0' && f[1] <= '9') precision = precision * 10 + size_t(*++f - '0');
      if (*++f != 's') break;
    }
    if (*f == 's') {
      const char* s = va_arg(ap, const char*);
      for (size_t i = 0; s && *s && i < precision; ++s, ++i) put(*s);
    } else if (*f == 'u' || (f[0] == 'l' && f[1] == 'l' && f[2] == 'u')) {
      unsigned long long v = *f == 'u' ? va_arg(ap, unsigned) : va_arg(ap, unsigned long long);
      if (*f == 'l') f += 2;
      char digits[24];
      int k = 0;
      do digits[k++] = char('0' + v % 10); while ((v /= 10) != 0);
      while (k) put(digits[--k]);
    } else if (*f == '%') {
      put('%');
    } else {
      break;
    }
  }
  va_end(ap);
  buf[n < capacity ? n : capacity - 1] = '\0';
  return n;
}

bool map_readonly_file(const char* path, size_t min_bytes, const unsigned char** base, size_t* size_bytes,
                       char* error, size_t error_capacity) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    format_message(error, error_capacity, "cannot open: %s", errno == ENOENT ? "no such file" : strerrordesc_np(errno));
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    format_message(error, error_capacity, "not a regular file");
    return false;
  }
  if (st.st_size < off_t(min_bytes)) {
    ::close(fd);
    format_message(error, error_capacity, "truncated: %llu bytes, shorter than the header", (unsigned long long)st.st_size);
    return false;
  }
  void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    format_message(error, error_capacity, "cannot map: %s", strerrordesc_np(errno));
    return false;
  }
  *base = static_cast<const unsigned char*>(p);
  *size_bytes = size_t(st.st_size);
  return true;
}

void unmap_file(const unsigned char* base, size_t size_bytes) {
  if (base != nullptr) munmap(const_cast<unsigned char*>(base), size_bytes);
}

void ModelFile::drop_resident() const {
  if (mapped_) drop_resident_pages(base_, size_bytes_);
}

void drop_resident_pages(const unsigned char* base, size_t size_bytes) {
  // A private read-only file mapping has no private copies to lose: MADV_DONTNEED only unmaps its pages.
  if (base != nullptr) madvise(const_cast<unsigned char*>(base), size_bytes, MADV_DONTNEED);
}

void evict_file_pages(const unsigned char* base, size_t size_bytes) {
  if (base == nullptr) return;
  auto* p = const_cast<unsigned char*>(base);
  // (PAGEOUT walks the mapped pages: it comes first, while validation's pages are still mapped. EINVAL before
  // Linux 5.4: the pages stay cached.)
#ifdef MADV_PAGEOUT
  madvise(p, size_bytes, MADV_PAGEOUT);
#endif
  madvise(p, size_bytes, MADV_DONTNEED);
  madvise(p, size_bytes, MADV_RANDOM);
}

bool ModelFile::open(const char* path, char* error, size_t error_capacity) {
  return open_file(path, kHeaderBytes, &base_, &size_bytes_, &mapped_, error, error_capacity,
                   [&] { return validate(error, error_capacity); }, [this] { close(); });
}

bool ModelFile::open_image(const void* data, size_t size_bytes, char* error, size_t error_capacity) {
  close();
  base_ = static_cast<const unsigned char*>(data);
  size_bytes_ = size_bytes;
  mapped_ = false;
  if (size_bytes < kHeaderBytes) {
    format_message(error, error_capacity, "truncated: %llu bytes, shorter than the header", (unsigned long long)size_bytes);
    base_ = nullptr;
    return false;
  }
  if (!validate(error, error_capacity)) {
    close();
    return false;
  }
  return true;
}

void ModelFile::close() {
  if (mapped_) unmap_file(base_, size_bytes_);
  base_ = nullptr;
  size_bytes_ = 0;
  folded_ = w_hidden_ = dense_w_ = dense_b_ = nullptr;
}

bool check_file_start(const unsigned char* h, const char (&magic)[8], uint32_t version, uint32_t header_bytes,
                      const char* what, char* error, size_t cap) {
  if (memcmp(h, magic, 8) != 0) return format_message(error, cap, "not a llamalloc %s (bad magic)", what), false;
  uint32_t v = load_field<uint32_t>(h + 8);
  if (v != version)
    return format_message(error, cap, "%s version %u, this llamalloc reads version %u", what, v, version), false;
  if (load_field<uint32_t>(h + 12) != header_bytes)
    return format_message(error, cap, "corrupt header (header size)"), false;
  return true;
}

bool ModelFile::validate(char* error, size_t cap) {
  const unsigned char* h = base_;
  if (!check_file_start(h, kMagic, kVersion, kHeaderBytes, "model file", error, cap)) return false;
  uint64_t file_bytes = load_field<uint64_t>(h + 16);
  if (file_bytes > size_bytes_)
    return format_message(error, cap, "truncated: %llu bytes of %llu", (unsigned long long)size_bytes_,
                          (unsigned long long)file_bytes), false;
  if (file_bytes < size_bytes_) return format_message(error, cap, "corrupt: trailing bytes after the model"), false;
  uint32_t crc = load_field<uint32_t>(h + 24);
  if (crc32(0, h + kHeaderBytes, file_bytes - kHeaderBytes) != crc)
    return format_message(error, cap, "corrupt: checksum mismatch"), false;
  uint32_t sections = load_field<uint32_t>(h + 28);
  uint32_t classes = load_field<uint32_t>(h + 32);
  vocab_size_ = load_field<uint32_t>(h + 36);
  uint32_t embedding_dim = load_field<uint32_t>(h + 40);
  hidden_dim_ = load_field<uint32_t>(h + 44);
  max_tokens_ = load_field<uint32_t>(h + 48);
  uint32_t layout[6] = {load_field<uint32_t>(h + 52), load_field<uint32_t>(h + 56), load_field<uint32_t>(h + 60),
                        load_field<uint32_t>(h + 64), load_field<uint32_t>(h + 68), load_field<uint32_t>(h + 72)};
  default_class_ = load_field<uint32_t>(h + 76);
  // The header's field num_size_classes (its on-disk name, docs/formats/model.md) holds kModelSizeBuckets.
  const uint32_t expected_layout[6] = {kModelSizeBuckets, kFirstSizeToken, kUnkToken, kPadToken, kSeparatorToken,
                                       kUnsymbolizedToken};
  if (classes != kNumClasses || memcmp(layout, expected_layout, sizeof layout) != 0)
    return format_message(error, cap, "class or token layout differs from this llamalloc's"), false;
  for (int k = 0; k < 6; ++k) {
    uint64_t bound = load_field<uint64_t>(h + 80 + 8 * k);
    if (bound != lifetime_class_bound_ns(unsigned(k))) return format_message(error, cap, "class bounds differ from this llamalloc's"), false;
  }
  if (vocab_size_ < kFirstSizeToken + kModelSizeBuckets || hidden_dim_ == 0 || hidden_dim_ > kMaxHiddenDim ||
      embedding_dim == 0 || max_tokens_ == 0 || max_tokens_ > kMaxTokens || default_class_ >= kNumClasses)
    return format_message(error, cap, "unsupported dimensions (vocabulary %u, hidden %u, max tokens %u)", vocab_size_,
                          hidden_dim_, max_tokens_), false;
  if (sections > kMaxSections || kHeaderBytes + uint64_t(sections) * kSectionBytes > file_bytes)
    return format_message(error, cap, "corrupt: section table out of bounds"), false;

  struct Want {
    const char* name;
    uint32_t dtype;
    uint64_t rows, cols;  // cols 0: one dimension
    const void** out;
    bool found;
  };
  const void *folded = nullptr, *w_hidden = nullptr, *dense_w = nullptr, *dense_b = nullptr, *offsets = nullptr,
             *strings = nullptr;
  uint64_t strings_bytes = 0;
  bool seen_decision = false;
  token_contexts_ = nullptr;
  token_stacks_ = nullptr;
  token_stack_count_ = 0;
  token_context_count_ = 0;
  token_class_ = nullptr;
  uint64_t token_class_count = 0;
  unseen_default_ = false;
  bool seen_unseen = false;
  decision_kind_ = kArgmax;
  decision_parameter_ = decision_tie_ = 0;
  const uint64_t v = vocab_size_, four_h = 4ull * hidden_dim_;
  Want want[] = {
      {"lstm.folded", kF32, v, four_h, &folded, false},     {"lstm.w_hidden", kF32, hidden_dim_, four_h, &w_hidden, false},
      {"dense.w", kF32, hidden_dim_, kNumClasses, &dense_w, false}, {"dense.b", kF32, kNumClasses, 0, &dense_b, false},
      {"vocab.offsets", kU32, v + 1, 0, &offsets, false},  {"vocab.strings", kU8, 0, 0, &strings, false},
  };
  for (uint32_t s = 0; s < sections; ++s) {
    const unsigned char* e = h + kHeaderBytes + uint64_t(s) * kSectionBytes;
    char name[25];
    memcpy(name, e, 24);
    name[24] = '\0';
    uint32_t dtype = load_field<uint32_t>(e + 24), ndim = load_field<uint32_t>(e + 28);
    uint32_t shape[4] = {load_field<uint32_t>(e + 32), load_field<uint32_t>(e + 36), load_field<uint32_t>(e + 40), load_field<uint32_t>(e + 44)};
    uint64_t offset = load_field<uint64_t>(e + 48), size = load_field<uint64_t>(e + 56);
    if (offset % 64 != 0 || offset > file_bytes || size > file_bytes - offset)
      return format_message(error, cap, "corrupt: section %s out of bounds", name), false;
    if (strcmp(name, "decision") == 0) {
      if (seen_decision) return format_message(error, cap, "corrupt: section %s twice", name), false;
      seen_decision = true;
      if (dtype != kU32 || ndim != 1 || shape[0] != 3 || size != 12)
        return format_message(error, cap, "section decision has the wrong type or shape"), false;
      uint32_t kind = load_field<uint32_t>(h + offset), parameter = load_field<uint32_t>(h + offset + 4),
               tie = load_field<uint32_t>(h + offset + 8);
      bool known = (kind == kPercentile && parameter >= 1 && parameter <= 100) ||
                   (kind == kMode && tie == kModeTiePercent) ||
                   (kind == kShare && parameter >= 1 && parameter <= 100 && tie == kModeTiePercent);
      if (!known) return format_message(error, cap, "unknown decision rule in section decision"), false;
      decision_kind_ = kind;
      decision_parameter_ = parameter;
      decision_tie_ = tie;
      continue;
    }
    // The key lists (train.token_contexts, train.token_stacks): u64 [n], sorted and distinct.
    const uint64_t** keys_out = strcmp(name, "train.token_contexts") == 0 ? &token_contexts_
                                : strcmp(name, "train.token_stacks") == 0 ? &token_stacks_
                                                                          : nullptr;
    if (keys_out != nullptr) {
      if (*keys_out != nullptr) return format_message(error, cap, "corrupt: section %s twice", name), false;
      if (dtype != kU64 || ndim != 1 || uint64_t(shape[0]) * 8 != size)
        return format_message(error, cap, "section %s has the wrong type or shape", name), false;
      const auto* keys = reinterpret_cast<const uint64_t*>(h + offset);
      for (uint64_t i = 1; i < shape[0]; ++i)
        if (keys[i] <= keys[i - 1]) return format_message(error, cap, "corrupt: section %s is not sorted", name), false;
      *keys_out = keys;
      (keys_out == &token_contexts_ ? token_context_count_ : token_stack_count_) = shape[0];
      continue;
    }
    if (strcmp(name, "train.token_class") == 0) {
      if (token_class_ != nullptr) return format_message(error, cap, "corrupt: section %s twice", name), false;
      if (dtype != kU8 || ndim != 1 || uint64_t(shape[0]) != size)
        return format_message(error, cap, "section train.token_class has the wrong type or shape"), false;
      for (uint64_t i = 0; i < size; ++i)
        if (h[offset + i] >= kNumClasses)
          return format_message(error, cap, "corrupt: section train.token_class holds a class out of range"), false;
      token_class_ = h + offset;
      token_class_count = size;
      continue;
    }
    if (strcmp(name, "deploy.unseen") == 0) {
      if (seen_unseen) return format_message(error, cap, "corrupt: section %s twice", name), false;
      seen_unseen = true;
      if (dtype != kU32 || ndim != 1 || shape[0] != 1 || size != 4 || load_field<uint32_t>(h + offset) > 1)
        return format_message(error, cap, "section deploy.unseen is not one u32 of 0 or 1"), false;
      unseen_default_ = load_field<uint32_t>(h + offset) == 1;
      continue;
    }
    for (Want& w : want) {
      if (strcmp(w.name, name) != 0) continue;
      if (w.found) return format_message(error, cap, "corrupt: section %s twice", name), false;
      w.found = true;
      bool ok = dtype == w.dtype;
      if (w.rows != 0) {
        uint32_t want_ndim = w.cols == 0 ? 1 : 2;
        uint64_t elems = w.rows * (w.cols == 0 ? 1 : w.cols);
        ok = ok && ndim == want_ndim && shape[0] == w.rows && (w.cols == 0 || shape[1] == w.cols) &&
             size == elems * (dtype == kU8 ? 1 : dtype == kU64 ? 8 : 4);
      } else {
        ok = ok && ndim == 1 && shape[0] == size;
        strings_bytes = size;
      }
      if (!ok) return format_message(error, cap, "section %s has the wrong type or shape for the header's dimensions", name), false;
      *w.out = h + offset;
    }
  }
  for (const Want& w : want)
    if (!w.found) return format_message(error, cap, "corrupt: section %s missing", w.name), false;
  if (token_class_ != nullptr && (token_contexts_ == nullptr || token_class_count != token_context_count_))
    return format_message(error, cap, "corrupt: section train.token_class does not match train.token_contexts"), false;
  longest_table_class_ = 0;
  for (uint64_t i = 0; token_class_ != nullptr && i < token_class_count; ++i)
    if (token_class_[i] > longest_table_class_) longest_table_class_ = token_class_[i];
  const auto* off = static_cast<const uint32_t*>(offsets);
  for (uint64_t i = 0; i < v; ++i)
    if (off[i] > off[i + 1]) return format_message(error, cap, "corrupt: vocabulary offsets not increasing"), false;
  if (off[v] != strings_bytes) return format_message(error, cap, "corrupt: vocabulary offsets past the strings"), false;
  folded_ = static_cast<const float*>(folded);
  w_hidden_ = static_cast<const float*>(w_hidden);
  dense_w_ = static_cast<const float*>(dense_w);
  dense_b_ = static_cast<const float*>(dense_b);
  // A NaN or infinity would make every class the same silently: refuse it.
  const float* arrays[] = {w_hidden_, dense_w_, dense_b_};
  const uint64_t counts[] = {uint64_t(hidden_dim_) * four_h, uint64_t(hidden_dim_) * kNumClasses, kNumClasses};
  for (int a = 0; a < 3; ++a)
    for (uint64_t i = 0; i < counts[a]; ++i)
      if (!std::isfinite(arrays[a][i])) return format_message(error, cap, "corrupt: a weight is not finite"), false;
  vocab_crc_ = crc32(crc32(0, offsets, (v + 1) * 4), strings, strings_bytes);
  return true;
}

namespace {

// The index of key in keys[0..count) (sorted), or -1.
int64_t find_key(const uint64_t* keys, uint64_t count, uint64_t key) {
  uint64_t lo = 0, hi = count;
  while (lo < hi) {
    uint64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo < count && keys[lo] == key ? int64_t(lo) : -1;
}

}  // namespace

int64_t ModelFile::find_context(const uint32_t* tokens, size_t count) const {
  if (token_contexts_ == nullptr) return -1;
  return find_key(token_contexts_, token_context_count_, token_context_key(tokens, count));
}

bool ModelFile::knows_context(const uint32_t* tokens, size_t count) const {
  return token_contexts_ == nullptr || find_context(tokens, count) >= 0;
}

bool ModelFile::knows_code_path(const uint32_t* tokens, size_t count) const {
  if (token_stacks_ == nullptr || count == 0) return knows_context(tokens, count);
  return find_key(token_stacks_, token_stack_count_, token_context_key(tokens + 1, count - 1)) >= 0;
}

int ModelFile::table_class(const uint32_t* tokens, size_t count) const {
  if (token_class_ == nullptr) return -1;
  int64_t i = find_context(tokens, count);
  return i >= 0 ? int(token_class_[i]) : -1;
}

unsigned ModelFile::decide(const float* logits) const {
  unsigned best = 0;
  for (unsigned k = 1; k < kNumClasses; ++k)
    if (logits[k] > logits[best]) best = k;
  if (decision_kind_ == kArgmax) return best;
  // The label rule of llamalloc.model.dataset.apply_rule on exp(logit - max): float exponentials, compared in
  // double (sums of eight floats are exact enough there that their order does not matter), as decide() in
  // Python computes them, so both give the same class. numpy's float exp and exp_float differ by an ulp or
  // two, which changes the class only at a tie that close.
  double score[kNumClasses];
  for (unsigned k = 0; k < kNumClasses; ++k) score[k] = double(exp_float(logits[k] - logits[best]));
  return label_rule().apply(score);
}

unsigned LabelRule::apply(const double* score) const {
  unsigned best = 0;
  for (unsigned k = 1; k < kNumClasses; ++k)
    if (score[k] > score[best]) best = k;
  if (kind == kArgmax) return best;
  double cumulative[kNumClasses], total = 0.0;
  for (unsigned k = 0; k < kNumClasses; ++k) {
    total += score[k];
    cumulative[k] = total;
  }
  if (kind == kPercentile) {
    for (unsigned k = 0; k < kNumClasses; ++k)
      if (100.0 * cumulative[k] >= double(parameter) * total) return k;
    return kNumClasses - 1;
  }
  // The mode, ties (within `tie` percent of the most common class) to the longest class.
  double top = score[best];
  unsigned mode = 0;
  for (unsigned k = kNumClasses; k-- > 0;)
    if (100.0 * score[k] >= double(100 - tie) * top) {
      mode = k;
      break;
    }
  if (kind == kMode) return mode;
  // shareNN: the longest class holding at least NN% of the objects, or the mode where that is longer.
  for (unsigned k = kNumClasses; k-- > mode + 1;)
    if (score[k] > 0.0 && 100.0 * score[k] >= double(parameter) * total) return k;
  return mode;
}

}  // namespace llamalloc::model
