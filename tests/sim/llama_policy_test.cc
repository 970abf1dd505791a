#include "sim/llama_policy.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "alloc/heap_config.h"
#include "thread_heap/thread_heap.h"
#include "sim/engine.h"
#include "test_events.h"

namespace llamalloc::sim {
namespace {

using testing::alloc_event;
using testing::free_event;
using testing::kMs;

constexpr uint64_t k2M = 2 << 20;

TEST(LlamaPolicy, ObjectsOfDifferentTrueClassesLiveOnDifferentHugePages) {
  VectorEventSource source({
      alloc_event(0, 0x1000, 64),                // freed after 5 ms: class 0
      alloc_event(1 * kMs, 0x2000, 64),          // never freed: class 7
      alloc_event(2 * kMs, 0x3000, 3 << 20),     // 3 MiB, freed after 3 ms: two whole huge pages
      free_event(5 * kMs, 0x1000),
      free_event(5 * kMs, 0x3000),
  });
  std::vector<uint8_t> classes = compute_lifetime_classes(source);
  ASSERT_EQ(classes, (std::vector<uint8_t>{0, 7, 0}));
  LlamaOptions options;
  options.snapshot_times_ns = {3 * kMs};
  LlamaPolicy policy(options);
  Engine engine(policy, EngineOptions{1 * kMs});
  engine.set_lifetime_classes(&classes);
  Event e;
  std::vector<uint64_t> footprints;
  while (source.next(&e)) {
    engine.process(e);
    footprints.push_back(policy.footprint_bytes());
    EXPECT_EQ(policy.footprint_bytes(), policy.platform_backed_bytes());
  }
  engine.finish();
  // One open page for class 0, one for class 7, two for the huge object; freeing it gives both back. The
  // class-0 span stays with its thread (as in the process), so its page stays open.
  EXPECT_EQ(footprints, (std::vector<uint64_t>{k2M, 2 * k2M, 4 * k2M, 4 * k2M, 2 * k2M}));
  const TimelineSample& last = engine.timeline().back();
  const auto& columns = engine.extra_columns();
  ASSERT_EQ(columns.size(), 8u);
  EXPECT_EQ(columns[7], "hp_class_7");
  EXPECT_EQ(last.extra[0], 1);
  EXPECT_EQ(last.extra[7], 1);
  EXPECT_EQ(last.extra[3], 0);
  // The requested snapshot (3 ms: 4 huge pages) and the final one.
  auto json = policy.summary_json();
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json[0].first, "snapshots");
  // The library options the heap was built from: the defaults here.
  EXPECT_EQ(json[1].first, "heap_options");
  EXPECT_NE(json[1].second.find("\"LONG_CLASS\": " + std::to_string(Options{}.long_class)), std::string::npos)
      << json[1].second;
  const std::string& s = json[0].second;
  EXPECT_NE(s.find("\"time_ns\": 3000000"), std::string::npos) << s;
  EXPECT_NE(s.find("\"kind\": \"huge-head\""), std::string::npos) << s;
  EXPECT_NE(s.find("\"class\": 7"), std::string::npos) << s;
  EXPECT_NE(s.find("\"state\": \"open\""), std::string::npos) << s;
}

// A snapshot says which contexts keep each page: its live objects, their bytes, and the stacks with the most
// bytes on it (what a user reads to find the few objects that pin a page after a peak).
TEST(LlamaPolicy, SnapshotsListTheContextsOfEachPagesLiveObjects) {
  auto from = [](Event e, uint32_t stack) {
    e.stack_id = stack;
    return e;
  };
  VectorEventSource source({
      from(alloc_event(0, 0x1000, 64), 5),
      from(alloc_event(0, 0x2000, 64), 5),
      from(alloc_event(0, 0x3000, 200), 9),
      from(alloc_event(0, 0x4000, 48), 2),
      from(alloc_event(0, 0x5000, 48), 4),
      from(alloc_event(0, 0x6000, 16), 6),
      free_event(1 * kMs, 0x2000),
      free_event(3 * kMs, 0x1000),
  });
  LlamaOptions options;
  options.fixed_class = 0;
  options.snapshot_times_ns = {2 * kMs};
  LlamaPolicy policy(options);
  replay(source, policy, EngineOptions{1 * kMs});
  auto json = policy.summary_json();
  ASSERT_EQ(json[0].first, "snapshots");
  const std::string& s = json[0].second;
  // At 2 ms: one page, five objects, 376 bytes; stack 9 (200 bytes), 5 (64), then 2 before 4 (48 each: the
  // lower id first); stack 6 (16 bytes) is not among the three shown.
  EXPECT_NE(s.find("\"objects\": 5, \"object_bytes\": 376, \"stacks\": [[9, 1, 200], [5, 1, 64], [2, 1, 48]]"),
            std::string::npos)
      << s;
  // At the end, stack 5 is gone from it.
  EXPECT_NE(s.find("\"objects\": 4, \"object_bytes\": 312, \"stacks\": [[9, 1, 200], [2, 1, 48], [4, 1, 48]]"),
            std::string::npos)
      << s;
}

// Each object's class is its stack id: the class a model would give its context.
class StackIsClass final : public ClassSource {
 public:
  unsigned class_of(const ObjectAlloc& object) override { return object.stack_id; }
};

// The library's options reach the replay's heap (LlamaOptions::heap_options, `simulate --option`): here
// DENSE_FIRST, replayed on the heap test's case (page_heap_test.cc, DenseFirst): two full class-2 pages A
// and B; B loses 2 objects, then A loses 28; a class-1 object recycles class 2's free blocks, then A's last 4
// objects go. With DENSE_FIRST=1 the object lands on B, the fuller page, and A goes back whole; with 0 it lands
// on A, which got a free block last, and keeps it.
TEST(LlamaPolicy, TheLibrarysPlacementOptionsConfigureTheReplaysHeap) {
  for (uint64_t dense : {1, 0}) {
    SCOPED_TRACE("DENSE_FIRST=" + std::to_string(dense));
    constexpr uint64_t k64K = 64 << 10;  // a large object of 8 blocks: 32 fill a huge page
    auto object = [](uint64_t t, uint64_t address, uint32_t lifetime_class) {
      Event e = alloc_event(t, address, k64K);
      e.stack_id = lifetime_class;
      return e;
    };
    std::vector<Event> events;
    for (uint64_t i = 0; i < 64; ++i) events.push_back(object(0, 0x100000 + i * k64K, 2));  // A: 0-31, B: 32-63
    for (uint64_t i = 32; i < 34; ++i) events.push_back(free_event(1 * kMs, 0x100000 + i * k64K));
    for (uint64_t i = 0; i < 28; ++i) events.push_back(free_event(2 * kMs, 0x100000 + i * k64K));
    events.push_back(object(3 * kMs, 0x9000000, 1));
    for (uint64_t i = 28; i < 32; ++i) events.push_back(free_event(4 * kMs, 0x100000 + i * k64K));
    VectorEventSource source(std::move(events));
    LlamaOptions options;
    options.class_source = std::make_shared<StackIsClass>();
    options.heap_options.dense_first = dense;
    LlamaPolicy policy(options);
    Engine engine(policy, EngineOptions{1 * kMs});
    Event e;
    std::vector<uint64_t> footprints;
    while (source.next(&e)) {
      engine.process(e);
      footprints.push_back(policy.footprint_bytes());
    }
    engine.finish();
    ASSERT_EQ(footprints.size(), 64u + 2 + 28 + 1 + 4);
    EXPECT_EQ(footprints[64 + 2 + 28], 2 * k2M) << "the class-1 object recycles a free block: no fresh page";
    EXPECT_EQ(footprints.back(), (dense ? 1 : 2) * k2M);
    auto json = policy.summary_json();
    ASSERT_EQ(json.size(), 2u);
    EXPECT_NE(json[1].second.find("\"DENSE_FIRST\": " + std::to_string(dense)), std::string::npos) << json[1].second;
  }
}

// A class above the heap's (a model's or a class source's) is clamped by the library's own rule (clamp_class,
// alloc/heap_config.h): the replay counts and places the object in the class the library would, for a heap of
// the replay's classes (all eight, whatever LLAMALLOC_CLASSES says).
TEST(LlamaPolicy, AClassAboveTheHeapsIsClampedAsTheLibraryClampsIt) {
  for (unsigned predicted : {0u, kMaxClasses - 1, kMaxClasses, kMaxClasses + 2, 255u}) {
    SCOPED_TRACE("class " + std::to_string(predicted));
    LlamaOptions options;
    options.class_source = std::make_shared<StackIsClass>();
    options.heap_options.classes = 4;
    LlamaPolicy policy(options);
    ASSERT_EQ(policy.heap().num_classes(), kMaxClasses);
    Event e = alloc_event(0, 0x1000, 64);
    e.stack_id = predicted;
    VectorEventSource source({e});
    RunResult r = replay(source, policy, EngineOptions{});
    unsigned expected = clamp_class(predicted, policy.heap().num_classes());
    for (auto& [name, value] : r.extras)
      if (name.rfind("allocs_class_", 0) == 0)
        EXPECT_EQ(value, name == "allocs_class_" + std::to_string(expected) ? 1 : 0) << name;
    for (unsigned c = 0; c < kMaxClasses; ++c)
      EXPECT_EQ(policy.heap().gauges().huge_pages_by_class[c], c == expected ? 1u : 0u) << "class " << c;
  }
}

TEST(LlamaPolicy, DefaultPolicyPutsEverythingInItsFixedClass) {
  LlamaOptions options;
  options.fixed_class = 0;
  LlamaPolicy policy(options);
  EXPECT_EQ(policy.name(), "llama-default");
  EXPECT_FALSE(policy.needs_lifetime_classes());
  VectorEventSource source({alloc_event(0, 0x1000, 64), alloc_event(1, 0x2000, 64), alloc_event(2, 0x3000, 20000)});
  RunResult r = replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.final_footprint_bytes, k2M);  // small and large objects share the one open page
  double class0 = -1;
  for (auto& [name, value] : r.extras) {
    if (name == "allocs_class_0") class0 = value;
  }
  EXPECT_EQ(class0, 3);
}

TEST(LlamaPolicy, ManyShortLivedObjectsReuseMemory) {
  // 200 rounds of 500 objects of 100 B each, all freed within the round (class 0): the heap must keep
  // reusing its pages, so the footprint stays a few huge pages, far from 200 x 500 x 100 B = 10 MB.
  std::vector<Event> events;
  uint64_t t = 0;
  for (int round = 0; round < 200; ++round) {
    for (uint64_t i = 0; i < 500; ++i) events.push_back(alloc_event(t++, 0x100000 + 128 * i, 100));
    for (uint64_t i = 0; i < 500; ++i) events.push_back(free_event(t++, 0x100000 + 128 * i));
  }
  VectorEventSource source(events);
  LlamaPolicy policy(LlamaOptions{});
  RunResult r = replay(source, policy, EngineOptions{});
  EXPECT_EQ(r.summary.peak_live_bytes, 50000u);
  EXPECT_LE(r.summary.peak_footprint_bytes, 2 * k2M);
  EXPECT_EQ(r.summary.unknown_frees, 0u);
}

}  // namespace
}  // namespace llamalloc::sim

namespace llamalloc::sim {
namespace {

TEST(LlamaPolicy, IdleThreadsGiveTheirSpansBackAsAtThreadExit) {
  // Thread 1 allocates twice and goes quiet; thread 2 works on. After thread_idle_ns the first thread's
  // span goes back to the heap (as release_all does at thread exit), and its objects' frees still work.
  std::vector<Event> events;
  Event a = testing::alloc_event(0, 0x1000, 64);
  a.thread = 1;
  Event b = testing::alloc_event(1, 0x2000, 64);
  b.thread = 1;
  events = {a, b};
  for (uint64_t i = 0; i < 30; ++i) {
    Event e = testing::alloc_event(100 * testing::kMs * (i + 1), 0x10000 + 64 * i, 64);
    e.thread = 2;
    events.push_back(e);
  }
  Event fa = testing::free_event(3100 * testing::kMs, 0x1000);
  fa.thread = 2;
  events.push_back(fa);
  LlamaOptions options;
  options.fixed_class = 0;
  options.thread_idle_ns = 1000 * testing::kMs;
  LlamaPolicy policy(options);
  VectorEventSource source(events);
  RunResult r = replay(source, policy, EngineOptions{100 * testing::kMs});
  double released = -1, threads = -1;
  for (auto& [name, value] : r.extras) {
    if (name == "idle_threads_released") released = value;
    if (name == "threads") threads = value;
  }
  EXPECT_EQ(threads, 2);
  EXPECT_EQ(released, 1);
  EXPECT_EQ(r.summary.final_live_bytes, 64u * 31);
  EXPECT_EQ(r.summary.unknown_frees, 0u);
}

TEST(LlamaPolicy, SpansOfAnIdleThreadThatOtherThreadsEmptyGoBackAtTheSweepersPeriodicPass) {
  // Thread 1 fills more than two huge pages with small objects and goes quiet (its idle release keeps the spans:
  // they hold objects). Thread 2 then frees every one of them: frees by another thread, which only the owner or
  // a sweep takes in. The library's sweeper sweeps every thread heap every 8 passes (sweep_idle_heaps), so the
  // emptied spans, and with them the huge pages, go back; the replay must do the same.
  std::vector<Event> events;
  constexpr uint64_t kObjects = 40000;  // 64 B each: 2.4 MiB
  for (uint64_t i = 0; i < kObjects; ++i) {
    Event e = testing::alloc_event(i * 1000, 0x100000 + 64 * i, 64);
    e.thread = 1;
    events.push_back(e);
  }
  for (uint64_t i = 0; i < kObjects; ++i) {
    Event e = testing::free_event(1000 * testing::kMs + i * 1000, 0x100000 + 64 * i);
    e.thread = 2;
    events.push_back(e);
  }
  for (uint64_t i = 0; i < 40; ++i) {  // thread 2 lives on: one object every 100 ms until 5.1 s
    Event e = testing::alloc_event(1100 * testing::kMs + 100 * testing::kMs * i, 0x10000000 + 64 * i, 64);
    e.thread = 2;
    events.push_back(e);
  }
  LlamaOptions options;
  options.fixed_class = 0;
  LlamaPolicy policy(options);
  VectorEventSource source(events);
  RunResult r = replay(source, policy, EngineOptions{100 * testing::kMs});
  EXPECT_EQ(r.summary.final_live_bytes, 64u * 40);
  EXPECT_GE(r.summary.peak_footprint_bytes, 2 * k2M);
  EXPECT_LE(r.summary.final_footprint_bytes, k2M) << "thread 1's emptied spans keep their huge pages";
}

// 8 MiB of 256 B objects allocated by 0.66 s, all but one in 256 freed at 1 s, and the trace's end at `end_ms`.
std::vector<Event> fill_then_free_most(uint64_t end_ms) {
  std::vector<Event> events;
  constexpr uint64_t kObjects = 32768;
  for (uint64_t i = 0; i < kObjects; ++i) events.push_back(testing::alloc_event(i * 20'000, 0x100000 + 256 * i, 256));
  for (uint64_t i = 0; i < kObjects; ++i)
    if (i % 256 != 0) events.push_back(testing::free_event(1000 * testing::kMs + i * 10, 0x100000 + 256 * i));
  events.push_back(testing::alloc_event(end_ms * testing::kMs, 0x10000000, 64));  // the trace's end
  return events;
}

// That trace replayed in class 1, with or without other threads (hence a sweeper), sampled every `sample_ms`.
RunResult replay_fill_then_free_most(uint64_t end_ms, bool other_threads, uint64_t sample_ms) {
  std::vector<Event> events = fill_then_free_most(end_ms);
  LlamaOptions options;
  options.fixed_class = 1;
  options.other_threads = other_threads;
  LlamaPolicy policy(options);
  VectorEventSource source(events);
  return replay(source, policy, EngineOptions{sample_ms * testing::kMs});
}

// One thread fills 8 MiB with 256 B objects and frees all but one in 256 at once, then stays quiet for 4 s: its
// pages go sparse. Run by the sweeper's passes (the process had other threads, LlamaOptions::other_threads), the
// replay gives back the free blocks of those pages in the quiet phase (subrelease) and reports heap-resident bytes
// far below the footprint; without a sweeper thread (a single-threaded process with a small heap) no slow path, hence
// no pass, follows the drop, and the pages stay resident, as in the process.
RunResult sparse_after_the_peak(bool other_threads) { return replay_fill_then_free_most(5000, other_threads, 100); }

double extra(const RunResult& r, const std::string& name) {
  for (auto& [n, value] : r.extras)
    if (n == name) return value;
  return -1;
}

TEST(LlamaPolicy, PagesGoneSparseAfterThePeakAreHeapResidentBelowTheFootprintOnceTheSweepersPassesRun) {
  RunResult swept = sparse_after_the_peak(true);
  EXPECT_EQ(extra(swept, "sweeper_started"), 1);
  EXPECT_GT(extra(swept, "blocks_subreleased") + extra(swept, "span_pages_purged"), 0);
  EXPECT_GE(swept.summary.after_peak_footprint_bytes, 4 * k2M);
  EXPECT_LT(swept.summary.after_peak_heap_resident_bytes, swept.summary.after_peak_footprint_bytes / 4);
  EXPECT_LE(swept.summary.final_heap_resident_bytes, swept.summary.final_footprint_bytes);
  for (const TimelineSample& s : swept.timeline) EXPECT_LE(s.heap_resident_bytes, s.footprint_bytes);

  RunResult alone = sparse_after_the_peak(false);
  EXPECT_EQ(extra(alone, "sweeper_started"), 0);
  EXPECT_GE(alone.summary.after_peak_heap_resident_bytes, alone.summary.after_peak_footprint_bytes * 9 / 10);
}

}  // namespace
}  // namespace llamalloc::sim

namespace llamalloc::sim {
namespace {

// The fast path's miss rule that the replay counts slow paths by (misses_fast_path, thread_heap/thread_heap.h).
TEST(RefillRule, FastPathMissesOnLargeAlignedOrEmpty) {
  ThreadHeap heap;  // every span the static empty one
  unsigned sc = classify(64, kMinAlignBytes);
  EXPECT_TRUE(misses_fast_path(heap, 1, sc, kMinAlignBytes));
  EXPECT_TRUE(misses_fast_path(heap, 1, kLargeRequest, kMinAlignBytes));
  SmallSpan span{};
  span.free = &span;  // one free block
  heap.spans[1][sc] = &span;
  EXPECT_FALSE(misses_fast_path(heap, 1, sc, kMinAlignBytes));
  EXPECT_TRUE(misses_fast_path(heap, 1, classify(64, 64), 64));
}

}  // namespace
}  // namespace llamalloc::sim

namespace llamalloc::sim {
namespace {

// One thread fills 8 MiB with 256 B objects by 0.66 s and frees all but one in 256 at 1 s, under the sweeper (the
// process had other threads). The sweeper's pass at 1.25 s sees the blocks in use fall; what it may give back is
// bounded by the demand of the pass before the fall, so it gives back little. The library's sweeper then runs its
// next pass a fifth of a period later (sweeper_main, Subrelease::kDropBlocks), which gives the free blocks back by
// about 1.3 s, not at 1.5 s as a full period would.
TEST(LlamaPolicy, APassThatSeesTheBlocksInUseDropBringsTheNextPassForwardToAFifthOfThePeriod) {
  RunResult r = replay_fill_then_free_most(3000, true, 10);
  uint64_t given_back_at = 0;  // the first sample with most of the footprint given back
  for (const TimelineSample& s : r.timeline)
    if (s.footprint_bytes >= 4 * k2M && s.heap_resident_bytes < s.footprint_bytes / 4) {
      given_back_at = s.time_ns;
      break;
    }
  EXPECT_GT(given_back_at, 1250 * testing::kMs) << "the pass that saw the fall gave back what the demand before it bounds";
  EXPECT_LE(given_back_at, 1350 * testing::kMs) << "the next pass came a full period after the fall's, not a fifth";
}

}  // namespace
}  // namespace llamalloc::sim

namespace llamalloc::sim {
namespace {

// Thread 1 fills 4 MiB with 256 B objects, frees all but one in 16 and makes no allocation or free after 0.1 s: it
// has exited (a trace has no thread exits). Thread 2 starts at 0.2 s, well within the idle time that takes a quiet
// thread as exited, and allocates 3 MiB of the same size. In the process it adopts the heap thread 1 left in the pool
// (acquire_heap) and fills the holes of its parked spans first; a fresh heap would take 3 MiB of new spans.
RunResult thread_after_an_exit(uint32_t first_thread_events_until_ms) {
  std::vector<Event> events;
  constexpr uint64_t kFirst = 16384, kSecond = 12288;
  for (uint64_t i = 0; i < kFirst; ++i) events.push_back(testing::alloc_event(i * 2'000, 0x100000 + 256 * i, 256));
  for (uint64_t i = 0; i < kFirst; ++i)
    if (i % 16 != 0) events.push_back(testing::free_event(50 * testing::kMs + i * 2'000, 0x100000 + 256 * i));
  if (first_thread_events_until_ms != 0)  // thread 1 comes back: it was alive and idle, not gone
    events.push_back(testing::alloc_event(first_thread_events_until_ms * testing::kMs, 0x8000000, 256));
  for (uint64_t i = 0; i < kSecond; ++i) {
    Event e = testing::alloc_event(200 * testing::kMs + i * 2'000, 0x10000000 + 256 * i, 256);
    e.thread = 2;
    events.push_back(e);
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_ns < b.time_ns; });
  LlamaOptions options;
  options.fixed_class = 1;
  LlamaPolicy policy(options);
  VectorEventSource source(events);
  return replay(source, policy, EngineOptions{10 * testing::kMs});
}

TEST(LlamaPolicy, AThreadThatStartsAfterAnotherMadeItsLastEventAdoptsItsHeapAndFillsItsHoles) {
  RunResult adopted = thread_after_an_exit(0);
  EXPECT_EQ(extra(adopted, "idle_threads_released"), 1);
  EXPECT_LE(adopted.summary.peak_footprint_bytes, 3 * k2M) << "thread 2 took new spans beside thread 1's holes";
  // Thread 1 comes back at 0.4 s: it was alive, and thread 2 gets a heap of its own.
  RunResult alive = thread_after_an_exit(400);
  EXPECT_GE(alive.summary.peak_footprint_bytes, 4 * k2M);
}

}  // namespace
}  // namespace llamalloc::sim
