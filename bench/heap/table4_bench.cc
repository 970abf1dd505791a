// The LLAMA paper's Table 4 (docs/references.md) as ns per alloc+free pair, for whatever malloc the process
// has: glibc when run plainly, or jemalloc / mimalloc / llamalloc under LD_PRELOAD (bench/heap/run_table4.sh runs
// all side by side).
//   fast path:   a small object (64 B), allocated and freed by one thread (the thread-local path)
//   global path: a large object (16 KiB >= 8 KiB), which llamalloc places in blocks under its global lock
// Each row runs with 1 and 2 threads (and one per core where there are more). A second pair of rows keeps 64
// objects live, so that a free is not always of the object just allocated. 1 KiB and 4 KiB pairs,
// and objects freed by another thread.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

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

// Objects allocated by the benchmark thread and freed by another: a single-producer single-consumer ring of
// 4096 slots; the consumer frees whatever arrives. Each iteration is one malloc (and, in the other thread, its
// free), so the figure is ns per alloc+remote-free pair as seen by the allocating thread.
void cross_thread_loop(benchmark::State& state, size_t size) {
  constexpr size_t kRing = 4096;
  std::vector<std::atomic<void*>> ring(kRing);
  for (auto& slot : ring) slot.store(nullptr, std::memory_order_relaxed);
  std::atomic<bool> done{false};
  std::thread consumer([&] {
    size_t i = 0;
    for (;;) {
      void* p = ring[i].exchange(nullptr, std::memory_order_acquire);
      if (p != nullptr) {
        free(p);
        i = (i + 1) % kRing;
      } else if (done.load(std::memory_order_acquire)) {
        for (auto& slot : ring) free(slot.exchange(nullptr));
        return;
      }
    }
  });
  size_t i = 0;
  for (auto _ : state) {
    void* p = malloc(size);
    benchmark::DoNotOptimize(p);
    void* expected = nullptr;
    while (!ring[i].compare_exchange_weak(expected, p, std::memory_order_release, std::memory_order_relaxed))
      expected = nullptr;
    i = (i + 1) % kRing;
  }
  done.store(true, std::memory_order_release);
  consumer.join();
  state.SetItemsProcessed(state.iterations());
}

void BM_FastPath(benchmark::State& state) { pair_loop(state, 64); }
void BM_Pair1KiB(benchmark::State& state) { pair_loop(state, 1024); }
void BM_Pair4KiB(benchmark::State& state) { pair_loop(state, 4096); }
void BM_Window1KiB(benchmark::State& state) { window_loop(state, 1024); }
void BM_Window4KiB(benchmark::State& state) { window_loop(state, 4096); }
void BM_CrossThread64(benchmark::State& state) { cross_thread_loop(state, 64); }
void BM_CrossThread1KiB(benchmark::State& state) { cross_thread_loop(state, 1024); }
void BM_CrossThread4KiB(benchmark::State& state) { cross_thread_loop(state, 4096); }
void BM_GlobalPath(benchmark::State& state) { pair_loop(state, 16 * 1024); }
void BM_FastPathWindow64(benchmark::State& state) { window_loop(state, 64); }
void BM_GlobalPathWindow64(benchmark::State& state) { window_loop(state, 16 * 1024); }

// 1 and 2 threads everywhere; on a machine with more cores also one thread per core (16 on the 16-core machine),
// and for the cross-thread rows one producer/consumer pair per two cores.
void Threads(benchmark::internal::Benchmark* b) {
  b->Threads(1)->Threads(2);
  if (unsigned n = std::thread::hardware_concurrency(); n > 2) b->Threads(static_cast<int>(n));
}
void CrossThreads(benchmark::internal::Benchmark* b) {
  if (unsigned n = std::thread::hardware_concurrency(); n > 2) b->Threads(1)->Threads(static_cast<int>(n / 2));
}

BENCHMARK(BM_FastPath)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_GlobalPath)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_FastPathWindow64)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_GlobalPathWindow64)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_Pair1KiB)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_Pair4KiB)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_Window1KiB)->Apply(Threads)->UseRealTime();
BENCHMARK(BM_Window4KiB)->Apply(Threads)->UseRealTime();
// Each benchmark thread allocates, and its own consumer thread frees: wall time, since the consumers' CPU is not
// counted.
BENCHMARK(BM_CrossThread64)->Apply(CrossThreads)->UseRealTime();
BENCHMARK(BM_CrossThread1KiB)->Apply(CrossThreads)->UseRealTime();
BENCHMARK(BM_CrossThread4KiB)->Apply(CrossThreads)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
