#include "sim/mesh_policy.h"

#include <algorithm>

#include "sim/id_lists.h"

namespace llamalloc::sim {

namespace {
uint32_t span_pages_for(uint64_t class_bytes) {
  if (class_bytes <= 512) return 1;
  return static_cast<uint32_t>((class_bytes * 8 + 4095) / 4096);
}
}  // namespace

MeshPolicy::MeshPolicy(MeshOptions options)
    : options_(options), random_(options.seed), classes_(kSizeClassCount), places_(1 << 16),
      backed_pages_per_huge_page_(1 << 10), candidates_(kSizeClassCount) {
  if (options_.mesh_period_ns == 0) options_.mesh_period_ns = 100'000'000;
}

void MeshPolicy::back_pages(uint64_t first_page, uint64_t page_count, int delta) {
  physical_pages_ += delta > 0 ? page_count : -page_count;
  uint64_t page = first_page;
  uint64_t end = first_page + page_count;
  while (page < end) {
    uint64_t huge = page >> (kHugePageShift - kPageShift);
    uint64_t huge_end = (huge + 1) << (kHugePageShift - kPageShift);
    uint32_t n = static_cast<uint32_t>(std::min(end, huge_end) - page);
    uint64_t key = huge + 1;  // 0 is the map's empty key
    if (delta > 0) {
      uint32_t& count = backed_pages_per_huge_page_.get_or_insert(key);
      if (count == 0) ++huge_pages_in_use_;
      count += n;
    } else {
      uint32_t* count = backed_pages_per_huge_page_.find(key);
      *count -= n;
      if (*count == 0) {
        backed_pages_per_huge_page_.erase(key);
        --huge_pages_in_use_;
      }
    }
    page += n;
  }
}

uint32_t MeshPolicy::new_span(uint32_t size_class) {
  uint32_t id = take_id(spans_, free_span_ids_);
  Span& s = spans_[id];
  s = Span{};
  uint64_t class_bytes = size_class_block_bytes(size_class);
  s.size_class = size_class;
  s.page_count = span_pages_for(class_bytes);
  s.capacity = static_cast<uint32_t>(std::min<uint64_t>(256, (uint64_t{s.page_count} << kPageShift) / class_bytes));
  s.first_page = arena_.allocate(s.page_count);
  s.leader = id;
  virtual_pages_ += s.page_count;
  back_pages(s.first_page, s.page_count, +1);
  return id;
}

void MeshPolicy::add_partial(uint32_t span) {
  Span& s = spans_[span];
  if (s.partial_pos != kNone || s.attached || s.leader != span) return;
  auto& list = classes_[s.size_class].partial;
  s.partial_pos = static_cast<uint32_t>(list.size());
  list.push_back(span);
}

void MeshPolicy::remove_partial(uint32_t span) {
  Span& s = spans_[span];
  if (s.partial_pos == kNone) return;
  remove_at(classes_[s.size_class].partial, s.partial_pos,
            [&](uint32_t id) -> uint32_t& { return spans_[id].partial_pos; });
  s.partial_pos = kNone;
}

void MeshPolicy::allocate(const ObjectAlloc& object) {
  if (object.size_bytes > kMaxSmallBytes) {
    uint32_t pages = static_cast<uint32_t>((object.size_bytes + 4095) >> kPageShift);
    Place p;
    p.first_page = arena_.allocate(pages);
    p.slot_or_pages = pages;
    virtual_pages_ += pages;
    back_pages(p.first_page, pages, +1);
    places_.put(object.address, p);
    return;
  }
  uint32_t size_class = size_class_index(object.size_bytes);
  ClassState& cls = classes_[size_class];
  if (cls.attached != kNone && spans_[cls.attached].live == spans_[cls.attached].capacity) {
    spans_[cls.attached].attached = false;  // full: detached until a free makes room
    cls.attached = kNone;
  }
  if (cls.attached == kNone) {
    uint32_t span;
    // A partial group may have been filled by meshing (its live slots are the union of two spans');
    // such a group is full, not partial: it leaves the list until a free makes room.
    while (!cls.partial.empty() && spans_[cls.partial.back()].live >= spans_[cls.partial.back()].capacity) {
      remove_partial(cls.partial.back());
    }
    if (!cls.partial.empty()) {
      span = cls.partial.back();
      remove_partial(span);
    } else {
      span = new_span(size_class);
    }
    spans_[span].attached = true;
    cls.attached = span;
  }
  Span& s = spans_[cls.attached];
  unsigned slot = s.slots.nth_clear(static_cast<unsigned>(random_.below(s.capacity - s.live)), s.capacity);
  s.slots.set(slot);
  ++s.live;
  places_.put(object.address, Place{0, cls.attached, slot});
}

void MeshPolicy::release_group(uint32_t leader) {
  Span& head = spans_[leader];
  back_pages(head.first_page, head.page_count, -1);  // the group's one physical span
  remove_partial(leader);
  for (uint32_t id = leader; id != kNone;) {
    Span& s = spans_[id];
    uint32_t next = s.next_member;
    arena_.free(s.first_page, s.page_count);
    virtual_pages_ -= s.page_count;
    s.leader = kNone;
    free_span_ids_.push_back(id);
    id = next;
  }
}

void MeshPolicy::free(uint64_t, uint64_t address, uint64_t, uint32_t) {
  Place p;
  if (!places_.erase(address, &p)) return;
  if (p.span == kNone) {
    arena_.free(p.first_page, p.slot_or_pages);
    virtual_pages_ -= p.slot_or_pages;
    back_pages(p.first_page, p.slot_or_pages, -1);
    return;
  }
  uint32_t leader = spans_[p.span].leader;
  Span& s = spans_[leader];
  s.slots.clear(p.slot_or_pages);
  --s.live;
  if (s.live == 0 && !s.attached) {
    release_group(leader);
  } else if (!s.attached) {
    add_partial(leader);
  }
}

void MeshPolicy::advance_time(uint64_t time_ns) {
  if (!mesh_clock_started_) {
    mesh_clock_started_ = true;
    next_mesh_ns_ = time_ns + options_.mesh_period_ns;
    return;
  }
  if (time_ns >= next_mesh_ns_) {
    mesh_now();
    next_mesh_ns_ = time_ns + options_.mesh_period_ns;
  }
}

void MeshPolicy::mesh_now() {
  ++mesh_passes_;
  for (auto& c : candidates_) c.clear();
  for (uint32_t id = 0; id < spans_.size(); ++id) {
    const Span& s = spans_[id];
    if (s.leader != id || s.attached || s.live == 0 || s.live == s.capacity) continue;
    candidates_[s.size_class].push_back(id);
  }
  for (auto& ids : candidates_) {
    if (ids.size() < 2) continue;
    candidate_bits_.clear();
    for (uint32_t id : ids) candidate_bits_.push_back(spans_[id].slots);
    for (auto [a_index, b_index] : split_mesher_match(candidate_bits_, random_, options_.probes)) {
      uint32_t keep = ids[a_index], drop = ids[b_index];
      // Mesh copies the emptier span into the fuller one and frees the emptier's physical page.
      if (spans_[drop].live > spans_[keep].live ||
          (spans_[drop].live == spans_[keep].live && spans_[drop].first_page < spans_[keep].first_page)) {
        std::swap(keep, drop);
      }
      Span& k = spans_[keep];
      Span& d = spans_[drop];
      back_pages(d.first_page, d.page_count, -1);
      pages_released_by_meshing_ += d.page_count;
      ++meshes_;
      remove_partial(drop);  // its slots now live on keep's page; keep stays allocatable
      k.slots.merge(d.slots);
      k.live += d.live;
      // A group that meshing filled is no longer partial: allocating from it would put two objects
      // in one slot (and past the span's capacity), a footprint below the live bytes.
      if (k.live >= k.capacity) remove_partial(keep);
      k.meshed = d.meshed = true;
      // Splice drop's member chain after keep's head.
      uint32_t tail = drop;
      for (uint32_t id = drop; id != kNone; id = spans_[id].next_member) {
        spans_[id].leader = keep;
        tail = id;
      }
      spans_[tail].next_member = k.next_member;
      k.next_member = drop;
    }
  }
}

std::vector<std::string> MeshPolicy::extra_columns() const {
  return {"footprint4k_bytes", "footprint2m_bytes", "unmeshed_footprint4k_bytes", "meshes"};
}

void MeshPolicy::sample(uint64_t, std::vector<int64_t>& v) {
  v[0] = static_cast<int64_t>(physical_pages_ << kPageShift);
  v[1] = static_cast<int64_t>(huge_pages_in_use_ << kHugePageShift);
  v[2] = static_cast<int64_t>(virtual_pages_ << kPageShift);
  v[3] = static_cast<int64_t>(meshes_);
}

std::vector<std::pair<std::string, double>> MeshPolicy::summary_extras() const {
  return {{"mesh_period_ns", static_cast<double>(options_.mesh_period_ns)},
          {"split_mesher_probes", static_cast<double>(options_.probes)},
          {"mesh_passes", static_cast<double>(mesh_passes_)},
          {"meshes", static_cast<double>(meshes_)},
          {"pages_released_by_meshing", static_cast<double>(pages_released_by_meshing_)},
          {"final_footprint4k_bytes", static_cast<double>(physical_pages_ << kPageShift)},
          {"final_footprint2m_bytes", static_cast<double>(huge_pages_in_use_ << kHugePageShift)},
          {"final_unmeshed_footprint4k_bytes", static_cast<double>(virtual_pages_ << kPageShift)}};
}

}  // namespace llamalloc::sim
