// tcmalloc-lifetime and tcmalloc: the traced objects replayed through a model of TCMalloc's central
// free lists and huge page filler (the TCMalloc characterisation paper, sections 2.1, 4.3, 4.4), with and without the
// lifetime-aware filler, the no-model baseline for lifetime classes. See docs/simulator.md.
//
// - Objects up to 256 KiB go to spans of their size class. A span is ceil(class / 8 KiB) TCMalloc
//   pages, grown until its tail waste is at most 1/8; its capacity is span bytes / class bytes.
// - Central free list with span prioritisation (4.3): an object goes to the non-full span of its
//   class with the most live objects (8 lists by log2 of the live count, the fullest list first).
// - A span with no live object goes straight back to the filler (front-end caches are assumed empty,
//   as the TCMalloc characterisation paper's Figure 8 does: an optimistic bound).
// - Huge page filler: a span's pages go to the huge page, among those that have a free run long
//   enough, with the most used pages (ties: lowest address); else a new huge page. The
//   lifetime-aware filler (tcmalloc-lifetime) keeps two disjoint sets of huge pages: spans of
//   capacity <= C (C = 16: large classes, short-lived spans) and spans of capacity > C.
// - Objects above 256 KiB and below 2 MiB are single-object spans in the filler (capacity 1);
//   objects of 2 MiB or more get their own run of whole huge pages (slack is not donated back).
// - Footprint: huge pages with at least one used page, times 2 MiB.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/arena.h"
#include "sim/flat_map.h"
#include "sim/policy.h"
#include "sim/size_classes.h"

namespace llamalloc::sim {

struct TcmallocOptions {
  bool lifetime_aware = true;
  uint32_t capacity_threshold = 16;  // C of the TCMalloc characterisation paper's section 4.4
};

class TcmallocPolicy final : public Policy {
 public:
  static constexpr unsigned kPageShift = 13;       // TCMalloc pages are 8 KiB
  static constexpr unsigned kHugePageShift = 21;
  static constexpr uint32_t kPagesPerHugePage = 1u << (kHugePageShift - kPageShift);  // 256
  static constexpr int kPriorityLists = 8;

  explicit TcmallocPolicy(TcmallocOptions options);

  std::string name() const override { return options_.lifetime_aware ? "tcmalloc-lifetime" : "tcmalloc"; }
  void allocate(const ObjectAlloc& object) override;
  void free(uint64_t time_ns, uint64_t address, uint64_t size_bytes, uint32_t thread) override;
  uint64_t footprint_bytes() const override { return huge_pages_in_use_ << kHugePageShift; }
  std::vector<std::string> extra_columns() const override;
  void sample(uint64_t time_ns, std::vector<int64_t>& extra_values) override;
  std::vector<std::pair<std::string, double>> summary_extras() const override;

  uint64_t huge_pages_in_set(int set) const { return filler_[set].size(); }
  uint64_t huge_pages_in_use() const { return huge_pages_in_use_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct HugePage {
    uint64_t number = 0;
    std::array<uint64_t, 4> used_pages{};  // 256 TCMalloc pages
    uint32_t used = 0;
    int set = 0;
    uint32_t set_pos = kNone;
  };
  struct Span {
    uint32_t huge_page = kNone;
    uint32_t first_page = 0;  // within the huge page
    uint32_t page_count = 0;
    uint32_t size_class = 0;  // kNone for a single large object
    uint32_t capacity = 0;
    uint32_t live = 0;
    int list = -1;            // priority list, -1 when full or not in the central free list
    uint32_t list_pos = kNone;
  };
  struct Place {
    uint32_t span = kNone;        // filler-backed objects
    uint64_t first_huge_page = 0;  // objects of >= 2 MiB
    uint32_t huge_pages = 0;
  };

  int set_for(uint32_t capacity) const {
    return options_.lifetime_aware && capacity > options_.capacity_threshold ? 1 : 0;
  }
  uint32_t allocate_span(uint32_t page_count, uint32_t size_class, uint32_t capacity);
  void release_span(uint32_t span);
  void update_list(uint32_t span);
  static int find_run(const HugePage& hp, uint32_t page_count);

  TcmallocOptions options_;
  std::array<uint32_t, kSizeClassCount> span_pages_{};
  std::vector<HugePage> huge_pages_;
  std::vector<uint32_t> free_huge_page_ids_;
  std::array<std::vector<uint32_t>, 2> filler_;  // huge page ids per set
  std::vector<Span> spans_;
  std::vector<uint32_t> free_span_ids_;
  std::vector<std::array<std::vector<uint32_t>, kPriorityLists>> central_;  // per class
  PageArena huge_page_arena_;
  FlatMap<Place> places_;
  uint64_t huge_pages_in_use_ = 0;
  uint64_t large_huge_pages_ = 0;
  uint64_t spans_allocated_ = 0;
};

}  // namespace llamalloc::sim
