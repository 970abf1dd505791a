// The page cache (the PageCache component, page_cache.h; its rules are there) and the page heap's side of it:
// changing its limits under the page heap lock, and its pages going back to the regions (give_back_pages).
#include "page_heap/page_cache.h"

#include <cstring>

#include "page_heap/page_heap.h"

namespace llamalloc {

size_t PageCache::demand_allowance() const {
  uint64_t largest = largest_;
  for (uint64_t l : largest_by_pass_) largest = l > largest ? l : largest;
  return largest < kMaxDemandPages ? size_t(largest) : kMaxDemandPages;
}

unsigned PageCache::use_share(size_t in_use) const {
  uint64_t freed = freed_, taken = huge_taken_;
  for (unsigned i = 0; i < kPasses; ++i) {
    freed += freed_by_pass_[i];
    taken += huge_taken_by_pass_[i];
  }
  return freed >= in_use && taken >= in_use && in_use != 0 ? kTurnoverUseShare : kUseShare;
}

size_t PageCache::limit(size_t in_use) const {
  size_t limit = max_pages_;
  if (bounded_by_use_) {
    size_t share = in_use / use_share(in_use), allowance = demand_allowance();
    share = share > allowance ? share : allowance;
    limit = share < limit ? share : limit;
  }
  return limit;
}

void PageCache::set_limits(unsigned max_pages, bool bounded_by_use, size_t in_use) {
  configure(max_pages, bounded_by_use);
  size_t most = limit(in_use);
  while (run_count_ > 0 && pages() > most) release_run(0);
}

void PageCache::put(Region* r, size_t index, size_t pages, size_t in_use) {
  freed_ += pages;
  size_t cached = this->pages();
  size_t most = limit(in_use);
  bool keep = pages <= most;
  if (!keep) sink_.give_back(r, index, pages);
  // Room, or within a limit that fell with the pages in use: the oldest runs go back first.
  while (run_count_ > 0 && cached + (keep ? pages : 0) > most) {
    cached -= runs_[0].pages;
    release_run(0);
  }
  if (!keep) return;
  gauges_.page_cache_bytes += pages * kHugePageBytes;
  // A run next to a cached run of the same region (before or after it) joins it, and the joined run is the
  // newest: a program that frees big buffers among live ones leaves runs that its neighbours' frees extend, and
  // one run serves a longer object that two could not.
  Run joined{r, uint32_t(index), uint32_t(pages)};
  for (unsigned i = run_count_; i-- > 0;) {
    const Run& run = runs_[i];
    if (run.region != joined.region) continue;
    if (run.index + run.pages == joined.index) {
      joined.index = run.index;
    } else if (joined.index + joined.pages != run.index) {
      continue;
    }
    joined.pages += run.pages;
    memmove(&runs_[i], &runs_[i + 1], sizeof(Run) * (run_count_ - i - 1));
    --run_count_;
  }
  if (run_count_ == kMaxRuns) release_run(0);
  runs_[run_count_++] = joined;
}

void PageCache::take_run(unsigned i) {
  Run run = runs_[i];
  memmove(&runs_[i], &runs_[i + 1], sizeof(Run) * (run_count_ - i - 1));
  --run_count_;
  // (Counted as taken by the take() that missed before it.)
  gauges_.page_cache_bytes -= run.pages * kHugePageBytes;
  counters_.huge_pages_reused.fetch_add(run.pages, std::memory_order_relaxed);
}

void PageCache::release_run(unsigned i) {
  Run run = runs_[i];
  memmove(&runs_[i], &runs_[i + 1], sizeof(Run) * (run_count_ - i - 1));
  --run_count_;
  gauges_.page_cache_bytes -= run.pages * kHugePageBytes;
  sink_.give_back(run.region, run.index, run.pages);
}

bool PageCache::take(size_t pages, size_t align_pages, Region** r, size_t* index) {
  taken_ += pages;
  // Only huge objects' takes make the demand allowance (a page of blocks takes one page).
  if (pages > 1 && pages > largest_) largest_ = pages;
  if (pages > 1) huge_taken_ += pages;
  // The run of fewest pages that holds the object, the newest of those (its memory is the likeliest to be in
  // cache), so that longer runs stay for longer objects: a huge object from its front, a page of blocks from its
  // back (a one-page run first).
  unsigned best = run_count_;
  size_t best_at = 0;
  for (unsigned i = run_count_; i-- > 0;) {
    const Run& run = runs_[i];
    if (run.pages < pages) continue;
    size_t at = pages == 1 ? run.index + run.pages - 1 : run.index;
    if (at % align_pages != 0) continue;
    if (best != run_count_ && runs_[best].pages <= run.pages) continue;
    best = i;
    best_at = at;
    if (run.pages == pages) break;
  }
  if (best == run_count_) return false;
  Run& run = runs_[best];
  *r = run.region;
  *index = best_at;
  if (best_at == run.index) run.index += uint32_t(pages);
  run.pages -= uint32_t(pages);
  if (run.pages == 0) {
    memmove(&runs_[best], &runs_[best + 1], sizeof(Run) * (run_count_ - best - 1));
    --run_count_;
  }
  gauges_.page_cache_bytes -= pages * kHugePageBytes;
  counters_.huge_pages_reused.fetch_add(pages, std::memory_order_relaxed);
  return true;
}

size_t PageCache::trim(size_t in_use, bool now) {
  unsigned slot = passes_++ % kPasses;
  demand_[slot] = in_use;
  taken_by_pass_[slot] = taken_;
  taken_ = 0;
  largest_by_pass_[slot] = largest_;
  largest_ = 0;
  freed_by_pass_[slot] = freed_;
  freed_ = 0;
  huge_taken_by_pass_[slot] = huge_taken_;
  huge_taken_ = 0;
  uint64_t peak = in_use, taken = 0;
  for (unsigned i = 0; i < kPasses; ++i) {
    peak = demand_[i] > peak ? demand_[i] : peak;
    taken = taken_by_pass_[i] > taken ? taken_by_pass_[i] : taken;
  }
  uint64_t keep = now ? 0 : peak - in_use > taken ? peak - in_use : taken;
  // The demand allowance only bounded by use (no sweeper): with a sweeper, the parked object serves the buffer a
  // program replaces, and the cache holds no more than a pass leaves between passes anyway.
  uint64_t most = in_use / use_share(in_use), allowance = bounded_by_use_ ? demand_allowance() : 0;
  most = most > allowance ? most : allowance;
  if (keep > most) keep = most;
  if (keep > max_pages_) keep = max_pages_;
  uint64_t cached = pages();
  return cached > keep ? release(cached - keep) : 0;
}

size_t PageCache::release(uint64_t pages) {
  size_t released = 0;
  while (run_count_ > 0 && released < pages) {
    uint64_t excess = pages - released;
    Run& oldest = runs_[0];
    if (oldest.pages > excess) {
      // Part of the oldest run: its first pages.
      sink_.give_back(oldest.region, oldest.index, excess);
      oldest.index += uint32_t(excess);
      oldest.pages -= uint32_t(excess);
      gauges_.page_cache_bytes -= excess * kHugePageBytes;
      return released + excess;
    }
    released += oldest.pages;
    release_run(0);
  }
  return released;
}

void PageHeap::CacheSink::give_back(Region* r, size_t index, size_t pages) { heap->give_back_pages(r, index, pages); }

void PageHeap::set_page_cache_pages(unsigned pages, bool bounded_by_use) {
  parking_.store(pages != 0, std::memory_order_relaxed);
  if (pages == 0) flush_parked_huge(true);
  LockGuard g(lock_);
  config_.page_cache_pages = pages;
  config_.page_cache_bounded_by_use = bounded_by_use;
  page_cache_.set_limits(pages, bounded_by_use, huge_pages_in_use());
}

}  // namespace llamalloc
