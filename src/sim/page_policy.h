// pages-4k and pages-2m: the footprint of the traced program's own addresses if the OS backed them
// with pages of one size and took every page back the moment it held no live byte (the LLAMA paper, section
// 2.1): the least the traced allocator's own placement costs, the bound for allocators the replay does not
// model.
#pragma once

#include <cstdint>
#include <string>

#include "sim/flat_map.h"
#include "sim/policy.h"

namespace llamalloc::sim {

class PagePolicy final : public Policy {
 public:
  // page_shift: 12 for 4 KiB, 21 for 2 MiB.
  explicit PagePolicy(unsigned page_shift);

  std::string name() const override;
  void allocate(const ObjectAlloc& object) override;
  void free(uint64_t time_ns, uint64_t address, uint64_t size_bytes, uint32_t thread) override;
  uint64_t footprint_bytes() const override { return pages_in_use_ << page_shift_; }
  std::vector<std::pair<std::string, double>> summary_extras() const override;

  uint64_t pages_in_use() const { return pages_in_use_; }

 private:
  // Each page counts the live objects that have at least one byte on it; a page is backed while
  // its count is non-zero. Zero-byte objects hold no byte and back nothing.
  void touch(uint64_t address, uint64_t size_bytes, int delta);

  unsigned page_shift_;
  FlatMap<uint32_t> objects_per_page_;
  uint64_t pages_in_use_ = 0;
  uint64_t peak_pages_in_use_ = 0;
};

}  // namespace llamalloc::sim
