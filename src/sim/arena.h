// Virtual address space of a simulated heap, in units of pages: runs are handed out best-fit
// (smallest free run that fits, lowest address among equals) and coalesced when given back, so a
// simulated heap reuses low addresses the way real allocators do. Only span-sized operations come
// here, never one per object.
#pragma once

#include <cstdint>
#include <map>
#include <set>

namespace llamalloc::sim {

class PageArena {
 public:
  uint64_t allocate(uint64_t page_count) {
    auto it = by_size_.lower_bound({page_count, 0});
    if (it == by_size_.end()) {
      uint64_t first = end_page_;
      end_page_ += page_count;
      return first;
    }
    auto [run_pages, first] = *it;
    by_size_.erase(it);
    by_address_.erase(first);
    if (run_pages > page_count) insert(first + page_count, run_pages - page_count);
    return first;
  }

  void free(uint64_t first, uint64_t page_count) {
    // Coalesce with the free runs on both sides.
    auto next = by_address_.lower_bound(first);
    if (next != by_address_.end() && next->first == first + page_count) {
      page_count += next->second;
      by_size_.erase({next->second, next->first});
      next = by_address_.erase(next);
    }
    if (next != by_address_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == first) {
        first = prev->first;
        page_count += prev->second;
        by_size_.erase({prev->second, prev->first});
        by_address_.erase(prev);
      }
    }
    if (first + page_count == end_page_) {
      end_page_ = first;  // give the top of the arena back
      return;
    }
    insert(first, page_count);
  }

  uint64_t end_page() const { return end_page_; }

 private:
  void insert(uint64_t first, uint64_t page_count) {
    by_address_[first] = page_count;
    by_size_.insert({page_count, first});
  }
  std::map<uint64_t, uint64_t> by_address_;            // first page -> run length
  std::set<std::pair<uint64_t, uint64_t>> by_size_;    // (run length, first page)
  uint64_t end_page_ = 0;
};

}  // namespace llamalloc::sim
