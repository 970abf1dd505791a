// The page heap's policy on fake pages with a fake clock: the LLAMA paper's Figure 6 (a) to (e) step by step,
// promotion and demotion chains to both ends, span recycling, huge objects, exhaustion.
#include <errno.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "fake_platform.h"
#include "page_heap/page_heap.h"

namespace llamalloc::testing {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr unsigned kK = 2;

class PageHeapTest : public ::testing::Test {
 protected:
  // The LLAMA paper's Figure 6 has three classes (< 10 ms, < 100 ms, < 1 s); the fourth is "never freed".
  PageHeapTest() : heap(std::make_unique<PageHeap>(platform, clock, HeapConfig{4, kK})) {}

  uintptr_t blocks(unsigned lc, size_t n) {
    void* p = heap->alloc_large(lc, n * kBlockBytes, kBlockBytes);
    EXPECT_NE(p, nullptr);
    heap->check_invariants();
    return reinterpret_cast<uintptr_t>(p);
  }
  void free(uintptr_t p) {
    heap->free_large(reinterpret_cast<void*>(p));
    heap->check_invariants();
  }
  PageInfo info(uintptr_t a) { return heap->page_info(a); }
  static uintptr_t page_of(uintptr_t a) { return a & ~(kHugePageBytes - 1); }
  static size_t block_of(uintptr_t a) { return (a & (kHugePageBytes - 1)) / kBlockBytes; }
  void advance(uint64_t ns) {
    clock.now += ns;
    heap->tick();
    heap->check_invariants();
  }

  FakePlatform platform;
  FakeClock clock;
  std::unique_ptr<PageHeap> heap;
};

TEST_F(PageHeapTest, ClassDurationsRiseTenfoldAndNeverFreedHasNoDeadline) {
  EXPECT_EQ(heap->class_duration_ns(0), 10 * kMs);
  EXPECT_EQ(heap->class_duration_ns(1), 100 * kMs);
  EXPECT_EQ(heap->class_duration_ns(2), 1000 * kMs);
  EXPECT_EQ(heap->class_duration_ns(3), ~uint64_t{0});
}

// The LLAMA paper's Figure 6 as one story. Each huge page is filled with same-class blocks first; pages are named as in the
// figure where they play its part.
TEST_F(PageHeapTest, Figure6StepByStep) {
  const uint64_t t0 = clock.now;
  // ---- (a) initial allocations: huge pages bump allocated in per-class regions, filled with one class.
  // Class 0: page "1" filled (active), page "2" filled (active), page "5" open.
  std::vector<uintptr_t> c0_p1, c0_p2;
  for (int i = 0; i < 128; ++i) c0_p1.push_back(blocks(0, 2));
  for (int i = 0; i < 128; ++i) c0_p2.push_back(blocks(0, 2));
  uintptr_t c0_p5 = blocks(0, 4);
  // Class 1: page "6" (active), page "7" (active), page "8" open.
  std::vector<uintptr_t> c1_p6, c1_p7;
  for (int i = 0; i < 64; ++i) c1_p6.push_back(blocks(1, 4));
  for (int i = 0; i < 64; ++i) c1_p7.push_back(blocks(1, 4));
  uintptr_t c1_p8 = blocks(1, 8);
  // Class 2: pages "9" and "10" (active), and a large object over two huge pages ("11" and "12").
  std::vector<uintptr_t> c2_p9, c2_p10;
  for (int i = 0; i < 32; ++i) c2_p9.push_back(blocks(2, 8));
  for (int i = 0; i < 32; ++i) c2_p10.push_back(blocks(2, 8));
  uintptr_t c2_open = blocks(2, 1);  // the open page of class 2
  // (exactly two pages: an object that ends early on its last page ends on a page of blocks, tested below)
  uintptr_t c2_huge = reinterpret_cast<uintptr_t>(heap->alloc_large(2, 2 * kHugePageBytes, kBlockBytes));
  ASSERT_NE(c2_huge, 0u);

  const uintptr_t p1 = page_of(c0_p1[0]), p2 = page_of(c0_p2[0]), p5 = page_of(c0_p5);
  const uintptr_t p6 = page_of(c1_p6[0]), p7 = page_of(c1_p7[0]), p8 = page_of(c1_p8);
  const uintptr_t p9 = page_of(c2_p9[0]), p10 = page_of(c2_p10[0]), p_open2 = page_of(c2_open);
  // Fresh pages come lowest address first, one region for every class: consecutive pages in the order opened.
  EXPECT_EQ(p2, p1 + kHugePageBytes);
  EXPECT_EQ(p5, p2 + kHugePageBytes);
  EXPECT_EQ(p7, p6 + kHugePageBytes);
  EXPECT_EQ(p10, p9 + kHugePageBytes);
  EXPECT_EQ(p1 >> kRegionShift, p9 >> kRegionShift);
  for (uintptr_t p : {p1, p2, p6, p7, p9, p10}) {
    PageInfo i = info(p);
    EXPECT_EQ(i.state, PageState::kActive);
    EXPECT_TRUE(i.live.all());
    EXPECT_TRUE(i.residual == i.live) << "every block of a freshly filled page is residual";
    EXPECT_EQ(i.deadline_ns, t0 + kK * heap->class_duration_ns(i.lifetime_class));
  }
  EXPECT_EQ(info(p1).lifetime_class, 0u);
  EXPECT_EQ(info(p6).lifetime_class, 1u);
  EXPECT_EQ(info(p9).lifetime_class, 2u);
  for (uintptr_t p : {p5, p8, p_open2}) {
    EXPECT_EQ(info(p).state, PageState::kOpen);
    EXPECT_EQ(info(p).deadline_ns, ~uint64_t{0}) << "open pages have no deadline";
  }
  PageInfo huge = info(c2_huge);
  EXPECT_EQ(huge.kind, PageKind::kHugeHead);
  EXPECT_EQ(info(c2_huge + kHugePageBytes).kind, PageKind::kHugeTail);
  EXPECT_EQ(heap->pages_in_use(0), 3u);
  EXPECT_EQ(heap->pages_in_use(1), 3u);
  EXPECT_EQ(heap->pages_in_use(2), 5u);

  // ---- (b) frees: pages "2" and "6" become entirely free and go back to the OS at once; others get holes.
  for (uintptr_t a : c0_p2) free(a);
  for (uintptr_t a : c1_p6) free(a);
  EXPECT_EQ(info(p2).state, PageState::kUnused);
  EXPECT_EQ(info(p6).state, PageState::kUnused);
  EXPECT_TRUE(platform.released.count(p2) && platform.released.count(p6));
  for (int i = 0; i < 64; ++i) free(c0_p1[2 * i]);        // page 1 keeps half its objects
  for (int i = 0; i < 32; ++i) free(c1_p7[2 * i]);        // page 7 keeps half
  for (int i = 0; i < 16; ++i) free(c2_p9[i]);            // page 9 loses its first half
  for (int i = 0; i < 16; ++i) free(c2_p10[2 * i]);       // page 10 keeps every other object
  for (uintptr_t p : {p1, p7, p9, p10}) {
    PageInfo i = info(p);
    EXPECT_EQ(i.state, PageState::kActive);
    EXPECT_EQ(i.live.count(), 128u);
    EXPECT_TRUE(i.residual == i.live) << "freeing clears both bitmaps";
  }

  // ---- (c) shorter-lived allocations recycle free blocks of longer-lived active pages, non-residual.
  // A two-block large object of class 0 prefers class 1 (lr + 1): page 7.
  uintptr_t large0 = blocks(0, 2);
  EXPECT_EQ(page_of(large0), p7);
  EXPECT_TRUE(info(p7).live.test(block_of(large0)));
  EXPECT_FALSE(info(p7).residual.test(block_of(large0))) << "recycled blocks are not residual";
  EXPECT_EQ(info(p7).lifetime_class, 1u) << "the page keeps its class";
  // The 16 KiB of a size-class span are taken as such a large object (thread_heap/ asks alloc_large): class 1 prefers
  // class 2's active pages (9 or 10), never an open page.
  uintptr_t span1 = reinterpret_cast<uintptr_t>(heap->alloc_large(1, kBlockSpanBytes, kBlockSpanBytes));
  EXPECT_TRUE(page_of(span1) == p9 || page_of(span1) == p10);
  EXPECT_NE(page_of(span1), p_open2) << "open pages are not recycled";
  EXPECT_FALSE(info(span1).residual.test(block_of(span1)));
  free(span1);

  // ---- (d) page 1's deadline expires with live residual blocks: promoted to 100 ms, residual stays.
  Bitmap256 residual_before = info(p1).residual;
  advance(kK * 10 * kMs);
  PageInfo i1 = info(p1);
  EXPECT_EQ(i1.lifetime_class, 1u);
  EXPECT_TRUE(i1.residual == residual_before);
  EXPECT_EQ(i1.deadline_ns, clock.now + kK * 100 * kMs);

  // ---- (e) page 9 ends up holding only non-residual blocks: it drops one class and they become residual.
  std::vector<uintptr_t> recycled_on_9;
  while (true) {  // fill the free blocks of pages 9 and 10 with class-1 objects (class 2 is lr + 1)
    uintptr_t a = blocks(1, 8);
    if (page_of(a) == p9 || page_of(a) == p10) EXPECT_FALSE(info(a).residual.test(block_of(a)));
    if (page_of(a) == p9) recycled_on_9.push_back(a);
    if (page_of(a) != p9 && page_of(a) != p10) {
      EXPECT_EQ(page_of(a), p8) << "then the open page of the class, residual";
      EXPECT_TRUE(info(a).residual.test(block_of(a)));
      free(a);
      break;
    }
  }
  ASSERT_FALSE(recycled_on_9.empty());
  for (int i = 16; i < 32; ++i) free(c2_p9[i]);  // the residual (class 2) blocks all die
  PageInfo i9 = info(p9);
  EXPECT_EQ(i9.state, PageState::kActive);
  EXPECT_EQ(i9.lifetime_class, 1u);
  EXPECT_TRUE(i9.residual == i9.live) << "after demotion the live blocks are residual";
  EXPECT_EQ(i9.deadline_ns, clock.now + kK * 100 * kMs);
  EXPECT_GE(heap->counters().demotions.load(), 1u);
  EXPECT_GE(heap->counters().promotions.load(), 1u);
  EXPECT_FALSE(platform.backed_twice);
}

TEST_F(PageHeapTest, PromotionChainEndsAtTheLongestFiniteClass) {
  uintptr_t keep = blocks(0, 128);
  uintptr_t fill = blocks(0, 128);  // page full: active with deadline
  uintptr_t p = page_of(keep);
  ASSERT_EQ(page_of(fill), p);
  ASSERT_EQ(info(p).state, PageState::kActive);
  free(fill);  // residual blocks (keep) still live
  for (unsigned expected = 1; expected <= 2; ++expected) {
    advance(info(p).deadline_ns - clock.now - 1);
    EXPECT_EQ(info(p).lifetime_class, expected - 1) << "not before the deadline";
    advance(1);
    EXPECT_EQ(info(p).lifetime_class, expected);
    EXPECT_EQ(info(p).deadline_ns, clock.now + kK * heap->class_duration_ns(expected));
  }
  // The top finite class is the end: never promoted into "never freed".
  advance(info(p).deadline_ns - clock.now);
  EXPECT_EQ(info(p).lifetime_class, 2u);
  EXPECT_EQ(info(p).deadline_ns, clock.now + kK * heap->class_duration_ns(2));
  EXPECT_EQ(heap->counters().promotions.load(), 2u);
  EXPECT_EQ(heap->counters().deadlines_expired.load(), 3u);
  free(keep);
  EXPECT_EQ(info(p).state, PageState::kUnused);
}

TEST_F(PageHeapTest, DemotionChainEndsAtTheShortestClass) {
  heap->configure(HeapConfig{.num_classes = 4, .deadline_k = kK, .same_class_recycling = false});  // the paper's rules: no same-class recycling
  // A class 2 page with residual blocks R and free blocks that shorter classes recycle.
  uintptr_t residual = blocks(2, 128);
  uintptr_t filler = blocks(2, 128);
  uintptr_t p = page_of(residual);
  free(filler);
  ASSERT_EQ(info(p).state, PageState::kActive);
  // A class 1 large object lands here (lr + 1 = 2), non-residual.
  uintptr_t n1 = blocks(1, 1);
  ASSERT_EQ(page_of(n1), p);
  free(residual);  // only non-residual left: 2 -> 1, n1 residual
  EXPECT_EQ(info(p).lifetime_class, 1u);
  EXPECT_TRUE(info(p).residual.test(block_of(n1)));
  uintptr_t n0 = blocks(0, 1);  // class 0 prefers class 1 now: this page
  ASSERT_EQ(page_of(n0), p);
  EXPECT_FALSE(info(p).residual.test(block_of(n0)));
  free(n1);  // 1 -> 0
  EXPECT_EQ(info(p).lifetime_class, 0u);
  EXPECT_TRUE(info(p).residual.test(block_of(n0)));
  EXPECT_EQ(heap->counters().demotions.load(), 2u);
  // Nothing is shorter than class 0, and no class 0 request recycles a class 0 page.
  uintptr_t other = blocks(0, 1);
  EXPECT_NE(page_of(other), p);
  free(n0);
  EXPECT_EQ(info(p).state, PageState::kUnused) << "the empty page goes back to the OS";
  free(other);
}

TEST_F(PageHeapTest, SameClassRecyclingFillsAnActivePageBeforeAFreshOneAndRenewsItsDeadline) {
  // Page A of class 1: filled (active), then half of it freed.
  uintptr_t a1 = blocks(1, 128);
  uintptr_t a2 = blocks(1, 128);
  uintptr_t a = page_of(a1);
  ASSERT_EQ(info(a).state, PageState::kActive);
  free(a2);
  // Page B, the open page of class 1, fills up.
  uintptr_t b1 = blocks(1, 256);
  uintptr_t b = page_of(b1);
  ASSERT_NE(b, a);
  advance(5 * kMs);
  uint64_t old_deadline = info(a).deadline_ns;
  // The next class 1 object: no longer class has free blocks and the open page is full, so it goes to the free
  // blocks of page A (residual: same class) instead of a fresh huge page, and A's deadline moves.
  size_t pages_before = heap->pages_in_use(kMaxClasses);
  uintptr_t c = blocks(1, 64);
  EXPECT_EQ(page_of(c), a);
  EXPECT_TRUE(info(a).residual.test(block_of(c)));
  EXPECT_EQ(heap->pages_in_use(kMaxClasses), pages_before) << "no fresh huge page";
  EXPECT_EQ(info(a).deadline_ns, clock.now + kK * heap->class_duration_ns(1));
  EXPECT_GT(info(a).deadline_ns, old_deadline);
  // With the paper's rules (same_class_recycling off) the same request takes a fresh page.
  PageHeap paper(platform, clock, HeapConfig{.num_classes = 4, .deadline_k = kK, .same_class_recycling = false});
  void* p1 = paper.alloc_large(1, 128 * kBlockBytes, kBlockBytes);
  void* p2 = paper.alloc_large(1, 128 * kBlockBytes, kBlockBytes);
  void* q1 = paper.alloc_large(1, 256 * kBlockBytes, kBlockBytes);
  paper.free_large(p2);
  void* r = paper.alloc_large(1, 64 * kBlockBytes, kBlockBytes);
  EXPECT_NE(page_of(reinterpret_cast<uintptr_t>(r)), page_of(reinterpret_cast<uintptr_t>(p1)));
  EXPECT_NE(page_of(reinterpret_cast<uintptr_t>(r)), page_of(reinterpret_cast<uintptr_t>(q1)));
  for (void* x : {p1, q1, r}) paper.free_large(x);
  for (uintptr_t x : {a1, b1, c}) free(x);
}

// HeapConfig::dense_first (LLAMALLOC_DENSE_FIRST): blocks recycled on pages already in use come from the
// fullest page with room, so that an emptier page drains and goes back whole (the filler of the TCMalloc characterisation paper); without it,
// from the page that got a free block last.
TEST(DenseFirst, RecycledBlocksComeFromTheFullestPageSoTheEmptierOneDrains) {
  for (bool dense : {true, false}) {
    SCOPED_TRACE(dense ? "dense_first" : "last freed first");
    FakePlatform platform;
    FakeClock clock;
    HeapConfig config{4, kK};
    config.dense_first = dense;
    PageHeap heap(platform, clock, config);
    auto alloc = [&](unsigned lc, size_t n) {
      void* p = heap.alloc_large(lc, n * kBlockBytes, kBlockBytes);
      EXPECT_NE(p, nullptr);
      heap.check_invariants();
      return reinterpret_cast<uintptr_t>(p);
    };
    auto page = [](uintptr_t a) { return a & ~(kHugePageBytes - 1); };
    // Two full class-2 pages: A and B.
    std::vector<uintptr_t> a, b;
    for (int i = 0; i < 32; ++i) a.push_back(alloc(2, 8));
    for (int i = 0; i < 32; ++i) b.push_back(alloc(2, 8));
    ASSERT_NE(page(a[0]), page(b[0]));
    ASSERT_EQ(heap.page_info(a[0]).state, PageState::kActive);
    // B loses two objects (240 of 256 blocks live), then A loses 28 (32 live): A got a free block last.
    for (int i = 0; i < 2; ++i) heap.free_large(reinterpret_cast<void*>(b[i]));
    for (int i = 0; i < 28; ++i) heap.free_large(reinterpret_cast<void*>(a[i]));
    heap.check_invariants();
    const size_t pages = heap.pages_in_use(kMaxClasses);
    // Shorter-lived objects recycle class 2's free blocks (the LLAMA paper, section 6.3): the first one goes to B
    // if dense_first.
    uintptr_t first = alloc(1, 8);
    EXPECT_EQ(page(first), page(dense ? b[0] : a[0]));
    EXPECT_EQ(heap.pages_in_use(kMaxClasses), pages) << "no fresh huge page";
    if (dense) {
      // B fills before A is touched again, and A, left alone, goes back whole when its last objects do.
      uintptr_t second = alloc(1, 8);
      EXPECT_EQ(page(second), page(b[0]));
      EXPECT_EQ(heap.page_info(b[0]).live.count(), 256u);
      for (int i = 28; i < 32; ++i) heap.free_large(reinterpret_cast<void*>(a[i]));
      heap.check_invariants();
      EXPECT_EQ(heap.pages_in_use(kMaxClasses), pages - 1) << "A drained and was released";
      EXPECT_EQ(heap.page_info(a[0]).state, PageState::kUnused);
      heap.free_large(reinterpret_cast<void*>(second));
    } else {
      for (int i = 28; i < 32; ++i) heap.free_large(reinterpret_cast<void*>(a[i]));
      EXPECT_EQ(heap.pages_in_use(kMaxClasses), pages) << "A is kept by the recycled object";
    }
    heap.free_large(reinterpret_cast<void*>(first));
    for (int i = 2; i < 32; ++i) heap.free_large(reinterpret_cast<void*>(b[i]));
    heap.check_invariants();
    EXPECT_EQ(heap.pages_in_use(kMaxClasses), 0u);
  }
}

TEST_F(PageHeapTest, OpenPageBecomesActiveWhenARequestNoLongerFits) {
  uintptr_t a = blocks(0, 200);
  uintptr_t b = blocks(0, 100);  // does not fit in the 56 free blocks left
  EXPECT_NE(page_of(a), page_of(b));
  EXPECT_EQ(info(a).state, PageState::kActive);
  EXPECT_EQ(info(b).state, PageState::kOpen);
  uintptr_t c = blocks(1, 56);  // a class 1 request may not use a class 0 page (shorter classes only)
  EXPECT_NE(page_of(c), page_of(a));
  uintptr_t d = blocks(0, 1);  // class 0 goes to its open page, not to the active one
  EXPECT_EQ(page_of(d), page_of(b));
}

TEST_F(PageHeapTest, LargeObjectAlignment) {
  for (size_t align : {kBlockBytes * 2, kBlockBytes * 8, kHugePageBytes}) {
    uintptr_t small = blocks(0, 1);
    void* p = heap->alloc_large(0, 3 * kBlockBytes, align);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u);
    EXPECT_EQ(heap->large_usable_size(p), 3 * kBlockBytes);
    free(reinterpret_cast<uintptr_t>(p));
    free(small);
  }
  void* huge_aligned = heap->alloc_large(0, kBlockBytes, 4 * kHugePageBytes);
  ASSERT_NE(huge_aligned, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(huge_aligned) % (4 * kHugePageBytes), 0u);
  free(reinterpret_cast<uintptr_t>(huge_aligned));
}

TEST_F(PageHeapTest, HugeObjectsUseWholeFreshHugePagesAndReleaseThemAtOnce) {
  size_t before = platform.backed_bytes;
  // Ends close to its last page's end: that page is the object's (no slack worth donating). Only its bytes,
  // rounded to 4 KiB, are backed: the rest of the last page stays reserved.
  size_t bytes = 6 * kHugePageBytes - (kMinSlackBlocks - 1) * kBlockBytes - 5000;
  size_t usable = (bytes + 4095) / 4096 * 4096;
  void* p = heap->alloc_large(3, bytes, kBlockBytes);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(platform.backed_bytes - before, usable);
  EXPECT_EQ(heap->large_usable_size(p), usable);
  EXPECT_EQ(heap->large_requested_size(p), bytes);
  EXPECT_EQ(heap->pages_in_use(3), 6u);
  EXPECT_EQ(heap->free_large(p), bytes);
  EXPECT_EQ(platform.backed_bytes, before);
  EXPECT_EQ(heap->pages_in_use(3), 0u);
  EXPECT_EQ(platform.released.count(reinterpret_cast<uintptr_t>(p) + 5 * kHugePageBytes), 1u) << "given back whole";
  // Its address range is free again and the next object takes it (lowest address first): the address space,
  // the page tables and the mappings stay as large as what is in use.
  void* q = heap->alloc_large(3, 2 * kHugePageBytes, kBlockBytes);
  EXPECT_EQ(q, p) << "a freed range is reused";
  EXPECT_FALSE(platform.backed_twice);
  heap->free_large(q);
  heap->check_invariants();
}

// Slack donation (the TCMalloc paper donates a large allocation's slack to the filler): a "never freed"
// huge object that ends early in its last huge page ends on a page of blocks of its class, whose free blocks
// serve other objects; freeing the object frees its blocks there, and the page goes when its last object does.
TEST_F(PageHeapTest, AHugeObjectsLastPageServesOtherObjectsInItsFreeBlocks) {
  size_t before = platform.backed_bytes;
  void* p = heap->alloc_large(3, 2 * kHugePageBytes + 1, kBlockBytes);  // ends one block into its third page
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(platform.backed_bytes - before, 3 * kHugePageBytes);
  EXPECT_EQ(heap->pages_in_use(3), 3u);
  EXPECT_EQ(heap->large_usable_size(p), 2 * kHugePageBytes + kBlockBytes) << "the rest of the page is not its";
  EXPECT_EQ(heap->large_requested_size(p), 2 * kHugePageBytes + 1);
  uintptr_t last = reinterpret_cast<uintptr_t>(p) + 2 * kHugePageBytes;
  PageInfo page = heap->page_info(last);
  EXPECT_EQ(page.kind, PageKind::kBlocks);
  EXPECT_EQ(page.state, PageState::kActive);
  EXPECT_EQ(page.live.count(), 1u);
  EXPECT_EQ(heap->counters().huge_slack_pages.load(), 1u);
  heap->check_invariants();
  // A shorter class's object takes free blocks there (a longer class's active page), not a new huge page.
  void* q = heap->alloc_large(2, 100 * kBlockBytes, kBlockBytes);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) >> kHugePageShift, last >> kHugePageShift);
  EXPECT_EQ(platform.backed_bytes - before, 3 * kHugePageBytes);
  heap->check_invariants();
  EXPECT_EQ(heap->free_large(p), 2 * kHugePageBytes + 1);
  EXPECT_EQ(platform.backed_bytes - before, kHugePageBytes) << "the two whole pages go at once; q keeps the last";
  EXPECT_EQ(heap->page_info(last).live.count(), 100u);
  heap->check_invariants();
  heap->free_large(q);
  EXPECT_EQ(platform.backed_bytes, before);
  EXPECT_EQ(heap->pages_in_use(3) + heap->pages_in_use(2), 0u);
  heap->check_invariants();
  // Only for "never freed" (here class 3): a shorter class's huge object goes back whole, at once.
  void* r = heap->alloc_large(2, 2 * kHugePageBytes + 1, kBlockBytes);
  EXPECT_EQ(heap->large_usable_size(r), 2 * kHugePageBytes + 4096);
  EXPECT_EQ(heap->page_info(reinterpret_cast<uintptr_t>(r) + 2 * kHugePageBytes).kind, PageKind::kHugeTail);
  EXPECT_EQ(heap->counters().huge_slack_pages.load(), 1u);
  heap->free_large(r);
  EXPECT_EQ(platform.backed_bytes, before);
}

TEST_F(PageHeapTest, FullRegionGetsAFreshRegion) {
  void* a = heap->alloc_large(0, kRegionBytes - kHugePageBytes, kBlockBytes);
  ASSERT_NE(a, nullptr);
  void* b = heap->alloc_large(0, 2 * kHugePageBytes, kBlockBytes);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(reinterpret_cast<uintptr_t>(a) >> kRegionShift, reinterpret_cast<uintptr_t>(b) >> kRegionShift);
  heap->free_large(a);
  heap->free_large(b);
  heap->check_invariants();
}

TEST_F(PageHeapTest, MemoryExhaustionGivesEnomemAndKeepsTheHeapConsistent) {
  platform.back_budget_bytes = 2 * kHugePageBytes;
  std::vector<uintptr_t> got;
  for (;;) {
    errno = 0;
    void* p = heap->alloc_large(0, 64 * kBlockBytes, kBlockBytes);
    if (p == nullptr) {
      EXPECT_EQ(errno, ENOMEM);
      break;
    }
    got.push_back(reinterpret_cast<uintptr_t>(p));
    ASSERT_LT(got.size(), 100u);
  }
  EXPECT_EQ(got.size(), 8u);
  errno = 0;
  EXPECT_EQ(heap->alloc_large(0, kBlockSpanBytes, kBlockSpanBytes), nullptr) << "nor a size-class span";
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(heap->alloc_large(0, 10 * kHugePageBytes, kBlockBytes), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(heap->alloc_large(0, ~size_t{0} / 2, kBlockBytes), nullptr) << "a giant request";
  heap->check_invariants();
  for (uintptr_t a : got) free(a);
  platform.back_budget_bytes = ~size_t{0};
  EXPECT_NE(heap->alloc_large(0, 64 * kBlockBytes, kBlockBytes), nullptr) << "works again after memory returns";
  heap->check_invariants();
}

TEST_F(PageHeapTest, AddressSpaceExhaustion) {
  platform.reservations_left = 0;
  for (int i = 0; i < 3; ++i) {
    errno = 0;
    EXPECT_EQ(heap->alloc_large(1, kBlockBytes, kBlockBytes), nullptr);
    EXPECT_EQ(errno, ENOMEM);
  }
  EXPECT_EQ(platform.metadata_reservations, 0u) << "a region that could not be made leaves no metadata behind";
  heap->check_invariants();
}

// Under an address-space limit the heap reserves its region in steps, not 16 GiB at once, uses all that the limit
// allows, and after everything is freed gets all of it again: freed pages go back to the OS and are reused.
TEST_F(PageHeapTest, UnderAnAddressSpaceLimitTheRegionGrowsInStepsAndFreedPagesAreReused) {
  platform.address_space_budget = 100 * kHugePageBytes;
  std::vector<void*> got;
  for (;;) {
    errno = 0;
    void* p = heap->alloc_large(0, kHugePageBytes, kBlockBytes);  // one whole page each
    if (p == nullptr) {
      EXPECT_EQ(errno, ENOMEM);
      break;
    }
    got.push_back(p);
    ASSERT_LT(got.size(), 200u);
  }
  // The region's metadata is sized from what the limit leaves; the pages are reserved as they are needed.
  EXPECT_GE(got.size(), 95u) << "the limit, less the metadata's share";
  EXPECT_LE(platform.reserved_bytes, platform.address_space_budget);
  EXPECT_GE(platform.extensions, 2u) << "grown in steps";
  EXPECT_EQ(heap->gauges().reserved_bytes, platform.reserved_bytes);
  heap->check_invariants();
  size_t first_round = got.size();
  size_t full = platform.reserved_bytes;
  std::vector<void*> first = got;
  for (void* p : got) heap->free_large(p);
  EXPECT_EQ(platform.backed_bytes, 0u) << "every page given back";
  EXPECT_EQ(platform.reserved_bytes, 0u) << "and its address space, under the limit";
  EXPECT_EQ(heap->gauges().reserved_bytes, 0u);
  heap->check_invariants();
  got.clear();
  for (void* p; (p = heap->alloc_large(0, kHugePageBytes, kBlockBytes)) != nullptr;) got.push_back(p);
  EXPECT_EQ(got.size(), first_round) << "all of it again";
  EXPECT_EQ(platform.reserved_bytes, full);
  std::sort(first.begin(), first.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, first) << "on the same addresses";
  EXPECT_TRUE(platform.reused_address);
  EXPECT_FALSE(platform.backed_twice);
  EXPECT_FALSE(platform.released_unbacked);
  for (void* p : got) heap->free_large(p);
  heap->check_invariants();
}

// A reservation that cannot grow in place (another mapping above it) is continued by a new region.
TEST_F(PageHeapTest, ARegionThatCannotGrowIsContinuedByANewOne) {
  platform.address_space_budget = 1000 * kHugePageBytes;
  void* a = heap->alloc_large(0, kHugePageBytes, kBlockBytes);
  ASSERT_NE(a, nullptr);
  uintptr_t region = reinterpret_cast<uintptr_t>(a) & ~(kRegionBytes - 1);
  platform.blocked_from = region + 64 * kHugePageBytes;
  std::vector<void*> got{a};
  for (int i = 0; i < 100; ++i) {
    void* p = heap->alloc_large(0, kHugePageBytes, kBlockBytes);
    ASSERT_NE(p, nullptr) << i;
    uintptr_t at = reinterpret_cast<uintptr_t>(p);
    EXPECT_TRUE(at - region < 64 * kHugePageBytes || (at >> kRegionShift) != (region >> kRegionShift))
        << "never over the other mapping";
    got.push_back(p);
  }
  EXPECT_NE(reinterpret_cast<uintptr_t>(got.back()) >> kRegionShift, region >> kRegionShift);
  heap->check_invariants();
  for (void* p : got) heap->free_large(p);
  heap->check_invariants();
}

// Addresses in a region's slot beyond what the heap reserved may belong to another mapping: no lookup takes them
// for the heap's.
TEST_F(PageHeapTest, AnAddressBeyondTheReservationIsNotTheHeaps) {
  platform.address_space_budget = 1000 * kHugePageBytes;
  void* a = heap->alloc_large(0, kHugePageBytes, kBlockBytes);
  ASSERT_NE(a, nullptr);
  uintptr_t beyond = (reinterpret_cast<uintptr_t>(a) & ~(kRegionBytes - 1)) + kRegionBytes / 2;
  EXPECT_TRUE(heap->owns(a));
  EXPECT_FALSE(heap->owns(reinterpret_cast<void*>(beyond)));
  EXPECT_EQ(heap->page_meta_of(beyond), nullptr);
  EXPECT_EQ(heap->large_usable_size(reinterpret_cast<void*>(beyond)), 0u);
  heap->free_large(a);
}

// Huge objects allocated and freed in a loop reuse one address range: the address space the heap reserves (and
// with it the kernel's page tables) stays what one object needs.
TEST_F(PageHeapTest, HugeAllocFreePairsKeepTheAddressSpaceBounded) {
  size_t reserved = 0;
  uintptr_t first = 0;
  for (int i = 0; i < 20000; ++i) {
    size_t bytes = (2 + i % 7) * kHugePageBytes + (i % 3) * kBlockBytes;
    void* p = heap->alloc_large(1, bytes, kBlockBytes);
    ASSERT_NE(p, nullptr) << i;
    if (i == 0) first = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p), first) << i;
    heap->free_large(p);
    if (i == 0) reserved = heap->gauges().reserved_bytes;
  }
  EXPECT_EQ(heap->gauges().reserved_bytes, reserved);
  EXPECT_EQ(platform.backed_bytes, 0u);
  heap->check_invariants();
}

// Under RLIMIT_AS the heap gives back address space with the memory: a huge object holds the address space of its
// bytes, not of its last page's slack, and freed pages are unreserved and reserved again when reused. A page that
// another mapping took meanwhile is never mapped over; the rest is reused.
TEST_F(PageHeapTest, UnderAnAddressSpaceLimitFreedAddressSpaceGoesBackAndAHugeObjectHoldsOnlyItsBytes) {
  platform.address_space_budget = 1000 * kHugePageBytes;
  size_t bytes = 2 * kHugePageBytes + kHugePageBytes / 2;  // 5 MiB: half of its third page is slack
  void* p = heap->alloc_large(1, bytes, kBlockBytes);
  ASSERT_NE(p, nullptr);
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  EXPECT_TRUE(platform.holes.count(a + bytes) && platform.holes.count(a + 3 * kHugePageBytes - 4096)) << "its slack";
  EXPECT_EQ(platform.holes.size(), kHugePageBytes / 2 / 4096);
  EXPECT_EQ(heap->gauges().reserved_bytes, platform.reserved_bytes);
  size_t reserved = platform.reserved_bytes;
  heap->free_large(p);
  EXPECT_EQ(platform.reserved_bytes, reserved - bytes) << "its address space went with it";
  EXPECT_EQ(platform.backed_bytes, 0u);
  heap->check_invariants();
  void* q = heap->alloc_large(1, 3 * kHugePageBytes, kBlockBytes);
  EXPECT_EQ(q, p) << "reserved again and reused whole";
  EXPECT_TRUE(platform.holes.empty());
  heap->free_large(q);
  heap->check_invariants();
  // Another mapping takes part of the third page while the range is free.
  platform.taken.insert(a + 2 * kHugePageBytes + kHugePageBytes / 2);
  q = heap->alloc_large(1, 3 * kHugePageBytes, kBlockBytes);
  ASSERT_NE(q, nullptr);
  EXPECT_GE(reinterpret_cast<uintptr_t>(q), a + 3 * kHugePageBytes) << "not over the other mapping";
  heap->check_invariants();
  void* b = heap->alloc_large(1, 2 * kHugePageBytes, kBlockBytes);
  EXPECT_EQ(b, p) << "the first two pages are reused";
  heap->free_large(q);
  heap->free_large(b);
  EXPECT_FALSE(platform.unreserved_twice);
  EXPECT_FALSE(platform.backed_twice);
  heap->check_invariants();
}

using PageHeapDeathTest = PageHeapTest;

TEST_F(PageHeapDeathTest, BadLargeFreesAbortWithOneLine) {
  uintptr_t a = blocks(0, 4);
  uintptr_t b = blocks(0, 1);
  EXPECT_DEATH(heap->free_large(reinterpret_cast<void*>(a + kBlockBytes)), "llamalloc: free of 0x[0-9a-f]+: pointer not the start of an object");
  EXPECT_DEATH(heap->free_large(reinterpret_cast<void*>(a + 16)), "pointer not the start of an object");
  free(b);
  EXPECT_DEATH(heap->free_large(reinterpret_cast<void*>(b)), "double free");
  EXPECT_DEATH(heap->free_large(reinterpret_cast<void*>(0x1234)), "pointer not allocated by llamalloc");
  void* h = heap->alloc_large(0, 3 * kHugePageBytes, kBlockBytes);
  EXPECT_DEATH(heap->free_large(static_cast<char*>(h) + kHugePageBytes), "inside a huge object");
  heap->free_large(h);
  EXPECT_DEATH(heap->free_large(h), "free huge page");
}

// Small heaps: a program with a few MiB live must not pay an open huge page per lifetime class.
// Shorter classes take blocks of a longer class's open page (non-residual: they are expected to die first)
// while fewer than small_heap_pages huge pages are in use; a longer class never lands on a shorter one's page.
TEST_F(PageHeapTest, SmallHeapLendsTheOpenPageOfALongerClassToShorterOnes) {
  heap->configure(HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 8});
  uintptr_t c3 = blocks(3, 1);
  uintptr_t c0 = blocks(0, 2), c1 = blocks(1, 1), c2 = blocks(2, 3);
  EXPECT_EQ(heap->pages_in_use(kMaxClasses), 1u) << "one huge page for four classes";
  for (uintptr_t a : {c0, c1, c2}) {
    EXPECT_EQ(page_of(a), page_of(c3));
    EXPECT_FALSE(info(a).residual.test(block_of(a))) << "lent blocks are not the page's own class";
  }
  EXPECT_TRUE(info(c3).residual.test(block_of(c3)));
  EXPECT_EQ(info(c3).lifetime_class, 3u);
  EXPECT_EQ(info(c3).state, PageState::kOpen);
  // Their blocks come back to the page when they die, and the page's own class goes on using it.
  free(c0);
  free(c1);
  free(c2);
  uintptr_t again = blocks(3, 1);
  EXPECT_EQ(page_of(again), page_of(c3));
  // A longer class is never placed on a shorter class's page.
  PageHeap fresh(platform, clock, HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 8});
  void* short_first = fresh.alloc_large(0, kBlockBytes, kBlockBytes);
  void* long_next = fresh.alloc_large(2, kBlockBytes, kBlockBytes);
  EXPECT_NE(reinterpret_cast<uintptr_t>(short_first) >> kHugePageShift,
            reinterpret_cast<uintptr_t>(long_next) >> kHugePageShift);
  EXPECT_EQ(fresh.pages_in_use(kMaxClasses), 2u);
  fresh.check_invariants();
  free(c3);
  free(again);
}

// An open page that has emptied is kept for its class (the next request of the class needs no fresh page), but
// not forever: the sweeper gives it back when it is still empty, with nothing taken from it, at its next pass
// (else a server past its peak keeps an empty open page, 2 MiB, for as long as it is quiet); collect at once.
// The page cache (HeapConfig::page_cache_pages): the pages of freed huge objects stay backed and are reused,
// exact lengths first, and passes give back what exceeds recent demand; emptied pages of blocks go back at once.
TEST_F(PageHeapTest, PageCacheReusesFreedHugeObjectsPagesAndGivesBackWhatRecentDemandDoesNotNeed) {
  HeapConfig config{4, kK, true, true, 0};
  config.page_cache_pages = 8;
  heap->configure(config);
  void* p = heap->alloc_large(3, 2 * kHugePageBytes, kBlockBytes);
  ASSERT_NE(p, nullptr);
  size_t backed = platform.backed_bytes;
  heap->free_large(p);
  heap->check_invariants();
  EXPECT_EQ(platform.released_bytes, 0u) << "kept backed";
  EXPECT_EQ(heap->gauges().page_cache_bytes, 2 * kHugePageBytes);
  EXPECT_EQ(heap->pages_in_use(kMaxClasses), 0u) << "cached pages are not in the footprint";
  EXPECT_EQ(info(reinterpret_cast<uintptr_t>(p)).state, PageState::kUnused);
  // An object of the same size gets the same pages, without backing new memory.
  void* q = heap->alloc_large(1, 2 * kHugePageBytes, kBlockBytes);
  EXPECT_EQ(q, p);
  EXPECT_EQ(platform.backed_bytes, backed);
  EXPECT_EQ(heap->counters().huge_pages_reused.load(), 2u);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_TRUE(heap->huge_object_recycled(q)) << "calloc must zero it";
  heap->free_large(q);
  // A new page of blocks takes the back page of a cached run. A huge object longer than any run takes fresh
  // pages, and as many cached pages as it takes go back first (here the one left): the cache never adds to
  // what the heap would hold without it.
  uintptr_t a = blocks(0, 4);
  EXPECT_EQ(page_of(a), reinterpret_cast<uintptr_t>(q) + kHugePageBytes);
  EXPECT_EQ(heap->gauges().page_cache_bytes, kHugePageBytes);
  void* big = heap->alloc_large(2, 3 * kHugePageBytes, kBlockBytes);
  EXPECT_FALSE(heap->huge_object_recycled(big));
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.released_bytes, kHugePageBytes);
  EXPECT_EQ(platform.backed_bytes, backed + 2 * kHugePageBytes);
  heap->free_large(big);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 3 * kHugePageBytes);
  // The emptied page of blocks is not kept.
  free(a);
  EXPECT_EQ(heap->release_empty_open_pages(true), 1u);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 3 * kHugePageBytes);
  EXPECT_EQ(platform.released_bytes, 2 * kHugePageBytes);
  // Passes with nothing taken give the pages back once the demand window has passed; none is lost.
  for (unsigned i = 0; i <= PageHeap::kPageCachePasses; ++i) heap->subrelease_free_blocks(false);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.released_bytes, 5 * kHugePageBytes);
  EXPECT_EQ(platform.backed_bytes, 0u) << "every page given back, none lost";
  // An object longer than the limit is never kept.
  void* huge = heap->alloc_large(3, 9 * kHugePageBytes, kBlockBytes);
  heap->free_large(huge);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.released_bytes, 14 * kHugePageBytes);
  // llamalloc_collect's pass gives every cached page back, and so does turning the cache off.
  void* r = heap->alloc_large(3, 4 * kHugePageBytes, kBlockBytes);
  heap->free_large(r);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 4 * kHugePageBytes);
  heap->subrelease_free_blocks(true);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  void* t = heap->alloc_large(3, 4 * kHugePageBytes, kBlockBytes);
  heap->free_large(t);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 4 * kHugePageBytes);
  heap->set_page_cache_pages(0);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.backed_bytes, 0u);
  void* u = heap->alloc_large(3, 4 * kHugePageBytes, kBlockBytes);
  heap->free_large(u);
  EXPECT_EQ(platform.backed_bytes, 0u) << "off: given back at once";
  heap->check_invariants();
}

// After a peak, a pass keeps at most an eighth of the pages in use cached, however many pages the recent
// periods took: a server with a few MiB in use that makes a few buffers a second does not hold 20 MiB for them.
TEST_F(PageHeapTest, PageCacheKeepsAtMostAShareOfThePagesInUse) {
  static_assert(PageHeap::kPageCacheUseShare == 8, "the figures below are for an eighth");
  HeapConfig config{4, kK, true, true, 0};
  config.page_cache_pages = 64;
  heap->configure(config);
  std::vector<void*> live;
  for (int i = 0; i < 16; ++i) live.push_back(heap->alloc_large(0, 2 * kHugePageBytes, kBlockBytes));  // 32 pages
  // Buffers of 2 pages made and freed in waves: 6 cached pages, and each period takes 6 (fewer than it holds: no
  // turnover).
  for (int wave = 0; wave < 3; ++wave) {
    std::vector<void*> buffers;
    for (int i = 0; i < 3; ++i) buffers.push_back(heap->alloc_large(1, 2 * kHugePageBytes, kBlockBytes));
    for (void* b : buffers) heap->free_large(b);
    heap->subrelease_free_blocks(false);
    EXPECT_EQ(heap->gauges().page_cache_bytes, 4 * kHugePageBytes) << "wave " << wave << ": 32 pages in use / 8";
  }
  EXPECT_EQ(heap->counters().huge_pages_reused.load(), 2 * 4u) << "each wave after the first reuses the 4 kept";
  // Periods without a take or a free: the cache empties.
  for (unsigned pass = 0; pass < PageHeap::kPageCachePasses; ++pass) heap->subrelease_free_blocks(false);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  // Most of the program's memory freed: 8 pages in use keep 1 (not bounded by use: no demand allowance).
  for (int i = 0; i < 12; ++i) heap->free_large(live[i]);
  heap->subrelease_free_blocks(false);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 1 * kHugePageBytes);
  for (int i = 12; i < 16; ++i) heap->free_large(live[i]);
  heap->subrelease_free_blocks(false);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.backed_bytes, 0u) << "every page given back, none lost";
  heap->check_invariants();
}

// Big buffers replaced among live ones: a freed buffer's run too short for the next, with free pages beside it,
// serves it, and only those free pages are backed afresh (mimalloc-bench's malloc-large).
TEST_F(PageHeapTest, ACachedRunTooShortForAHugeObjectServesItWithTheFreePagesBesideIt) {
  HeapConfig config{4, kK, true, true, 0};
  config.page_cache_pages = 64;
  heap->configure(config);
  void* a = heap->alloc_large(1, 3 * kHugePageBytes, kBlockBytes);
  void* b = heap->alloc_large(1, 2 * kHugePageBytes, kBlockBytes);
  void* c = heap->alloc_large(1, 3 * kHugePageBytes, kBlockBytes);
  heap->free_large(c);  // the pages after b's are free: c's are cached
  heap->free_large(b);  // joins c's run: 5 cached pages after a's
  ASSERT_EQ(heap->gauges().page_cache_bytes, 5 * kHugePageBytes);
  size_t backed = platform.backed_bytes, reused = heap->counters().huge_pages_reused.load();
  void* d = heap->alloc_large(1, 7 * kHugePageBytes, kBlockBytes);
  EXPECT_EQ(d, reinterpret_cast<char*>(a) + 3 * kHugePageBytes) << "the cached run, and the free pages after it";
  EXPECT_EQ(platform.backed_bytes - backed, 2 * kHugePageBytes) << "only the 2 free pages backed afresh";
  EXPECT_EQ(heap->counters().huge_pages_reused.load() - reused, 5u);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_TRUE(heap->huge_object_recycled(d)) << "calloc must zero it";
  heap->check_invariants();
  heap->free_large(d);
  heap->free_large(a);
  heap->set_page_cache_pages(0);
  EXPECT_EQ(platform.backed_bytes, 0u) << "every page given back, none lost";
  heap->check_invariants();
}

// Without passes to trim it (the library before its sweeper runs), each free keeps the cache within the larger of
// an eighth of the pages in use and the recent demand allowance (the largest huge object taken lately, at most
// PageCache::kMaxDemandPages): a program that replaces big buffers one by one reuses their pages, and one that
// frees everything keeps at most that one buffer's pages cached.
TEST_F(PageHeapTest, APageCacheBoundedByUseKeepsAtMostAnEighthOfThePagesInUseOrOneRecentBufferAtEveryFree) {
  HeapConfig config{4, kK, true, true, 0};
  config.page_cache_pages = 64;
  config.page_cache_bounded_by_use = true;
  heap->configure(config);  // (not set_page_cache_pages: no parked object, the cache alone)
  std::vector<void*> live;
  for (int i = 0; i < 8; ++i) live.push_back(heap->alloc_large(0, 2 * kHugePageBytes, kBlockBytes));  // 16 pages
  // A buffer of 2 pages replaced by one of the same size: the second takes the first's pages.
  void* a = heap->alloc_large(1, 2 * kHugePageBytes, kBlockBytes);
  heap->free_large(a);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 2 * kHugePageBytes) << "16 pages in use / 8";
  size_t backed = platform.backed_bytes;
  void* b = heap->alloc_large(1, 2 * kHugePageBytes, kBlockBytes);
  EXPECT_EQ(b, a);
  EXPECT_EQ(platform.backed_bytes, backed) << "no fresh memory";
  EXPECT_EQ(heap->counters().huge_pages_reused.load(), 2u);
  // A 3-page buffer is more than an eighth of what is in use, but it was just taken: within the allowance.
  void* c = heap->alloc_large(1, 3 * kHugePageBytes, kBlockBytes);
  heap->free_large(c);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 3 * kHugePageBytes);
  // Freeing the rest keeps the cache within the allowance (3 pages), the oldest runs going back first.
  heap->free_large(b);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 2 * kHugePageBytes) << "c's 3 pages went back for b's 2";
  for (void* p : live) heap->free_large(p);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 2 * kHugePageBytes) << "nothing in use: one buffer's pages";
  for (unsigned pass = 0; pass <= PageHeap::kPageCachePasses; ++pass) heap->subrelease_free_blocks(false, 1);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.backed_bytes, 0u) << "every page given back, none lost";
  heap->check_invariants();
}

// The parked huge object (huge_objects.cc): with the page cache turned on, a freed huge object waits, still in
// use, for the next allocation of its size and class, which takes it without the page cache; one that does not
// fit, a second one parked, or a pass that finds it unused sends it to the page cache; a second free of it is a
// double free.
TEST_F(PageHeapTest, AFreedHugeObjectIsParkedForTheNextAllocationOfItsSizeAndFlushedWhenUnused) {
  heap->configure(HeapConfig{4, kK, true, true, 0});
  heap->set_page_cache_pages(64, true);
  void* a = heap->alloc_large(1, 2 * kHugePageBytes + 100, kBlockBytes);
  size_t in_use = heap->pages_in_use(1);
  EXPECT_EQ(heap->free_large(a), 2 * kHugePageBytes + 100) << "the requested bytes, for the live accounting";
  EXPECT_EQ(heap->pages_in_use(1), in_use) << "parked: still in use";
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(heap->alloc_large(1, 2 * kHugePageBytes + 100, kBlockBytes), a);
  EXPECT_TRUE(heap->huge_object_recycled(a)) << "calloc must zero it";
  heap->free_large(a);
  EXPECT_DEATH(heap->free_large(a), "double free");
  // Another size: the parked one goes to the page cache, and the new one takes its pages from there.
  void* b = heap->alloc_large(1, 2 * kHugePageBytes + 8192, kBlockBytes);
  EXPECT_EQ(b, a);
  EXPECT_EQ(heap->counters().huge_pages_reused.load(), 2u * 3);
  heap->free_large(b);
  EXPECT_FALSE(heap->flush_parked_huge(false)) << "a pass: reused since the previous one";
  EXPECT_TRUE(heap->flush_parked_huge(false)) << "the next pass: unused since";
  EXPECT_EQ(heap->pages_in_use(1), 0u);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 3 * kHugePageBytes) << "the allowance of its 3 pages";
  // A second object parked sends the first to the page cache; turning the cache off, both back to the OS.
  void* c = heap->alloc_large(1, 4 * kHugePageBytes, kBlockBytes);
  void* d = heap->alloc_large(1, 4 * kHugePageBytes, kBlockBytes);
  heap->free_large(c);
  heap->free_large(d);
  EXPECT_EQ(heap->pages_in_use(1), 4u) << "d parked";
  heap->set_page_cache_pages(0);
  EXPECT_EQ(heap->pages_in_use(1), 0u);
  EXPECT_EQ(heap->gauges().page_cache_bytes, 0u);
  EXPECT_EQ(platform.backed_bytes, 0u) << "every page given back, none lost";
  heap->free_large(heap->alloc_large(1, 4 * kHugePageBytes, kBlockBytes));
  EXPECT_EQ(heap->pages_in_use(1), 0u) << "the cache off: nothing parked";
  heap->check_invariants();
}

TEST_F(PageHeapTest, AnOpenPageThatStaysEmptyIsGivenBackAtTheSweepAfterTheOneThatFoundItEmpty) {
  heap->configure(HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0});  // (no lending between classes: one page each)
  uintptr_t a = blocks(0, 4);
  uintptr_t keep = blocks(1, 1);
  free(a);
  EXPECT_EQ(info(a).state, PageState::kOpen) << "freeing its last block keeps an open page";
  EXPECT_EQ(heap->release_empty_open_pages(false), 0u) << "the first pass only notes it";
  EXPECT_EQ(heap->pages_in_use(0), 1u);
  // Used again between two passes: still wanted.
  uintptr_t b = blocks(0, 2);
  EXPECT_EQ(page_of(b), page_of(a));
  free(b);
  EXPECT_EQ(heap->release_empty_open_pages(false), 0u);
  EXPECT_EQ(heap->release_empty_open_pages(false), 1u) << "empty at two passes in a row, nothing taken between";
  heap->check_invariants();
  EXPECT_EQ(heap->pages_in_use(0), 0u);
  EXPECT_EQ(info(a).state, PageState::kUnused);
  EXPECT_EQ(heap->pages_in_use(1), 1u) << "an open page with a block in use stays";
  // The class opens a page when it needs one again (the same address, given back and free); collect (now) gives an
  // empty one back at once.
  size_t released = heap->counters().huge_pages_released.load();
  uintptr_t c = blocks(0, 1);
  EXPECT_EQ(info(c).state, PageState::kOpen);
  free(c);
  EXPECT_EQ(heap->release_empty_open_pages(true), 1u);
  EXPECT_EQ(heap->counters().huge_pages_released.load(), released + 1);
  EXPECT_EQ(heap->pages_in_use(0), 0u);
  free(keep);
  EXPECT_EQ(heap->release_empty_open_pages(true), 1u);
  EXPECT_EQ(heap->pages_in_use(kMaxClasses), 0u);
  heap->check_invariants();
}

// An object of 1 to 2 MiB on a fresh page (docs/heap-memory.md, "Objects of 1 to 2 MiB"): the rest of its page is
// left unbacked and the page kept off huge pages before the object is written, so that it costs the 4 KiB pages
// the program writes, not a whole huge page; the rest is backed again as other objects take it, and the page may
// be huge again once all of it is. A nearly whole page, a page from the page cache and HUGE_PAGES=2 keep theirs.
TEST_F(PageHeapTest, AnObjectOfMoreThanHalfAFreshPageLeavesTheRestUnbackedAndThePageSmall) {
  heap->configure(HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0});
  uintptr_t big = blocks(1, 129);  // 1 MiB + 8 KiB
  uintptr_t page = page_of(big);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 127 * kBlockBytes);
  EXPECT_EQ(platform.no_huge_page, std::set<uintptr_t>{page});
  EXPECT_EQ(platform.subreleased_bytes, 0u) << "nothing resident to give back on a fresh page";
  EXPECT_EQ(heap->subrelease_free_blocks(true), 0u) << "counted once";
  // Objects of its class take the rest: backed again, and the page may be huge once none of it is left unbacked.
  uintptr_t a = blocks(1, 100);
  EXPECT_EQ(page_of(a), page);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 27 * kBlockBytes);
  EXPECT_EQ(platform.no_huge_page.count(page), 1u);
  uintptr_t b = blocks(1, 27);
  EXPECT_EQ(page_of(b), page);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 0u);
  EXPECT_TRUE(platform.no_huge_page.empty());
  free(a);
  free(b);
  free(big);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 0u);
  // A nearly whole page (fewer than kMinSlackBlocks free) stays huge.
  uintptr_t whole = blocks(2, kBlocksPerHugePage - kMinSlackBlocks + 1);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 0u);
  EXPECT_EQ(platform.no_huge_page.count(page_of(whole)), 0u);
  free(whole);
  // Half a page or less: another object of its size fills the rest.
  uintptr_t half = blocks(3, 128);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 0u);
  free(half);
  // HUGE_PAGES=2: a page is small until it is dense, and the rest of this one is left as it is (a collapse
  // needs all of the page)...
  HeapConfig dense{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0};
  dense.collapse_dense = true;
  heap->configure(dense);
  uintptr_t c = blocks(1, 129);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 0u);
  free(c);
  // ... unless its class fills pages densely, whose pages are advised huge when they open: that advice is taken
  // back and the rest left unbacked.
  // Filled, every 4 KiB page resident: the default class is dense (only its pages are advised).
  uintptr_t full = blocks(1, kBlocksPerHugePage);
  uintptr_t d = blocks(1, 129);
  ASSERT_EQ(platform.advised.size(), 1u);
  EXPECT_EQ(platform.advised[0], page_of(d));
  EXPECT_EQ(heap->gauges().subreleased_bytes, 127 * kBlockBytes);
  EXPECT_EQ(platform.no_huge_page.count(page_of(d)), 1u);
  free(d);
  free(full);
  EXPECT_FALSE(platform.bad_huge_page_advice);
  heap->check_invariants();
}

// Subrelease (docs/heap.md): the free blocks of a sparse page from which nothing was taken for a whole pass go
// back to the OS, but only as far as the heap's blocks exceed the most it used over the last kDemandPasses
// passes; the page and its objects stay, and blocks taken again are backed again.
TEST_F(PageHeapTest, SubreleaseGivesBackFreeBlocksOfSparseIdlePagesBeyondRecentDemand) {
  heap->configure(HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0});  // (no lending between classes: one page each)
  std::vector<uintptr_t> objects;
  for (int i = 0; i < 25; ++i) objects.push_back(blocks(1, 8));  // 200 of the page's 256 blocks
  uintptr_t page = page_of(objects[0]);
  EXPECT_EQ(heap->subrelease_free_blocks(false), 0u) << "blocks were taken since the last pass: not idle";
  for (size_t i = 1; i < objects.size(); ++i) free(objects[i]);  // 8 blocks in use: 3% of the page
  // Idle and sparse now, but 200 blocks were in use at the last pass: only the 56 beyond that go back.
  EXPECT_EQ(heap->subrelease_free_blocks(false), 56u);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 56 * kBlockBytes);
  // And the page is kept from being collapsed into a whole huge page again (khugepaged would refill it).
  EXPECT_EQ(platform.no_huge_page, std::set<uintptr_t>{page});
  EXPECT_EQ(platform.subreleased_bytes, 56 * kBlockBytes);
  for (auto [address, bytes] : platform.subreleased_ranges) {
    EXPECT_EQ(page_of(address), page);
    EXPECT_GE(address, objects[0] + 8 * kBlockBytes) << "a live object's blocks were given back";
    EXPECT_LE(address + bytes, page + kHugePageBytes);
  }
  for (unsigned pass = 3; pass < PageHeap::kDemandPasses + 1; ++pass)
    EXPECT_EQ(heap->subrelease_free_blocks(false), 0u) << "pass " << pass << ": the peak is still in the window";
  EXPECT_EQ(heap->subrelease_free_blocks(false), 192u) << "the peak left the window: every other free block";
  EXPECT_EQ(heap->subrelease_free_blocks(false), 0u);
  EXPECT_EQ(heap->pages_in_use(1), 1u) << "the page stays in use";
  EXPECT_EQ(info(objects[0]).live.count(), 8u);
  heap->check_invariants();
  // Blocks taken again are backed again (off the gauge); the page is then no longer idle.
  uintptr_t again = blocks(1, 4);
  EXPECT_EQ(page_of(again), page);
  EXPECT_EQ(heap->gauges().subreleased_bytes, 244 * kBlockBytes);
  EXPECT_EQ(heap->counters().blocks_subreleased.load(), 248u);
  EXPECT_EQ(platform.no_huge_page.count(page), 1u) << "still blocks subreleased";
  free(again);
  EXPECT_FALSE(platform.bad_huge_page_advice);
  // llamalloc_collect's pass: at once, idle or not, whatever the recent demand.
  (void)blocks(2, 100);
  free(objects[0]);
  uintptr_t small = blocks(2, 1);
  EXPECT_GE(heap->subrelease_free_blocks(true), 155u);
  heap->check_invariants();
  free(small);
  EXPECT_EQ(heap->release_empty_open_pages(true), 1u) << "class 1's page, empty";
  heap->check_invariants();  // the gauge lost that page's subreleased blocks with it
}

// A steady server's sweeps give back a span and its next request takes one again: a sparse page from which a few
// blocks are taken every period still counts as idle, and its other free blocks go back (the taken ones stay);
// a page being filled (more than kIdleTakenBlocks a period) keeps its huge page whole.
TEST_F(PageHeapTest, SubreleaseKeepsOnlyTheBlocksTakenAgainEachPeriod) {
  heap->configure(HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0});
  uintptr_t keep = blocks(1, 8);
  uintptr_t page = page_of(keep);
  for (unsigned pass = 0; pass < PageHeap::kDemandPasses + 2; ++pass) {
    uintptr_t churn = blocks(1, 2);  // taken and given back within each period
    ASSERT_EQ(page_of(churn), page);
    heap->subrelease_free_blocks(false);
    free(churn);
  }
  // Of the 248 free blocks, only the 2 the churn takes each period stay backed.
  EXPECT_EQ(heap->gauges().subreleased_bytes, 246 * kBlockBytes);
  EXPECT_EQ(info(keep).live.count(), 8u);
  EXPECT_EQ(platform.no_huge_page, std::set<uintptr_t>{page});
  heap->check_invariants();
  // Every block in use again: the page may be collapsed into a huge page again.
  uintptr_t rest = blocks(1, 248);
  EXPECT_EQ(page_of(rest), page);
  EXPECT_TRUE(platform.no_huge_page.empty());
  EXPECT_EQ(heap->gauges().subreleased_bytes, 0u);
  EXPECT_FALSE(platform.bad_huge_page_advice);
  free(rest);
  // Filling: more than kIdleTakenBlocks taken in a period, nothing of the page goes back in it.
  PageHeap filling(platform, clock, HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0});
  uint64_t before = platform.subreleased_bytes;
  for (unsigned pass = 0; pass < PageHeap::kDemandPasses + 2; ++pass) {
    ASSERT_NE(filling.alloc_large(1, (PageHeap::kIdleTakenBlocks + 1) * kBlockBytes, kBlockBytes), nullptr);
    filling.subrelease_free_blocks(false);
  }
  EXPECT_EQ(platform.subreleased_bytes, before) << "a page being filled was split";
  filling.check_invariants();
}

TEST_F(PageHeapTest, SubreleaseSkipsDensePagesAndCanBeTurnedOff) {
  HeapConfig config{4, kK, true, true, 0};
  heap->configure(config);
  std::vector<uintptr_t> objects;
  for (int i = 0; i < 32; ++i) objects.push_back(blocks(1, 8));  // the whole page
  for (size_t i = 0; i < objects.size(); i += 2) free(objects[i]);  // half of it in use
  for (int pass = 0; pass < 10; ++pass) heap->subrelease_free_blocks(false);
  EXPECT_EQ(platform.subreleased_bytes, 128 * kBlockBytes) << "a page half in use is at the default limit";
  for (size_t i = 1; i < 10; i += 2) free(objects[i]);  // 88 blocks of 256 in use still
  config.subrelease_percent = 25;
  heap->configure(config);
  for (int pass = 0; pass < 10; ++pass) heap->subrelease_free_blocks(false);
  EXPECT_EQ(platform.subreleased_bytes, 128 * kBlockBytes) << "34% in use is above a 25% limit";
  config.subrelease_percent = 0;
  heap->configure(config);
  for (size_t i = 11; i < 30; i += 2) free(objects[i]);  // 8 blocks in use
  for (int pass = 0; pass < 10; ++pass) EXPECT_EQ(heap->subrelease_free_blocks(true), 0u) << "off";
  config.subrelease_percent = 25;
  heap->configure(config);
  for (int pass = 0; pass < 10; ++pass) heap->subrelease_free_blocks(false);
  EXPECT_EQ(platform.subreleased_bytes, 248 * kBlockBytes);
  heap->check_invariants();
}

// A class above the default class (only a model puts objects there) whose pages stay less than half as full as
// the default class's for kFallbackPasses passes takes its blocks from the default class's pages from then on; a
// class about as full keeps its own; CLASS_FALLBACK=0 never moves one.
TEST_F(PageHeapTest, AClassMuchEmptierThanTheDefaultClassFallsBackOntoItsPages) {
  for (bool fallback : {true, false}) {
    HeapConfig config{.num_classes = 8, .deadline_k = kK, .small_heap_pages = 0};
    config.class_fallback = fallback;
    PageHeap h(platform, clock, config);
    auto take = [&](unsigned lc) { return reinterpret_cast<uintptr_t>(h.alloc_large(lc, 8 * kBlockBytes, kBlockBytes)); };
    std::vector<uintptr_t> one, two, three;
    for (int i = 0; i < 64; ++i) one.push_back(take(1));    // two pages, full
    for (int i = 0; i < 64; ++i) two.push_back(take(2));    // two pages, three quarters kept below
    for (int i = 0; i < 96; ++i) three.push_back(take(3));  // three pages, one object in 32 kept below
    for (size_t i = 0; i < two.size(); ++i)
      if (i % 4 == 0) h.free_large(reinterpret_cast<void*>(two[i]));
    for (size_t i = 0; i < three.size(); ++i)
      if (i % 32 != 0) h.free_large(reinterpret_cast<void*>(three[i]));
    ASSERT_EQ(h.pages_in_use(3), 3u);
    for (unsigned pass = 1; pass < PageHeap::kFallbackPasses; ++pass) h.subrelease_free_blocks(false);
    EXPECT_EQ(h.page_class(3), 3u) << "not yet: " << PageHeap::kFallbackPasses << " passes in a row";
    h.subrelease_free_blocks(false);
    EXPECT_EQ(h.page_class(3), fallback ? 1u : 3u);
    EXPECT_EQ(h.page_class(2), 2u) << "three quarters as full as the default class: its own pages";
    EXPECT_EQ(h.counters().class_fallbacks.load(), fallback ? 1u : 0u);
    // A new class-3 object is now placed as a default-class one: the default class's pages are full, so in a
    // hole of a longer class's page (recycling), not on a page of class 3.
    uintptr_t p = take(3);
    uintptr_t q = take(1);
    EXPECT_EQ(h.page_info(p).lifetime_class, fallback ? h.page_info(q).lifetime_class : 3u);
    h.check_invariants();
  }
}

TEST_F(PageHeapTest, LargeHeapsAndSmallHeapPagesZeroKeepOnePagePerClass) {
  // Off: the paper's placement, one open page per class.
  PageHeap off(platform, clock, HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 0});
  for (unsigned c : {3u, 0u, 1u, 2u}) ASSERT_NE(off.alloc_large(c, kBlockBytes, kBlockBytes), nullptr);
  EXPECT_EQ(off.pages_in_use(kMaxClasses), 4u);
  off.check_invariants();
  // At the threshold: once that many huge pages are in use, every class opens its own.
  PageHeap big(platform, clock, HeapConfig{.num_classes = 4, .deadline_k = kK, .small_heap_pages = 1});
  ASSERT_NE(big.alloc_large(3, kBlockBytes, kBlockBytes), nullptr);
  ASSERT_NE(big.alloc_large(0, kBlockBytes, kBlockBytes), nullptr);
  EXPECT_EQ(big.pages_in_use(kMaxClasses), 2u);
  EXPECT_EQ(big.pages_in_use(0), 1u);
  big.check_invariants();
}

// HeapConfig::long_class_min (LLAMALLOC_LONG_CLASS): objects of the long classes share the huge pages of the
// longest class, so a long class that holds a few objects keeps no open page of its own. Shorter classes keep
// theirs, and off, every class has its own.
TEST_F(PageHeapTest, LongClassesTakeTheLongestClassPages) {
  HeapConfig config{kMaxClasses, kK, true, true, 0};
  config.long_class_min = 4;
  PageHeap shared(platform, clock, config);
  auto at = [](void* p) { return reinterpret_cast<uintptr_t>(p); };
  uintptr_t c4 = at(shared.alloc_large(4, kBlockBytes, kBlockBytes));
  uintptr_t c6 = at(shared.alloc_large(6, 2 * kBlockBytes, kBlockBytes));
  uintptr_t c7 = at(shared.alloc_large(7, kBlockBytes, kBlockBytes));
  uintptr_t c3 = at(shared.alloc_large(3, kBlockBytes, kBlockBytes));
  EXPECT_EQ(page_of(c4), page_of(c7));
  EXPECT_EQ(page_of(c6), page_of(c7));
  EXPECT_NE(page_of(c3), page_of(c7));
  EXPECT_EQ(shared.page_info(c4).lifetime_class, 7u);
  EXPECT_EQ(shared.page_info(c3).lifetime_class, 3u);
  EXPECT_EQ(shared.pages_in_use(kMaxClasses), 2u);
  EXPECT_EQ(shared.pages_in_use(4), 0u);
  shared.check_invariants();
  for (uintptr_t p : {c7, c4, c6, c3}) shared.free_large(reinterpret_cast<void*>(p));
  shared.check_invariants();

  PageHeap off(platform, clock, HeapConfig{.num_classes = kMaxClasses, .deadline_k = kK, .small_heap_pages = 0});
  for (unsigned c : {4u, 6u, 7u, 3u}) ASSERT_NE(off.alloc_large(c, kBlockBytes, kBlockBytes), nullptr);
  EXPECT_EQ(off.pages_in_use(kMaxClasses), 4u);
  EXPECT_EQ(off.pages_in_use(4), 1u);
  off.check_invariants();
}

// Huge pages only where they are dense (LLAMALLOC_HUGE_PAGES=2, dense_pages.cc): a pass collapses the pages with
// nine tenths of their blocks in use and of their 4 KiB pages resident, each once, at most `budget` a pass; a page
// found too sparse is looked at again 4 passes later; a failed collapse is tried again; memory given back inside a
// page (subrelease) makes it a candidate again once the kernel has split it.
TEST(DensePages, OnlyDenseResidentPagesBecomeHugeWithinTheBudget) {
  FakePlatform platform;
  FakeClock clock;
  HeapConfig off{4, kK};
  PageHeap without(platform, clock, off);
  ASSERT_NE(without.alloc_large(1, 250 * kBlockBytes, kBlockBytes), nullptr);
  EXPECT_EQ(without.collapse_dense_pages(16), 0u) << "off unless HUGE_PAGES=2";
  EXPECT_TRUE(platform.collapsed.empty());

  HeapConfig on{4, kK};
  on.collapse_dense = true;
  PageHeap heap(platform, clock, on);
  auto page = [](void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1); };
  void* dense = heap.alloc_large(1, 250 * kBlockBytes, kBlockBytes);   // 250 of 256 blocks: dense
  void* sparse = heap.alloc_large(2, 100 * kBlockBytes, kBlockBytes);  // another class's page, 100 blocks
  void* untouched = heap.alloc_large(3, 250 * kBlockBytes, kBlockBytes);
  ASSERT_TRUE(dense && sparse && untouched);
  platform.resident[page(untouched)] = 40;  // allocated whole, touched at a few places
  EXPECT_EQ(heap.collapse_dense_pages(16), 1u);
  ASSERT_EQ(platform.collapsed.size(), 1u);
  EXPECT_EQ(platform.collapsed[0], page(dense));
  EXPECT_EQ(heap.counters().huge_pages_collapsed.load(), 1u);
  EXPECT_EQ(heap.collapse_dense_pages(16), 0u) << "a collapsed page is not collapsed again";
  // The untouched page fills up: looked at again four passes after it was found too sparse.
  platform.resident[page(untouched)] = 512;
  EXPECT_EQ(heap.collapse_dense_pages(16), 0u);
  EXPECT_EQ(heap.collapse_dense_pages(16), 0u);
  EXPECT_EQ(heap.collapse_dense_pages(16), 1u);
  EXPECT_EQ(platform.collapsed.back(), page(untouched));
  // Budget, and a collapse the kernel cannot do now: tried again at the next pass.
  std::vector<void*> more;
  // (Class 0: class 1 fills its pages densely by now, and its next pages are advised huge at their opening.)
  platform.default_resident = 300;  // filled sparsely as they are handed out: not advised huge at their opening
  for (int i = 0; i < 3; ++i) more.push_back(heap.alloc_large(0, 250 * kBlockBytes, kBlockBytes));
  platform.default_resident = ~size_t{0};  // then written whole
  platform.collapse_result = Platform::Collapse::kFailed;
  EXPECT_EQ(heap.collapse_dense_pages(2), 0u);
  EXPECT_EQ(heap.counters().huge_page_collapses_failed.load(), 3u);
  platform.collapse_result = Platform::Collapse::kDone;
  EXPECT_EQ(heap.collapse_dense_pages(2), 2u) << "at most the budget a pass";
  EXPECT_EQ(heap.collapse_dense_pages(2), 1u);
  // Most of the dense page freed and its free blocks given back: split by the kernel, and a candidate once dense.
  heap.free_large(dense);
  void* small = heap.alloc_large(1, 10 * kBlockBytes, kBlockBytes);
  ASSERT_NE(small, nullptr);
  heap.subrelease_free_blocks(true);
  size_t before = platform.collapsed.size();
  EXPECT_EQ(heap.collapse_dense_pages(16), 0u) << "a sparse page with memory given back stays small";
  EXPECT_EQ(platform.collapsed.size(), before);
  heap.check_invariants();
  EXPECT_FALSE(platform.bad_huge_page_advice);
}

// A heap under LLAMALLOC_HUGE_PAGES=2 (collapse_dense) whose pages are filled one at a time by large objects of
// 200 of their 256 blocks: the next object does not fit, and opens a page. The fake platform says every 4 KiB page
// of a page resident (it filled densely) unless the test says otherwise.
class DenseAdvice : public ::testing::Test {
 protected:
  static HeapConfig dense_config() {
    HeapConfig on{4, kK};
    on.collapse_dense = true;
    return on;
  }
  static uintptr_t page(void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1); }
  uintptr_t fill_one(unsigned lc) {
    objects.push_back(heap.alloc_large(lc, 200 * kBlockBytes, kBlockBytes));
    return page(objects.back());
  }
  void TearDown() override {
    for (void* p : objects) heap.free_large(p);
    heap.check_invariants();
    EXPECT_FALSE(platform.bad_huge_page_advice);
  }
  FakePlatform platform;
  FakeClock clock;
  PageHeap heap{platform, clock, dense_config()};
  std::vector<void*> objects;
};

// A class whose page filled densely opens its next pages huge from their first touch, but for one in
// kProbeEvery, which stays on 4 KiB pages as a sample: a sparse sample stops the advice until a page on 4 KiB pages
// fills densely again; the first page of a class is never advised.
TEST_F(DenseAdvice, AClassThatFillsPagesDenselyGetsItsNextPagesHugeFromTheStart) {
  fill_one(1);
  EXPECT_TRUE(platform.advised.empty()) << "a class's first page";
  std::vector<uintptr_t> pages;
  for (unsigned i = 0; i < PageHeap::kProbeEvery; ++i) pages.push_back(fill_one(1));
  // (The fake says every 4 KiB page resident: the first page filled densely.)
  ASSERT_EQ(platform.advised.size(), PageHeap::kProbeEvery - 1) << "all but the probe";
  uintptr_t probe = 0;
  for (uintptr_t p : pages)
    if (std::find(platform.advised.begin(), platform.advised.end(), p) == platform.advised.end()) probe = p;
  ASSERT_NE(probe, 0u);
  EXPECT_EQ(probe, pages.back());
  platform.resident[probe] = 64;  // the probe page touched in a few places only
  size_t advised = platform.advised.size();
  uintptr_t after = fill_one(1);  // the probe fills (sparse): the class is no longer dense
  EXPECT_EQ(platform.advised.size(), advised) << "after a sparse probe, the next page is not advised";
  fill_one(1);  // that page, on 4 KiB pages, fills densely (the fake's default): dense again
  EXPECT_EQ(platform.advised.size(), advised + 1);
  EXPECT_NE(platform.advised.back(), after);
  void* other = heap.alloc_large(2, 10 * kBlockBytes, kBlockBytes);  // another class: its own first page
  EXPECT_EQ(platform.advised.size(), advised + 1);
  heap.free_large(other);
}

// Only the default class has its pages advised huge at their opening: a class split from it (a model's or the
// learner's) fills its pages on 4 KiB pages however densely, since while it holds little an open page advised huge
// would be 2 MiB resident for a few objects; its dense pages are collapsed instead.
TEST_F(DenseAdvice, OnlyTheDefaultClassHasItsPagesAdvisedHugeAtTheirOpening) {
  ASSERT_EQ(dense_config().default_class, 1u);
  for (unsigned i = 0; i < 2 * PageHeap::kProbeEvery; ++i) fill_one(2);
  EXPECT_TRUE(platform.advised.empty()) << "a split class's pages, though they filled densely";
  fill_one(1);
  uintptr_t second = fill_one(1);
  ASSERT_EQ(platform.advised.size(), 1u) << "the default class: from its second page";
  EXPECT_EQ(platform.advised.back(), second);
  fill_one(0);
  fill_one(0);
  EXPECT_EQ(platform.advised.size(), 1u) << "a class below the default one";
}

}  // namespace
}  // namespace llamalloc::testing
