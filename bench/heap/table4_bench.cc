// papers/000 Table 4 as ns per alloc+free pair, for whatever malloc the process has: glibc when run plainly,
// or jemalloc / mimalloc / llamalloc under LD_PRELOAD (bench/heap/run_table4.sh runs all side by side).
//   fast path:   a small object (64 B), allocated and freed by one thread (the thread-local path)
//   global path: a large object (16 KiB >= 8 KiB), which llamalloc places in blocks under its global lock
// Each row runs with 1 and 2 threads. A second pair of rows keeps 64 objects live, so that a free is not
// always of the object just allocated.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>

namespace {

void pair_loop(benchmark::State& state, size_t size) {
  for (auto _ : state) {
    void* p = malloc(size);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  state.SetItemsProcessed(state.iterations());
}

void window_loop(benchmark::State& state, size_t size) {
  constexpr int kWindow = 64;
  void* live[kWindow] = {};
  int i = 0;
  for (auto _ : state) {
    free(live[i]);
    live[i] = malloc(size);
    benchmark::DoNotOptimize(live[i]);
    i = (i + 1) % kWindow;
  }
  for (void* p : live) free(p);
  state.SetItemsProcessed(state.iterations());
}

void BM_FastPath(benchmark::State& state) { pair_loop(state, 64); }
void BM_GlobalPath(benchmark::State& state) { pair_loop(state, 16 * 1024); }
void BM_FastPathWindow64(benchmark::State& state) { window_loop(state, 64); }
void BM_GlobalPathWindow64(benchmark::State& state) { window_loop(state, 16 * 1024); }

BENCHMARK(BM_FastPath)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_GlobalPath)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_FastPathWindow64)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(BM_GlobalPathWindow64)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
