// Token tables (docs/formats/tokens.md): for each binary of the program, its call sites and functions ->
// the model's token ids of that frame, written ahead of time by `llamalloc prepare`. Mapped read-only; a
// lookup is a binary search, with no allocation, no lock and nothing that takes the loader's lock.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc::model {

inline constexpr unsigned kMaxSegments = 4;
inline constexpr unsigned kPathBytes = 304;

// One frame's tokens: ids[0..count) in the table's token pool. `terminal`: the unwinder stops after this
// frame, its tokens already include the frames above it (the C library's start routines, which keep no frame
// pointer, see docs/prediction.md).
struct FrameTokens {
  const uint32_t* ids;
  uint32_t count;
  bool terminal;
};

class TokenTables {
 public:
  // Tables opened with open(): drops their pages from the resident set; they come back when read.
  void drop_resident() const;
  struct Segment {
    uint64_t file_offset, vaddr, file_bytes;
  };
  struct Binary {
    const char* path;  // NUL-terminated, inside the mapping
    uint64_t file_bytes;
    int64_t mtime_ns;
    uint32_t segment_count;
    Segment segments[kMaxSegments];
    const unsigned char* sites;      // 16-byte entries: u64 vaddr of a return address, u32 first, u32 count|flags
    uint32_t site_count;
    const unsigned char* functions;  // 24-byte entries: u64 start, u64 end, u32 first, u32 count|flags
    uint32_t function_count;
    const uint32_t* tokens;
    uint32_t token_count;
  };

  TokenTables() = default;
  TokenTables(const TokenTables&) = delete;
  TokenTables& operator=(const TokenTables&) = delete;
  ~TokenTables() { close(); }

  // Maps and validates `path` against the model's vocabulary (its CRC and size). false + reason on failure.
  bool open(const char* path, uint32_t vocab_crc, uint32_t vocab_size, char* error, size_t error_capacity);
  bool open_image(const void* data, size_t size_bytes, uint32_t vocab_crc, uint32_t vocab_size, char* error,
                  size_t error_capacity);
  void close();

  uint32_t binary_count() const { return binary_count_; }
  const Binary& binary(uint32_t i) const { return binaries_[i]; }
  // The binary whose recorded path is `path`, or -1.
  int find_binary(const char* path) const;
  // Tokens of the frame whose return address has ELF virtual address `vaddr` in binary b: the call site's
  // exact entry if there is one, else the function containing vaddr - 1; false when neither is known.
  bool lookup(uint32_t b, uint64_t vaddr, FrameTokens* out) const;

 private:
  bool validate(uint32_t vocab_crc, uint32_t vocab_size, char* error, size_t error_capacity);

  static constexpr uint32_t kMaxBinaries = 256;
  const unsigned char* base_ = nullptr;
  size_t size_bytes_ = 0;
  bool mapped_ = false;
  uint32_t binary_count_ = 0;
  Binary binaries_[kMaxBinaries];
};

}  // namespace llamalloc::model
