#include "sim/tcmalloc_policy.h"

#include <algorithm>
#include <bit>

#include "sim/id_lists.h"

namespace llamalloc::sim {

TcmallocPolicy::TcmallocPolicy(TcmallocOptions options)
    : options_(options), central_(kSizeClassCount), places_(1 << 16) {
  for (uint32_t c = 0; c < kSizeClassCount; ++c) {
    uint64_t class_bytes = size_class_block_bytes(c);
    uint64_t pages = (class_bytes + (1u << kPageShift) - 1) >> kPageShift;
    while (((pages << kPageShift) % class_bytes) * 8 > (pages << kPageShift)) ++pages;
    span_pages_[c] = static_cast<uint32_t>(pages);
  }
}

int TcmallocPolicy::find_run(const HugePage& hp, uint32_t page_count) {
  // First fit inside the huge page.
  uint32_t run = 0;
  for (uint32_t p = 0; p < kPagesPerHugePage; ++p) {
    bool used = (hp.used_pages[p / 64] >> (p % 64)) & 1;
    run = used ? 0 : run + 1;
    if (run == page_count) return static_cast<int>(p + 1 - page_count);
  }
  return -1;
}

uint32_t TcmallocPolicy::allocate_span(uint32_t page_count, uint32_t size_class, uint32_t capacity) {
  int set = set_for(capacity);
  uint32_t best = kNone;
  int best_first = -1;
  for (uint32_t id : filler_[set]) {
    const HugePage& hp = huge_pages_[id];
    if (kPagesPerHugePage - hp.used < page_count) continue;
    if (best != kNone && (hp.used < huge_pages_[best].used ||
                          (hp.used == huge_pages_[best].used && hp.number > huge_pages_[best].number))) {
      continue;
    }
    int first = find_run(hp, page_count);
    if (first < 0) continue;
    best = id;
    best_first = first;
  }
  if (best == kNone) {
    best = take_id(huge_pages_, free_huge_page_ids_);
    HugePage& hp = huge_pages_[best];
    hp = HugePage{};
    hp.number = huge_page_arena_.allocate(1);
    hp.set = set;
    hp.set_pos = static_cast<uint32_t>(filler_[set].size());
    filler_[set].push_back(best);
    ++huge_pages_in_use_;
    best_first = 0;
  }
  HugePage& hp = huge_pages_[best];
  for (uint32_t p = best_first; p < best_first + page_count; ++p) hp.used_pages[p / 64] |= uint64_t{1} << (p % 64);
  hp.used += page_count;

  uint32_t span = take_id(spans_, free_span_ids_);
  spans_[span] = Span{best, static_cast<uint32_t>(best_first), page_count, size_class, capacity, 0, -1, kNone};
  ++spans_allocated_;
  return span;
}

void TcmallocPolicy::release_span(uint32_t span) {
  Span& s = spans_[span];
  HugePage& hp = huge_pages_[s.huge_page];
  for (uint32_t p = s.first_page; p < s.first_page + s.page_count; ++p) hp.used_pages[p / 64] &= ~(uint64_t{1} << (p % 64));
  hp.used -= s.page_count;
  if (hp.used == 0) {
    remove_at(filler_[hp.set], hp.set_pos, [&](uint32_t id) -> uint32_t& { return huge_pages_[id].set_pos; });
    huge_page_arena_.free(hp.number, 1);
    free_huge_page_ids_.push_back(s.huge_page);
    --huge_pages_in_use_;
  }
  free_span_ids_.push_back(span);
}

void TcmallocPolicy::update_list(uint32_t span) {
  Span& s = spans_[span];
  // The TCMalloc characterisation paper (section 4.3) indexes lists by max(0, L - log2(A)); here index log2(A) so the fullest list is
  // the highest, taken first. Full spans are in no list.
  int list = s.live == s.capacity ? -1 : std::min(kPriorityLists - 1, static_cast<int>(std::bit_width(s.live)));
  if (list == s.list) return;
  auto& lists = central_[s.size_class];
  if (s.list >= 0) remove_at(lists[s.list], s.list_pos, [&](uint32_t id) -> uint32_t& { return spans_[id].list_pos; });
  s.list = list;
  s.list_pos = kNone;
  if (list >= 0) {
    s.list_pos = static_cast<uint32_t>(lists[list].size());
    lists[list].push_back(span);
  }
}

void TcmallocPolicy::allocate(const ObjectAlloc& object) {
  Place place;
  if (object.size_bytes >= (uint64_t{1} << kHugePageShift)) {
    place.huge_pages = static_cast<uint32_t>((object.size_bytes + (1u << kHugePageShift) - 1) >> kHugePageShift);
    place.first_huge_page = huge_page_arena_.allocate(place.huge_pages);
    huge_pages_in_use_ += place.huge_pages;
    large_huge_pages_ += place.huge_pages;
    places_.put(object.address, place);
    return;
  }
  if (object.size_bytes > kMaxSizeClassBytes) {
    uint32_t pages = static_cast<uint32_t>((object.size_bytes + (1u << kPageShift) - 1) >> kPageShift);
    place.span = allocate_span(pages, kNone, 1);
    spans_[place.span].live = 1;
    places_.put(object.address, place);
    return;
  }
  uint32_t size_class = size_class_index(object.size_bytes);
  auto& lists = central_[size_class];
  uint32_t span = kNone;
  for (int l = kPriorityLists - 1; l >= 0 && span == kNone; --l) {
    if (!lists[l].empty()) span = lists[l].back();
  }
  if (span == kNone) {
    uint32_t pages = span_pages_[size_class];
    uint32_t capacity = static_cast<uint32_t>((uint64_t{pages} << kPageShift) / size_class_block_bytes(size_class));
    span = allocate_span(pages, size_class, capacity);
  }
  ++spans_[span].live;
  update_list(span);
  place.span = span;
  places_.put(object.address, place);
}

void TcmallocPolicy::free(uint64_t, uint64_t address, uint64_t, uint32_t) {
  Place place;
  if (!places_.erase(address, &place)) return;
  if (place.span == kNone) {
    huge_page_arena_.free(place.first_huge_page, place.huge_pages);
    huge_pages_in_use_ -= place.huge_pages;
    large_huge_pages_ -= place.huge_pages;
    return;
  }
  Span& s = spans_[place.span];
  --s.live;
  if (s.size_class == kNone) {
    release_span(place.span);
    return;
  }
  if (s.live == 0) {
    s.live = s.capacity;  // take it out of the lists: update_list treats live == capacity as full
    update_list(place.span);
    release_span(place.span);
    return;
  }
  update_list(place.span);
}

std::vector<std::string> TcmallocPolicy::extra_columns() const {
  return {"hp_short_spans", "hp_long_spans", "hp_large"};
}

void TcmallocPolicy::sample(uint64_t, std::vector<int64_t>& v) {
  v[0] = static_cast<int64_t>(filler_[0].size());
  v[1] = static_cast<int64_t>(filler_[1].size());
  v[2] = static_cast<int64_t>(large_huge_pages_);
}

std::vector<std::pair<std::string, double>> TcmallocPolicy::summary_extras() const {
  return {{"capacity_threshold", static_cast<double>(options_.lifetime_aware ? options_.capacity_threshold : 0)},
          {"spans_allocated", static_cast<double>(spans_allocated_)}};
}

}  // namespace llamalloc::sim
