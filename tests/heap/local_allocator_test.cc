// Thread-local span allocation on real memory with a fake clock: bump allocation in runs of free lines,
// line counts, line recycling in partially free spans after their page's deadline, overflow spans.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "fake_platform.h"
#include "local/local.h"

namespace llamalloc::testing {
namespace {

class LocalAllocatorTest : public ::testing::Test {
 protected:
  LocalAllocatorTest() : global(std::make_unique<GlobalAllocator>(platform, clock, HeapConfig{8, 2})) {}
  ~LocalAllocatorTest() override { LocalAllocator::release_all(*global, heap); }

  void* alloc(unsigned lc, size_t size) {
    void* p = cursor_bump(heap.classes[lc].primary, size);
    if (p == nullptr) p = LocalAllocator::alloc_small(*global, heap, lc, size, 16);
    EXPECT_TRUE(heap.check(*global));
    return p;
  }
  void free(void* p) {
    SpanMeta* s = global->span_of(reinterpret_cast<uintptr_t>(p));
    ASSERT_NE(s, nullptr);
    ASSERT_TRUE(s->small.load());
    LocalAllocator::free_small(*global, s, p);
  }
  static uintptr_t span_of(const void* p) { return reinterpret_cast<uintptr_t>(p) & ~(kBlockSpanBytes - 1); }

  LinuxPlatform platform;  // objects need real memory: their headers are written
  FakeClock clock;
  std::unique_ptr<GlobalAllocator> global;
  LocalHeap heap;
};

TEST_F(LocalAllocatorTest, BumpAllocatesContiguouslyWithEightByteHeaders) {
  char* a = static_cast<char*>(alloc(0, 24));
  char* b = static_cast<char*>(alloc(0, 24));
  EXPECT_EQ(b - a, 32) << "24 bytes + 8 header = 32";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 16, 0u);
  EXPECT_EQ(LocalAllocator::usable_size(a), 24u);
  free(a);
  free(b);
  global->check_invariants();
}

TEST_F(LocalAllocatorTest, LineCountsFollowObjectsAndAFreedSpanReturnsToTheGlobalAllocator) {
  std::vector<void*> objs;
  for (int i = 0; i < 300; ++i) objs.push_back(alloc(0, 100));  // 112 bytes: some straddle lines
  uintptr_t first_span = span_of(objs[0]);
  SpanMeta* s = global->span_of(first_span);
  EXPECT_TRUE(s->owned == 0) << "the first span was filled and closed";
  EXPECT_GT(s->live_lines.load(), 120);
  for (void* p : objs)
    if (span_of(p) == first_span) free(p);
  EXPECT_EQ(s->small.load(), 0) << "the last free gave the span back";
  EXPECT_FALSE(global->page_info(first_span).live.test((first_span & (kHugePageBytes - 1)) / kBlockBytes));
  for (void* p : objs)
    if (span_of(p) != first_span) free(p);
  global->check_invariants();
}

TEST_F(LocalAllocatorTest, PartiallyFreeSpansAreRecycledLineByLineAfterTheDeadline) {
  global->configure(HeapConfig{8, 2, false, false});  // the paper's rules: lines recycled after the deadline
  // Fill a whole huge page with 64-byte objects of class 2 so that it becomes active with a deadline.
  std::vector<void*> objs;
  uintptr_t page = 0;
  while (true) {
    void* p = alloc(2, 56);
    if (page == 0) page = reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1);
    if ((reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1)) != page) {
      free(p);
      break;
    }
    objs.push_back(p);
  }
  ASSERT_EQ(global->page_info(page).state, PageState::kActive);
  // Keep the objects that start in every eighth line; free the rest: runs of about six free lines appear.
  std::vector<void*> kept;
  for (void* p : objs) {
    if (line_of_offset(reinterpret_cast<uintptr_t>(p) - 8) % 8 != 0) free(p);
    else kept.push_back(p);
  }
  for (void* p : kept) memset(p, 0x5A, 56);
  uint64_t recycled_before = global->counters().lines_recycled.load();
  // Before the deadline a class 0 request may take only completely free blocks.
  void* early = alloc(0, 56);
  EXPECT_NE(reinterpret_cast<uintptr_t>(early) & ~(kHugePageBytes - 1), page);
  LocalAllocator::release_all(*global, heap);
  clock.now += 2 * global->class_duration_ns(2) + 1;
  global->tick();
  EXPECT_EQ(global->page_info(page).lifetime_class, 3u) << "live residual blocks at the deadline: promoted";
  // Now shorter-lived objects go into the free lines of the partially free spans.
  std::set<uintptr_t> kept_lines;
  for (void* p : kept) {
    kept_lines.insert(line_of_offset(reinterpret_cast<uintptr_t>(p) - 8));  // spans are line aligned
    kept_lines.insert(line_of_offset(reinterpret_cast<uintptr_t>(p) + 55));
  }
  int recycled_here = 0;
  std::vector<void*> fresh;
  for (int i = 0; i < 400; ++i) {
    void* p = alloc(0, 56);
    fresh.push_back(p);
    if ((reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1)) == page) {
      ++recycled_here;
      EXPECT_EQ(kept_lines.count(line_of_offset(reinterpret_cast<uintptr_t>(p) - 8)), 0u)
          << "a recycled object never lands in a live line";
      EXPECT_EQ(kept_lines.count(line_of_offset(reinterpret_cast<uintptr_t>(p) + 55)), 0u);
    }
    memset(p, 0xC3, 56);
  }
  EXPECT_GT(recycled_here, 300);
  EXPECT_GT(global->counters().lines_recycled.load(), recycled_before);
  for (void* p : kept)
    for (int i = 0; i < 56; ++i) ASSERT_EQ(static_cast<unsigned char*>(p)[i], 0x5A);
  // Medium objects do not go into the small objects' holes: they fill spans of their own.
  ASSERT_TRUE(heap.classes[0].primary.partially_free);
  void* medium = alloc(0, 1000);
  EXPECT_NE(span_of(medium), span_of(fresh.back()));
  EXPECT_EQ(heap.classes[0].medium.span, global->span_of(reinterpret_cast<uintptr_t>(medium)));
  free(medium);
  for (void* p : fresh) free(p);
  for (void* p : kept) free(p);
  free(early);
  LocalAllocator::release_all(*global, heap);
  global->check_invariants();
  EXPECT_EQ(global->page_info(page).state, PageState::kUnused) << "all objects freed: the page is released";
}

TEST_F(LocalAllocatorTest, EarlyLineRecyclingFillsTheHolesOfALongerClassBeforeItsDeadline) {
  // A class 3 page full of 56-byte objects; most of them die at once, every eighth line stays live.
  std::vector<void*> objs;
  uintptr_t page = 0;
  for (;;) {
    void* p = alloc(3, 56);
    if (page == 0) page = reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1);
    if ((reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1)) != page) {
      free(p);
      break;
    }
    objs.push_back(p);
  }
  LocalAllocator::release_all(*global, heap);
  ASSERT_EQ(global->page_info(page).state, PageState::kActive);
  std::vector<void*> kept;
  for (void* p : objs) {
    if (line_of_offset(reinterpret_cast<uintptr_t>(p) - 8) % 8 != 0) free(p);
    else kept.push_back(p);
  }
  // Long before the page's deadline (10 s x K), class 0 objects go into its free lines: no fresh memory.
  size_t footprint = global->gauges().footprint_bytes;
  int here = 0;
  std::vector<void*> fresh;
  for (int i = 0; i < 1000; ++i) {
    void* p = alloc(0, 56);
    fresh.push_back(p);
    here += (reinterpret_cast<uintptr_t>(p) & ~(kHugePageBytes - 1)) == page;
  }
  EXPECT_EQ(here, 1000);
  EXPECT_LE(global->gauges().footprint_bytes, footprint + kHugePageBytes) << "at most one open page more";
  for (void* p : fresh) free(p);
  for (void* p : kept) free(p);
  LocalAllocator::release_all(*global, heap);
  global->check_invariants();
}

TEST_F(LocalAllocatorTest, AFreedMediumObjectLeavesAHoleThatTheNextOfItsSizeFits) {
  // Medium objects start at a line and hold whole lines alone.
  void* a = alloc(2, 1000);
  void* b = alloc(2, 1000);
  EXPECT_EQ((reinterpret_cast<uintptr_t>(a) - kSmallHeaderBytes) % kLineBytes, kSmallHeaderBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) - reinterpret_cast<uintptr_t>(a), 1024u) << "1000 + 8 rounded to 8 lines";
  EXPECT_EQ(LocalAllocator::usable_size(a), 1016u);
  // Fill class 2 pages with 1000-byte values interleaved with 24-byte objects (a server's keys and values),
  // then free every other value: the holes are exactly one value long.
  std::vector<void*> values, keys;
  for (int i = 0; i < 6000; ++i) {
    values.push_back(alloc(2, 1000));
    keys.push_back(alloc(2, 24));
  }
  LocalAllocator::release_all(*global, heap);
  // A class 2 object that fits no open page: the last open page becomes active too (an open page is still being
  // filled by its own class; only active pages are recycled by shorter ones).
  void* whole_page = global->alloc_large(2, kHugePageBytes, kBlockBytes);
  for (size_t i = 0; i < values.size(); i += 2) free(values[i]);
  size_t footprint = global->gauges().footprint_bytes;
  std::set<uintptr_t> value_spans;
  for (void* p : values) value_spans.insert(span_of(p));
  // As many class 1 values again go into those holes (early line recycling of the longer class 2).
  std::vector<void*> again;
  size_t in_holes = 0;
  for (int i = 0; i < 3000; ++i) {
    again.push_back(alloc(1, 1000));
    in_holes += value_spans.count(span_of(again.back()));
  }
  EXPECT_EQ(in_holes, 3000u) << "every value went into a hole left by another";
  EXPECT_EQ(global->gauges().footprint_bytes, footprint) << "no fresh memory";
  for (void* p : again) free(p);
  for (size_t i = 1; i < values.size(); i += 2) free(values[i]);
  for (void* p : keys) free(p);
  global->free_large(whole_page);
  free(a);
  free(b);
  LocalAllocator::release_all(*global, heap);
  global->check_invariants();
}

TEST_F(LocalAllocatorTest, AlignedSmallObjectsLeaveWalkablePadding) {
  std::vector<void*> objs;
  for (size_t a = 32; a <= kMaxSmallAlignment; a <<= 1) {
    void* x = alloc(1, 24);
    void* p = LocalAllocator::alloc_small(*global, heap, 1, 40, a);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % a, 0u);
    objs.push_back(x);
    objs.push_back(p);
  }
  LocalAllocator::release_all(*global, heap);  // close_run walks over the padding records
  for (void* p : objs) free(p);
  global->check_invariants();
  EXPECT_EQ(global->gauges().footprint_bytes, kHugePageBytes) << "only the open page is left";
}

}  // namespace
}  // namespace llamalloc::testing

namespace llamalloc::testing {
namespace {

// alloc_small skips to the next free line for tiny objects, so every size the tiny rule admits must fit a run of
// one free line as open_run() starts it (8 bytes in). Sizes 105..120 once broke this and alloc_small spun forever
// in a partially free span whose free lines were all single (found replaying an image-server trace).
TEST(LocalAllocatorRules, EveryTinyObjectFitsARunOfOneFreeLine) {
  alignas(kLineBytes) static unsigned char line[kLineBytes];
  size_t tiny_sizes = 0;
  for (size_t size = 1; size <= kSmallMaxBytes; ++size) {
    if (!LocalAllocator::fits_one_line(size, kMinAlignBytes)) continue;
    ++tiny_sizes;
    SpanCursor c;
    c.run_start = c.bump = reinterpret_cast<uintptr_t>(line) + kSmallHeaderBytes;
    c.run_end = reinterpret_cast<uintptr_t>(line) + kLineBytes;
    EXPECT_NE(cursor_bump(c, size), nullptr) << "a tiny object of " << size << " bytes does not fit one line";
  }
  EXPECT_EQ(tiny_sizes, 104u) << "objects up to 104 bytes (112 with their header) are tiny";
}

}  // namespace
}  // namespace llamalloc::testing
