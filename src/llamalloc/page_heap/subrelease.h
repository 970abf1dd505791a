// Subrelease (HeapConfig::subrelease_percent; docs/heap-memory.md, "Subrelease"), as in the subrelease paper
// (docs/references.md): the free blocks of sparse, idle huge pages go back to the OS while the pages stay in use,
// on 4 KiB pages; and span purge, the 4 KiB pages inside a thread heap's sparse spans given back. A component of
// the page heap (PageHeap holds one), tested alone with a fake platform (tests/heap/subrelease_test.cc). Its clock
// is the sweeper's passes. Rules:
// - A pass gives back only what the pages hold beyond the most blocks in use over the last kDemandPasses passes,
//   so that a load that comes back finds its memory still there; sparsest pages first (at most 1/16 of their
//   blocks in use, then 1/8, 1/4, 1/2, then up to `percent` of them); only pages from which at most
//   kIdleTakenBlocks blocks were taken since the previous pass (idle), or that are on 4 KiB pages (no huge page to
//   keep whole: on_small_pages), and of those only the free blocks not taken in that period. A live block is never
//   given back. Every pass then starts a new period (clears `taken`).
//   `now` (llamalloc_collect): every free block of every sparse page, idle or not, whatever the recent demand.
// - A quiet pass (the thread heaps ran at most kQuietSlowPaths slow paths and the pages took at most
//   kQuietTakenBlocks blocks since the previous pass, neither counting those that took again the spans the last
//   sweep took, and hold no more in use than then) gives back the free blocks of pages up to `quiet_percent` of
//   their blocks in use instead of `percent`, and span purge takes the same bound until the next pass that is not
//   quiet: a program that has gone quiet after a peak keeps its survivors' pages on 4 KiB pages, which cost
//   nothing in TLB reach while nothing runs, and a load that comes back takes blocks again, ending the quiet.
// - At a thread's exit after the blocks in use fell (kDropBlocks) from the most in use at once over the demand
//   window's periods and since (after_fall): the free blocks of pages up to `quiet_percent` in use beyond the
//   blocks in use now, taken in the period or not -- a batch's end, when what it freed should go back before
//   its threads' joins return.
// - A page with blocks or span pages given back is kept from being collapsed into a huge page again (at most
//   kMaxNoHugePages pages, for the kernel's map count) until all of them are backed again.
// - What goes back is counted: gauges.subreleased_bytes and span_purged_bytes (while given back),
//   counters.blocks_subreleased and span_pages_purged (ever).
// Not thread-safe: the page heap calls it under its lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"
#include "page_heap/page_meta.h"
#include "pal/pal.h"
#include "stats.h"

namespace llamalloc {

class Subrelease {
 public:
  // Passes whose demand bounds what a pass gives back (at 250 ms a pass, half a second).
  static constexpr unsigned kDemandPasses = 2;
  // A page from which at most this many blocks were taken since the previous pass counts as idle (its other free
  // blocks may go back): a steady server's sweep gives back a span and its next request takes one again, which
  // would keep a long-lived class's mostly empty open page (all 2 MiB resident) from ever being idle. A page
  // being filled takes more than this per period, and keeps its huge page whole.
  static constexpr size_t kIdleTakenBlocks = 16;
  // Pages kept from khugepaged (HugePageMeta::no_huge_page) at most. Each splits its VMA in up to three, and a
  // process has at most vm.max_map_count (65530 by default) of them: beyond this many, a subreleased page is left
  // as it is (khugepaged may fill it again).
  static constexpr uint32_t kMaxNoHugePages = 8192;
  // A pass whose pages took at most this many blocks since the previous one (512 KiB in a sweep period: a
  // monitoring probe, a timer's buffers) is quiet, if their blocks in use did not grow.
  static constexpr size_t kQuietTakenBlocks = 64;
  // ... and whose thread heaps ran at most this many slow paths (a program busy inside its spans takes no block
  // from the page heap, but refills and flushes them: larson's threads run thousands a period).
  static constexpr uint64_t kQuietSlowPaths = 64;
  // A pass whose blocks in use fell by at least a quarter, and by at least this many blocks (two huge pages),
  // since the previous one saw a drop: the sweeper runs the next pass after a fifth of its period, so that a
  // program that went quiet after its peak gets the peak's memory back in tens of milliseconds instead of two
  // periods (the demand of the pass before the drop bounds what the pass that saw it may give back).
  static constexpr size_t kDropBlocks = 2 * kBlocksPerHugePage;

  // Gives memory back through `platform`; counts into `gauges` and `counters` (above).
  constexpr Subrelease(Platform& platform, Gauges& gauges, Counters& counters)
      : platform_(platform), gauges_(gauges), counters_(counters) {}
  Subrelease(const Subrelease&) = delete;
  Subrelease& operator=(const Subrelease&) = delete;

  // The largest share of a page's blocks in use, in percent, at which its free blocks may go back; 0: never.
  // quiet_percent: the same on a quiet pass (at least `percent`; 0 or below `percent`: `percent`).
  // small_pages_first: pages are backed by 4 KiB pages until collapsed or advised huge (HeapConfig::collapse_dense).
  constexpr void configure(unsigned percent, unsigned quiet_percent = 0, bool small_pages_first = false) {
    percent_ = percent;
    quiet_percent_ = quiet_percent > percent ? quiet_percent : percent;
    small_pages_first_ = small_pages_first;
  }
  // Whether the last pass was quiet, and the share of a span's blocks in use up to which span purge may give its
  // free pages back until the next pass (0: never). Read by thread heaps without the page heap's lock.
  bool quiet() const { return quiet_.load(std::memory_order_relaxed); }
  // Whether the last pass saw a drop (kDropBlocks).
  bool dropped() const { return dropped_; }
  // Whether `in_use` blocks in use now would be a drop (kDropBlocks) from the last pass's.
  bool fell_to(size_t in_use) const {
    return falls(passes_ != 0 ? demand_[(passes_ - 1) % kDemandPasses] : 0, in_use);
  }
  unsigned span_purge_percent() const { return percent_ == 0 ? 0 : quiet() ? quiet_percent_ : percent_; }

  // A pass's demand, summed over the pages of blocks in use: their blocks in use, and those not given back.
  struct Demand {
    size_t in_use = 0;
    size_t backed = 0;
    size_t taken = 0;  // blocks taken since the previous pass
    size_t high = 0;   // the most blocks in use at once since the previous pass (the page heap's count)
    // Adds page p; returns its blocks in use.
    size_t add(const HugePageMeta* p) {
      size_t live = p->live.count();
      in_use += live;
      taken += p->taken.count();
      backed += kBlocksPerHugePage - p->released.count();
      return live;
    }
  };
  // One pass over the pages of blocks in use (open and active): `each_page(f)` calls f(HugePageMeta*) on each,
  // `demand` is theirs now. Demand over the last `demand_passes` passes (at most kDemandPasses; the slow paths'
  // passes of a process without a sweeper thread use 1: no pass may follow the last one before a quiet phase).
  // Returns the blocks given back.
  // threads_quiet: the thread heaps ran at most kQuietSlowPaths slow paths since the last pass (the caller counts
  // them; false where it cannot tell). A pass is quiet only then. retaken_blocks: of the blocks taken since the
  // last pass, at most this many took again spans the sweep took from working threads (their empty spans, which
  // the next request takes again): the sweep's cost, not the program's, so they count against kQuietTakenBlocks
  // no more than their slow paths count against kQuietSlowPaths.
  template <typename EachPage>
  size_t pass(EachPage&& each_page, const Demand& demand, bool now, unsigned demand_passes, bool threads_quiet = false,
              uint64_t retaken_blocks = 0);
  // Whether `in_use` blocks in use now fell (kDropBlocks) from the most in use at once over the demand window's
  // periods and since (`high`, the page heap's count since the last pass): not from the passes' own counts, since
  // passes that came between a load's spikes saw only its valleys, and one that came between a batch's frees and
  // its threads' exits saw the fall but gave back little (the window held the peak).
  bool fell_from_high(size_t high, size_t in_use) const {
    for (unsigned i = 1; i <= kDemandPasses && i <= passes_; ++i)
      high = high_[(passes_ - i) % kDemandPasses] > high ? high_[(passes_ - i) % kDemandPasses] : high;
    return falls(high, in_use);
  }
  // After such a fall (PageHeap::subrelease_after_fall, at a thread's exit): the free blocks of pages up to the
  // quiet bound beyond the blocks in use now, taken in the period or not, of idle pages or not -- the load that
  // took them is what fell, and what stays is its survivors, whose pages are often more than half full (the quiet
  // pass's reason; query-spikes-cache kept 2.4 MiB of such holes until the sweeper's first quiet pass). Not a pass
  // of the sweeper's clock: the demand window, the quiet state and the blocks taken in the period stay as the last
  // pass left them, so that the next pass judges the period whole, and each later exit of the same fall gives back
  // what it freed. Returns the blocks given back.
  template <typename EachPage>
  size_t after_fall(EachPage&& each_page, const Demand& demand);

  // Gives back the free blocks of p not given back yet, at most `budget`, and not those taken since the last pass
  // (unless `now`); returns how many.
  size_t release_free_blocks(HugePageMeta* p, size_t budget, bool now);
  // Blocks [first, first + count) of p are backed again (taken), or dropped with the page: off the gauge.
  void unrelease(HugePageMeta* p, size_t first, size_t count);
  // The free blocks of p, a page fresh from the address space that nothing has touched, count as given back, and
  // p is kept off huge pages, before its first object is written: the kernel then backs only the 4 KiB pages
  // the program touches. Taken again, they are backed again as any subreleased block (unrelease).
  void leave_unbacked(HugePageMeta* p);

  // Span purge: the 4 KiB pages [start, start + bytes) inside p, in a span whose objects on them are all free, go
  // back; forgotten: `pages` of them are backed again, or their span goes back whole.
  void purge_span_pages(HugePageMeta* p, uintptr_t start, size_t bytes);
  void span_purge_forgotten(HugePageMeta* p, size_t pages);

  // Pages kept from being collapsed into a huge page now.
  uint32_t pages_kept_from_khugepaged() const { return no_huge_pages_; }

 private:
  // Keeps p from being collapsed into a huge page again, up to kMaxNoHugePages pages; and lets it be once no
  // block and no span's page of it is given back any more.
  void keep_from_khugepaged(HugePageMeta* p);
  void allow_huge_page_again(HugePageMeta* p);
  static uintptr_t address_of(const HugePageMeta* p) { return p->region->page_address(p->index); }
  // Gives back at most `budget` free blocks of the pages with at most `percent` of their blocks in use, sparsest
  // first; of busy pages too (not only idle ones, or those on_small_pages) with busy_pages, and the blocks taken
  // in the period too with taken_blocks. Returns how many.
  template <typename EachPage>
  size_t release_sparsest(EachPage&& each_page, size_t budget, unsigned percent, bool busy_pages, bool taken_blocks);
  // A page on 4 KiB pages (pages start so, and this one was neither advised huge nor collapsed): it has no huge
  // page to keep whole, so the blocks taken from it since the last pass do not keep its other free blocks resident.
  bool on_small_pages(const HugePageMeta* p) const { return small_pages_first_ && !p->huge_backed && !p->huge_advised; }

  Platform& platform_;
  Gauges& gauges_;
  Counters& counters_;
  unsigned percent_ = 50;
  unsigned quiet_percent_ = 50;
  std::atomic<bool> quiet_{false};
  bool dropped_ = false;
  bool small_pages_first_ = false;
  // From `before` blocks in use to `in_use`: a drop (kDropBlocks).
  static bool falls(size_t before, size_t in_use) { return before >= in_use + kDropBlocks && in_use * 4 <= before * 3; }
  // Blocks in use at each of the last kDemandPasses passes (a ring), and the pass count.
  uint32_t demand_[kDemandPasses] = {};
  // The most blocks in use at once in the periods that ended at those passes (Demand::high).
  uint32_t high_[kDemandPasses] = {};
  uint32_t passes_ = 0;
  uint32_t no_huge_pages_ = 0;
};

template <typename EachPage>
size_t Subrelease::pass(EachPage&& each_page, const Demand& demand, bool now, unsigned demand_passes,
                        bool threads_quiet, uint64_t retaken_blocks) {
  bool quiet = threads_quiet && passes_ != 0 && demand.taken <= kQuietTakenBlocks + retaken_blocks &&
               demand.in_use <= demand_[(passes_ - 1) % kDemandPasses];
  quiet_.store(quiet, std::memory_order_relaxed);
  dropped_ = fell_to(demand.in_use);
  high_[passes_ % kDemandPasses] = uint32_t(demand.high > demand.in_use ? demand.high : demand.in_use);
  demand_[passes_++ % kDemandPasses] = uint32_t(demand.in_use);
  size_t peak = demand.in_use;
  for (unsigned i = 1; i <= demand_passes && i <= kDemandPasses; ++i) {
    uint32_t d = demand_[(passes_ - i) % kDemandPasses];
    peak = d > peak ? d : peak;
  }
  size_t budget = now ? ~size_t{0} : (demand.backed > peak ? demand.backed - peak : 0);
  size_t done = release_sparsest(each_page, budget, quiet ? quiet_percent_ : percent_, now, now);
  // The blocks taken from now to the next pass (the page heap sets them as it hands blocks out).
  each_page([](HugePageMeta* p) { p->taken = Bitmap256{}; });
  return done;
}

template <typename EachPage>
size_t Subrelease::after_fall(EachPage&& each_page, const Demand& demand) {
  size_t budget = demand.backed > demand.in_use ? demand.backed - demand.in_use : 0;
  return release_sparsest(each_page, budget, quiet_percent_, true, true);
}

template <typename EachPage>
size_t Subrelease::release_sparsest(EachPage&& each_page, size_t budget, unsigned percent, bool busy_pages,
                                    bool taken_blocks) {
  size_t done = 0;
  if (percent_ == 0 || budget == 0) return 0;
  size_t limit = kBlocksPerHugePage * percent / 100;
  // Sparsest first: pages with at most 1/16 of their blocks in use, then 1/8, 1/4, 1/2, then up to the limit.
  for (size_t bound = kBlocksPerHugePage / 16;; bound *= 2) {
    size_t b = bound < limit ? bound : limit;
    each_page([&](HugePageMeta* p) {
      if (done < budget && (busy_pages || p->taken.count() <= kIdleTakenBlocks || on_small_pages(p)) &&
          p->live.count() <= b)
        done += release_free_blocks(p, budget - done, taken_blocks);
    });
    if (b == limit) break;
  }
  return done;
}

}  // namespace llamalloc
