// The PageCache component (page_heap/page_cache.h) alone, with a fake page sink that records what goes back to the
// OS, without a page heap. Its clock is the sweeper's passes: each trim() is one period. Tested: runs kept up to
// the limit and the oldest given back beyond it, reuse of the fewest pages that fit, joining, release oldest first, the
// passes giving back what recent demand does not need, the share of the pages in use, turning it off.
#include <gtest/gtest.h>

#include <vector>

#include "page_heap/page_cache.h"

namespace llamalloc::testing {
namespace {

struct Given {
  Region* region;
  size_t index, pages;
  bool operator==(const Given&) const = default;
};

class FakeSink final : public PageSink {
 public:
  void give_back(Region* r, size_t index, size_t pages) override { given.push_back({r, index, pages}); }
  size_t pages() const {
    size_t n = 0;
    for (const Given& g : given) n += g.pages;
    return n;
  }
  std::vector<Given> given;
};

class PageCacheTest : public ::testing::Test {
 protected:
  PageCacheTest() : cache(sink, gauges, counters) { cache.configure(16, false); }

  // Takes `pages` (alignment 1); the index taken, or ~0 when nothing fits.
  size_t take(size_t pages, size_t align_pages = 1, Region* expected_region = nullptr) {
    Region* r = nullptr;
    size_t index = 0;
    if (!cache.take(pages, align_pages, &r, &index)) return ~size_t{0};
    if (expected_region != nullptr) EXPECT_EQ(r, expected_region);
    return index;
  }

  Region regions[2] = {};  // (the cache never reads a region: only their addresses)
  Region* r0 = &regions[0];
  Region* r1 = &regions[1];
  FakeSink sink;
  Gauges gauges;
  Counters counters;
  PageCache cache;
};

TEST_F(PageCacheTest, KeepsFreedRunsUpToItsLimitAndGivesBackTheOldestBeyondIt) {
  cache.configure(8, false);
  cache.put(r0, 0, 3, 100);
  cache.put(r0, 10, 3, 100);
  EXPECT_EQ(cache.pages(), 6u);
  EXPECT_EQ(gauges.page_cache_bytes, 6 * kHugePageBytes);
  EXPECT_TRUE(sink.given.empty()) << "kept backed";
  cache.put(r0, 20, 3, 100);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 0, 3}})) << "the oldest run goes back first";
  EXPECT_EQ(cache.pages(), 6u);
  // A run longer than the limit goes back at once, and the cache keeps what it held.
  cache.put(r1, 0, 9, 100);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 0, 3}, {r1, 0, 9}}));
  EXPECT_EQ(cache.pages(), 6u);
  EXPECT_EQ(gauges.page_cache_bytes, 6 * kHugePageBytes);
}

TEST_F(PageCacheTest, TakesTheNewestRunOfFewestPagesThatHoldsTheObjectFromItsFront) {
  cache.put(r0, 0, 2, 100);
  cache.put(r0, 10, 3, 100);
  cache.put(r1, 20, 2, 100);
  EXPECT_EQ(take(2, 1, r1), 20u) << "newest of exactly 2";
  EXPECT_EQ(take(2, 1, r0), 0u) << "the older one of exactly 2";
  EXPECT_EQ(take(2, 1, r0), 10u) << "the front of the 3-page run";
  EXPECT_EQ(take(1, 1, r0), 12u) << "what is left of it";
  EXPECT_EQ(take(1), ~size_t{0}) << "empty";
  EXPECT_EQ(counters.huge_pages_reused.load(), 7u);
  EXPECT_EQ(gauges.page_cache_bytes, 0u);
  EXPECT_TRUE(sink.given.empty());
  // A single page (a new page of blocks) comes from a run's back; an alignment the run's front lacks is refused.
  cache.put(r0, 1, 4, 100);
  EXPECT_EQ(take(2, 2), ~size_t{0});
  EXPECT_EQ(take(1), 4u);
  EXPECT_EQ(take(2, 1), 1u);
  EXPECT_EQ(cache.pages(), 1u);
  // A longer run stays for a longer object: 4 pages from the 5-page run, not the newer 6-page one.
  cache.put(r1, 40, 5, 100);
  cache.put(r0, 30, 6, 100);
  EXPECT_EQ(take(4, 1, r1), 40u);
  EXPECT_EQ(take(6, 1, r0), 30u);
  // A page of blocks takes a one-page run before the back of a longer, newer one.
  cache.put(r1, 50, 1, 100);
  cache.put(r0, 60, 3, 100);
  EXPECT_EQ(take(1, 1, r1), 50u);
}

TEST_F(PageCacheTest, ARunBesideACachedRunOfItsRegionJoinsItBeforeOrAfterAndIsTheNewest) {
  cache.put(r0, 4, 2, 100);
  cache.put(r1, 6, 1, 100);  // another region: a run of its own, though its pages follow r0's run
  cache.put(r0, 2, 2, 100);  // before r0's run, which is no longer the newest
  cache.put(r0, 6, 1, 100);  // after it
  ASSERT_EQ(cache.runs(), 2u);
  EXPECT_EQ(cache.run(1).region, r0) << "the joined run is the newest";
  EXPECT_EQ(cache.run(1).index, 2u);
  EXPECT_EQ(cache.run(1).pages, 5u);
  EXPECT_EQ(take(5, 1, r0), 2u) << "the joined run serves an object of its whole length";
  EXPECT_EQ(cache.pages(), 1u);
}

// While huge objects turn over (freed and taken, each at least the pages in use over the last periods), the cache
// may hold half the pages in use instead of an eighth; a fall from the peak (no take) or growth (no free) keeps
// an eighth.
TEST_F(PageCacheTest, WhileHugeObjectsTurnOverTheCacheHoldsHalfThePagesInUse) {
  cache.configure(64, true);
  EXPECT_EQ(cache.limit(32), 32 / PageCache::kUseShare);
  cache.put(r0, 0, 40, 32);  // a fall: 40 pages freed, none taken
  EXPECT_EQ(cache.limit(32), 32 / PageCache::kUseShare);
  for (int i = 0; i < 8; ++i) {
    take(4);
    cache.put(r1, 4 * i, 4, 32);
  }
  EXPECT_EQ(cache.limit(32), 32 / PageCache::kTurnoverUseShare) << "32 pages taken and freed";
  // Once kPasses passes have seen neither, the eighth again.
  for (unsigned pass = 0; pass <= PageCache::kPasses; ++pass) cache.trim(32, false);
  EXPECT_EQ(cache.limit(32), 32 / PageCache::kUseShare);
}

TEST_F(PageCacheTest, ReleaseGivesBackTheOldestPagesFirstAndTheFrontOfALongerRun) {
  cache.put(r0, 0, 3, 100);
  cache.put(r1, 10, 3, 100);
  EXPECT_EQ(cache.release(4), 4u);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 0, 3}, {r1, 10, 1}}));
  ASSERT_EQ(cache.runs(), 1u);
  EXPECT_EQ(cache.run(0).index, 11u);
  EXPECT_EQ(cache.pages(), 2u);
  EXPECT_EQ(cache.release(10), 2u) << "no more than it holds";
  EXPECT_EQ(gauges.page_cache_bytes, 0u);
}

TEST_F(PageCacheTest, PassesKeepWhatOnePeriodTookUntilKPassesWentByWithout) {
  // 80 pages in use (a tenth may stay cached). A period takes 4 pages and frees them.
  cache.put(r0, 0, 4, 80);
  EXPECT_EQ(take(4), 0u);
  cache.put(r0, 0, 4, 80);
  // The next kPasses passes keep them for the next period; the one after, with no page taken in kPasses
  // periods, gives them back.
  for (unsigned pass = 0; pass < PageCache::kPasses; ++pass) EXPECT_EQ(cache.trim(80, false), 0u) << pass;
  EXPECT_EQ(cache.pages(), 4u);
  EXPECT_EQ(cache.trim(80, false), 4u);
  EXPECT_EQ(cache.pages(), 0u);
  EXPECT_EQ(sink.pages(), 4u);
}

TEST_F(PageCacheTest, APassKeepsWhatTheFallFromThePeakFreedButAtMostAShareOfThePagesInUse) {
  cache.configure(64, false);
  EXPECT_EQ(cache.trim(80, false), 0u);  // the peak: 80 pages in use
  cache.put(r0, 0, 20, 60);
  // 20 below the peak, but at most 60 / kUseShare.
  EXPECT_EQ(cache.trim(60, false), 20u - 60 / PageCache::kUseShare);
  EXPECT_EQ(cache.pages(), 60 / PageCache::kUseShare);
  // What the periods took is bounded the same way (a page at a time: pages of blocks, no demand allowance).
  cache.put(r1, 0, 12, 60);
  for (size_t i = 0; i < 12; ++i) EXPECT_NE(take(1), ~size_t{0});
  cache.put(r1, 0, 12, 60);
  cache.trim(16, false);
  EXPECT_EQ(cache.pages(), 16 / PageCache::kUseShare);
  // `now` (llamalloc_collect): all of it.
  EXPECT_EQ(cache.trim(16, true), 16 / PageCache::kUseShare);
  EXPECT_EQ(cache.pages(), 0u);
  EXPECT_EQ(sink.pages(), 20u + 12u);
}

// A huge object taken recently lets the cache hold its pages whatever the pages in use (up to kMaxDemandPages),
// so that a program that replaces one buffer while it holds little else reuses it; once kPasses passes saw no
// such take, the share of the pages in use bounds the cache again.
TEST_F(PageCacheTest, TheLargestRecentHugeObjectTakeMayStayCachedWhateverThePagesInUse) {
  cache.configure(64, true);
  EXPECT_EQ(cache.limit(0), 0u);
  EXPECT_EQ(take(3), ~size_t{0}) << "a miss is demand too";
  EXPECT_EQ(cache.limit(0), 3u);
  cache.put(r0, 0, 3, 0);
  EXPECT_EQ(cache.pages(), 3u) << "kept with nothing else in use";
  EXPECT_EQ(take(3), 0u);
  cache.put(r0, 0, 3, 0);
  EXPECT_EQ(take(1), 2u) << "a page of blocks takes the back of a run";
  EXPECT_EQ(cache.limit(0), 3u) << "single pages make no allowance";
  EXPECT_EQ(take(20), ~size_t{0});
  EXPECT_EQ(cache.limit(0), size_t{PageCache::kMaxDemandPages}) << "at most kMaxDemandPages";
  cache.put(r1, 0, 20, 0);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r1, 0, 20}})) << "longer than the allowance: back at once";
  // Passes keep the allowance while any of the last kPasses periods took one, then the cache empties.
  for (unsigned pass = 0; pass < PageCache::kPasses; ++pass) EXPECT_EQ(cache.trim(0, false), 0u) << pass;
  EXPECT_EQ(cache.pages(), 2u);
  EXPECT_EQ(cache.trim(0, false), 2u);
  EXPECT_EQ(cache.limit(0), 0u);
  EXPECT_EQ(cache.pages(), 0u);
}

TEST_F(PageCacheTest, BoundedByUseEachPutKeepsAtMostAShareOfThePagesInUse) {
  cache.configure(64, true);
  EXPECT_EQ(cache.limit(16), 16 / PageCache::kUseShare);
  cache.put(r0, 0, 2, 16);
  EXPECT_EQ(cache.pages(), 2u);
  cache.put(r0, 10, 3, 16);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 10, 3}})) << "more than 16 / 8: back at once";
  cache.put(r0, 20, 1, 8);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 10, 3}, {r0, 0, 2}})) << "8 in use keep 1: the oldest went";
  EXPECT_EQ(cache.pages(), 1u);
  cache.configure(64, false);
  EXPECT_EQ(cache.limit(16), 64u) << "unbounded: the configured limit";
}

TEST_F(PageCacheTest, NewLimitsGiveBackTheOldestBeyondThemAndZeroTurnsItOff) {
  cache.put(r0, 0, 3, 100);
  cache.put(r0, 10, 3, 100);
  cache.put(r0, 20, 3, 100);
  cache.set_limits(4, false, 100);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 0, 3}, {r0, 10, 3}}));
  EXPECT_EQ(cache.pages(), 3u);
  cache.set_limits(0, false, 100);
  EXPECT_EQ(cache.pages(), 0u);
  EXPECT_EQ(sink.pages(), 9u);
  cache.put(r0, 30, 1, 100);
  EXPECT_EQ(sink.given.back(), (Given{r0, 30, 1})) << "off: given back at once";
  EXPECT_EQ(cache.pages(), 0u);
}

TEST_F(PageCacheTest, AtMostKMaxRunsTheOldestGoesBackBeyondThem) {
  cache.configure(4 * PageCache::kMaxRuns, false);
  for (size_t i = 0; i <= PageCache::kMaxRuns; ++i) cache.put(r0, 2 * i, 1, 100'000);  // none adjacent
  EXPECT_EQ(cache.runs(), PageCache::kMaxRuns);
  EXPECT_EQ(sink.given, (std::vector<Given>{{r0, 0, 1}}));
  EXPECT_EQ(cache.pages(), PageCache::kMaxRuns);
}

}  // namespace
}  // namespace llamalloc::testing
