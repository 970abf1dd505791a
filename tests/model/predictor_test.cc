// The learned predictor in this process: the walk of the caller's stack, the module map, the per-thread caches'
// memory and keys shared by call paths.
#include <gtest/gtest.h>

#include <link.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "learned_predictor.h"
#include "stack_walk.h"
#include "test_images.h"
#include "test_threads.h"

using namespace llamalloc::model;
using namespace llamalloc::model::test;

namespace {

// ---------------------------------------------------------------- the stack walk

uintptr_t g_expected[4];

__attribute__((noinline)) size_t fake_malloc_walk(LearnedPredictor& p, uintptr_t* pcs) {
  // As the heap calls the predictor: the caller's return address and the heap function's own frame.
  llamalloc::AllocationContext ctx{reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                                   reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), 64};
  uintptr_t top = mapping_end(ctx.stack_address);
  return p.capture_stack(ctx, top, pcs, kMaxFrames);
}

__attribute__((noinline)) size_t level2(LearnedPredictor& p, uintptr_t* pcs) {
  size_t n = fake_malloc_walk(p, pcs);
  g_expected[0] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return n;
}

__attribute__((noinline)) size_t level1(LearnedPredictor& p, uintptr_t* pcs) {
  size_t n = level2(p, pcs);
  asm volatile("" ::: "memory");
  return n;
}

TEST(StackWalk, FollowsTheFramePointersOfTheCallersInnermostFirst) {
  static LearnedPredictor p;  // no model: only the module map is needed for the walk
  p.modules().refresh(p.tables());
  uintptr_t pcs[kMaxFrames];
  size_t n = level1(p, pcs);
  ASSERT_GE(n, 3u);
  // pcs[0] is in level2 (the caller of the fake malloc), pcs[1] in level1 (at level2's return address - 1: the
  // pc convention of src/common/stack_walk.h, as profiles record them).
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[0]));
  EXPECT_LE(n, size_t(kMaxFrames));
  for (size_t i = 0; i < n; ++i) {
    Module m;
    EXPECT_TRUE(p.modules().find(pcs[i], &m));
  }
}

// A function built without a frame pointer between the program and the allocator, as libstdc++'s and glibc's
// internals are: it keeps rbp as its caller left it, so the frame-pointer chain goes from the allocator's
// frame straight to its caller's caller.
__attribute__((noinline, optimize("omit-frame-pointer"))) size_t level2_without_frame_pointer(LearnedPredictor& p,
                                                                                              uintptr_t* pcs) {
  size_t n = fake_malloc_walk(p, pcs);
  g_expected[1] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return n;
}

__attribute__((noinline)) size_t level1_above_frameless(LearnedPredictor& p, uintptr_t* pcs) {
  size_t n = level2_without_frame_pointer(p, pcs);
  g_expected[2] = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  asm volatile("" ::: "memory");
  return n;
}

TEST(StackWalk, TheDwarfWalkKeepsTheCallerOfAFunctionWithoutFramePointer) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  uintptr_t pcs[kMaxFrames];
  size_t n = level1_above_frameless(p, pcs);  // the default: the DWARF unwinder, as the profiler's
  ASSERT_GE(n, 3u);
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[1]));  // level1_above_frameless, the frameless
                                                                   // function's caller
  EXPECT_EQ(pcs[2], llamalloc::stack_walk::pc_of(g_expected[2]));
  p.set_dwarf_unwind(false);
  n = level1_above_frameless(p, pcs);
  p.set_dwarf_unwind(true);
  ASSERT_GE(n, 2u);
  // Frame pointers alone skip it: the frame record after the allocator's is its caller's.
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[2]));
}

// One call site for both walks.
__attribute__((noinline)) size_t walk_with(LearnedPredictor& p, bool dwarf, uintptr_t* pcs) {
  p.set_dwarf_unwind(dwarf);
  size_t n = level1(p, pcs);
  asm volatile("" ::: "memory");
  return n;
}

TEST(StackWalk, TheFramePointerWalkGivesTheSameStackWhereEveryFrameKeepsOne) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  uintptr_t walks[2][kMaxFrames];
  size_t n[2] = {walk_with(p, true, walks[0]), walk_with(p, false, walks[1])};
  p.set_dwarf_unwind(true);
  const uintptr_t* dwarf = walks[0];
  const uintptr_t* fp = walks[1];
  size_t n_dwarf = n[0], n_fp = n[1];
  // The test's own frames (level2, level1, walk_with) are the same; past them GoogleTest's and libc's frames
  // may lack frame pointers.
  ASSERT_GE(n_dwarf, 3u);
  ASSERT_GE(n_fp, 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(dwarf[i], fp[i]) << "frame " << i;
}

// Initialises p with a model of several pages of weights (all read by each run), written to a file named for
// `name`; its path, empty on failure.
std::string init_with_model_file(LearnedPredictor& p, const char* name) {
  static Image img;
  build_model(img, 48);
  std::string path = ::testing::TempDir() + "/" + name + "." + std::to_string(getpid()) + ".model";
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return "";
  bool ok = fwrite(img.bytes, 1, img.size, f) == img.size;
  fclose(f);
  char err[256];
  if (!ok || !p.init(path.c_str(), nullptr, 0, err, sizeof err)) return "";
  return path;
}

// The unwind tables of libc: [first whole page of .eh_frame_hdr, end of its read-only segment), as the trim's
// drop takes them.
struct UnwindTables {
  const unsigned char* start = nullptr;
  size_t bytes = 0;
};
UnwindTables libc_unwind_tables() {
  UnwindTables t;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) {
        if (info->dlpi_name == nullptr || strstr(info->dlpi_name, "/libc.so") == nullptr) return 0;
        const ElfW(Phdr)* eh = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i)
          if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) eh = &info->dlpi_phdr[i];
        for (int i = 0; eh != nullptr && i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || eh->p_vaddr < ph.p_vaddr || eh->p_vaddr >= ph.p_vaddr + ph.p_memsz) continue;
          uintptr_t start = (info->dlpi_addr + eh->p_vaddr + 4095) & ~uintptr_t{4095};
          uintptr_t end = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz) & ~uintptr_t{4095};
          auto* out = static_cast<UnwindTables*>(arg);
          out->start = reinterpret_cast<const unsigned char*>(start);
          out->bytes = end > start ? end - start : 0;
        }
        return 1;
      },
      &t);
  return t;
}

uint64_t checksum(const unsigned char* p, size_t n) {
  uint64_t h = 0;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

TEST(StackWalk, AQuietTrimUnmapsTheUnwindTablesThatModelRunsReadAndTheyStillServe) {
  static LearnedPredictor p;
  std::string path = init_with_model_file(p, "unwind");
  ASSERT_FALSE(path.empty());
  UnwindTables t = libc_unwind_tables();
  ASSERT_GE(t.bytes, size_t{64} << 10) << "libc's unwind tables span many pages";
  uint64_t sum = checksum(t.start, t.bytes);  // reads, and so maps, every page
  long before = resident_kib(t.start);
  static int written = 0;
  written = 42;
  p.trim();  // no model run since the last pass: quiet
  long after = resident_kib(t.start);
  EXPECT_GE(before - after, long(t.bytes >> 10) - 8) << "resident KiB of libc's segment: " << before << " -> "
                                                     << after;
  EXPECT_EQ(written, 42) << "writable data stays";
  EXPECT_EQ(checksum(t.start, t.bytes), sum) << "the tables read back from the file as they were";
  // The DWARF walk reads them again.
  p.trim();
  uintptr_t pcs[kMaxFrames];
  size_t n = level1_above_frameless(p, pcs);
  ASSERT_GE(n, 3u);
  EXPECT_EQ(pcs[1], llamalloc::stack_walk::pc_of(g_expected[1]));
  EXPECT_EQ(pcs[2], llamalloc::stack_walk::pc_of(g_expected[2]));
  unlink(path.c_str());
}

TEST(StackWalk, NoFrameGivesOnlyTheReturnAddress) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  uintptr_t pcs[kMaxFrames];
  llamalloc::AllocationContext ctx{0x401000, 0, 16};
  EXPECT_EQ(p.capture_stack(ctx, 0, pcs, kMaxFrames), 1u);
  uintptr_t garbage[4] = {0x10, 0x20, 0, 0};  // a "frame" whose saved rbp is no frame pointer
  ctx.stack_address = reinterpret_cast<uintptr_t>(garbage);
  EXPECT_EQ(p.capture_stack(ctx, mapping_end(ctx.stack_address), pcs, kMaxFrames), 1u);
}

TEST(ModuleMap, KnowsThisProgramsCodeAndNotItsData) {
  static LearnedPredictor p;
  p.modules().refresh(p.tables());
  Module m;
  EXPECT_TRUE(p.modules().find(reinterpret_cast<uintptr_t>(&fake_malloc_walk), &m));
  EXPECT_EQ(m.binary, -1);  // no token tables loaded
  static int data_word;
  EXPECT_FALSE(p.modules().find(reinterpret_cast<uintptr_t>(&data_word), &m));
  EXPECT_FALSE(p.modules().find(0x10, &m));
}

// ---------------------------------------------------------------- the per-thread caches' memory

// A predictor with a small model file (no token tables: every frame is <unsymbolized>).
LearnedPredictor& cache_test_predictor() {
  static LearnedPredictor p;
  static bool ready = [] {
    static Image img;
    build_model(img);
    std::string path = ::testing::TempDir() + "/caches." + std::to_string(getpid()) + ".model";
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr || fwrite(img.bytes, 1, img.size, f) != img.size) return false;
    fclose(f);
    char err[256];
    return p.init(path.c_str(), nullptr, 0, err, sizeof err);
  }();
  EXPECT_TRUE(ready);
  return p;
}

// Predicts 4096 contexts (distinct return addresses): enough to touch every page of the 2,048-entry cache.
void predict_many(LearnedPredictor& p) {
  for (uintptr_t i = 0; i < 4096; ++i) p.predict({0x401000 + 16 * i, 0, 64});
}

// A thread's cache outlives it for the next thread on the same stack (a program that starts a thread per task
// would otherwise run the model on every context of every new thread), and leaves the resident set after
// four trims (the sweeper's passes, about a second) if no such thread comes. A thread on another stack starts
// from an empty cache and does not take it.
TEST(PredictionCaches, AnExitedThreadsCacheGoesToTheNextThreadOnItsStackThenLeavesTheResidentSet) {
  LearnedPredictor& p = cache_test_predictor();
  TwoStacks stacks;
  void* stack_a = stacks.a;
  void* stack_b = stacks.b;
  constexpr size_t kStack = TwoStacks::kBytes;
  // Contexts with a stack height inside stack A, as the heap's entry point gives them.
  auto predict_on_a = [&] {
    for (uintptr_t i = 0; i < 256; ++i) p.predict({0x401000 + 16 * i, reinterpret_cast<uintptr_t>(stack_a) + 4096, 64});
  };
  llamalloc::PredictionCacheEntry* first = nullptr;
  uint64_t runs_first = 0, runs_again = 0;
  run_on_stack(stack_a, kStack, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();
    runs_first = p.totals().model_runs - before;
    // Again on the same thread: the cache doubled while the first passes' misses evicted live entries; what
    // misses by the fourth pass are the contexts that still evict each other in their sets.
    for (int pass = 0; pass < 3; ++pass) {
      before = p.totals().model_runs;
      predict_on_a();
      runs_again = p.totals().model_runs - before;
    }
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    first = view.entries;
  });
  ASSERT_EQ(runs_first, 256u);
  ASSERT_LT(runs_again, 64u);
  // The cache's table: at most 2,048 entries of 16 bytes, inside A's state.
  constexpr size_t kCacheTableBytes = 32 * 1024;
  long warm = resident_kib_in(first, kCacheTableBytes);
  // (256 contexts: a table of at least 1,024 entries, 16 KiB.)
  EXPECT_GE(warm, 16) << "the exited thread's cache stays resident for now";

  run_on_stack(stack_b, kStack - 4096, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();  // the same keys, from a thread on another stack
    EXPECT_EQ(p.totals().model_runs - before, 256u) << "a thread on another stack starts from an empty cache";
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    EXPECT_NE(view.entries, first) << "it does not take the warm cache of stack A";
  });
  run_on_stack(stack_a, kStack, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();
    EXPECT_LE(p.totals().model_runs - before, runs_again)
        << "the next thread on stack A finds its contexts cached, as its previous thread would have";
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    EXPECT_EQ(view.entries, first);
  });
  warm = resident_kib_in(first, kCacheTableBytes);
  for (int pass = 0; pass < 3; ++pass) p.trim();
  EXPECT_EQ(resident_kib_in(first, kCacheTableBytes), warm) << "three trims: still warm";
  p.trim();
  long after = resident_kib_in(first, kCacheTableBytes);
  EXPECT_EQ(after, 0) << "resident KiB of A's cache table: " << warm << " -> " << after;
  run_on_stack(stack_a, kStack, [&] {
    uint64_t before = p.totals().model_runs;
    predict_on_a();
    EXPECT_EQ(p.totals().model_runs - before, 256u) << "after the drop the contexts miss again";
  });
}

// ---------------------------------------------------------------- keys shared by call paths

// An allocation entry point as the heap's: the caller's return address and this function's own frame.
#define LLAMALLOC_FRAMED __attribute__((noinline, optimize("no-omit-frame-pointer")))
volatile int g_path_a, g_path_b;

LLAMALLOC_FRAMED unsigned fake_entry(LearnedPredictor& p, size_t size) {
  unsigned lc = p.predict({reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                           reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), size});
  asm volatile("" ::: "memory");
  return lc;
}
// A wrapper (redis's zmalloc): every allocation returns into it, at the same stack height from both paths.
LLAMALLOC_FRAMED unsigned wrapper(LearnedPredictor& p, size_t size) {
  unsigned lc = fake_entry(p, size);
  asm volatile("" ::: "memory");
  return lc;
}
LLAMALLOC_FRAMED unsigned path_a(LearnedPredictor& p, size_t size) {
  g_path_a = 1;
  unsigned lc = wrapper(p, size);
  asm volatile("" ::: "memory");
  return lc;
}
LLAMALLOC_FRAMED unsigned path_b(LearnedPredictor& p, size_t size) {
  g_path_b = 2;
  unsigned lc = wrapper(p, size);
  asm volatile("" ::: "memory");
  return lc;
}

// Path a or b, always from the same two call sites (a call site is part of a context).
LLAMALLOC_FRAMED unsigned step(LearnedPredictor& p, bool b, size_t size) {
  unsigned lc = b ? path_b(p, size) : path_a(p, size);
  asm volatile("" ::: "memory");
  return lc;
}

// Paths a (0) and b (1) in turn, each from the same call sites whichever test line asks: the key of a shared entry
// takes kDeepKeyFrames (4) callers' return addresses, here path_x, step, steps_inner and steps.
LLAMALLOC_FRAMED void steps_inner(LearnedPredictor& p, const int* paths, size_t n, size_t size) {
  for (size_t i = 0; i < n; ++i) step(p, paths[i] != 0, size);
  asm volatile("" ::: "memory");
}
LLAMALLOC_FRAMED void steps(LearnedPredictor& p, std::initializer_list<int> paths, size_t size) {
  steps_inner(p, paths.begin(), paths.size(), size);
  asm volatile("" ::: "memory");
}

// Two call paths of the same depth through a wrapper share one cache key (return address, stack height, size
// class): the first path's class answered for both. The predictor (every miss, re-prediction, and every
// kPredictionCheckEvery-th hit on the fast path) compares the callers' tag of the entry with the allocation's:
// another path marks the key shared, and from then on each path is keyed with its callers too, so each gets its
// own entry (the model's answer for its context: a run, or the thread's memo of it). One path alone never marks
// its key shared.
TEST(PredictionCaches, AKeySharedByTwoCallPathsIsKeyedByTheirCallers) {
  static LearnedPredictor p;
  cache_test_predictor();  // writes the model file
  std::string path = ::testing::TempDir() + "/caches." + std::to_string(getpid()) + ".model";
  char err[256];
  ASSERT_TRUE(p.init(path.c_str(), nullptr, /*repredict_every=*/0, err, sizeof err)) << err;
  std::thread t([&] {
    auto runs = [&] { return p.totals().model_runs; };
    auto shared = [&] { return p.totals().shared_keys; };
    auto memo = [&] { return p.totals().memo_answers; };
    // One path: one model run, then hits; never shared.
    uint64_t r0 = runs(), s0 = shared();
    steps(p, {0, 0, 0, 0, 0, 0}, 256);
    EXPECT_EQ(runs() - r0, 1u);
    EXPECT_EQ(shared() - s0, 0u);
    // Two paths, another model size bucket: a's miss; b comes with other callers, so the key is shared and b gets
    // its own entry (a model run).
    r0 = runs();
    steps(p, {0, 1}, 64);
    EXPECT_EQ(runs() - r0, 2u) << "b is not served a's entry";
    EXPECT_EQ(shared() - s0, 1u) << "the key was found shared";
    uint64_t m0 = memo();
    steps(p, {0, 1}, 64);
    EXPECT_EQ(memo() - m0, 1u) << "a gets its own entry too, with its context's answer from the thread's memo";
    EXPECT_EQ(runs() - r0, 2u) << "the model ran once for a's context";
    steps(p, {0, 1, 0, 1}, 64);
    EXPECT_EQ(runs() - r0, 2u) << "each path hits its own entry";
    EXPECT_EQ(memo() - m0, 1u);
    EXPECT_EQ(shared() - s0, 1u);
  });
  t.join();
}

// The heap's fast path over a thread's cache (heap_malloc in alloc/alloc.h): a hit that is due neither for a
// check nor for a re-prediction stays inline; anything else goes to the predictor. true: it went there.
LLAMALLOC_FRAMED bool fast_entry(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size) {
  uintptr_t ra = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uint64_t key = llamalloc::prediction_cache_key(ra, sp, llamalloc::model_size_bucket(size));
  llamalloc::PredictionCacheEntry* way = &view.entries[(key >> view.shift) & ~uint64_t{1}];
  if (way->key != key) ++way;
  uint32_t n = way->hits + 1;
  if (way->key == key && n % llamalloc::kPredictionCheckEvery != 0 &&
      n < uint64_t(view.repredict_every) << way->backoff) {
    way->hits++;
    view.hits->store(view.hits->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    return false;
  }
  p.predict({ra, sp, size});
  asm volatile("" ::: "memory");
  return true;
}
LLAMALLOC_FRAMED bool fast_wrapper(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size) {
  bool visited = fast_entry(p, view, size);
  asm volatile("" ::: "memory");
  return visited;
}
LLAMALLOC_FRAMED bool fast_path_a(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size) {
  g_path_a = 3;
  bool visited = fast_wrapper(p, view, size);
  asm volatile("" ::: "memory");
  return visited;
}
LLAMALLOC_FRAMED bool fast_path_b(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size) {
  g_path_b = 4;
  bool visited = fast_wrapper(p, view, size);
  asm volatile("" ::: "memory");
  return visited;
}
// Path a under two more frames: the kDeepKeyFrames callers of the tag end inside run_path_a.
LLAMALLOC_FRAMED bool fast_path_a_mid(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size) {
  bool visited = fast_path_a(p, view, size);
  asm volatile("" ::: "memory");
  return visited;
}
LLAMALLOC_FRAMED bool fast_path_a_top(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size) {
  bool visited = fast_path_a_mid(p, view, size);
  asm volatile("" ::: "memory");
  return visited;
}
// n allocations of path a, one call path whichever test line asks; how many went to the predictor.
LLAMALLOC_FRAMED int run_path_a(LearnedPredictor& p, const llamalloc::PredictionCacheView& view, size_t size, int n) {
  int visits = 0;
  for (int i = 0; i < n; ++i) visits += fast_path_a_top(p, view, size);
  asm volatile("" ::: "memory");
  return visits;
}

// A key found shared only when a check meets its rare path: each allocation of that path before then gets the
// frequent path's class (a long-lived record among short-lived buffers pins their page). A thread that starts
// from an empty cache checks every 1 to kYoungCheckEvery hits for its first kYoungCheckHits, so a path that comes
// once per 201 allocations is found after about 4.5 of its allocations, not 32.5; its re-predictions still come
// after about repredict_every hits. Later the checks come every 1 to kPredictionCheckEvery hits (their cost).
TEST(PredictionCaches, AYoungThreadFindsARarePathBehindAFrequentOneAfterAFewOfItsAllocations) {
  static LearnedPredictor p;
  cache_test_predictor();  // writes the model file
  std::string path = ::testing::TempDir() + "/caches." + std::to_string(getpid()) + ".model";
  char err[256];
  constexpr uint32_t kEvery = 1000;
  ASSERT_TRUE(p.init(path.c_str(), nullptr, kEvery, err, sizeof err, /*repredict_backoff=*/0)) << err;
  std::thread t([&] {
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    uint64_t young_hits = view.hits->load() + kYoungCheckHits;
    // 20 keys (20 model size buckets), each a record after every 200 buffers until the key is found shared.
    size_t rare_served = 0;
    for (unsigned k = 0; k < 20; ++k) {
      size_t size = size_t{32} << k;
      uint64_t shared0 = p.totals().shared_keys;
      size_t rare = 0;
      while (p.totals().shared_keys == shared0 && rare < 5000) {
        for (int i = 0; i < 200; ++i) fast_path_a(p, view, size);
        fast_path_b(p, view, size);
        ++rare;
      }
      ASSERT_GT(p.totals().shared_keys, shared0) << "size " << size << ": never found shared";
      rare_served += rare;
    }
    // Expected 20 x 4.5 = 90 (sd 18); with checks every 1 to 64 hits, 650 (sd 143).
    EXPECT_LE(rare_served, 250u) << "records served the buffers' class before their keys were found shared";

    // One path of a key no other path has (a model size bucket of its own), young: about one visit per 4.5 hits
    // and one re-prediction per kEvery hits.
    constexpr int kHits = 20000;
    ASSERT_LT(view.hits->load() + kHits, young_hits);
    uint64_t re0 = p.totals().repredictions;
    int visits = run_path_a(p, view, 16, kHits);
    EXPECT_GE(visits, kHits / 8) << "young: checked every 1 to " << kYoungCheckEvery << " hits";
    uint64_t repredictions = p.totals().repredictions - re0;
    EXPECT_GE(repredictions, uint64_t(kHits / kEvery / 2));
    EXPECT_LE(repredictions, uint64_t(kHits / kEvery * 2)) << "the young checks' count stands for the hits";

    // Past its youth: about one visit per 32.5 hits.
    while (view.hits->load() < young_hits) run_path_a(p, view, 16, 1000);
    visits = run_path_a(p, view, 16, kHits);
    EXPECT_LE(visits, kHits / 20) << "checked every 1 to " << llamalloc::kPredictionCheckEvery << " hits";
  });
  t.join();
}

// Bytes of `stack` (filled with 0xA5 before the thread ran) that the thread wrote: from the lowest changed
// byte to the top.
size_t stack_used(const unsigned char* stack, size_t bytes) {
  size_t i = 0;
  while (i < bytes && stack[i] == 0xA5) ++i;
  return bytes - i;
}

// Runs fn on a fresh 1 MiB stack filled with 0xA5; the bytes of that stack fn wrote (stack_used).
size_t stack_written_by(const std::function<void()>& fn) {
  constexpr size_t kStack = 1 << 20;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) {
    ADD_FAILURE() << "mmap of a " << kStack << "-byte stack failed";
    return 0;
  }
  memset(stack, 0xA5, kStack);
  run_on_stack(stack, kStack, fn);
  size_t bytes = stack_used(static_cast<const unsigned char*>(stack), kStack);
  munmap(stack, kStack);
  return bytes;
}

// A model run needs little stack below the allocation that asked for it (the DWARF walk, the tokens, the LSTM),
// so that a thread with a small stack can allocate: the token array and the LSTM buffers are sized by the model
// in use, not by the largest model (4,096 tokens, 16 KiB; a 6 KiB hidden state).
TEST(PredictionCaches, AModelRunNeedsLittleStack) {
  LearnedPredictor& p = cache_test_predictor();
  uintptr_t first_address = 0x9a1000;  // contexts no other test predicts, new for each thread
  auto used = [&](bool predict) {
    uint64_t runs = 0;
    size_t bytes = stack_written_by([&] {
      if (!predict) return;
      uint64_t before = p.totals().model_runs;
      for (uintptr_t i = 0; i < 64; ++i) p.predict({first_address + 16 * i, 0, 64});
      runs = p.totals().model_runs - before;
    });
    first_address += 0x10000;
    if (predict) EXPECT_GE(runs, 32u) << "the contexts ran the model";
    return bytes;
  };
  size_t idle = used(false);
  for (bool dwarf : {false, true}) {
    p.set_dwarf_unwind(dwarf);
    size_t predicting = used(true);
    EXPECT_LE(predicting, idle + 16 * 1024) << (dwarf ? "DWARF walk" : "frame pointers") << ": a thread that only "
                                            << "starts writes " << idle << " bytes of its stack, with model runs "
                                            << predicting;
  }
  p.set_dwarf_unwind(true);  // the predictor's default, which the other tests expect
}

// Finding a thread's stack bounds (mapping_end, once per thread that predicts or learns) takes little of that
// thread's stack: what it touches stays resident for the thread's life, on every thread of a server.
TEST(PredictionCaches, FindingAThreadsStackBoundsNeedsLittleStack) {
  auto used = [&](bool find) {
    uintptr_t at = 0, end = 0;
    size_t bytes = stack_written_by([&] {
      volatile uintptr_t here = 0;
      at = reinterpret_cast<uintptr_t>(&here);
      if (find) end = mapping_end(at);
    });
    if (find) EXPECT_GT(end, at) << "the end of the mapping that holds the stack";
    return bytes;
  };
  // Once first, off the measured stack: the first calls of open and read in the process go through the dynamic
  // linker's lazy binding, whose resolver saves the vector registers on the stack (a few KiB), once per process.
  volatile uintptr_t here = 0;
  EXPECT_NE(mapping_end(reinterpret_cast<uintptr_t>(&here)), 0u);
  size_t idle = used(false);
  size_t finding = used(true);
  EXPECT_LE(finding, idle + 2048) << "a call that finds nothing writes " << idle << " bytes of its stack, "
                                  << "mapping_end " << finding;
}

// drop_thread_cache (the sweeper, for an idle thread): the pages go, the cache reads as empty (the next
// prediction of a context runs the model again), and the thread goes on using it.
TEST(PredictionCaches, ADroppedCacheIsEmptyAndNotResident) {
  LearnedPredictor& p = cache_test_predictor();
  std::thread t([&] {
    predict_many(p);
    llamalloc::PredictionCacheView view;
    ASSERT_TRUE(p.thread_cache(&view));
    const llamalloc::AllocationContext context{0x400000, 0, 64};  // (not among predict_many's)
    p.predict(context);
    uint64_t runs = p.totals().model_runs;
    p.predict(context);
    EXPECT_EQ(p.totals().model_runs, runs) << "a context seen before is a hit";
    long before = resident_kib(view.entries);
    EXPECT_TRUE(p.drop_thread_cache(view));
    long after = resident_kib(view.entries);
    EXPECT_GE(before - after, 32) << "resident KiB of the caches' pool: " << before << " -> " << after;
    for (unsigned i = 0; i < 2048; ++i) EXPECT_EQ(view.entries[i].key, 0u);
    p.predict(context);
    EXPECT_EQ(p.totals().model_runs, runs + 1) << "after the drop the context misses";
    p.predict(context);
    EXPECT_EQ(p.totals().model_runs, runs + 1) << "and is cached again";
    static llamalloc::PredictionCacheEntry not_ours[2048];
    llamalloc::PredictionCacheView foreign = view;
    foreign.entries = not_ours;
    EXPECT_FALSE(p.drop_thread_cache(foreign));
  });
  t.join();
}

// The model file's pages stay resident only while the model is busy (at least kBusyRunsPerTrim runs between two
// trims, the sweeper's passes): a rarely running model gives them back after each run, so that a few runs in a
// quiet phase do not keep the whole file resident.
TEST(PredictionCaches, AModelThatRunsRarelyDoesNotStayResident) {
  static LearnedPredictor p;
  std::string path = init_with_model_file(p, "rare");
  ASSERT_FALSE(path.empty());
  const void* base = p.model().base();
  std::thread t([&] {
    uintptr_t next = 0x500000;
    auto runs = [&](int n) {
      uint64_t before = p.totals().model_runs;
      // Each a new context: a model run. Their tokens are the same (no token tables), so the memo of the LSTM's
      // answers goes first: each run reads the model, as runs of different stacks do.
      for (int i = 0; i < n; ++i, next += 16) {
        p.clear_token_memo();
        p.predict({next, 0, 64});
      }
      ASSERT_EQ(p.totals().model_runs - before, uint64_t(n));
    };
    p.trim();
    runs(3);  // quiet: each run gives the pages back
    EXPECT_LE(resident_kib(base), 4) << "a rare run leaves nothing resident";
    runs(200);  // a burst: after kBusyRunsPerTrim runs in this pass the pages stay
    EXPECT_GT(resident_kib(base), 8);
    p.trim();
    EXPECT_GT(resident_kib(base), 8) << "a busy model keeps its pages at the pass";
    runs(3);
    EXPECT_GT(resident_kib(base), 8) << "and after its runs in the next pass";
    p.trim();  // that pass was quiet
    EXPECT_LE(resident_kib(base), 4) << "a few runs since the previous pass: the pages go";
    runs(3);
    EXPECT_LE(resident_kib(base), 4) << "and leave after each run again";
  });
  t.join();
  unlink(path.c_str());
}

// The process's memo of the LSTM's answers: a token sequence met again, in a context the thread has never seen
// (a recursion at another depth), takes the answer the LSTM gave it without running it; another sequence runs the
// LSTM; a memo cleared (a quiet sweep period, a setting changed) runs it again, to the same answer.
TEST(PredictionCaches, ATokenSequenceMetAgainTakesTheLSTMsAnswerWithoutRunningIt) {
  static LearnedPredictor p;
  std::string path = init_with_model_file(p, "memo");
  ASSERT_FALSE(path.empty());
  std::thread t([&] {
    // Distinct return addresses, so each is a miss of the thread's cache; no token tables, so their frames are all
    // <unsymbolized> and one size gives one token sequence.
    PredictionTotals before = p.totals();
    unsigned first = p.predict({0x700000, 0, 64});
    for (uintptr_t i = 1; i < 64; ++i) EXPECT_EQ(p.predict({0x700000 + 16 * i, 0, 64}), first);
    PredictionTotals after = p.totals();
    EXPECT_EQ(after.model_runs - before.model_runs, 64u);
    EXPECT_EQ(after.token_memo_answers - before.token_memo_answers, 63u) << "the LSTM ran once";
    p.predict({0x710000, 0, 1 << 20});
    EXPECT_EQ(p.totals().token_memo_answers, after.token_memo_answers) << "another size, another sequence: a run";
    p.clear_token_memo();
    EXPECT_EQ(p.predict({0x720000, 0, 64}), first);
    EXPECT_EQ(p.totals().token_memo_answers, after.token_memo_answers) << "cleared: the LSTM ran again";
    EXPECT_EQ(p.predict({0x730000, 0, 64}), first);
    EXPECT_EQ(p.totals().token_memo_answers, after.token_memo_answers + 1);
  });
  t.join();
  unlink(path.c_str());
}

}  // namespace
