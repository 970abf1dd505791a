// The page cache (HeapConfig::page_cache_pages): runs of free huge pages kept backed for reuse by the next huge
// object or page the page heap opens, as the HugeCache of the TCMalloc paper does. Rules: only whole backed pages
// are cached (a freed huge object's pages; emptied pages of blocks go back at once); the cache holds at most
// page_cache_pages, oldest runs given back first; a huge object that no run fits first gives back as many cached
// pages as it takes, so that the cache never adds to what the page heap would hold without it; each subrelease
// pass trims the cache to recent demand (trim_page_cache); and where passes may stop at any time, each free keeps
// it within the share of the pages in use that a pass leaves (HeapConfig::page_cache_bounded_by_use). Cached
// pages count in page_cache_bytes, never in the footprint.
#include <cstring>

#include "page_heap/page_heap.h"

namespace llamalloc {

void PageHeap::set_page_cache_pages(unsigned pages, bool bounded_by_use) {
  LockGuard g(lock_);
  config_.page_cache_pages = pages;
  config_.page_cache_bounded_by_use = bounded_by_use;
  size_t limit = page_cache_limit();
  while (cached_runs_ > 0 && gauges_.page_cache_bytes / kHugePageBytes > limit) release_cached_run(0);
}

size_t PageHeap::page_cache_limit() const {
  size_t limit = config_.page_cache_pages;
  if (config_.page_cache_bounded_by_use) {
    size_t share = gauges_.footprint_bytes / kHugePageBytes / kPageCacheUseShare;
    limit = share < limit ? share : limit;
  }
  return limit;
}

void PageHeap::cache_or_release(Region* r, size_t index, size_t pages) {
  size_t cached = gauges_.page_cache_bytes / kHugePageBytes;
  size_t limit = page_cache_limit();
  bool keep = pages <= limit;
  if (!keep) give_back_pages(r, index, pages);
  // Room, or within a limit that fell with the pages in use: the oldest runs go back first.
  while (cached_runs_ > 0 && cached + (keep ? pages : 0) > limit) {
    cached -= cached_[0].pages;
    release_cached_run(0);
  }
  if (!keep) return;
  gauges_.page_cache_bytes += pages * kHugePageBytes;
  // Right after the newest run of the same region: one run (the pages of a big object freed page by page).
  if (cached_runs_ > 0) {
    CachedRun& last = cached_[cached_runs_ - 1];
    if (last.region == r && last.index + last.pages == index) {
      last.pages += uint32_t(pages);
      return;
    }
  }
  if (cached_runs_ == kMaxCachedRuns) release_cached_run(0);
  cached_[cached_runs_++] = CachedRun{r, uint32_t(index), uint32_t(pages)};
}

void PageHeap::release_cached_run(unsigned i) {
  CachedRun run = cached_[i];
  memmove(&cached_[i], &cached_[i + 1], sizeof(CachedRun) * (cached_runs_ - i - 1));
  --cached_runs_;
  gauges_.page_cache_bytes -= run.pages * kHugePageBytes;
  give_back_pages(run.region, run.index, run.pages);
}

bool PageHeap::take_cached(size_t pages, size_t align_pages, Region** r, size_t* index) {
  pages_taken_ += pages;
  // Newest first (its memory is the likeliest to be in cache), a run of exactly the size asked first (a huge
  // object keeps finding the runs that objects of its size left); a huge object takes the front of a longer
  // run, a page of blocks the back of one.
  for (bool exact : {true, false}) {
    for (unsigned i = cached_runs_; i-- > 0;) {
      CachedRun& run = cached_[i];
      if (exact ? run.pages != pages : run.pages < pages) continue;
      size_t at = pages == 1 ? run.index + run.pages - 1 : run.index;
      if (at % align_pages != 0) continue;
      *r = run.region;
      *index = at;
      if (at == run.index) run.index += uint32_t(pages);
      run.pages -= uint32_t(pages);
      if (run.pages == 0) {
        memmove(&cached_[i], &cached_[i + 1], sizeof(CachedRun) * (cached_runs_ - i - 1));
        --cached_runs_;
      }
      gauges_.page_cache_bytes -= pages * kHugePageBytes;
      counters_.huge_pages_reused.fetch_add(pages, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

size_t PageHeap::trim_page_cache(bool now) {
  // Called under the lock, once per subrelease pass.
  uint64_t in_use = gauges_.footprint_bytes / kHugePageBytes;
  unsigned slot = (demand_passes_ - 1) % kPageCachePasses;
  page_demand_[slot] = in_use;
  pages_taken_by_pass_[slot] = pages_taken_;
  pages_taken_ = 0;
  uint64_t peak = in_use, taken = 0;
  for (unsigned i = 0; i < kPageCachePasses; ++i) {
    peak = page_demand_[i] > peak ? page_demand_[i] : peak;
    taken = pages_taken_by_pass_[i] > taken ? pages_taken_by_pass_[i] : taken;
  }
  uint64_t keep = now ? 0 : peak - in_use > taken ? peak - in_use : taken;
  if (keep > in_use / kPageCacheUseShare) keep = in_use / kPageCacheUseShare;
  uint64_t cached = gauges_.page_cache_bytes / kHugePageBytes;
  return cached > keep ? release_cached_pages(cached - keep) : 0;
}

size_t PageHeap::release_cached_pages(uint64_t pages) {
  size_t released = 0;
  while (cached_runs_ > 0 && released < pages) {
    uint64_t excess = pages - released;
    CachedRun& oldest = cached_[0];
    if (oldest.pages > excess) {
      // Part of the oldest run: its first pages.
      give_back_pages(oldest.region, oldest.index, excess);
      oldest.index += uint32_t(excess);
      oldest.pages -= uint32_t(excess);
      gauges_.page_cache_bytes -= excess * kHugePageBytes;
      return released + excess;
    }
    released += oldest.pages;
    release_cached_run(0);
  }
  return released;
}

}  // namespace llamalloc
