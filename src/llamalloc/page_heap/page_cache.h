// The page cache (HeapConfig::page_cache_pages; docs/heap-memory.md, "Page cache"): runs of free huge pages kept
// backed for reuse by the next huge object or page the page heap opens, as the HugeCache of the TCMalloc paper
// does. A component of the page heap (PageHeap holds one), tested alone with a fake page sink
// (tests/heap/page_cache_test.cc). Its clock is the sweeper's passes (trim, once a pass). Rules:
// - It holds whole backed pages that its owner put there (the owner decides which: the page heap puts a freed
//   huge object's pages, never an emptied page of blocks), at most its limit: max_pages, and with bounded_by_use
//   also the pages in use / kUseShare (kTurnoverUseShare while huge objects turn over) at every put. A run longer
//   than the limit goes back at once; beyond it the oldest runs go back first.
// - Whatever the pages in use, the cache may hold the recent demand allowance: the pages of the largest single
//   take of a huge object (hit or miss; more than one page) in the current period and the last kPasses, up to kMaxDemandPages. A program that replaces
//   one big buffer again and again while it holds little else (an I/O buffer, a per-request arena) then reuses its
//   pages instead of mapping and faulting in fresh ones each time; when it goes quiet it keeps at most that one
//   buffer's pages, as glibc keeps its top chunk below its trim threshold.
// - A run put beside a cached run of the same region (before or after it) joins it; the joined run is the newest.
// - take() gives the run of fewest pages that holds the object, the newest of those, from its front (its
//   alignment allowed); a single page comes from the back of such a run (a one-page run first).
// - Each pass (trim) records the pages in use and the pages taken since the last pass, then gives back, oldest
//   first, the cached pages beyond the larger of how far the pages in use are below their highest and the most
//   pages taken in one period, over the last kPasses passes, and never more than the pages in use / kUseShare
//   (kTurnoverUseShare while huge objects turn over; or, bounded by use, the demand allowance if larger); all of
//   them with `now`.
// - Pages go back through the PageSink, and are counted in gauges.page_cache_bytes and counters.huge_pages_reused;
//   cached pages are in no footprint (they hold no live byte).
// Not thread-safe: the page heap calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "config.h"
#include "page_heap/page_meta.h"
#include "stats.h"

namespace llamalloc {

// Where the page cache's pages go back to (the page heap: its regions' free pages and the OS).
class PageSink {
 public:
  // Gives [index, index + pages) of r back.
  virtual void give_back(Region* r, size_t index, size_t pages) = 0;

 protected:
  ~PageSink() = default;
};

class PageCache {
 public:
  // Passes whose demand a trim looks back over.
  static constexpr unsigned kPasses = 4;
  // A pass keeps at most the pages in use divided by this: a server past its peak, with a few MiB in use and a
  // few buffers a second, would otherwise keep several cached pages (2 MiB of RSS each) for what those few buffers
  // reuse; its steady RSS falls as this rises, and the reuse it gives up is small.
  static constexpr unsigned kUseShare = 8;
  // While huge objects turn over, the pages huge objects freed and the pages they took over the last kPasses periods
  // both reaching the pages in use, the share is the pages in use divided by this instead: a program that replaces
  // big buffers of random sizes among live ones finds a cached run that fits only when the cache holds several
  // buffers' pages (mimalloc-bench's malloc-large, 200 pages in use: the kernel zeroed 7.3 GiB of fresh pages at
  // an eighth, 2.9 GiB at half, for the same peak, since a take that misses gives back as many cached pages as it
  // backs). A server that replaces a few buffers a second frees and takes far fewer pages than it holds; a program
  // that grows by big objects frees none, one that falls from its peak takes none: they keep the eighth.
  static constexpr unsigned kTurnoverUseShare = 2;
  // Runs held at most (beyond them the oldest goes back).
  static constexpr unsigned kMaxRuns = 512;
  // The most pages the demand allowance keeps (16 MiB; above): enough for the buffers servers replace whole
  // (glibc serves those up to 32 MiB from its heap too), little beside a quiet process's RSS.
  static constexpr unsigned kMaxDemandPages = 8;

  struct Run {
    Region* region;
    uint32_t index;
    uint32_t pages;
  };

  // Gives pages back through `sink`; counts into gauges.page_cache_bytes and counters.huge_pages_reused.
  constexpr PageCache(PageSink& sink, Gauges& gauges, Counters& counters)
      : sink_(sink), gauges_(gauges), counters_(counters) {}
  PageCache(const PageCache&) = delete;
  PageCache& operator=(const PageCache&) = delete;

  // The limits (0 pages: off), before anything is cached; set_limits() applies them to what is.
  constexpr void configure(unsigned max_pages, bool bounded_by_use) {
    max_pages_ = max_pages;
    bounded_by_use_ = bounded_by_use;
  }
  // New limits, giving back the oldest runs beyond them (all of them for 0), with `in_use` pages in use.
  void set_limits(unsigned max_pages, bool bounded_by_use, size_t in_use);
  // The most pages the cache may hold with `in_use` pages in use.
  size_t limit(size_t in_use) const;
  // The demand allowance (above): pages the cache may keep whatever the pages in use.
  size_t demand_allowance() const;
  // kUseShare, or kTurnoverUseShare while huge objects turn over (above), with `in_use` pages in use.
  unsigned use_share(size_t in_use) const;

  // Keeps [index, index + pages) of r (free, backed) for reuse, or gives it back when the cache is off or the run
  // is longer than the limit; `in_use`: the pages in use after it was freed.
  void put(Region* r, size_t index, size_t pages, size_t in_use);
  // `pages` contiguous cached pages aligned to align_pages: true with their region and index.
  bool take(size_t pages, size_t align_pages, Region** r, size_t* index);
  // Takes run i out of the cache whole, counted as reused: for an object that takes the free pages beside it too
  // (PageHeap::take_cached_around).
  void take_run(unsigned i);
  // Gives back up to `pages` cached pages, oldest first (the first pages of a run if it is longer). Returns the
  // pages given back.
  size_t release(uint64_t pages);
  // One pass (the sweeper's, once a period; every pass of the page heap's subrelease): records the pass's demand
  // and gives back what the next period may not want (above). Returns the pages given back.
  size_t trim(size_t in_use, bool now);

  size_t pages() const { return gauges_.page_cache_bytes / kHugePageBytes; }
  unsigned runs() const { return run_count_; }
  const Run& run(unsigned i) const { return runs_[i]; }

 private:
  void release_run(unsigned i);

  PageSink& sink_;
  Gauges& gauges_;
  Counters& counters_;
  unsigned max_pages_ = 0;
  bool bounded_by_use_ = false;
  // Oldest first.
  Run runs_[kMaxRuns] = {};
  unsigned run_count_ = 0;
  uint32_t passes_ = 0;
  // The pages in use at each of the last kPasses passes; the pages taken since the last pass, and in each of the
  // last kPasses periods.
  uint64_t demand_[kPasses] = {};
  uint64_t taken_ = 0;
  uint64_t taken_by_pass_[kPasses] = {};
  // The largest single take since the last pass, and in each of the last kPasses periods.
  uint64_t largest_ = 0;
  uint64_t largest_by_pass_[kPasses] = {};
  // Pages of freed huge objects put (kept or not) since the last pass, and in each of the last kPasses periods.
  uint64_t freed_ = 0;
  uint64_t freed_by_pass_[kPasses] = {};
  // Pages taken by huge objects (takes of more than one page, hit or miss), likewise.
  uint64_t huge_taken_ = 0;
  uint64_t huge_taken_by_pass_[kPasses] = {};
};

}  // namespace llamalloc
