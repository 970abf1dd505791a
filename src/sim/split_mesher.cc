#include "sim/split_mesher.h"

#include <algorithm>
#include <bit>
#include <numeric>

namespace llamalloc::sim {

unsigned SlotBitmap::count() const {
  return std::popcount(words[0]) + std::popcount(words[1]) + std::popcount(words[2]) + std::popcount(words[3]);
}

unsigned SlotBitmap::nth_clear(unsigned n, unsigned capacity) const {
  for (unsigned w = 0; w * 64 < capacity; ++w) {
    uint64_t clear = ~words[w];
    if ((w + 1) * 64 > capacity) clear &= (uint64_t{1} << (capacity - w * 64)) - 1;
    unsigned c = std::popcount(clear);
    if (n < c) {
      for (; n > 0; --n) clear &= clear - 1;  // drop the lowest n clear bits
      return w * 64 + std::countr_zero(clear);
    }
    n -= c;
  }
  return capacity;  // unreachable when n is in range
}

std::vector<std::pair<uint32_t, uint32_t>> split_mesher_match(const std::vector<SlotBitmap>& pages,
                                                            Random& random, unsigned probes) {
  std::vector<std::pair<uint32_t, uint32_t>> matches;
  if (pages.size() < 2) return matches;
  std::vector<uint32_t> order(pages.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[random.below(i + 1)]);
  size_t left_count = order.size() / 2;
  size_t right_count = order.size() - left_count;
  std::vector<bool> matched(pages.size(), false);
  unsigned rounds = static_cast<unsigned>(std::min<size_t>(probes, right_count));
  for (unsigned t = 0; t < rounds; ++t) {
    for (size_t i = 0; i < left_count; ++i) {
      uint32_t a = order[i];
      if (matched[a]) continue;
      uint32_t b = order[left_count + (i + t) % right_count];
      if (matched[b] || pages[a].overlaps(pages[b])) continue;
      matched[a] = matched[b] = true;
      matches.emplace_back(a, b);
    }
  }
  return matches;
}

uint64_t mesh_pages_freed(std::vector<SlotBitmap> pages, Random& random, unsigned max_rounds, unsigned probes) {
  uint64_t freed = 0;
  for (unsigned round = 0; round < max_rounds; ++round) {
    auto matches = split_mesher_match(pages, random, probes);
    if (matches.empty()) break;
    std::vector<bool> gone(pages.size(), false);
    for (auto [a, b] : matches) {
      pages[a].merge(pages[b]);
      gone[b] = true;
    }
    std::vector<SlotBitmap> next;
    next.reserve(pages.size() - matches.size());
    for (size_t i = 0; i < pages.size(); ++i) {
      if (!gone[i]) next.push_back(pages[i]);
    }
    pages = std::move(next);
    freed += matches.size();
  }
  return freed;
}

}  // namespace llamalloc::sim
