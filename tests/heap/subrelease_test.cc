// The Subrelease component (page_heap/subrelease.h) alone, with a fake platform that records what is given back
// and pages' metadata made here, without a page heap. Its clock is the sweeper's passes: each pass() is one period.
// Tested: only free blocks of sparse, idle pages go back, never a live one, and only beyond the demand of the last
// passes; sparsest first; the blocks taken in a period stay; `now`; off; blocks taken again; khugepaged kept off
// a page while any of it is given back; span purge; the gauges and counters of what went back.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "fake_platform.h"
#include "page_heap/subrelease.h"

namespace llamalloc::testing {
namespace {

class SubreleaseTest : public ::testing::Test {
 protected:
  SubreleaseTest() : subrelease(platform, gauges, counters) {
    region.base = uintptr_t{1} << 40;
    subrelease.configure(50);
  }

  // A page of blocks in use (active), nothing on it.
  HugePageMeta* page() {
    pages.push_back(std::make_unique<HugePageMeta>());
    HugePageMeta* p = pages.back().get();
    p->region = &region;
    p->index = uint32_t(pages.size() - 1);
    p->state = PageState::kActive;
    p->kind = PageKind::kBlocks;
    return p;
  }
  uintptr_t address(const HugePageMeta* p) const { return region.page_address(p->index); }
  // What the page heap does when it hands out blocks [first, first + count) of p, and when they are freed.
  void take(HugePageMeta* p, size_t first, size_t count) {
    p->live.set_range(first, count);
    p->taken.set_range(first, count);
    subrelease.unrelease(p, first, count);
  }
  static void free(HugePageMeta* p, size_t first, size_t count) { p->live.clear_range(first, count); }
  // One pass over every page made here (threads_quiet: the thread heaps ran few slow paths since the last one).
  size_t pass(bool now = false, unsigned demand_passes = Subrelease::kDemandPasses, bool threads_quiet = true) {
    auto each_page = [&](auto&& f) {
      for (auto& p : pages) f(p.get());
    };
    Subrelease::Demand demand;
    each_page([&](HugePageMeta* p) { demand.add(p); });
    return subrelease.pass(each_page, demand, now, demand_passes, threads_quiet);
  }
  // Every range given back lies on p and on none of its live blocks.
  void expect_no_live_block_given_back(const HugePageMeta* p) {
    for (auto [a, bytes] : platform.subreleased_ranges) {
      if (a < address(p) || a >= address(p) + kHugePageBytes) continue;
      ASSERT_LE(a + bytes, address(p) + kHugePageBytes);
      size_t first = (a - address(p)) / kBlockBytes;
      EXPECT_FALSE(p->live.any_in_range(first, bytes / kBlockBytes)) << "block " << first;
    }
    EXPECT_TRUE((p->released & p->live).none());
  }

  FakePlatform platform;
  Gauges gauges;
  Counters counters;
  Subrelease subrelease;
  Region region = {};
  std::vector<std::unique_ptr<HugePageMeta>> pages;
};

TEST_F(SubreleaseTest, GivesBackEveryFreeBlockOfASparseIdlePageAndNoLiveOne) {
  HugePageMeta* p = page();
  take(p, 100, 8);
  p->taken = Bitmap256{};  // (taken in an earlier period)
  EXPECT_EQ(pass(), 248u);
  EXPECT_EQ(platform.subreleased_ranges,
            (std::set<std::pair<uintptr_t, size_t>>{{address(p), 100 * kBlockBytes},
                                                   {address(p) + 108 * kBlockBytes, 148 * kBlockBytes}}));
  expect_no_live_block_given_back(p);
  EXPECT_EQ(p->released.count(), 248u);
  EXPECT_EQ(gauges.subreleased_bytes, 248 * kBlockBytes);
  EXPECT_EQ(counters.blocks_subreleased.load(), 248u);
  // Kept from khugepaged, which would fill it again.
  EXPECT_EQ(platform.no_huge_page, std::set<uintptr_t>{address(p)});
  EXPECT_EQ(subrelease.pages_kept_from_khugepaged(), 1u);
  EXPECT_EQ(pass(), 0u) << "nothing more to give back";
  EXPECT_EQ(counters.blocks_subreleased.load(), 248u);
}

TEST_F(SubreleaseTest, OnlyWhatThePagesHoldBeyondTheMostInUseOverTheLastPassesGoesBack) {
  HugePageMeta* p = page();
  take(p, 0, 200);
  EXPECT_EQ(pass(), 0u) << "200 blocks taken in the period: not idle";
  free(p, 8, 192);  // 8 in use
  // 200 were in use at the last pass: the 56 beyond that go back, no live one.
  EXPECT_EQ(pass(), 56u);
  expect_no_live_block_given_back(p);
  // The peak has left the window of kDemandPasses passes: the rest.
  EXPECT_EQ(pass(), 192u);
  EXPECT_EQ(gauges.subreleased_bytes, 248 * kBlockBytes);
  // A pass that looks back only at itself (a process without a sweeper thread) gives back at once.
  Subrelease alone(platform, gauges, counters);
  HugePageMeta* q = page();
  q->live.set_range(0, 200);
  Subrelease::Demand busy;
  busy.add(q);
  alone.pass([&](auto&& f) { f(q); }, busy, false, 1);
  free(q, 8, 192);
  Subrelease::Demand quiet;
  quiet.add(q);
  EXPECT_EQ(alone.pass([&](auto&& f) { f(q); }, quiet, false, 1), 248u);
}

TEST_F(SubreleaseTest, APassSeesADropWhenTheBlocksInUseFellByAQuarterAndTwoHugePages) {
  // The sweeper brings the next pass forward after such a pass: the first whose demand window is all after it.
  std::vector<HugePageMeta*> ps;
  for (int i = 0; i < 8; ++i) {
    ps.push_back(page());
    take(ps.back(), 0, kBlocksPerHugePage);
  }
  pass();
  EXPECT_FALSE(subrelease.dropped()) << "the first pass has nothing to compare with";
  free(ps[0], 0, kBlocksPerHugePage);  // one huge page's worth: less than kDropBlocks
  pass();
  EXPECT_FALSE(subrelease.dropped());
  free(ps[1], 0, kBlocksPerHugePage);
  free(ps[2], 0, kBlocksPerHugePage / 2);  // 7 to 5.5 pages in use: under a quarter, under two pages
  pass();
  EXPECT_FALSE(subrelease.dropped());
  free(ps[2], kBlocksPerHugePage / 2, kBlocksPerHugePage / 2);
  free(ps[3], 0, kBlocksPerHugePage);  // 5.5 to 4 pages in use: a quarter, but 1.5 pages
  pass();
  EXPECT_FALSE(subrelease.dropped());
  free(ps[4], 0, kBlocksPerHugePage);
  free(ps[5], 0, kBlocksPerHugePage);  // 4 to 2: half, and two pages
  pass();
  EXPECT_TRUE(subrelease.dropped());
  pass();
  EXPECT_FALSE(subrelease.dropped()) << "no fall since";
}

// (With `now`, so that neither idleness nor the recent demand holds anything back: only the share in use does.)
TEST_F(SubreleaseTest, APageWithMoreThanThePercentOfItsBlocksInUseKeepsItsFreeBlocks) {
  HugePageMeta* p = page();
  take(p, 0, 129);
  EXPECT_EQ(pass(true), 0u) << "129 of 256 in use: above 50%";
  free(p, 128, 1);
  EXPECT_EQ(pass(true), 128u) << "half in use: at the limit";
  subrelease.configure(25);
  HugePageMeta* q = page();
  take(q, 0, 65);
  EXPECT_EQ(pass(true), 0u) << "65 of 256 in use: above 25%";
  free(q, 64, 1);
  EXPECT_EQ(pass(true), 192u) << "a quarter in use";
}

// A quiet pass (at most kQuietTakenBlocks taken since the previous one, no more in use than then) raises the
// bound to the quiet percentage, for pages and for span purge, until a pass that is not quiet.
TEST_F(SubreleaseTest, AQuietPassGivesBackTheFreeBlocksOfDenserPagesUntilTheLoadComesBack) {
  subrelease.configure(50, 90);
  HugePageMeta* dense = page();
  dense->live.set_range(0, 240);  // 94% in use (taken in an earlier period)
  HugePageMeta* p = page();
  take(p, 0, 200);  // 78% in use: above 50%, below 90%
  EXPECT_EQ(pass(), 0u) << "200 blocks taken since the last pass: not quiet, and no page at 50% or less";
  EXPECT_FALSE(subrelease.quiet());
  EXPECT_EQ(subrelease.span_purge_percent(), 50u);
  EXPECT_EQ(pass(false, Subrelease::kDemandPasses, false), 0u) << "threads busy inside their spans: not quiet";
  EXPECT_FALSE(subrelease.quiet());
  EXPECT_EQ(pass(), 56u) << "nothing taken, no more in use, threads quiet: quiet, the 90% bound";
  EXPECT_TRUE(subrelease.quiet());
  EXPECT_EQ(subrelease.span_purge_percent(), 90u);
  expect_no_live_block_given_back(p);
  EXPECT_TRUE(dense->released.none()) << "94% in use: above the quiet bound";
  // The load comes back: more than kQuietTakenBlocks blocks taken (and freed) in a period ends the quiet.
  HugePageMeta* q = page();
  take(q, 0, Subrelease::kQuietTakenBlocks + 1);
  free(q, 0, Subrelease::kQuietTakenBlocks + 1);
  EXPECT_EQ(pass(), 0u);
  EXPECT_FALSE(subrelease.quiet());
  EXPECT_EQ(subrelease.span_purge_percent(), 50u);
  // Few blocks taken, but more in use than at the last pass: not quiet either.
  take(q, 0, 8);
  pass();
  EXPECT_FALSE(subrelease.quiet());
  // Without a quiet percentage above the subrelease one nothing changes; off stays off.
  subrelease.configure(50);
  EXPECT_EQ(pass(), 0u);
  EXPECT_TRUE(subrelease.quiet());
  EXPECT_EQ(subrelease.span_purge_percent(), 50u);
  subrelease.configure(0, 90);
  EXPECT_EQ(subrelease.span_purge_percent(), 0u);
}

TEST_F(SubreleaseTest, AnIdlePageKeepsTheBlocksTakenInThePeriodAndABusyOneKeepsAll) {
  HugePageMeta* p = page();
  take(p, 0, 8);
  p->taken = Bitmap256{};
  take(p, 8, 2);  // a span taken and given back within the period
  free(p, 8, 2);
  EXPECT_EQ(pass(), 246u) << "the 2 blocks taken in the period stay backed";
  EXPECT_FALSE(p->released.test(8) || p->released.test(9));
  EXPECT_TRUE(p->taken.none()) << "a pass starts a new period";
  EXPECT_EQ(pass(), 2u) << "not taken in the period since";
  // More than kIdleTakenBlocks taken in a period: the page is being filled; nothing of it goes back.
  HugePageMeta* q = page();
  take(q, 0, Subrelease::kIdleTakenBlocks + 1);
  free(q, 0, Subrelease::kIdleTakenBlocks);
  EXPECT_EQ(pass(), 0u);
  EXPECT_TRUE(q->released.none());
  EXPECT_EQ(pass(), kBlocksPerHugePage - 1) << "idle in the next period";
}

TEST_F(SubreleaseTest, ABusyPageOnSmallPagesGivesBackTheFreeBlocksNotTakenInThePeriod) {
  // Pages start on 4 KiB pages (LLAMALLOC_HUGE_PAGES=2): one that is neither advised huge nor collapsed has no huge
  // page to keep whole, so blocks taken from it do not keep its other free blocks resident.
  subrelease.configure(50, 0, true);
  HugePageMeta* small = page();
  HugePageMeta* huge = page();
  huge->huge_backed = 1;
  HugePageMeta* advised = page();
  advised->huge_advised = 1;
  for (HugePageMeta* p : {small, huge, advised}) {
    take(p, 0, 40);
    p->taken = Bitmap256{};
    take(p, 40, Subrelease::kIdleTakenBlocks + 1);  // busy: a span taken per request
    free(p, 40, Subrelease::kIdleTakenBlocks + 1);
  }
  EXPECT_EQ(pass(), kBlocksPerHugePage - 40 - (Subrelease::kIdleTakenBlocks + 1));
  EXPECT_EQ(small->released.count(), kBlocksPerHugePage - 40 - (Subrelease::kIdleTakenBlocks + 1));
  EXPECT_FALSE(small->released.any_in_range(40, Subrelease::kIdleTakenBlocks + 1)) << "taken in the period";
  EXPECT_TRUE(huge->released.none()) << "a collapsed page being used keeps its huge page whole";
  EXPECT_TRUE(advised->released.none()) << "so does an advised one";
  expect_no_live_block_given_back(small);
}

TEST_F(SubreleaseTest, AfterAFallFromTheMostInUseTheFreeBlocksGoBackTakenInThePeriodOrNot) {
  auto each_page = [&](auto&& f) {
    for (auto& p : pages) f(p.get());
  };
  auto demand = [&](size_t high) {
    Subrelease::Demand d;
    each_page([&](HugePageMeta* p) { d.add(p); });
    d.high = high;
    return d;
  };
  HugePageMeta* a = page();
  take(a, 0, 100);
  // A pass between the load's spikes sees only a valley: 100 in use, but 768 at once in its period.
  EXPECT_EQ(subrelease.pass(each_page, demand(768), false, Subrelease::kDemandPasses, false), 0u);
  HugePageMeta* b = page();
  HugePageMeta* c = page();
  take(a, 100, 156);
  take(b, 0, 256);
  take(c, 0, 256);
  free(a, 8, 248);
  free(b, 8, 248);
  free(c, 8, 248);  // 24 in use, every free block taken in this period, on busy pages
  EXPECT_FALSE(subrelease.fell_to(24)) << "not a fall from the last pass's own count (100)";
  ASSERT_TRUE(subrelease.fell_from_high(0, 24)) << "a fall from the most in use at once in the window's periods";
  EXPECT_EQ(subrelease.after_fall(each_page, demand(0)), 744u);
  for (HugePageMeta* p : {a, b, c}) expect_no_live_block_given_back(p);
  EXPECT_FALSE(subrelease.dropped()) << "not a pass: the passes' state stays";
  // A fall of less than a quarter, or of fewer than kDropBlocks, is none.
  Subrelease fresh(platform, gauges, counters);
  EXPECT_FALSE(fresh.fell_from_high(4 * 512, 3 * 512 + 1));
  EXPECT_FALSE(fresh.fell_from_high(511 + 8, 8));
  EXPECT_TRUE(fresh.fell_from_high(512 + 8, 8));
}

// After a fall the pages up to the quiet bound give back their free blocks, not only those up to the busy one: the
// load that filled them is what fell, and the survivors' pages are often more than half full (query-spikes-cache
// kept 2.4 MiB of such holes until the sweeper's first quiet pass, 0.2 s into its quiet phase).
TEST_F(SubreleaseTest, AfterAFallThePagesUpToTheQuietBoundGiveBackTheirFreeBlocks) {
  subrelease.configure(50, 90);
  auto each_page = [&](auto&& f) {
    for (auto& p : pages) f(p.get());
  };
  Subrelease::Demand d;
  HugePageMeta* survivors = page();
  HugePageMeta* dense = page();
  take(survivors, 0, 256);
  free(survivors, 0, 100);  // 156 in use: 61%
  take(dense, 0, 256);
  free(dense, 0, 12);  // 244 in use: 95%
  each_page([&](HugePageMeta* p) { d.add(p); });
  d.high = 400 + 1024;  // two huge pages' worth more in use at once in the period
  ASSERT_TRUE(subrelease.fell_from_high(d.high, d.in_use));
  EXPECT_EQ(subrelease.after_fall(each_page, d), 100u) << "the 61% page's free blocks; the 95% page keeps its holes";
  EXPECT_EQ(survivors->released.count(), 100u);
  EXPECT_EQ(dense->released.count(), 0u);
  expect_no_live_block_given_back(survivors);
}

TEST_F(SubreleaseTest, TheSparsestPagesGoFirstWhenDemandLeavesRoomForLess) {
  HugePageMeta* dense = page();
  HugePageMeta* sparse = page();
  take(dense, 0, 100);
  take(sparse, 0, 160);
  EXPECT_EQ(pass(), 0u);  // 260 in use
  free(sparse, 10, 150);  // 110 in use, 512 backed: 252 beyond the last pass's 260
  EXPECT_EQ(pass(), 252u);
  EXPECT_EQ(sparse->released.count(), 246u) << "all of the sparser page's free blocks";
  EXPECT_EQ(dense->released.count(), 6u) << "then what the budget left, from the denser one";
  expect_no_live_block_given_back(dense);
  expect_no_live_block_given_back(sparse);
}

TEST_F(SubreleaseTest, NowGivesBackEveryFreeBlockOfEverySparsePageIdleOrNotAndOffNothing) {
  HugePageMeta* p = page();
  take(p, 0, 100);
  EXPECT_EQ(pass(), 0u);
  free(p, 8, 92);
  take(p, 8, 20);  // busy and taken in this period; the last pass's demand is 100
  free(p, 8, 20);
  EXPECT_EQ(pass(true), 248u);
  expect_no_live_block_given_back(p);
  subrelease.configure(0);
  HugePageMeta* q = page();
  take(q, 0, 1);
  HugePageMeta* empty = page();  // (an open page with no block in use: the sparsest there is)
  for (int i = 0; i < 4; ++i) EXPECT_EQ(pass(true), 0u) << "off";
  EXPECT_TRUE(q->released.none());
  EXPECT_TRUE(empty->released.none());
}

TEST_F(SubreleaseTest, BlocksTakenAgainLeaveTheGaugeAndThePageMayBeHugeAgainOnceAllAreBacked) {
  HugePageMeta* p = page();
  take(p, 0, 8);
  p->taken = Bitmap256{};
  ASSERT_EQ(pass(), 248u);
  take(p, 8, 4);
  EXPECT_EQ(p->released.count(), 244u);
  EXPECT_EQ(gauges.subreleased_bytes, 244 * kBlockBytes);
  EXPECT_EQ(counters.blocks_subreleased.load(), 248u) << "a counter of what ever went back";
  EXPECT_EQ(platform.no_huge_page.count(address(p)), 1u) << "still blocks given back";
  take(p, 12, 244);
  EXPECT_EQ(gauges.subreleased_bytes, 0u);
  EXPECT_TRUE(platform.no_huge_page.empty());
  EXPECT_EQ(subrelease.pages_kept_from_khugepaged(), 0u);
  EXPECT_FALSE(platform.bad_huge_page_advice);
}

TEST_F(SubreleaseTest, SpanPurgeGivesBackPagesInsideASpanAndKeepsThePageFromKhugepagedUntilTheyAreBacked) {
  HugePageMeta* p = page();
  take(p, 0, 16);
  uintptr_t start = address(p) + 4 * kBlockBytes;
  subrelease.purge_span_pages(p, start, 3 * kSmallPageBytes);
  EXPECT_EQ(platform.subreleased_ranges, (std::set<std::pair<uintptr_t, size_t>>{{start, 3 * kSmallPageBytes}}));
  EXPECT_EQ(gauges.span_purged_bytes, 3 * kSmallPageBytes);
  EXPECT_EQ(counters.span_pages_purged.load(), 3u);
  EXPECT_EQ(p->span_purged_pages, 3u);
  EXPECT_EQ(platform.no_huge_page, std::set<uintptr_t>{address(p)});
  // Blocks given back too: the page stays kept from khugepaged until both are backed again.
  p->taken = Bitmap256{};
  ASSERT_EQ(pass(), 240u);
  subrelease.span_purge_forgotten(p, 3);
  EXPECT_EQ(gauges.span_purged_bytes, 0u);
  EXPECT_EQ(platform.no_huge_page.count(address(p)), 1u) << "its free blocks are still given back";
  take(p, 16, 240);
  EXPECT_TRUE(platform.no_huge_page.empty());
}

}  // namespace
}  // namespace llamalloc::testing
