// The size classes of the comparison heaps (mesh-*, tcmalloc-*): a size class is a block size, and an object
// takes the block of the smallest class that holds it. 16-byte steps up to 1 KiB (so that no class wastes more
// than 15 bytes where most objects are), then four classes per power of two up to 256 KiB (at most 25% waste),
// TCMalloc's and jemalloc's shape. These are not the library's size classes (thread_heap/size_class.h, which
// llama-* replays through the real heap): the comparison heaps stand for other allocators, with their tables.
#pragma once

#include <cstdint>

namespace llamalloc::sim {

inline constexpr uint64_t kSmallStepBytes = 16;
inline constexpr uint64_t kSmallStepLimitBytes = 1024;
inline constexpr uint64_t kMaxSizeClassBytes = 256 * 1024;

// Index of the class that holds size_bytes (0-byte objects use the 16-byte class), for sizes up
// to kMaxSizeClassBytes.
inline uint32_t size_class_index(uint64_t size_bytes) {
  if (size_bytes <= kSmallStepLimitBytes) {
    return size_bytes == 0 ? 0 : static_cast<uint32_t>((size_bytes - 1) / kSmallStepBytes);
  }
  // Above 1 KiB: 4 classes in (2^k, 2^(k+1)], each 2^(k-2) wide.
  uint32_t index = static_cast<uint32_t>(kSmallStepLimitBytes / kSmallStepBytes);  // 64
  uint64_t base = kSmallStepLimitBytes;
  while (size_bytes > base * 2) {
    base *= 2;
    index += 4;
  }
  uint64_t step = base / 4;
  return index + static_cast<uint32_t>((size_bytes - base - 1) / step);
}

inline uint64_t size_class_block_bytes(uint32_t index) {
  uint32_t small_count = static_cast<uint32_t>(kSmallStepLimitBytes / kSmallStepBytes);
  if (index < small_count) return (index + 1) * kSmallStepBytes;
  uint32_t above = index - small_count;
  uint64_t base = kSmallStepLimitBytes << (above / 4);
  return base + (base / 4) * (above % 4 + 1);
}

inline constexpr uint32_t kSizeClassCount = 64 + 4 * 8;  // 1 KiB .. 256 KiB is 8 doublings

}  // namespace llamalloc::sim
