// Mesh's SplitMesher ("Mesh: Compacting Memory Management for C/C++ Applications", Powers et al., PLDI
// 2019): approximates a maximum matching in the "meshable" graph (two pages of one size class mesh when their
// live slots do not overlap) without building the graph. The candidates are shuffled and split in two halves;
// for t = 0 .. probes-1, left[i] is compared with right[(i + t) % |right|], and each meshable pair found is
// matched and removed. O(n * probes) bitmap comparisons; with random placement it finds at least half of a
// maximum matching with high probability.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/random.h"

namespace llamalloc::sim {

// Occupancy of one span: up to 256 slots (4 KiB of 16-byte objects), one bit per live slot.
struct SlotBitmap {
  std::array<uint64_t, 4> words{};

  bool test(unsigned slot) const { return (words[slot / 64] >> (slot % 64)) & 1; }
  void set(unsigned slot) { words[slot / 64] |= uint64_t{1} << (slot % 64); }
  void clear(unsigned slot) { words[slot / 64] &= ~(uint64_t{1} << (slot % 64)); }
  bool overlaps(const SlotBitmap& other) const {
    return (words[0] & other.words[0]) | (words[1] & other.words[1]) | (words[2] & other.words[2]) |
           (words[3] & other.words[3]);
  }
  void merge(const SlotBitmap& other) {
    for (int i = 0; i < 4; ++i) words[i] |= other.words[i];
  }
  unsigned count() const;
  // The n-th (0-based) clear slot below capacity; n < capacity - count().
  unsigned nth_clear(unsigned n, unsigned capacity) const;
};

inline constexpr unsigned kSplitMesherProbes = 64;

// One SplitMesher pass over pages[0..n): returns the matched pairs (indices into pages).
std::vector<std::pair<uint32_t, uint32_t>> split_mesher_match(const std::vector<SlotBitmap>& pages,
                                                            Random& random,
                                                            unsigned probes = kSplitMesherProbes);

// Repeats SplitMesher passes, merging each matched pair into one page (the union of its slots),
// until a pass finds nothing or max_rounds is reached. Returns how many pages meshing frees.
uint64_t mesh_pages_freed(std::vector<SlotBitmap> pages, Random& random, unsigned max_rounds,
                        unsigned probes = kSplitMesherProbes);

}  // namespace llamalloc::sim
