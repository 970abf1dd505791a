// Thread heaps on real memory with a fake clock: size classes, size-class spans inside lifetime classes,
// owner and remote frees, full spans brought back by a remote free, the empty-span cache, and the page heap's
// lifetime-class placement underneath.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "fake_platform.h"
#include "thread_heap/thread_heap.h"

namespace llamalloc::testing {
namespace {

class ThreadHeapTest : public ::testing::Test {
 protected:
  ThreadHeapTest() : page_heap(std::make_unique<PageHeap>(platform, clock, HeapConfig{8, 2})) {
    other = std::make_unique<ThreadHeap>();
    // Full-size spans from the first (these tests count blocks per span); SpanGrowth tests the smaller first ones.
    full_size_spans(heap);
    full_size_spans(*other);
  }
  static void full_size_spans(ThreadHeap& h) { memset(h.spans_taken, kSpanGrowthSteps, sizeof h.spans_taken); }
  ~ThreadHeapTest() override {
    ThreadHeapOps::release_all(*page_heap, *other);  // (first: its remote-free batch goes into heap's spans)
    ThreadHeapOps::release_all(*page_heap, heap);
  }

  void* alloc(unsigned lc, size_t size, size_t alignment = 16) {
    void* p = ThreadHeapOps::allocate(*page_heap, heap, lc, size, alignment);
    EXPECT_TRUE(heap.check(*page_heap));
    return p;
  }
  // A free by the owner (heap) or by another thread (other).
  void free(void* p, ThreadHeap* by = nullptr) {
    ThreadHeapOps::deallocate(*page_heap, by ? by : &heap, p);
    EXPECT_TRUE(heap.check(*page_heap));
  }
  // A free by another thread, whose remote-free batch is then pushed (as its next free into another span does).
  void free_pushed(void* p) {
    free(p, other.get());
    ThreadHeapOps::flush_remote_batch(*other);
  }
  SmallSpan* span(const void* p) { return ThreadHeapOps::span_of(*page_heap, p); }

  LinuxPlatform platform;  // blocks need real memory: free lists are written into them
  FakeClock clock;
  std::unique_ptr<PageHeap> page_heap;
  ThreadHeap heap;
  std::unique_ptr<ThreadHeap> other;
};

TEST(SizeClasses, EveryRequestGetsABlockAtMostAQuarterLargerAndEveryAlignmentIsServed) {
  for (size_t size = 0; size <= kSmallMaxBytes; ++size) {
    unsigned sc = size_class_of(size);
    ASSERT_LT(sc, kNumSizeClasses);
    size_t b = size_class_bytes(sc);
    ASSERT_GE(b, size);
    if (sc > 0) ASSERT_LT(size_class_bytes(sc - 1), size) << "not the smallest class for " << size;
    if (size > 128) ASSERT_LE(b * 4, size * 5 + 4 * 16) << size;
    ASSERT_EQ(b % 16, 0u);
    ASSERT_EQ(classify(size, 16), sc);
    for (size_t a = 32; a <= kMaxSmallAlignment; a <<= 1) {
      unsigned c = classify(size, a);
      ASSERT_NE(c, kLargeRequest) << size << " aligned " << a;
      ASSERT_EQ(size_class_bytes(c) % a, 0u);
      ASSERT_GE(size_class_bytes(c), size);
    }
    ASSERT_EQ(size_class_span_bytes(sc) % kBlockSpanBytes, 0u);
    ASSERT_GE(size_class_span_bytes(sc) / b, 7u) << "a span holds several objects";
  }
  EXPECT_EQ(classify(kSmallMaxBytes + 1, 16), kLargeRequest);
  EXPECT_EQ(classify(100, 8192), kLargeRequest);
}

TEST_F(ThreadHeapTest, BlocksOfASizeClassAreContiguousAlignedAndHaveNoHeader) {
  char* a = static_cast<char*>(alloc(0, 24));
  char* b = static_cast<char*>(alloc(0, 24));
  EXPECT_EQ(b - a, 32) << "24 bytes round up to the 32-byte class, with no header";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 16, 0u);
  EXPECT_EQ(ThreadHeapOps::usable_size(span(a)), 32u);
  EXPECT_EQ(span(a), span(b));
  EXPECT_EQ(span(a)->start % kBlockSpanBytes, 0u) << "spans are 16 KiB aligned";
  for (size_t al = 32; al <= 4096; al <<= 1) {
    void* p = alloc(0, 40, al);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % al, 0u);
    free(p);
  }
  free(a);
  free(b);
  page_heap->check_invariants();
}


// A thread keeps the span each lifetime and size class allocates from, even when empty: a span that served a
// block or two must have touched no more than its first 4 KiB page, which is then all it keeps resident.
TEST_F(ThreadHeapTest, AFreshSpanPutsItsFirst4KiBOnTheFreeListThen16KiBAtATime) {
  void* first = alloc(0, 48);
  SmallSpan* s = span(first);
  ASSERT_GT(s->capacity, 4096u / 48);
  EXPECT_EQ(s->extended.load(), 4096u / 48) << "the first step is the first 4 KiB";
  std::vector<void*> objs{first};
  while (s->extended.load() == 4096u / 48) objs.push_back(alloc(0, 48));
  EXPECT_EQ(objs.size(), 4096u / 48 + 1) << "the next block past them extends the span";
  EXPECT_EQ(s->extended.load(), std::min(s->capacity, 4096u / 48 + 16384u / 48)) << "then 16 KiB at a time";
  for (void* p : objs) free(p);
}
TEST_F(ThreadHeapTest, OwnerFreesAreReusedWhenTheFreeListRunsDryAndAnEmptySpanIsKeptOrCached) {
  std::vector<void*> objs;
  for (int i = 0; i < 300; ++i) objs.push_back(alloc(0, 100));  // 112-byte class: 146 per 16 KiB span
  std::set<SmallSpan*> spans;
  for (void* p : objs) spans.insert(span(p));
  EXPECT_EQ(spans.size(), 3u);
  size_t before = page_heap->gauges().footprint_bytes;
  for (void* p : objs) free(p);
  // The span the fast path uses is kept, one goes to the thread's span cache, the third back to the page heap
  // (its page still holds the other two).
  EXPECT_EQ(heap.cache_count[0][span_kind(16 * 1024)], 1u);
  EXPECT_EQ(page_heap->gauges().footprint_bytes, before);
  std::set<void*> again;
  std::set<SmallSpan*> again_spans;
  for (int i = 0; i < 300; ++i) {
    void* p = alloc(0, 100);
    again.insert(p);
    again_spans.insert(span(p));
  }
  EXPECT_EQ(again_spans, spans) << "the same spans serve again: no new memory";
  for (void* p : again) free(p);
  ThreadHeapOps::release_all(*page_heap, heap);
  PageInfo page = page_heap->page_info(reinterpret_cast<uintptr_t>(objs[0]));
  EXPECT_TRUE(page.live.none()) << "thread exit gives every empty span back";
  EXPECT_LE(page_heap->gauges().footprint_bytes, kHugePageBytes) << "only the class's open page stays";
}

// Span purge: after most objects of a size class are freed, the 4 KiB pages of idle, sparse spans whose blocks
// are all free go back to the OS (they read as zero), the objects that stay keep their data, and the blocks on
// those pages are handed out again when the span's free list runs dry -- every one, once.
TEST_F(ThreadHeapTest, SpanPurgeGivesBackThePagesOfFreeBlocksAndHandsTheirBlocksOutAgainWhenNeeded) {
  std::vector<void*> objs;
  for (int i = 0; i < 64 * 4; ++i) objs.push_back(alloc(1, 256));  // 64 per 16 KiB span: 16 per 4 KiB page
  std::set<SmallSpan*> spans;
  for (void* p : objs) {
    spans.insert(span(p));
    memset(p, 0x5a, 256);
  }
  ASSERT_EQ(spans.size(), 4u);
  // One object stays per span: the first block of the span's first page.
  std::vector<void*> kept, freed;
  for (void* p : objs) (ThreadHeapOps::block_index(span(p), p) == 0 ? kept : freed).push_back(p);
  ASSERT_EQ(kept.size(), 4u);
  for (void* p : freed) free(p);
  ThreadHeapOps::release_all(*page_heap, heap);
  EXPECT_EQ(ThreadHeapOps::purge_sparse_spans(*page_heap, heap, PurgeWhen::kIdle).purged, 0u) << "first look: not yet known idle";
  EXPECT_EQ(ThreadHeapOps::purge_sparse_spans(*page_heap, heap, PurgeWhen::kIdle).purged, 4u) << "idle for a whole pass: purged";
  EXPECT_EQ(ThreadHeapOps::purge_sparse_spans(*page_heap, heap, PurgeWhen::kIdle).purged, 0u) << "nothing more to give back";
  EXPECT_TRUE(heap.check(*page_heap));
  for (SmallSpan* s : spans) {
    EXPECT_EQ(s->purged_pages, 0b1110u) << "the three pages with no object left";
    EXPECT_EQ(s->parked, 48u);
    EXPECT_EQ(s->used, 1u) << "the parked blocks are free, not in use";
  }
  EXPECT_EQ(page_heap->gauges().span_purged_bytes, 4u * 3 * 4096);
  EXPECT_EQ(page_heap->counters().span_pages_purged.load(), 4u * 3);
  for (void* p : kept) {
    EXPECT_EQ(static_cast<unsigned char*>(p)[255], 0x5a) << "a live object keeps its data";
    EXPECT_TRUE(ThreadHeapOps::span_of(*page_heap, p) != nullptr);
  }
  for (void* p : freed) {
    if (ThreadHeapOps::block_index(span(p), p) < 16) continue;  // on the first page, which stays
    EXPECT_EQ(static_cast<unsigned char*>(p)[100], 0) << "a purged page reads as zero";
    EXPECT_TRUE(ThreadHeapOps::on_free_list(span(p), p)) << "a parked block counts as free (double frees)";
  }
  // Every block comes back once: 252 allocations fill the four spans exactly, with no new span.
  std::set<void*> again;
  for (int i = 0; i < 64 * 4 - 4; ++i) {
    void* p = alloc(1, 256);
    EXPECT_TRUE(spans.count(span(p)) == 1) << "served by the purged spans";
    EXPECT_TRUE(again.insert(p).second) << "handed out twice";
  }
  EXPECT_EQ(again.size(), freed.size());
  for (SmallSpan* s : spans) {
    EXPECT_EQ(s->purged_pages, 0u);
    EXPECT_EQ(s->parked, 0u);
    EXPECT_EQ(s->used, s->capacity);
  }
  EXPECT_EQ(page_heap->gauges().span_purged_bytes, 0u);
  for (void* p : again) free(p);
  for (void* p : kept) free(p);
}

// The owner's free of the last object of a purged span gives the span back at once, as for a span never purged:
// its parked blocks are free, not in use (into the thread's cache of empty spans, or back to the page heap when
// the cache is full). Counted in use, the span stayed on its queue, seemingly holding
// objects, until the sweeper's next pass; a single thread that freed a 1 GiB peak of small objects kept up to 600
// MiB resident for that long.
TEST_F(ThreadHeapTest, AnOwnersFreeThatEmptiesAPurgedSpanGivesItBackWithoutASweep) {
  std::vector<void*> objs;
  for (int i = 0; i < 64 * 4; ++i) objs.push_back(alloc(1, 256));
  std::vector<void*> kept;
  for (void* p : objs) {
    if (ThreadHeapOps::block_index(span(p), p) == 0) kept.push_back(p);
    else free(p);
  }
  ASSERT_EQ(kept.size(), 4u);
  ThreadHeapOps::release_all(*page_heap, heap);
  ThreadHeapOps::purge_sparse_spans(*page_heap, heap, PurgeWhen::kIdle);
  ASSERT_EQ(ThreadHeapOps::purge_sparse_spans(*page_heap, heap, PurgeWhen::kIdle).purged, 4u);
  const SmallSpan* head = heap.spans[1][span(kept[0])->size_class];
  unsigned gone = 0;
  for (void* p : kept) {
    bool was_head = span(p) == head;
    free(p);
    if (was_head) continue;  // the span the fast path allocates from stays where it is when it empties
    const SmallSpan* s = span(p);
    EXPECT_TRUE(s == nullptr || s->cached) << "emptied by the owner's free: off its queue with no sweep";
    ++gone;
  }
  EXPECT_GE(gone, 3u);
  EXPECT_EQ(page_heap->gauges().span_purged_bytes, (4u - gone) * 3 * 4096) << "the purged pages of the spans "
                                                                              "given back are no longer counted";
  ThreadHeapOps::release_all(*page_heap, heap);
  EXPECT_EQ(page_heap->gauges().span_purged_bytes, 0u);
  EXPECT_TRUE(heap.check(*page_heap));
}

// A span with more than the subrelease percentage of its blocks in use keeps its pages; a sparse one that is
// emptied while purged goes back to the page heap whole, its purged pages no longer counted.
TEST_F(ThreadHeapTest, SpanPurgeLeavesDenseSpansAndForgetsThePagesOfASpanThatEmpties) {
  std::vector<void*> objs;
  for (int i = 0; i < 64 * 2; ++i) objs.push_back(alloc(1, 256));
  SmallSpan* dense = span(objs[0]);
  SmallSpan* sparse = span(objs[64]);
  ASSERT_NE(dense, sparse);
  for (int i = 0; i < 64; ++i)
    if (i % 16 >= 12) free(objs[i]);  // 75% in use, a quarter of every page free
  for (int i = 65; i < 128; ++i) free(objs[i]);
  ThreadHeapOps::release_all(*page_heap, heap);
  EXPECT_EQ(ThreadHeapOps::purge_sparse_spans(*page_heap, heap, PurgeWhen::kAll).purged, 1u);
  EXPECT_EQ(dense->purged_pages, 0u);
  EXPECT_EQ(sparse->purged_pages, 0b1110u);
  EXPECT_EQ(page_heap->gauges().span_purged_bytes, 3u * 4096);
  free(objs[64]);
  ThreadHeapOps::release_all(*page_heap, heap);
  EXPECT_EQ(span(objs[64]), nullptr) << "the emptied span went back to the page heap";
  EXPECT_EQ(page_heap->gauges().span_purged_bytes, 0u);
  for (int i = 0; i < 64; ++i)
    if (i % 16 < 12) free(objs[i]);
}

// A thread's first spans of a size class whose span is 64 KiB or more are a quarter and a half of it, then the
// whole; a class whose span is 16 KiB has it from the first; every size comes back from the span cache at its own
// size.
TEST(SpanGrowth, AThreadsFirstSpansOfAClassAreSmallerThenFullSize) {
  static_assert(grown_span_bytes(64 * 1024, 0) == 16 * 1024 && grown_span_bytes(64 * 1024, 1) == 32 * 1024);
  static_assert(grown_span_bytes(64 * 1024, 2) == 64 * 1024 && grown_span_bytes(16 * 1024, 0) == 16 * 1024);
  static_assert(grown_span_bytes(128 * 1024, 0) == 32 * 1024 && grown_span_bytes(256 * 1024, 1) == 128 * 1024);
  LinuxPlatform platform;
  FakeClock clock;
  PageHeap page_heap{platform, clock, HeapConfig{8, 2}};
  ThreadHeap heap;
  std::vector<void*> objs;
  std::vector<uint32_t> sizes;
  for (int i = 0; i < 16 + 8 + 64; ++i) {  // 1 KiB objects: 16, 32 and 64 KiB spans
    objs.push_back(ThreadHeapOps::allocate(page_heap, heap, 1, 1000, 16));
    ASSERT_NE(objs.back(), nullptr);
    uint32_t bytes = ThreadHeapOps::span_of(page_heap, objs.back())->span_bytes;
    if (sizes.empty() || sizes.back() != bytes) sizes.push_back(bytes);
  }
  EXPECT_EQ(sizes, (std::vector<uint32_t>{16 * 1024, 32 * 1024, 64 * 1024}));
  void* tiny = ThreadHeapOps::allocate(page_heap, heap, 1, 64, 16);
  EXPECT_EQ(ThreadHeapOps::span_of(page_heap, tiny)->span_bytes, 16u * 1024) << "a 16 KiB class: as before";
  void* big = ThreadHeapOps::allocate(page_heap, heap, 1, 12000, 16);
  EXPECT_EQ(ThreadHeapOps::span_of(page_heap, big)->span_bytes, 32u * 1024) << "a 128 KiB class: a quarter first";
  for (void* p : objs) ThreadHeapOps::deallocate(page_heap, &heap, p);
  for (void* p : {tiny, big}) ThreadHeapOps::deallocate(page_heap, &heap, p);
  EXPECT_TRUE(heap.check(page_heap));
  ThreadHeapOps::release_all(page_heap, heap);
  page_heap.check_invariants();
}

// A sweep that empties a queue costs its owner one slow path, and the span's blocks, when it next allocates
// there: those are not the program's activity, so that a thread that works a little on every pass (an idle
// server's monitoring requests) can look quiet. Each sweep's count is forgiven once.
TEST(SweptQueues, TheSlowPathsThatTakeASweptSpanAgainAreNotCountedAsActivity) {
  LinuxPlatform platform;
  FakeClock clock;
  PageHeap page_heap{platform, clock, HeapConfig{8, 2}};
  ThreadHeap heap;
  void* kept = ThreadHeapOps::allocate(page_heap, heap, 1, 2000, 16);  // its queue keeps a span
  for (size_t size : {16, 100, 1000}) ThreadHeapOps::deallocate(page_heap, &heap, ThreadHeapOps::allocate(page_heap, heap, 1, size, 16));
  ThreadHeapOps::release_all(page_heap, heap);
  EXPECT_EQ(heap.swept_queues, 3u);
  EXPECT_EQ(heap.swept_blocks, 3u * (16 * 1024 / kBlockBytes)) << "three 16 KiB spans";
  uint64_t retaken = 0;
  EXPECT_EQ(ThreadHeapOps::program_slow_paths(heap, 110, 100, &retaken), 7u) << "10 slow paths, 3 of them re-takes";
  EXPECT_EQ(retaken, 6u);
  EXPECT_EQ(ThreadHeapOps::program_slow_paths(heap, 120, 110, &retaken), 10u) << "forgiven once";
  EXPECT_EQ(retaken, 6u);
  for (size_t size : {16, 100, 1000}) ThreadHeapOps::deallocate(page_heap, &heap, ThreadHeapOps::allocate(page_heap, heap, 1, size, 16));
  ThreadHeapOps::release_all(page_heap, heap);  // the next tick, and the next sweep
  EXPECT_EQ(ThreadHeapOps::program_slow_paths(heap, 122, 120, nullptr), 0u) << "fewer than the re-takes: none";
  ThreadHeapOps::deallocate(page_heap, &heap, kept);
  ThreadHeapOps::release_all(page_heap, heap);
  page_heap.check_invariants();
}

// Growth follows the spans a thread holds: a size class whose spans all go back to the page heap (a request's
// temporaries between requests, given back by the sweeper) starts again from its smallest span. Counted as ever
// taken, each size class a thread used grew to a full span for good, and a worker kept one such span nearly
// empty per size class (36 of them, 2.2 MiB, in hash-trimmed-cache).
TEST(SpanGrowth, ASizeClassWhoseSpansWentBackStartsSmallAgain) {
  LinuxPlatform platform;
  FakeClock clock;
  PageHeap page_heap{platform, clock, HeapConfig{8, 2}};
  ThreadHeap heap;
  for (int round = 0; round < 4; ++round) {
    std::vector<void*> objs;
    std::vector<uint32_t> sizes;
    for (int i = 0; i < 16 + 8 + 64; ++i) {  // 1 KiB objects: three spans
      objs.push_back(ThreadHeapOps::allocate(page_heap, heap, 1, 1000, 16));
      ASSERT_NE(objs.back(), nullptr);
      uint32_t bytes = ThreadHeapOps::span_of(page_heap, objs.back())->span_bytes;
      if (sizes.empty() || sizes.back() != bytes) sizes.push_back(bytes);
    }
    EXPECT_EQ(sizes, (std::vector<uint32_t>{16 * 1024, 32 * 1024, 64 * 1024})) << "round " << round;
    for (void* p : objs) ThreadHeapOps::deallocate(page_heap, &heap, p);
    ThreadHeapOps::release_all(page_heap, heap);  // as the sweeper does to a heap whose spans are empty
    EXPECT_EQ(heap.spans_taken[1][size_class_of(1000)], 0u);
  }
  page_heap.check_invariants();
}

// A cached empty span taken for another size class of its lifetime class carries its count with it: the class
// it served holds one span fewer, the class it serves one more.
TEST(SpanGrowth, ACachedSpanReusedForAnotherSizeClassMovesItsCount) {
  LinuxPlatform platform;
  FakeClock clock;
  PageHeap page_heap{platform, clock, HeapConfig{8, 2}};
  ThreadHeap heap;
  const unsigned a = size_class_of(1000), b = size_class_of(2000);
  std::vector<void*> first;
  for (int i = 0; i < 16; ++i) first.push_back(ThreadHeapOps::allocate(page_heap, heap, 1, 1000, 16));  // 16 KiB
  void* second = ThreadHeapOps::allocate(page_heap, heap, 1, 1000, 16);  // a 32 KiB span, now the queue's head
  ASSERT_EQ(ThreadHeapOps::span_of(page_heap, first[0])->span_bytes, 16u * 1024);
  ASSERT_NE(ThreadHeapOps::span_of(page_heap, second), ThreadHeapOps::span_of(page_heap, first[0]));
  EXPECT_EQ(heap.spans_taken[1][a], 2u);
  SmallSpan* cached = ThreadHeapOps::span_of(page_heap, first[0]);
  for (void* p : first) ThreadHeapOps::deallocate(page_heap, &heap, p);  // emptied, not the head: cached
  void* other = ThreadHeapOps::allocate(page_heap, heap, 1, 2000, 16);  // a first 16 KiB span: from the cache
  EXPECT_EQ(ThreadHeapOps::span_of(page_heap, other), cached);
  EXPECT_EQ(heap.spans_taken[1][a], 1u);
  EXPECT_EQ(heap.spans_taken[1][b], 1u);
  for (void* p : {second, other}) ThreadHeapOps::deallocate(page_heap, &heap, p);
  ThreadHeapOps::release_all(page_heap, heap);
  EXPECT_EQ(heap.spans_taken[1][a], 0u);
  EXPECT_EQ(heap.spans_taken[1][b], 0u);
  page_heap.check_invariants();
}

// A heap whose classes 3 and up are long-lived (HeapConfig::shared_class_min), on real memory and a fake clock.
class LongLivedClassTest : public ::testing::Test {
 protected:
  static HeapConfig config() {
    HeapConfig c{8, 2};
    c.shared_class_min = 3;
    return c;
  }
  LinuxPlatform platform;
  FakeClock clock;
  PageHeap page_heap{platform, clock, config()};
};

// A long-lived class (shared_class_min and up) holds few objects per size class for a long time: its spans are
// 16 KiB up to 2 KiB objects, so a few hundred KiB of them do not take a huge page of 64 KiB spans. Shorter
// classes keep the larger spans (fewer trips to the slow path), and the empty-span cache never hands a span of
// one size to a request for the other.
TEST_F(LongLivedClassTest, SpansAreSixteenKiBUpToTwoKiBObjectsAndTheSpanCacheKeepsSizesApart) {
  ThreadHeap heap;
  memset(heap.spans_taken, kSpanGrowthSteps, sizeof heap.spans_taken);  // full-size spans from the first
  auto span_bytes = [&](void* p) { return ThreadHeapOps::span_of(page_heap, p)->span_bytes; };
  for (size_t size : {300, 1000, 2048}) {
    void* shortlived = ThreadHeapOps::allocate(page_heap, heap, 2, size, 16);
    void* longlived = ThreadHeapOps::allocate(page_heap, heap, 3, size, 16);
    void* never = ThreadHeapOps::allocate(page_heap, heap, 7, size, 16);
    EXPECT_EQ(span_bytes(shortlived), 64u * 1024) << size;
    EXPECT_EQ(span_bytes(longlived), 16u * 1024) << size;
    EXPECT_EQ(span_bytes(never), 16u * 1024) << size;
    EXPECT_GE(16u * 1024 / ThreadHeapOps::usable_size(ThreadHeapOps::span_of(page_heap, longlived)), 8u);
    for (void* p : {shortlived, longlived, never}) ThreadHeapOps::deallocate(page_heap, &heap, p);
  }
  void* big = ThreadHeapOps::allocate(page_heap, heap, 3, 4000, 16);
  EXPECT_EQ(span_bytes(big), 64u * 1024) << "above 2 KiB a long-lived class keeps the usual span";
  ThreadHeapOps::deallocate(page_heap, &heap, big);
  // Empty spans of both sizes go through the class's cache and come back at their own size.
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> objs;
    for (int i = 0; i < 40; ++i) {
      objs.push_back(ThreadHeapOps::allocate(page_heap, heap, 3, i % 2 ? 1500 : 5000, 16));
      ASSERT_NE(objs.back(), nullptr);
      memset(objs.back(), 0xab, i % 2 ? 1500 : 5000);
      ASSERT_EQ(span_bytes(objs.back()), i % 2 ? 16u * 1024 : 64u * 1024);
    }
    for (void* p : objs) ThreadHeapOps::deallocate(page_heap, &heap, p);
    ASSERT_TRUE(heap.check(page_heap));
  }
  ThreadHeapOps::release_all(page_heap, heap);
  page_heap.check_invariants();
}

// The shared heap of long-lived classes serves threads that make few such objects. A thread that makes them fast
// (kSharedBurst within kSharedBurstNs) takes that class from its own spans from then on, off the shared lock;
// one that makes as many slowly stays on the shared heap, and its other classes are unaffected.
TEST_F(LongLivedClassTest, AThreadThatMakesThemFastTakesThemFromItsOwnSpansNotTheSharedHeap) {
  ThreadHeap shared, fast, slow;
  page_heap.set_shared_heap(&shared);
  auto owner = [&](void* p) { return ThreadHeapOps::span_of(page_heap, p)->owner; };
  std::vector<std::pair<ThreadHeap*, void*>> objs;
  auto make = [&](ThreadHeap& h, unsigned lc, int n, uint64_t step_ns) {
    void* p = nullptr;
    for (int i = 0; i < n; ++i) {
      p = ThreadHeapOps::allocate(page_heap, h, lc, 64, 16);
      objs.emplace_back(&h, p);
      clock.now += step_ns;
    }
    return p;
  };
  // Two windows of kSharedBurst at 1 us each: the first only starts the count, the second is a burst.
  EXPECT_EQ(owner(make(fast, 3, kSharedBurst, 1000)), &shared);
  EXPECT_EQ(owner(make(fast, 3, kSharedBurst, 1000)), &shared);
  EXPECT_EQ(fast.own_class[3], 1);
  EXPECT_EQ(owner(make(fast, 3, 10, 1000)), &fast) << "after a burst, the thread's own spans";
  EXPECT_EQ(owner(make(fast, 4, 10, 1000)), &shared) << "other long-lived classes stay shared";
  // As many, one every 200 us: 1024 take 205 ms, more than the window.
  for (int round = 0; round < 3; ++round) EXPECT_EQ(owner(make(slow, 3, kSharedBurst, 200'000)), &shared);
  EXPECT_EQ(slow.own_class[3], 0);
  for (auto& [h, p] : objs) ThreadHeapOps::deallocate(page_heap, h, p);
  EXPECT_TRUE(fast.check(page_heap));
  EXPECT_TRUE(slow.check(page_heap));
  for (ThreadHeap* h : {&fast, &slow, &shared}) ThreadHeapOps::release_all(page_heap, *h);
  page_heap.check_invariants();
}

// The shared thread heap serves the long-lived objects that threads make few of: the spans of all its classes
// come from the huge pages of the longest class, so that they pack on one page instead of taking an open page per
// class, where the spans of the class's other objects come and go around them. A thread's own spans keep their
// class's pages.
TEST_F(LongLivedClassTest, TheSharedHeapsSpansOfEveryClassShareThePagesOfTheLongestClass) {
  HeapConfig c = config();
  c.small_heap_pages = 0;  // (no lending between the classes' pages: each span shows its page's class)
  PageHeap page_heap{platform, clock, c};
  ThreadHeap shared, thread;
  page_heap.set_shared_heap(&shared);
  auto page = [&](void* p) { return reinterpret_cast<uintptr_t>(p) >> kHugePageShift; };
  auto page_class = [&](void* p) { return page_heap.page_info(reinterpret_cast<uintptr_t>(p)).lifetime_class; };
  std::vector<void*> objs;
  for (unsigned lc : {3u, 4u, 5u, 7u})
    for (size_t size : {48, 200, 1000}) {
      objs.push_back(ThreadHeapOps::allocate(page_heap, thread, lc, size, 16));
      ASSERT_EQ(ThreadHeapOps::span_of(page_heap, objs.back())->owner, &shared);
      EXPECT_EQ(page(objs.back()), page(objs.front())) << "class " << lc << ", " << size << " B: the same page";
      EXPECT_EQ(page_class(objs.back()), 7u);
      EXPECT_EQ(ThreadHeapOps::span_of(page_heap, objs.back())->lifetime_class, lc) << "queued by its own class";
    }
  EXPECT_EQ(page_heap.pages_in_use(3) + page_heap.pages_in_use(4) + page_heap.pages_in_use(5), 0u);
  thread.own_class[3] = 1;  // (as after a burst)
  void* fast = ThreadHeapOps::allocate(page_heap, thread, 3, 200, 16);
  EXPECT_EQ(ThreadHeapOps::span_of(page_heap, fast)->owner, &thread);
  EXPECT_NE(page(fast), page(objs.front())) << "a thread's own span of the class: not the shared heap's page";
  objs.push_back(fast);
  for (void* p : objs) ThreadHeapOps::deallocate(page_heap, &thread, p);
  for (ThreadHeap* h : {&thread, &shared}) ThreadHeapOps::release_all(page_heap, *h);
  page_heap.check_invariants();
}

TEST_F(ThreadHeapTest, FreesByAnotherThreadAreCollectedInBulkByTheOwner) {
  std::vector<void*> objs;
  for (int i = 0; i < 100; ++i) objs.push_back(alloc(0, 1000));  // 1 KiB class: 64 per 64 KiB span
  SmallSpan* s = span(objs[0]);
  uint32_t used = s->used;
  EXPECT_EQ(used, 64u);
  for (void*& p : objs)
    if (span(p) == s) {
      free(p, other.get());
      p = nullptr;
    }
  EXPECT_EQ(s->used, used) << "remote frees are not counted until the owner takes them";
  EXPECT_NE(s->xfree.load() & ~kXfreeStateMask, 0u);
  ThreadHeapOps::collect_remote(s);
  EXPECT_EQ(s->used, 0u);
  EXPECT_EQ(s->xfree.load() & ~kXfreeStateMask, 0u);
  for (void* p : objs)
    if (p != nullptr) free(p, other.get());
}

TEST_F(ThreadHeapTest, AFullSpanLeavesItsQueueAndARemoteFreeBringsItBack) {
  std::vector<void*> objs;
  for (int i = 0; i < 17; ++i) objs.push_back(alloc(0, 4096));  // 16 per 64 KiB span: the 17th takes a second
  SmallSpan* full = span(objs[0]);
  ASSERT_NE(full, span(objs[16]));
  EXPECT_FALSE(full->queued) << "a full span is off the queue";
  EXPECT_EQ(full->xfree.load(), kXfreeFull);
  free_pushed(objs[3]);
  EXPECT_EQ(heap.notify.load(), full) << "the first remote free into it tells the owner";
  EXPECT_EQ(full->xfree.load() & kXfreeStateMask, kXfreeNotified);
  free_pushed(objs[4]);
  EXPECT_EQ(heap.notify.load(), full) << "once";
  // Use up the second span: the owner drains its notify list and finds the two blocks again.
  std::set<void*> got;
  for (int i = 0; i < 17; ++i) got.insert(alloc(0, 4096));
  EXPECT_TRUE(got.count(objs[3]) && got.count(objs[4]));
  EXPECT_EQ(heap.notify.load(), nullptr);
  for (void* p : got) free(p);
  for (int i = 0; i < 17; ++i)
    if (i != 3 && i != 4) free(objs[i]);
}

// Another thread's frees into one span wait in that thread's batch and go onto the span's list together: when
// the batch holds a quarter of the span's blocks (at most 64), when that thread frees into another span, and
// when its heap is released (a sweep, thread exit). Until then they count as in use, and the owner is not told.
// The same thread freeing a block of its batch again is a double free.
TEST_F(ThreadHeapTest, RemoteFreesIntoOneSpanWaitInABatchAndGoOnItsListTogether) {
  std::vector<void*> objs;
  for (int i = 0; i < 17; ++i) objs.push_back(alloc(0, 4096));  // 16 per 64 KiB span: the first is full
  SmallSpan* full = span(objs[0]);
  SmallSpan* second = span(objs[16]);
  ASSERT_NE(full, second);
  ASSERT_EQ(ThreadHeapOps::remote_batch_limit(full), 4u);
  for (int i = 3; i < 6; ++i) free(objs[i], other.get());
  EXPECT_EQ(other->batch_span.load(), full);
  EXPECT_EQ(other->batch_count, 3u);
  EXPECT_EQ(full->xfree.load(), kXfreeFull) << "nothing pushed yet";
  EXPECT_EQ(heap.notify.load(), nullptr) << "and the owner not told";
  EXPECT_EQ(full->used, 16u);
  free(objs[6], other.get());  // the fourth: the batch is full and pushed
  EXPECT_EQ(other->batch_span.load(), nullptr);
  EXPECT_EQ(heap.notify.load(), full);
  EXPECT_EQ(full->xfree.load() & kXfreeStateMask, kXfreeNotified);
  free(objs[7], other.get());
  free(objs[16], other.get());  // another span: the first span's batch (objs[7]) goes, the new one opens
  EXPECT_EQ(other->batch_span.load(), second);
  EXPECT_EQ(other->batch_count, 1u);
  EXPECT_DEATH(free(objs[16], other.get()), "free of 0x[0-9a-f]+: double free");
  // A block of a batch freed again by the span's owner, or by a third thread, and handed out again or not: the
  // push's walk of the batch finds the block's link changed. The owner's second free of the block the batch
  // began with, while the span has no free block, writes the same link: then the owner's next takes of the
  // span's lists find it instead, before any block is handed out twice.
  free(objs[8], other.get());  // the second span's batch goes, one opens on the first
  free(objs[9], other.get());
  EXPECT_DEATH(
      {
        free(objs[9]);
        ThreadHeapOps::flush_remote_batch(*other);
      },
      "free of 0x[0-9a-f]+: double free");
  EXPECT_DEATH(
      {
        free(objs[9]);
        void* again = alloc(0, 4096);  // the owner hands the block out again
        memset(again, 0x5a, 4096);
        ThreadHeapOps::flush_remote_batch(*other);
      },
      "free of 0x[0-9a-f]+: double free");
  ThreadHeap third;
  EXPECT_DEATH(
      {
        free(objs[9], &third);
        ThreadHeapOps::flush_remote_batch(*other);
      },
      "free of 0x[0-9a-f]+: double free");
  EXPECT_DEATH(
      {
        free(objs[8]);
        ThreadHeapOps::flush_remote_batch(*other);
        std::set<void*> seen;
        for (int i = 0; i < 64; ++i) {
          void* q = alloc(0, 4096);
          if (!seen.insert(q).second) abort();  // (handed out twice: no report)
          memset(q, 0x5a, 4096);
        }
      },
      "(free of 0x[0-9a-f]+: double free|freed block 0x[0-9a-f]+: its link was overwritten)");
  ThreadHeapOps::release_all(*page_heap, *other);  // a sweep or thread exit pushes it
  EXPECT_EQ(other->batch_span.load(), nullptr);
  EXPECT_NE(second->xfree.load() & ~kXfreeStateMask, 0u);
  // The owner finds all of them again.
  std::set<void*> got;
  for (int i = 0; i < 2 * 16; ++i) got.insert(alloc(0, 4096));
  for (int i : {3, 4, 5, 6, 7, 8, 9, 16}) EXPECT_TRUE(got.count(objs[i])) << i;
  for (void* p : got) free(p);
  for (int i = 0; i < 16; ++i)
    if (i < 3 || i > 9) free(objs[i]);
  page_heap->check_invariants();
}

// A span that a free brings back from full goes to the end of its queue: the spans ahead of it are allocated
// from first, so that it has collected more frees when its turn comes (with the span right behind the head, a
// program freeing at random sent most of its allocations to the slow path, one or two blocks per refill).
TEST_F(ThreadHeapTest, ASpanBroughtBackFromFullQueuesBehindTheOthersAndIsUsedAfterThem) {
  std::vector<void*> objs;
  for (int i = 0; i < 3 * 16; ++i) objs.push_back(alloc(0, 4096));  // three full 64 KiB spans
  SmallSpan *a = span(objs[0]), *b = span(objs[16]), *c = span(objs[32]);
  ASSERT_TRUE(a != b && b != c && a != c);
  void* d_first = alloc(0, 4096);  // a fourth span, at the head
  SmallSpan* d = span(d_first);
  EXPECT_FALSE(a->queued || b->queued || c->queued);
  free(objs[1]);   // a comes back
  free(objs[17]);  // then b
  unsigned sc = a->size_class;
  EXPECT_EQ(heap.spans[0][sc], d) << "the span in use stays at the head";
  EXPECT_EQ(d->next, a);
  EXPECT_EQ(a->next, b) << "in the order they came back, each at the end";
  EXPECT_EQ(heap.tails[0][sc], b);
  // The head is used up first, then a, then b.
  std::vector<void*> more;
  for (int i = 0; i < 15; ++i) more.push_back(alloc(0, 4096));
  EXPECT_EQ(span(more.back()), d);
  more.push_back(alloc(0, 4096));
  EXPECT_EQ(more.back(), objs[1]);
  more.push_back(alloc(0, 4096));
  EXPECT_EQ(more.back(), objs[17]);
  for (void* p : more) free(p);
  free(d_first);
  for (size_t i = 0; i < objs.size(); ++i)
    if (i != 1 && i != 17) free(objs[i]);
}

// A remote free into a full span sets kXfreeNotified, then pushes the span on the owner's notify list. If the
// freeing thread is preempted in between, the owner frees the span's other objects (which queues it again) and
// exits, the span is empty when its abandoned heap is emptied -- but its notify is still to come. Given back
// then, the later drain took it a second time, when its blocks could already be another thread's span: a block
// handed out twice (stress-threads, once in a CI run under load: "object corrupted at offset 0").
TEST_F(ThreadHeapTest, AnExitingOwnerLeavesAnEmptySpanWithANotifyInFlightToTheDrain) {
  std::vector<void*> objs;
  for (int i = 0; i < 17; ++i) objs.push_back(alloc(0, 4096));  // 16 per span: the first span is full
  SmallSpan* full = span(objs[0]);
  ASSERT_EQ(full->xfree.load(), kXfreeFull);
  // Another thread frees objs[1]: the first half of remote_free, then it is preempted.
  void* p = objs[1];
  uintptr_t x = full->xfree.load();
  *static_cast<uintptr_t*>(p) = (x & ~kXfreeStateMask) ^ full->key;
  ASSERT_TRUE(full->xfree.compare_exchange_strong(x, reinterpret_cast<uintptr_t>(p) | kXfreeNotified));
  for (int i = 0; i < 16; ++i)
    if (i != 1) free(objs[i]);
  EXPECT_TRUE(full->queued) << "the owner's free brought it back to its queue";
  ThreadHeapOps::abandon(*page_heap, heap);  // the owner's thread exits
  EXPECT_EQ(span(objs[0]), full) << "empty, but kept for the drain that its notify will cause";
  // The preempted free goes on: the span on the notify list; the drain gives it back, once.
  full->notify_next = heap.notify.load();
  heap.notify.store(full);
  ThreadHeapOps::drain_notify(*page_heap, heap);
  EXPECT_EQ(span(objs[0]), nullptr);
  EXPECT_EQ(heap.notify.load(), nullptr);
  ThreadHeapOps::hooks.reclaim_pending.store(false);
  free_pushed(objs[16]);  // into the parked second span: notifies the abandoned heap
  EXPECT_EQ(heap.notify.load(), span(objs[16]));
  EXPECT_TRUE(ThreadHeapOps::hooks.reclaim_pending.load()) << "its thread is gone: the next slow path reclaims";
  ThreadHeapOps::drain_notify(*page_heap, heap);
  EXPECT_EQ(span(objs[16]), nullptr);
  ThreadHeapOps::hooks.reclaim_pending.store(false);
  page_heap->check_invariants();
}

// HeapConfig::span_recycling: a class with no span with a free block takes a partially free span of a longer
// class of the same thread heap (not the one that class's fast path uses) before new memory, and the span goes
// back to its own class's queue once it has been full. Without it, the holes that a long-lived class's dead
// objects leave stay empty while a shorter class takes fresh spans.
TEST_F(ThreadHeapTest, AShorterClassFillsTheHolesOfALongerClassesSpanBeforeTakingNewMemory) {
  std::vector<void*> longlived;
  for (int i = 0; i < 3 * 16; ++i) longlived.push_back(alloc(7, 4096));  // three full 64 KiB spans of class 7
  SmallSpan *a = span(longlived[0]), *b = span(longlived[16]), *c = span(longlived[32]);
  void* c_more = alloc(7, 4096);  // a fourth span, at the head of class 7's queue
  SmallSpan* d = span(c_more);
  ASSERT_TRUE(a != b && b != c && c != d && a != d);
  for (int i = 0; i < 16; i += 2) free(longlived[i]);  // a: eight holes, back on class 7's queue behind d
  ASSERT_TRUE(a->queued);
  unsigned sc = a->size_class;
  size_t footprint = page_heap->gauges().footprint_bytes;
  std::vector<void*> shortlived;
  for (int i = 0; i < 8; ++i) shortlived.push_back(alloc(1, 4096));
  for (void* p : shortlived) EXPECT_EQ(span(p), a) << "class 1 fills a's holes";
  EXPECT_EQ(a->home_class, 7u);
  EXPECT_EQ(page_heap->gauges().footprint_bytes, footprint) << "no new memory";
  EXPECT_EQ(heap.spans[7][sc], d) << "the longer class's own span in use is not taken";
  // a is full again: the next one is a new span of class 1's own.
  shortlived.push_back(alloc(1, 4096));
  SmallSpan* e = span(shortlived.back());
  EXPECT_TRUE(e != a && e != b && e != c && e != d);
  EXPECT_EQ(e->home_class, 1u);
  EXPECT_FALSE(a->queued);
  // A free brings a back to class 7's queue, where class 7 itself allocates from it again.
  free(shortlived[0]);
  EXPECT_TRUE(a->queued);
  EXPECT_EQ(a->lifetime_class, 7u);
  EXPECT_EQ(heap.tails[7][sc], a);
  for (void* p : shortlived) if (p != shortlived[0]) free(p);
  for (int i = 0; i < 48; ++i) if (i >= 16 || i % 2 == 1) free(longlived[i]);
  free(c_more);
  page_heap->check_invariants();
}

// With a predictor (a thread heap's fast_class is kMaxClasses, as here), a class whose span of a size keeps
// emptying (a request's temporaries) gives it back and allocates from the span a longer class of the thread
// allocates from, until that span fills; a class whose span holds an object keeps its own.
TEST_F(ThreadHeapTest, AClassWhoseSpanKeepsEmptyingBorrowsTheLongerClassesSpanUntilItFills) {
  void* survivor = alloc(7, 100);
  SmallSpan* longer = span(survivor);
  unsigned sc = longer->size_class;
  void* held = alloc(1, 100);  // class 1 keeps an object: its span never empties
  for (unsigned i = 0; i < 2 * kHeadEmptiesToBorrow; ++i) free(alloc(1, 100));
  EXPECT_EQ(heap.spans[1][sc], span(held)) << "a span that does not empty stays its class's own";
  void* first = alloc(2, 100);
  SmallSpan* own = span(first);
  EXPECT_NE(own, longer);
  free(first);
  for (unsigned i = 1; i < kHeadEmptiesToBorrow; ++i) {
    void* p = alloc(2, 100);
    EXPECT_EQ(span(p), own) << "below the count, the class's own span serves";
    free(p);
  }
  EXPECT_EQ(heap.spans[2][sc], longer) << "emptied " << kHeadEmptiesToBorrow << " times: class 2 borrows class 7's span";
  EXPECT_EQ(heap.tails[2][sc], nullptr);
  std::vector<void*> temps;
  for (int i = 0; i < 4; ++i) temps.push_back(alloc(2, 100));
  for (void* p : temps) EXPECT_EQ(span(p), longer);
  for (void* p : temps) free(p);
  // Class 7 fills its span: the span leaves its queue, and class 2 takes a span of its own again.
  std::vector<void*> longlived;
  while (longer->used < longer->capacity) longlived.push_back(alloc(7, 100));
  longlived.push_back(alloc(7, 100));
  EXPECT_FALSE(longer->queued);
  EXPECT_NE(heap.spans[2][sc], longer);
  void* again = alloc(2, 100);
  EXPECT_NE(span(again), longer);
  EXPECT_EQ(span(again)->home_class, 2u);
  free(again);
  free(held);
  for (void* p : longlived) free(p);
  free(survivor);
  page_heap->check_invariants();
}

// A page heap with span recycling off (LLAMALLOC_SPAN_RECYCLING=0) and a thread heap on it.
class SpanRecyclingOff : public ::testing::Test {
 protected:
  static HeapConfig off() {
    HeapConfig config{8, 2};
    config.span_recycling = false;
    return config;
  }
  LinuxPlatform platform;
  FakeClock clock;
  PageHeap page_heap{platform, clock, off()};
  ThreadHeap heap;
};

// The count of a span's empties starts again at the mark whether or not the class borrows (here it may not):
// a malloc/free pair keeps taking the slow path only as often as a process without a sweeper makes it.
TEST_F(SpanRecyclingOff, APairThatKeepsEmptyingItsSpanStaysOnTheFastPath) {
  void* survivor = ThreadHeapOps::allocate(page_heap, heap, 7, 100, 16);  // a longer class's span of the size
  ThreadHeapOps::deallocate(page_heap, &heap, ThreadHeapOps::allocate(page_heap, heap, 1, 100, 16));
  uint32_t before = heap.slow_ops.load();
  constexpr unsigned kPairs = 1024;
  for (unsigned i = 0; i < kPairs; ++i)
    ThreadHeapOps::deallocate(page_heap, &heap, ThreadHeapOps::allocate(page_heap, heap, 1, 100, 16));
  EXPECT_LE(heap.slow_ops.load() - before, kPairs / kEmptyFreesPerSlowPath + kPairs / kHeadEmptiesToBorrow + 2);
  ThreadHeapOps::deallocate(page_heap, &heap, survivor);
  ThreadHeapOps::release_all(page_heap, heap);
}

TEST_F(SpanRecyclingOff, AShorterClassTakesNewMemoryBesideALongerClassesHoles) {
  std::vector<void*> longlived;
  for (int i = 0; i < 17; ++i) longlived.push_back(ThreadHeapOps::allocate(page_heap, heap, 7, 4096, 16));
  SmallSpan* a = ThreadHeapOps::span_of(page_heap, longlived[0]);
  ThreadHeapOps::deallocate(page_heap, &heap, longlived[0]);
  ASSERT_TRUE(a->queued);
  void* p = ThreadHeapOps::allocate(page_heap, heap, 1, 4096, 16);
  EXPECT_NE(ThreadHeapOps::span_of(page_heap, p), a) << "a new span";
  EXPECT_EQ(ThreadHeapOps::span_of(page_heap, p)->home_class, 1u);
  EXPECT_EQ(a->lifetime_class, 7u);
  ThreadHeapOps::deallocate(page_heap, &heap, p);
  for (int i = 1; i < 17; ++i) ThreadHeapOps::deallocate(page_heap, &heap, longlived[i]);
  ThreadHeapOps::release_all(page_heap, heap);
}

TEST_F(ThreadHeapTest, SpansOfALifetimeClassComeFromHugePagesOfThatClassOrLonger) {
  void* s0 = alloc(0, 64);
  void* s3 = alloc(3, 64);
  void* s7 = alloc(7, 20000);
  EXPECT_EQ(page_heap->page_info(reinterpret_cast<uintptr_t>(s0)).lifetime_class, 0u);
  EXPECT_EQ(page_heap->page_info(reinterpret_cast<uintptr_t>(s3)).lifetime_class, 3u);
  EXPECT_EQ(page_heap->page_info(reinterpret_cast<uintptr_t>(s7)).lifetime_class, 7u);
  EXPECT_NE(reinterpret_cast<uintptr_t>(s0) >> kHugePageShift, reinterpret_cast<uintptr_t>(s3) >> kHugePageShift);
  EXPECT_EQ(page_heap->pages_in_use(0) + page_heap->pages_in_use(3) + page_heap->pages_in_use(7), 3u);
  free(s0);
  free(s3);
  free(s7);
}

TEST_F(ThreadHeapTest, LargeRequestsTakeWholeBlocksAndSmallOnesAbove8KiBUseSizeClasses) {
  void* v = alloc(0, 16 * 1024 + 64);  // a value just above 16 KiB
  EXPECT_EQ(ThreadHeapOps::usable_size(span(v)), 20u * 1024) << "the 20 KiB class, not 24 KiB of blocks";
  void* big = alloc(0, 40 * 1024);
  EXPECT_EQ(span(big), nullptr);
  EXPECT_EQ(page_heap->large_usable_size(big), 40u * 1024);
  free(v);
  free(big);
}

}  // namespace
}  // namespace llamalloc::testing
