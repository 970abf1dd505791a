// Subrelease and span purge (the Subrelease component, subrelease.h; its rules are there) and the page heap's side
// of them: a pass under the page heap lock over its pages of blocks in use (each class's open page and active
// pages), with the model's placement check and the page cache's pass that share it; span purge's lookup and
// checks of the range a thread heap gives back.
#include "page_heap/subrelease.h"

#include "page_heap/page_heap.h"

namespace llamalloc {

void Subrelease::unrelease(HugePageMeta* p, size_t first, size_t count) {
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

void Subrelease::leave_unbacked(HugePageMeta* p) {
  // (Nothing to give back: a fresh page has no resident memory. Counted in the gauge, not as blocks given back.)
  // A page that cannot be kept off huge pages (kMaxNoHugePages reached) is left as it is: huge from its first
  // touch, its blocks must not count as given back.
  Bitmap256 rest = ~(p->live | p->released);
  size_t n = rest.count();
  if (n == 0 || (!p->no_huge_page && no_huge_pages_ >= kMaxNoHugePages)) return;
  p->released = p->released | rest;
  gauges_.subreleased_bytes += n * kBlockBytes;
  keep_from_khugepaged(p);
}

void Subrelease::allow_huge_page_again(HugePageMeta* p) {
  // Every block and every span's page backed again: the page may become one huge page again.
  if (p->released.none() && p->span_purged_pages == 0 && p->no_huge_page) {
    p->no_huge_page = 0;
    --no_huge_pages_;
    platform_.allow_huge_page(reinterpret_cast<void*>(address_of(p)), kHugePageBytes, true);
  }
}

void Subrelease::keep_from_khugepaged(HugePageMeta* p) {
  p->huge_backed = 0;  // (the kernel split it to give back part of it)
  if (!p->no_huge_page && no_huge_pages_ < kMaxNoHugePages) {
    p->no_huge_page = 1;
    ++no_huge_pages_;
    platform_.allow_huge_page(reinterpret_cast<void*>(address_of(p)), kHugePageBytes, false);
  }
}

void Subrelease::purge_span_pages(HugePageMeta* p, uintptr_t start, size_t bytes) {
  platform_.subrelease(reinterpret_cast<void*>(start), bytes);
  size_t pages = bytes / kSmallPageBytes;
  p->span_purged_pages = uint16_t(p->span_purged_pages + pages);
  gauges_.span_purged_bytes += bytes;
  counters_.span_pages_purged.fetch_add(pages, std::memory_order_relaxed);
  keep_from_khugepaged(p);
}

void Subrelease::span_purge_forgotten(HugePageMeta* p, size_t pages) {
  p->span_purged_pages = uint16_t(p->span_purged_pages - pages);
  gauges_.span_purged_bytes -= pages * kSmallPageBytes;
  allow_huge_page_again(p);
}

size_t Subrelease::release_free_blocks(HugePageMeta* p, size_t budget, bool now) {
  size_t done = 0;
  uintptr_t base = address_of(p);
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

void PageHeap::purge_span_pages(uintptr_t start, size_t bytes) {
  LockGuard g(lock_);
  HugePageMeta* p = page_of(start);
  LLAMALLOC_CHECK(p != nullptr && p->kind == PageKind::kBlocks && start % kSmallPageBytes == 0 &&
                      bytes % kSmallPageBytes == 0 && (start + bytes - 1) / kHugePageBytes == start / kHugePageBytes,
                  "span purge: a range that is not inside one page of blocks");
  subrelease_.purge_span_pages(p, start, bytes);
}

void PageHeap::span_purge_forgotten(uintptr_t start, size_t pages) {
  LockGuard g(lock_);
  HugePageMeta* p = page_of(start);
  LLAMALLOC_CHECK(p != nullptr && p->span_purged_pages >= pages, "span purge: more pages forgotten than purged");
  subrelease_.span_purge_forgotten(p, pages);
}

size_t PageHeap::subrelease_free_blocks(bool now, unsigned demand_passes, bool threads_quiet, uint64_t retaken_blocks) {
  return subrelease_pass(now, demand_passes, threads_quiet, retaken_blocks, false);
}

size_t PageHeap::subrelease_after_fall() {
  {
    // The counts first: a thread that ends while the load holds (a thread per task) costs no walk of the pages.
    LockGuard g(lock_);
    if (!subrelease_.fell_from_high(blocks_high_, blocks_in_use_)) return 0;
  }
  return subrelease_pass(false, 1, false, 0, true);
}

size_t PageHeap::subrelease_pass(bool now, unsigned demand_passes, bool threads_quiet, uint64_t retaken_blocks,
                                 bool only_after_fall) {
  // The parked huge object first, unless a huge allocation reused it since the last pass: its pages then count
  // in this pass's page cache trim.
  if (!only_after_fall) flush_parked_huge(now);
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  // The page heap's demand now (blocks in use) and what is still backed, and by class.
  Subrelease::Demand demand;
  size_t live_by_class[kMaxClasses] = {}, pages_by_class[kMaxClasses] = {};
  auto each_page = [&](auto&& f) {
    for (unsigned c = 0; c < num_classes(); ++c) {
      if (open_[c] != nullptr) f(open_[c]);
      for (HugePageMeta* p = deadlines_.first(c); p != nullptr; p = p->active_next)
        if (p->kind == PageKind::kBlocks) f(p);
    }
  };
  each_page([&](HugePageMeta* p) {
    live_by_class[p->lifetime_class] += demand.add(p);
    ++pages_by_class[p->lifetime_class];
  });
  demand.high = blocks_high_;
  if (only_after_fall) {
    // Not a pass of the sweeper's clock for the class review and the page cache, which count those.
    // (Again under this lock: another thread may have taken blocks since the count was read.)
    bool fell = subrelease_.fell_from_high(demand.high, demand.in_use);
    size_t done = fell ? subrelease_.after_fall(each_page, demand) : 0;
    debug_check();
    return done;
  }
  review_model_classes(live_by_class, pages_by_class);
  size_t done = subrelease_.pass(each_page, demand, now, demand_passes, threads_quiet, retaken_blocks);
  blocks_high_ = blocks_in_use_;  // a new period
  page_cache_.trim(huge_pages_in_use(), now);
  debug_check();
  return done;
}

}  // namespace llamalloc
