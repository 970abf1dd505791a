// The Deadlines component (page_heap/deadlines.h) alone, with a fake clock and pages' metadata made here, without
// a page heap: deadlines from the class and K, expiry at the deadline and not before, promotion of pages whose
// residual blocks outlive it and demotion of those whose do not, both chains' ends, the lists' order.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "fake_platform.h"
#include "page_heap/deadlines.h"

namespace llamalloc::testing {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr unsigned kK = 2;
constexpr unsigned kClasses = 4;  // 10 ms, 100 ms, 1 s, and "never freed"

class DeadlinesTest : public ::testing::Test {
 protected:
  DeadlinesTest() : deadlines(counters) { deadlines.configure(kClasses, kK); }

  // An active page of class lc, activated now, with `live` blocks of which `residual` are residual.
  HugePageMeta* activate(unsigned lc, size_t live, size_t residual) {
    pages.push_back(std::make_unique<HugePageMeta>());
    HugePageMeta* p = pages.back().get();
    p->state = PageState::kActive;
    p->lifetime_class = uint8_t(lc);
    p->live.set_range(0, live);
    p->residual.set_range(0, residual);
    p->deadline_ns = deadlines.deadline(lc, clock.now_ns());
    deadlines.push(p);
    return p;
  }
  // What the page heap does on a change of class, recorded.
  void expire() {
    deadlines.expire(clock.now_ns(), [&](HugePageMeta* p, unsigned c) {
      changes.push_back({p, c});
      deadlines.move(p, c, clock.now_ns());
    });
  }
  std::vector<HugePageMeta*> list(unsigned lc) {
    std::vector<HugePageMeta*> out;
    for (HugePageMeta* p = deadlines.first(lc); p != nullptr; p = p->active_next) out.push_back(p);
    return out;
  }

  struct Change {
    HugePageMeta* page;
    unsigned new_class;
    bool operator==(const Change&) const = default;
  };
  FakeClock clock;
  Counters counters;
  Deadlines deadlines;
  std::vector<std::unique_ptr<HugePageMeta>> pages;
  std::vector<Change> changes;
};

TEST_F(DeadlinesTest, ADeadlineIsNowPlusKTimesTheClassDurationAndNeverFreedHasNone) {
  EXPECT_EQ(deadlines.class_duration_ns(0), 10 * kMs);
  EXPECT_EQ(deadlines.class_duration_ns(2), 1000 * kMs);
  EXPECT_EQ(deadlines.deadline(1, clock.now), clock.now + kK * 100 * kMs);
  EXPECT_EQ(deadlines.deadline(3, clock.now), kNoDeadline);
  // K and the class count apply to deadlines set from then on.
  deadlines.configure(8, 5);
  EXPECT_EQ(deadlines.deadline(3, clock.now), clock.now + 5 * 10'000 * kMs);
  EXPECT_EQ(deadlines.deadline(7, clock.now), kNoDeadline);
}

TEST_F(DeadlinesTest, APagePastItsDeadlineWithLiveResidualBlocksIsPromotedAndOneBeforeItsDeadlineIsNot) {
  HugePageMeta* early = activate(0, 10, 4);
  clock.now += 5 * kMs;
  HugePageMeta* later = activate(0, 10, 4);
  // One nanosecond before the first deadline: nothing is due, and an expiry changes nothing.
  clock.now = early->deadline_ns - 1;
  EXPECT_FALSE(deadlines.due(clock.now));
  expire();
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(early->lifetime_class, 0u);
  // At the deadline: the first page goes one class up with a deadline from now; the second stays as it was.
  clock.now += 1;
  EXPECT_TRUE(deadlines.due(clock.now));
  expire();
  EXPECT_EQ(changes, (std::vector<Change>{{early, 1}}));
  EXPECT_EQ(early->lifetime_class, 1u);
  EXPECT_EQ(early->deadline_ns, clock.now + kK * 100 * kMs);
  EXPECT_TRUE(early->deadline_passed);
  EXPECT_EQ(early->residual.count(), 4u) << "a promoted page keeps its residual blocks";
  EXPECT_EQ(later->lifetime_class, 0u);
  EXPECT_FALSE(later->deadline_passed);
  EXPECT_EQ(list(0), std::vector<HugePageMeta*>{later});
  EXPECT_EQ(list(1), std::vector<HugePageMeta*>{early});
  EXPECT_EQ(counters.deadlines_expired.load(), 1u);
  EXPECT_EQ(counters.promotions.load(), 1u);
  EXPECT_EQ(counters.demotions.load(), 0u);
  // Nothing else is due before the second page's deadline.
  EXPECT_FALSE(deadlines.due(later->deadline_ns - 1));
  EXPECT_TRUE(deadlines.due(later->deadline_ns));
}

TEST_F(DeadlinesTest, APagePastItsDeadlineWithNoLiveResidualBlockIsDemotedAndItsLiveBlocksBecomeResidual) {
  HugePageMeta* p = activate(2, 10, 0);
  clock.now = p->deadline_ns;
  expire();
  EXPECT_EQ(changes, (std::vector<Change>{{p, 1}}));
  EXPECT_EQ(p->lifetime_class, 1u);
  EXPECT_EQ(p->residual, p->live);
  EXPECT_EQ(p->deadline_ns, clock.now + kK * 100 * kMs);
  EXPECT_EQ(counters.demotions.load(), 1u);
  EXPECT_EQ(counters.promotions.load(), 0u);
  // A page that demote() is asked for directly (its last residual object freed) goes the same way.
  HugePageMeta* q = activate(1, 3, 0);
  deadlines.demote(q, [&](HugePageMeta* page, unsigned c) { deadlines.move(page, c, clock.now_ns()); });
  EXPECT_EQ(q->lifetime_class, 0u);
  EXPECT_EQ(q->residual.count(), 3u);
  EXPECT_EQ(counters.demotions.load(), 2u);
}

TEST_F(DeadlinesTest, PromotionStopsAtTheLongestFiniteClass) {
  HugePageMeta* p = activate(0, 1, 1);
  // 0 -> 1 -> 2, then kept in 2 (never into "never freed"), each time with a new deadline.
  for (unsigned expected : {1u, 2u, 2u}) {
    clock.now = p->deadline_ns;
    expire();
    EXPECT_EQ(p->lifetime_class, expected);
    EXPECT_EQ(p->deadline_ns, clock.now + kK * deadlines.class_duration_ns(expected));
  }
  EXPECT_EQ(counters.deadlines_expired.load(), 3u);
  EXPECT_EQ(counters.promotions.load(), 2u) << "staying in the longest finite class is no promotion";
}

TEST_F(DeadlinesTest, DemotionStopsAtTheShortestClass) {
  HugePageMeta* p = activate(2, 1, 0);
  for (unsigned expected : {1u, 0u, 0u}) {
    p->residual = Bitmap256{};  // (a demoted page's live blocks become residual: none of them is residual here)
    clock.now = p->deadline_ns;
    expire();
    EXPECT_EQ(p->lifetime_class, expected);
    EXPECT_EQ(p->deadline_ns, clock.now + kK * deadlines.class_duration_ns(expected));
  }
  EXPECT_EQ(counters.demotions.load(), 2u) << "staying in class 0 is no demotion";
}

TEST_F(DeadlinesTest, NeverFreedPagesHaveNoDeadlineAndNeverExpire) {
  HugePageMeta* p = activate(3, 5, 5);
  EXPECT_EQ(p->deadline_ns, kNoDeadline);
  EXPECT_FALSE(deadlines.due(clock.now + 1'000'000 * 1000 * kMs));
  clock.now += 1'000'000 * 1000 * kMs;
  expire();
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(list(3), std::vector<HugePageMeta*>{p});
  deadlines.renew(p, clock.now);
  EXPECT_EQ(p->deadline_ns, kNoDeadline);
}

TEST_F(DeadlinesTest, ExpiryGoesClassByClassFromTheShortestAndEachListStaysInDeadlineOrder) {
  HugePageMeta* a = activate(1, 1, 1);  // promoted into 2
  HugePageMeta* b = activate(0, 1, 1);  // promoted into 1
  clock.now += 100 * kMs;
  HugePageMeta* c = activate(2, 1, 0);  // not due
  HugePageMeta* d = activate(1, 1, 0);  // not due
  clock.now = a->deadline_ns;
  expire();
  EXPECT_EQ(changes, (std::vector<Change>{{b, 1}, {a, 2}}));
  EXPECT_EQ(list(1), (std::vector<HugePageMeta*>{d, b}));
  EXPECT_EQ(list(2), (std::vector<HugePageMeta*>{c, a}));
  for (unsigned lc = 0; lc < kClasses; ++lc) {
    uint64_t last = 0;
    for (HugePageMeta* p : list(lc)) {
      EXPECT_GE(p->deadline_ns, last) << "class " << lc;
      last = p->deadline_ns;
    }
  }
  EXPECT_FALSE(deadlines.due(d->deadline_ns - 1)) << "the earliest deadline is d's";
}

TEST_F(DeadlinesTest, ARenewedPageGoesToItsClassTailWithADeadlineFromNowAndARemovedOneNeverExpires) {
  HugePageMeta* a = activate(0, 1, 1);
  HugePageMeta* b = activate(0, 1, 1);
  clock.now += 15 * kMs;
  deadlines.renew(a, clock.now);
  EXPECT_EQ(a->deadline_ns, clock.now + kK * 10 * kMs);
  EXPECT_EQ(list(0), (std::vector<HugePageMeta*>{b, a}));
  deadlines.remove(b);
  EXPECT_EQ(list(0), std::vector<HugePageMeta*>{a});
  clock.now = b->deadline_ns;
  expire();
  EXPECT_TRUE(changes.empty()) << "b is on no list, a's deadline is later";
  clock.now = a->deadline_ns;
  expire();
  EXPECT_EQ(changes, (std::vector<Change>{{a, 1}}));
}

}  // namespace
}  // namespace llamalloc::testing
