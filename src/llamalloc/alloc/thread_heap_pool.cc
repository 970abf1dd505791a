// The thread-heap pool: which thread heap a thread allocates from, from its first allocation to its exit.
//
// Rules, and why:
// - A thread starts on the static empty heap (tl_heap = &g_empty_heap), whose spans are all empty, so its first
//   allocation misses into the slow path, which attaches a heap to it (attach_thread_heap). No constructor runs
//   per thread, and a thread that never allocates costs nothing, unless it frees other threads' objects: its
//   first such free attaches a heap too, which holds its remote-free batch (ThreadHeapOps::remote_free).
// - Thread heaps come from metadata pages, never from malloc, and are never unmapped: a heap whose thread exited
//   waits in the pool (g_heap_pool) for the next new thread, which adopts it as it is. Its queues and span cache
//   are empty by then (ThreadHeapOps::abandon); the spans that still hold objects are parked (ThreadHeap::
//   pool_parked): other threads' frees into them come through its notify list, which gives them back once
//   empty, and the thread that adopts the heap takes the others back onto its queues.
// - The exit hook is a pthread key destructor: keys below PTHREAD_KEY_2NDLEVEL_SIZE never allocate. It takes the
//   heap off the list of live heaps before it abandons it, so that a sweep of it in progress ends first.
// - Lock order: the pool's lock, then the page heap's.
// - The live-byte gauge: each thread counts the bytes it allocates and frees in tl_live_delta, without atomics,
//   and adds them to the page heap's gauge from its slow paths (flush_live_bytes) and at its exit.
#include <pthread.h>

#include <atomic>
#include <new>

#include "alloc/runtime_internal.h"

namespace llamalloc {

constinit HeapPool g_heap_pool;
ThreadHeap* g_live_heaps = nullptr;
bool g_share_long_lived = false;

namespace {

// New heaps are carved from chunks of metadata pages (g_page_heap.lock()).
constexpr size_t kHeapChunkBytes = 64 * 1024;
char* g_heap_chunk = nullptr;
size_t g_heap_chunk_left = 0;

unsigned g_live_count = 0;  // g_heap_pool.lock

// Small objects of long-lived classes, for every thread (HeapConfig::shared_class_min; g_page_heap.shared_lock()).
constinit ThreadHeap g_shared_heap;

pthread_key_t g_thread_key;
std::atomic<bool> g_key_ready{false};

// g_heap_pool.lock held.
void register_live(ThreadHeap* h) {
  h->live_prev = nullptr;
  h->live_next = g_live_heaps;
  if (g_live_heaps != nullptr) g_live_heaps->live_prev = h;
  g_live_heaps = h;
  h->seen_ops = h->slow_ops.load(std::memory_order_relaxed);
  h->idle_ticks = 0;
  h->seen_cache_hits = 0;
  h->cache_idle_ticks = 0;
  ++g_live_count;
}

// g_heap_pool.lock held.
void unregister_live(ThreadHeap* h) {
  if (h->live_prev != nullptr) h->live_prev->live_next = h->live_next;
  else g_live_heaps = h->live_next;
  if (h->live_next != nullptr) h->live_next->live_prev = h->live_prev;
  h->live_next = h->live_prev = nullptr;
  --g_live_count;
}

// A heap from the pool, or a new one; nullptr when no metadata memory can be had. *second: the process now has
// more than one live thread heap.
ThreadHeap* acquire_heap(bool* second) {
  {
    LockGuard g(g_heap_pool.lock);
    if (ThreadHeap* h = g_heap_pool.head) {
      g_heap_pool.head = h->next_free;
      h->next_free = nullptr;
      h->prediction_cache = PredictionCacheView{};
      // Its exited thread's parked spans back on its queues: this thread fills their holes first.
      ThreadHeapOps::adopt_parked(*h);
      h->abandoned.store(0, std::memory_order_relaxed);
      register_live(h);
      *second = g_live_count >= 2;
      return h;
    }
  }
  ThreadHeap* h;
  {
    LockGuard g(g_page_heap.lock());
    if (g_heap_chunk_left < sizeof(ThreadHeap)) {
      g_heap_chunk = static_cast<char*>(g_platform.map_metadata(kHeapChunkBytes));
      if (g_heap_chunk == nullptr) return nullptr;
      g_heap_chunk_left = kHeapChunkBytes;
    }
    h = reinterpret_cast<ThreadHeap*>(g_heap_chunk);
    g_heap_chunk += (sizeof(ThreadHeap) + 63) & ~size_t{63};
    g_heap_chunk_left -= (sizeof(ThreadHeap) + 63) & ~size_t{63};
    new (h) ThreadHeap();
  }
  LockGuard g(g_heap_pool.lock);
  register_live(h);
  *second = g_live_count >= 2;
  return h;
}

// The pthread key's destructor: the thread's heap goes to the pool.
void thread_exit(void* arg) {
  ThreadHeap* h = static_cast<ThreadHeap*>(arg);
  {
    // Off the sweeper's list first (a sweep of it in progress ends before this lock is had).
    LockGuard g(g_heap_pool.lock);
    unregister_live(h);
  }
  ThreadHeapOps::abandon(g_page_heap, *h);
  flush_live_bytes();
  if (tl_heap == h) tl_heap = &g_empty_heap;
  {
    LockGuard g(g_heap_pool.lock);
    h->pool_passes = 0;
    h->next_free = g_heap_pool.head;
    g_heap_pool.head = h;
  }
  // A thread that ends after the program's blocks in use fell (a pool's workers ended after a batch whose
  // objects other threads freed): what the pages hold beyond the blocks in use now goes back on this thread,
  // before its join returns, not up to a sweep period later -- as jemalloc purges an arena its last thread left.
  // A thread that ends while the load holds (a thread per task) finds no fall, in two counters, and walks no page.
  g_page_heap.subrelease_after_fall();
}

}  // namespace

// Sampled objects of every thread (online learning; g_page_heap.shared_lock()).
constinit ThreadHeap g_sampled_heap;

ThreadHeap* attach_thread_heap() {
  ensure_init();
  bool second = false;
  ThreadHeap* h = acquire_heap(&second);
  if (h == nullptr) return nullptr;
  h->fast_class = every_allocation() ? uint8_t(kMaxClasses) : uint8_t(clamp_class(current_predictor()->predict({0, 0, 0})));
  tl_heap = h;
  // Registers the thread-exit hook (before the library's constructor has made the key, the first thread's heap
  // is registered there).
  if (g_key_ready.load(std::memory_order_acquire)) pthread_setspecific(g_thread_key, h);
  if (second && g_share_long_lived && g_page_heap.shared_heap() == nullptr) g_page_heap.set_shared_heap(&g_shared_heap);
  if (second) start_sweeper();
  return h;
}

void install_thread_exit_hook() {
  if (pthread_key_create(&g_thread_key, thread_exit) == 0) g_key_ready.store(true, std::memory_order_release);
  if (tl_heap != &g_empty_heap && g_key_ready.load()) pthread_setspecific(g_thread_key, tl_heap);
}

void flush_live_bytes() {
  if (tl_live_delta != 0) flush_live_delta(g_page_heap);
}

}  // namespace llamalloc
