// mesh-4k and mesh-2m: the traced program's objects replayed through a Mesh-style heap (Mesh; the LLAMA
// paper, section 9.6) that meshes, every mesh period of trace time, pages of one size class
// whose live slots do not overlap, found with SplitMesher. See docs/simulator.md for the model.
//
// The heap: one span per size class "attached" for allocation; each object goes to a random free
// slot of it (Mesh's shuffle vector), which is what makes pages meshable. A full span is detached;
// the next allocation attaches the most recently freed-into partial span, else a new span. Spans of
// classes <= 512 B are one 4 KiB page; larger classes get ceil(8 * class / 4 KiB) pages; objects
// above 16 KiB get their own pages and never mesh. Meshing keeps the fuller span's physical page,
// releases the other's; the group keeps serving allocations through the kept span (one shared occupancy
// bitmap, as a meshed MiniHeap does) and may mesh again; when it empties, all its virtual spans go back.
//
// Footprint: mesh-4k counts the 4 KiB physical pages still backed; mesh-2m counts the 2 MiB huge
// pages of the arena that still hold at least one backed page (meshing gives back 4 KiB pages; a
// huge page is returned only when all 512 of them are gone). Both run the same simulation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/arena.h"
#include "sim/flat_map.h"
#include "sim/policy.h"
#include "sim/random.h"
#include "sim/size_classes.h"
#include "sim/split_mesher.h"

namespace llamalloc::sim {

struct MeshOptions {
  bool account_huge_pages = false;          // mesh-2m when true
  uint64_t mesh_period_ns = 100'000'000;    // Mesh meshes at most once every 100 ms
  uint64_t seed = 1;
  unsigned probes = kSplitMesherProbes;
};

class MeshPolicy final : public Policy {
 public:
  static constexpr unsigned kPageShift = 12;
  static constexpr unsigned kHugePageShift = 21;
  static constexpr uint64_t kMaxSmallBytes = 16 * 1024;

  explicit MeshPolicy(MeshOptions options);

  std::string name() const override { return options_.account_huge_pages ? "mesh-2m" : "mesh-4k"; }
  void allocate(const ObjectAlloc& object) override;
  void free(uint64_t time_ns, uint64_t address, uint64_t size_bytes, uint32_t thread) override;
  void advance_time(uint64_t time_ns) override;
  uint64_t footprint_bytes() const override {
    return options_.account_huge_pages ? huge_pages_in_use_ << kHugePageShift : physical_pages_ << kPageShift;
  }
  std::vector<std::string> extra_columns() const override;
  void sample(uint64_t time_ns, std::vector<int64_t>& extra_values) override;
  std::vector<std::pair<std::string, double>> summary_extras() const override;

  // Runs one meshing pass over every size class now (tests call it directly).
  void mesh_now();
  uint64_t physical_pages() const { return physical_pages_; }
  uint64_t virtual_pages() const { return virtual_pages_; }
  uint64_t huge_pages_in_use() const { return huge_pages_in_use_; }
  // The slot a small object occupies in its span (tests set up known occupancy patterns with it).
  int slot_of(uint64_t address) const {
    const Place* p = places_.find(address);
    return p == nullptr || p->span == kNone ? -1 : static_cast<int>(p->slot_or_pages);
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Span {
    uint64_t first_page = 0;
    uint32_t page_count = 0;
    uint32_t size_class = 0;
    uint32_t capacity = 0;
    uint32_t live = 0;          // leader: live objects of the whole group
    uint32_t leader = kNone;    // kNone: the span is not in use
    uint32_t next_member = kNone;
    uint32_t partial_pos = kNone;  // index in partial_[size_class], or kNone
    bool attached = false;
    bool meshed = false;        // part of a group of meshed spans
    SlotBitmap slots;           // leader: union of the group's live slots
  };
  struct Place {
    uint64_t first_page = 0;  // large objects: their pages; small: unused
    uint32_t span = kNone;    // small objects: the span (its leader holds the bits)
    uint32_t slot_or_pages = 0;
  };
  struct ClassState {
    uint32_t attached = kNone;
    std::vector<uint32_t> partial;  // group leaders with free slots that are not attached
  };

  uint32_t new_span(uint32_t size_class);
  void release_group(uint32_t leader);
  void add_partial(uint32_t span);
  void remove_partial(uint32_t span);
  void back_pages(uint64_t first_page, uint64_t page_count, int delta);

  MeshOptions options_;
  Random random_;
  PageArena arena_;
  std::vector<Span> spans_;
  std::vector<uint32_t> free_span_ids_;
  std::vector<ClassState> classes_;
  FlatMap<Place> places_;
  FlatMap<uint32_t> backed_pages_per_huge_page_;
  uint64_t physical_pages_ = 0;
  uint64_t virtual_pages_ = 0;
  uint64_t huge_pages_in_use_ = 0;
  uint64_t next_mesh_ns_ = 0;
  bool mesh_clock_started_ = false;
  uint64_t meshes_ = 0;
  uint64_t mesh_passes_ = 0;
  uint64_t pages_released_by_meshing_ = 0;
  // Scratch for mesh_now, kept to avoid allocating per pass.
  std::vector<std::vector<uint32_t>> candidates_;
  std::vector<SlotBitmap> candidate_bits_;
};

}  // namespace llamalloc::sim
