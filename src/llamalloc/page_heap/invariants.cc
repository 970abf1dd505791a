// The page heap's invariant checker: every region, page, list, the page cache and the gauges agree. It runs after
// every change in debug builds and in the test library (LLAMALLOC_DEBUG_CHECKS; debug_check), and on demand
// (check_invariants); on the first broken invariant it prints it and aborts. It reads only the page heap's own
// metadata: the thread heaps check their spans themselves (ThreadHeap::check).
#include <cstddef>

#include "page_heap/page_heap.h"
#include "page_heap/region_bitmap.h"

namespace llamalloc {

bool HugePageMeta::check(unsigned num_classes) const {
  if (state == PageState::kUnused) return false;
  if (lifetime_class >= num_classes) return false;
  if (kind != PageKind::kBlocks) return live.all();
  if (!(residual & ~live).none()) return false;               // residual blocks are live
  if (!(large_start & ~live).none()) return false;
  if (!(released & live).none()) return false;                // only free blocks are subreleased
  // An open page holds its class's objects (residual) and, in a small page heap, objects of shorter classes lent
  // from it (HeapConfig::small_heap_pages): live non-residual blocks are allowed in every state.
  // Every live block belongs to a large object (size-class spans are handed out as such) that starts and ends on
  // this page, or to the end of the huge object before it (slack donation).
  size_t open_object_end = 256;
  for (size_t b = 0; b < kBlocksPerHugePage; ++b) {
    if (b < huge_tail_blocks) {
      if (!live.test(b) || large_start.test(b)) return false;
      continue;
    }
    if (large_start.test(b)) {
      if (open_object_end != 256) return false;
      open_object_end = large_end.next_set(b);
      if (open_object_end == 256) return false;
    }
    bool in_object = open_object_end != 256;
    if (live.test(b) != in_object) return false;
    if (in_object && b == open_object_end) open_object_end = 256;
  }
  return open_object_end == 256;
}

void PageHeap::check_invariants() {
  LockGuard g(lock_);
  check_invariants_locked();
}

void PageHeap::check_invariants_locked() {
  size_t pages_by_class[kMaxClasses] = {};
  size_t total = 0, released_blocks = 0, all_used_pages = 0, unreserved_used = 0, live_blocks = 0;
  for (size_t i = 0; i < region_count_; ++i) {
    Region* r = &regions_[i];
    LLAMALLOC_CHECK(region_of(r->base) == r, "invariant: region table does not map a region's base to it");
    LLAMALLOC_CHECK(slots_[r->base >> kRegionShift].metadata.load(std::memory_order_relaxed) == r->metadata &&
                        slots_[r->base >> kRegionShift].bound.load(std::memory_order_relaxed) ==
                            uint64_t(r->committed) * kHugePageBytes,
                    "invariant: slot table does not map a region's base to its metadata and bound");
    LLAMALLOC_CHECK(r->committed <= r->reserved && r->reserved <= r->capacity && r->capacity <= kHugePagesPerRegion,
                    "invariant: region's committed <= reserved <= capacity");
    size_t used_pages = 0;
    for (size_t j = 0; j < r->reserved; ++j) {
      bool used = test_bit(r->used, j);
      used_pages += used;
      LLAMALLOC_CHECK(used || j >= r->search_from, "invariant: a free page below the region's search start");
      if (j >= r->committed) {
        LLAMALLOC_CHECK(!used, "invariant: a used page without usable metadata");
        continue;
      }
      HugePageMeta* p = r->page(j);
      LLAMALLOC_CHECK(used || p->state == PageState::kUnused, "invariant: a page in use is not marked used");
      if (test_bit(r->unreserved, j)) {
        LLAMALLOC_CHECK(p->state == PageState::kUnused, "invariant: a page in use whose address space was given back");
        unreserved_used += used;
      }
      if (p->state == PageState::kUnused) continue;
      LLAMALLOC_CHECK(p->check(num_classes()), "invariant: huge page metadata inconsistent");
      LLAMALLOC_CHECK(p->region == r && p->index == j, "invariant: huge page back-pointers wrong");
      pages_by_class[p->lifetime_class]++;
      total++;
      released_blocks += p->released.count();
      if (p->kind != PageKind::kBlocks) continue;
      live_blocks += p->live.count();
      if (p->state == PageState::kOpen) LLAMALLOC_CHECK(open_[p->lifetime_class] == p, "invariant: stray open page");
      if (p->state == PageState::kActive) {
        LLAMALLOC_CHECK(!p->live.none(), "invariant: an active page with no live block was not released");
        LLAMALLOC_CHECK(bool(p->in_recyclable) == !p->live.all(), "invariant: recyclable list membership");
      }
    }
    LLAMALLOC_CHECK(used_pages + r->free_pages == r->reserved, "invariant: region's free pages miscounted");
    all_used_pages += used_pages;
  }
  // Every used page that is not in use is in the page cache.
  size_t cached_pages = 0;
  for (unsigned i = 0; i < page_cache_.runs(); ++i) {
    const PageCache::Run& run = page_cache_.run(i);
    cached_pages += run.pages;
    for (size_t j = 0; j < run.pages; ++j)
      LLAMALLOC_CHECK(test_bit(run.region->used, run.index + j) &&
                          run.region->page(run.index + j)->state == PageState::kUnused,
                      "invariant: a cached page is not a used page out of use");
  }
  LLAMALLOC_CHECK(cached_pages * kHugePageBytes == gauges_.page_cache_bytes, "invariant: page cache miscounted");
  LLAMALLOC_CHECK(live_blocks == blocks_in_use_ && blocks_in_use_ <= blocks_high_,
                  "invariant: blocks in use miscounted");
  LLAMALLOC_CHECK(all_used_pages == total + cached_pages + lost_pages_,
                  "invariant: a used page neither in use, nor cached, nor lost");
  LLAMALLOC_CHECK(unreserved_used == lost_pages_, "invariant: lost pages miscounted");
  for (unsigned c = 0; c < kMaxClasses; ++c) {
    LLAMALLOC_CHECK(pages_by_class[c] == gauges_.huge_pages_by_class[c], "invariant: pages by class miscounted");
    uint64_t last_deadline = 0;
    for (HugePageMeta* p = deadlines_.first(c); p; p = p->active_next) {
      LLAMALLOC_CHECK(p->state == PageState::kActive && p->lifetime_class == c, "invariant: active list entry");
      LLAMALLOC_CHECK(p->deadline_ns >= last_deadline, "invariant: active list not in deadline order");
      last_deadline = p->deadline_ns;
    }
    for (unsigned b = 0; b < kRecycleBuckets; ++b)
      for (HugePageMeta* p = recyclable_head_[c][b]; p; p = p->recyclable_next)
        LLAMALLOC_CHECK(p->in_recyclable == 1 + b && recycle_bucket(p) == b && p->lifetime_class == c &&
                            p->state == PageState::kActive,
                        "invariant: recyclable list entry");
    if (open_[c]) LLAMALLOC_CHECK(open_[c]->state == PageState::kOpen, "invariant: open page not open");
  }
  LLAMALLOC_CHECK(total * kHugePageBytes == gauges_.footprint_bytes, "invariant: footprint miscounted");
  LLAMALLOC_CHECK(released_blocks * kBlockBytes == gauges_.subreleased_bytes, "invariant: subreleased bytes miscounted");
}

}  // namespace llamalloc
