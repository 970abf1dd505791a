#include "sim/page_policy.h"

#include <algorithm>

namespace llamalloc::sim {

PagePolicy::PagePolicy(unsigned page_shift) : page_shift_(page_shift), objects_per_page_(1 << 16) {}

std::string PagePolicy::name() const {
  return page_shift_ == 21 ? "pages-2m" : page_shift_ == 12 ? "pages-4k" : "pages-" + std::to_string(1u << page_shift_);
}

void PagePolicy::touch(uint64_t address, uint64_t size_bytes, int delta) {
  if (size_bytes == 0) return;
  uint64_t first_page = address >> page_shift_;
  uint64_t last_page = (address + size_bytes - 1) >> page_shift_;
  for (uint64_t page = first_page; page <= last_page; ++page) {
    // Page number 0 is the map's empty key; shift by one so the first page is representable.
    uint64_t key = page + 1;
    if (delta > 0) {
      uint32_t& count = objects_per_page_.get_or_insert(key);
      if (count++ == 0) ++pages_in_use_;
    } else {
      uint32_t* count = objects_per_page_.find(key);
      if (count == nullptr) continue;  // cannot happen: the engine frees only what it allocated
      if (--*count == 0) {
        objects_per_page_.erase(key);
        --pages_in_use_;
      }
    }
  }
  peak_pages_in_use_ = std::max(peak_pages_in_use_, pages_in_use_);
}

void PagePolicy::allocate(const ObjectAlloc& object) { touch(object.address, object.size_bytes, +1); }

void PagePolicy::free(uint64_t, uint64_t address, uint64_t size_bytes, uint32_t) { touch(address, size_bytes, -1); }

std::vector<std::pair<std::string, double>> PagePolicy::summary_extras() const {
  return {{"page_size_bytes", static_cast<double>(uint64_t{1} << page_shift_)},
          {"peak_pages_in_use", static_cast<double>(peak_pages_in_use_)}};
}

}  // namespace llamalloc::sim
