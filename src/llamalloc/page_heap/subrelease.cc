// Subrelease (HeapConfig::subrelease_percent, docs/heap-memory.md "Subrelease"), as in the subrelease paper
// (docs/references.md): the free blocks of sparse, idle huge pages go back to the OS while their pages stay in use, on
// 4 KiB pages. Rules: a pass gives back only what exceeds the most the page heap used over the last kDemandPasses
// passes, sparsest pages first, and only blocks not taken since the previous pass (an idle page), so that a load
// that comes back finds its memory still there; a subreleased page is kept from being collapsed into a huge page
// again (at most kMaxNoHugePages of them, for the kernel's map count) until every block is backed again.
#include "page_heap/page_heap.h"

namespace llamalloc {

void PageHeap::unrelease(HugePageMeta* p, size_t first, size_t count) {
  if (LLAMALLOC_LIKELY(p->released.none())) return;
  size_t n = 0;
  for (size_t b = first; b < first + count; ++b)
    if (p->released.test(b)) {
      p->released.clear(b);
      ++n;
    }
  gauges_.subreleased_bytes -= n * kBlockBytes;
  allow_huge_page_again(p);
}

void PageHeap::allow_huge_page_again(HugePageMeta* p) {
  // Every block and every span's page backed again: the page may become one huge page again.
  if (p->released.none() && p->span_purged_pages == 0 && p->no_huge_page) {
    p->no_huge_page = 0;
    --no_huge_pages_;
    platform_.allow_huge_page(reinterpret_cast<void*>(page_address(p)), kHugePageBytes, true);
  }
}

void PageHeap::keep_from_khugepaged(HugePageMeta* p) {
  p->huge_backed = 0;  // (the kernel split it to give back part of it)
  if (!p->no_huge_page && no_huge_pages_ < kMaxNoHugePages) {
    p->no_huge_page = 1;
    ++no_huge_pages_;
    platform_.allow_huge_page(reinterpret_cast<void*>(page_address(p)), kHugePageBytes, false);
  }
}

void PageHeap::purge_span_pages(uintptr_t start, size_t bytes) {
  LockGuard g(lock_);
  HugePageMeta* p = page_of(start);
  LLAMALLOC_CHECK(p != nullptr && p->kind == PageKind::kBlocks && start % kSmallPageBytes == 0 &&
                      bytes % kSmallPageBytes == 0 && (start + bytes - 1) / kHugePageBytes == start / kHugePageBytes,
                  "span purge: a range that is not inside one page of blocks");
  platform_.subrelease(reinterpret_cast<void*>(start), bytes);
  size_t pages = bytes / kSmallPageBytes;
  p->span_purged_pages = uint16_t(p->span_purged_pages + pages);
  gauges_.span_purged_bytes += bytes;
  counters_.span_pages_purged.fetch_add(pages, std::memory_order_relaxed);
  keep_from_khugepaged(p);
}

void PageHeap::span_purge_forgotten(uintptr_t start, size_t pages) {
  LockGuard g(lock_);
  HugePageMeta* p = page_of(start);
  LLAMALLOC_CHECK(p != nullptr && p->span_purged_pages >= pages, "span purge: more pages forgotten than purged");
  p->span_purged_pages = uint16_t(p->span_purged_pages - pages);
  gauges_.span_purged_bytes -= pages * kSmallPageBytes;
  allow_huge_page_again(p);
}

size_t PageHeap::subrelease_page(HugePageMeta* p, size_t budget, bool now) {
  size_t done = 0;
  uintptr_t base = page_address(p);
  auto keep = [&](size_t b) { return p->live.test(b) || p->released.test(b) || (!now && p->taken.test(b)); };
  for (size_t b = 0; b < kBlocksPerHugePage && done < budget;) {
    if (keep(b)) {
      ++b;
      continue;
    }
    size_t end = b;
    while (end < kBlocksPerHugePage && end - b < budget - done && !keep(end)) ++end;
    platform_.subrelease(reinterpret_cast<void*>(base + b * kBlockBytes), (end - b) * kBlockBytes);
    p->released.set_range(b, end - b);
    done += end - b;
    b = end;
  }
  gauges_.subreleased_bytes += done * kBlockBytes;
  counters_.blocks_subreleased.fetch_add(done, std::memory_order_relaxed);
  if (done != 0) keep_from_khugepaged(p);
  return done;
}

size_t PageHeap::subrelease_free_blocks(bool now, unsigned demand_passes) {
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  // The page heap's demand now (blocks in use) and what is still backed, and by class.
  size_t in_use = 0, backed = 0;
  size_t live_by_class[kMaxClasses] = {}, pages_by_class[kMaxClasses] = {};
  auto each_page = [&](auto&& f) {
    for (unsigned c = 0; c < num_classes(); ++c) {
      if (open_[c] != nullptr) f(open_[c]);
      for (HugePageMeta* p = deadlines_.first(c); p != nullptr; p = p->active_next)
        if (p->kind == PageKind::kBlocks) f(p);
    }
  };
  each_page([&](HugePageMeta* p) {
    size_t live = p->live.count();
    in_use += live;
    live_by_class[p->lifetime_class] += live;
    ++pages_by_class[p->lifetime_class];
    backed += kBlocksPerHugePage - p->released.count();
  });
  review_model_classes(live_by_class, pages_by_class);
  demand_[demand_passes_++ % kDemandPasses] = uint32_t(in_use);
  size_t peak = in_use;
  for (unsigned i = 1; i <= demand_passes && i <= kDemandPasses; ++i) {
    uint32_t d = demand_[(demand_passes_ - i) % kDemandPasses];
    peak = d > peak ? d : peak;
  }
  size_t budget = now ? ~size_t{0} : (backed > peak ? backed - peak : 0);
  size_t done = 0;
  if (config_.subrelease_percent != 0 && budget != 0) {
    size_t limit = kBlocksPerHugePage * config_.subrelease_percent / 100;
    // Sparsest first: pages with at most 1/16 of their blocks in use, then 1/8, 1/4, 1/2, then up to the limit.
    for (size_t bound = kBlocksPerHugePage / 16;; bound *= 2) {
      size_t b = bound < limit ? bound : limit;
      each_page([&](HugePageMeta* p) {
        if (done < budget && (now || p->taken.count() <= kIdleTakenBlocks) && p->live.count() <= b)
          done += subrelease_page(p, budget - done, now);
      });
      if (b == limit) break;
    }
  }
  // The blocks taken from now to the next pass (mark_allocated sets them).
  each_page([](HugePageMeta* p) { p->taken = Bitmap256{}; });
  page_cache_.trim(huge_pages_in_use(), now);
  debug_check();
  return done;
}

}  // namespace llamalloc
