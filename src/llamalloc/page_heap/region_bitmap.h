// A region's page bitmaps (Region::used, Region::unreserved): a bit per huge page, searched for free runs. Page
// heap internal (regions.cc and the invariant checker). Rules: bits are set and cleared in runs under the page
// heap lock; a search never looks at or past `end` (the region's reserved pages).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc {

inline bool test_bit(const uint64_t* w, size_t i) { return (w[i >> 6] >> (i & 63)) & 1; }

inline void set_bits(uint64_t* w, size_t first, size_t count, bool value) {
  for (size_t i = first; i < first + count;) {
    size_t n = 64 - (i & 63);
    if (n > first + count - i) n = first + count - i;
    uint64_t mask = (n == 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1)) << (i & 63);
    if (value) w[i >> 6] |= mask;
    else w[i >> 6] &= ~mask;
    i += n;
  }
}

// The first index in [from, end) whose bit is `value`, or end.
inline size_t next_bit(const uint64_t* w, size_t from, size_t end, bool value) {
  while (from < end) {
    uint64_t word = (value ? w[from >> 6] : ~w[from >> 6]) >> (from & 63);
    if (word != 0) {
      size_t at = from + size_t(__builtin_ctzll(word));
      return at < end ? at : end;
    }
    from = (from | 63) + 1;
  }
  return end;
}

// The first run of `count` clear bits in [from, end) that starts at a multiple of `align`, or end.
inline size_t find_clear_run(const uint64_t* w, size_t from, size_t end, size_t count, size_t align) {
  for (size_t at = from;;) {
    at = next_bit(w, at, end, false);
    at = (at + align - 1) / align * align;
    if (at >= end || end - at < count) return end;
    size_t taken = next_bit(w, at, at + count, true);
    if (taken == at + count) return at;
    at = taken + 1;
  }
}

// x rounded up to a multiple of `to` (page and byte counts).
inline size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

}  // namespace llamalloc
