#include "token_table.h"

#include <errno.h>

#include <cstring>

#include "model_file.h"

namespace llamalloc::model {

namespace {

constexpr char kMagic[8] = {'L', 'L', 'A', 'T', 'O', 'K', 'E', 'N'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 64;
constexpr uint32_t kBinaryBytes = 512;
constexpr uint32_t kSiteBytes = 16;
constexpr uint32_t kFunctionBytes = 24;
constexpr uint32_t kTerminalFlag = 0x80000000u;

}  // namespace

bool TokenTables::open(const char* path, uint32_t vocab_crc, uint32_t vocab_size, char* error, size_t cap) {
  return open_file(path, kHeaderBytes, &base_, &size_bytes_, &mapped_, error, cap,
                   [&] { return validate(vocab_crc, vocab_size, error, cap); }, [this] { close(); });
}

bool TokenTables::open_image(const void* data, size_t size_bytes, uint32_t vocab_crc, uint32_t vocab_size,
                             char* error, size_t cap) {
  close();
  if (size_bytes < kHeaderBytes) {
    format_message(error, cap, "truncated: shorter than the header");
    return false;
  }
  base_ = static_cast<const unsigned char*>(data);
  size_bytes_ = size_bytes;
  mapped_ = false;
  if (!validate(vocab_crc, vocab_size, error, cap)) {
    close();
    return false;
  }
  return true;
}

void TokenTables::drop_resident() const {
  if (mapped_) drop_resident_pages(base_, size_bytes_);
}

void TokenTables::close() {
  if (mapped_) unmap_file(base_, size_bytes_);
  base_ = nullptr;
  size_bytes_ = 0;
  binary_count_ = 0;
}

bool TokenTables::validate(uint32_t vocab_crc, uint32_t vocab_size, char* error, size_t cap) {
  const unsigned char* h = base_;
  if (!check_file_start(h, kMagic, kVersion, kHeaderBytes, "token table", error, cap)) return false;
  uint64_t file_bytes = load_field<uint64_t>(h + 16);
  if (file_bytes != size_bytes_)
    return format_message(error, cap, "truncated or corrupt: %llu bytes, the header says %llu",
                          (unsigned long long)size_bytes_, (unsigned long long)file_bytes), false;
  if (crc32(0, h + kHeaderBytes, file_bytes - kHeaderBytes) != load_field<uint32_t>(h + 24))
    return format_message(error, cap, "corrupt: checksum mismatch"), false;
  uint32_t count = load_field<uint32_t>(h + 28);
  if (load_field<uint32_t>(h + 32) != vocab_crc || load_field<uint32_t>(h + 36) != vocab_size)
    return format_message(error, cap, "made for another model (vocabulary differs): run llamalloc prepare again"), false;
  if (count > kMaxBinaries || kHeaderBytes + uint64_t(count) * kBinaryBytes > file_bytes)
    return format_message(error, cap, "corrupt: binary table out of bounds"), false;
  for (uint32_t i = 0; i < count; ++i) {
    const unsigned char* r = h + kHeaderBytes + uint64_t(i) * kBinaryBytes;
    Binary& b = binaries_[i];
    if (memchr(r, 0, kPathBytes) == nullptr) return format_message(error, cap, "corrupt: a path is not terminated"), false;
    b.path = reinterpret_cast<const char*>(r);
    b.file_bytes = load_field<uint64_t>(r + 304);
    b.mtime_ns = load_field<int64_t>(r + 312);
    b.segment_count = load_field<uint32_t>(r + 320);
    if (b.segment_count > kMaxSegments) return format_message(error, cap, "corrupt: too many segments"), false;
    for (uint32_t s = 0; s < kMaxSegments; ++s) {
      const unsigned char* e = r + 360 + 24 * s;
      b.segments[s] = {load_field<uint64_t>(e), load_field<uint64_t>(e + 8), load_field<uint64_t>(e + 16)};
    }
    uint64_t so = load_field<uint64_t>(r + 456), fo = load_field<uint64_t>(r + 464), to = load_field<uint64_t>(r + 472);
    uint32_t sc = load_field<uint32_t>(r + 480), fc = load_field<uint32_t>(r + 484), tc = load_field<uint32_t>(r + 488);
    if (so % 8 || fo % 8 || to % 4 || so > file_bytes || uint64_t(sc) * kSiteBytes > file_bytes - so ||
        fo > file_bytes || uint64_t(fc) * kFunctionBytes > file_bytes - fo || to > file_bytes ||
        uint64_t(tc) * 4 > file_bytes - to)
      return format_message(error, cap, "corrupt: tables of %s out of bounds", b.path), false;
    b.sites = h + so;
    b.site_count = sc;
    b.functions = h + fo;
    b.function_count = fc;
    b.tokens = reinterpret_cast<const uint32_t*>(h + to);
    b.token_count = tc;
    // Everything the allocation path will read is checked here once: ranges sorted, token runs in the pool,
    // token ids inside the vocabulary.
    for (uint32_t k = 0; k < tc; ++k)
      if (b.tokens[k] >= vocab_size) return format_message(error, cap, "corrupt: token id out of the vocabulary"), false;
    uint64_t prev = 0;
    for (uint32_t k = 0; k < sc; ++k) {
      const unsigned char* e = b.sites + uint64_t(k) * kSiteBytes;
      uint64_t a = load_field<uint64_t>(e);
      uint32_t first = load_field<uint32_t>(e + 8), n = load_field<uint32_t>(e + 12) & ~kTerminalFlag;
      if ((k && a <= prev) || uint64_t(first) + n > tc)
        return format_message(error, cap, "corrupt: call sites of %s not sorted or out of bounds", b.path), false;
      prev = a;
    }
    prev = 0;
    for (uint32_t k = 0; k < fc; ++k) {
      const unsigned char* e = b.functions + uint64_t(k) * kFunctionBytes;
      uint64_t start = load_field<uint64_t>(e), end = load_field<uint64_t>(e + 8);
      uint32_t first = load_field<uint32_t>(e + 16), n = load_field<uint32_t>(e + 20) & ~kTerminalFlag;
      if (end <= start || (k && start < prev) || uint64_t(first) + n > tc)
        return format_message(error, cap, "corrupt: functions of %s not sorted or out of bounds", b.path), false;
      prev = end;
    }
  }
  binary_count_ = count;
  return true;
}

int TokenTables::find_binary(const char* path) const {
  for (uint32_t i = 0; i < binary_count_; ++i)
    if (strcmp(binaries_[i].path, path) == 0) return int(i);
  return -1;
}

bool TokenTables::lookup(uint32_t bi, uint64_t vaddr, FrameTokens* out) const {
  const Binary& b = binaries_[bi];
  uint32_t lo = 0, hi = b.site_count;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (load_field<uint64_t>(b.sites + uint64_t(mid) * kSiteBytes) < vaddr) lo = mid + 1;
    else hi = mid;
  }
  if (lo < b.site_count) {
    const unsigned char* e = b.sites + uint64_t(lo) * kSiteBytes;
    if (load_field<uint64_t>(e) == vaddr) {
      uint32_t n = load_field<uint32_t>(e + 12);
      *out = {b.tokens + load_field<uint32_t>(e + 8), n & ~kTerminalFlag, (n & kTerminalFlag) != 0};
      return true;
    }
  }
  // The function holding the call instruction (vaddr - 1): the last function starting at or before it.
  uint64_t pc = vaddr - 1;
  lo = 0;
  hi = b.function_count;
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (load_field<uint64_t>(b.functions + uint64_t(mid) * kFunctionBytes) <= pc) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return false;
  const unsigned char* e = b.functions + uint64_t(lo - 1) * kFunctionBytes;
  if (pc >= load_field<uint64_t>(e + 8)) return false;
  uint32_t n = load_field<uint32_t>(e + 20);
  *out = {b.tokens + load_field<uint32_t>(e + 16), n & ~kTerminalFlag, (n & kTerminalFlag) != 0};
  return true;
}

}  // namespace llamalloc::model
