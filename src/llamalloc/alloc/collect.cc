// Giving memory back: the idle sweep of thread heaps and of the shared heap, and llamalloc_collect and
// malloc_trim, which do at once what the sweeper's passes do over time (alloc/sweeper.cc says when those run).
//
// Rules, and why:
// - A thread heap belongs to its thread: its owner works on it without locks or atomics. Another thread may
//   take a heap's empty spans only through the sweep handshake (thread_heap/thread_heap.h): it asks (h->sweep), runs
//   membarrier so that every running thread passes a full barrier, and sweeps the heap only if its owner is not
//   inside the allocator (h->busy). An owner that enters meanwhile sees the request and waits for it to end. A
//   heap that is busy is left for the next pass. Without the expedited membarrier no other thread's heap is
//   swept.
// - Only heaps that may have something to give are asked: those whose owner ran a slow path since the last
//   pass (it may have taken spans it no longer needs), those another thread's free brought a full span back to
//   (a notify pending), those holding a remote-free batch (blocks of another thread's span; release_all pushes
//   it), and every heap every 8 passes (frees into spans still on its queues). A heap that has
//   done nothing since it was swept has nothing to give.
// - A thread's prediction cache that has had no hit and its heap no slow path for about a second is dropped:
//   its pages are given back, and it reads as empty, so the thread's next allocations run the model again. In
//   a server idle after its peak it is about as much memory as the thread's objects.
// - The shared heap of long-lived classes takes no handshake: every operation on it holds its lock. Every free
//   into it is a remote free, so only a sweep (or an allocation of the same size class) takes them in.
// - Lock order: the shared heap's lock, the pool's, then the page heap's; the shared heap is never swept with
//   the pool's lock held (an allocation from it may take the pool's lock after its own).
#include <atomic>

#include "alloc/runtime_internal.h"
#include "options.h"
#include "stats.h"

namespace llamalloc {

namespace {
// How long a thread's prediction cache stays resident with neither a hit nor a slow path.
constexpr uint64_t kCacheIdleMs = 1000;
// Whether an idle heap is swept on its n-th idle pass in a row: 1, 2, 4, then every 8th.
bool sweep_due(uint32_t n) { return n % 8 == 0 || (n & (n - 1)) == 0; }
}  // namespace

uint32_t prediction_cache_idle_passes() {
  // (LLAMALLOC_SWEEP_MS=0: passes come only from llamalloc_collect and tests; count them as default periods.)
  uint64_t period_ms = options().sweep_ms != 0 ? options().sweep_ms : Options{}.sweep_ms;
  return uint32_t(1 + (kCacheIdleMs - 1) / period_ms);
}

unsigned sweep_idle_heaps(bool every_heap, uint64_t* slow_paths, uint64_t* retaken_blocks) {
  ThreadHeap* self = tl_heap;
  // The caller's own remote-free batch (the sweeper thread frees too), which no sweep of it pushes.
  if (self != &g_empty_heap && self->batch_span.load(std::memory_order_relaxed) != nullptr) {
    owner_enter(self);
    if (sweep_requested(self)) ThreadHeapOps::wait_for_sweep(*self);
    ThreadHeapOps::flush_remote_batch(*self);
    owner_exit(self);
  }
  LockGuard g(g_heap_pool.lock);
  const uint32_t cache_idle_passes = prediction_cache_idle_passes();
  unsigned requested = 0;
  for (ThreadHeap* h = g_live_heaps; h != nullptr; h = h->live_next) {
    if (h == self) continue;  // (the caller's own: llamalloc_collect takes it as its owner)
    uint32_t ops = h->slow_ops.load(std::memory_order_relaxed);
    bool changed = ops != h->seen_ops;
    uint32_t ran = ThreadHeapOps::program_slow_paths(*h, ops, h->seen_ops, retaken_blocks);
    if (slow_paths != nullptr) *slow_paths += ran;
    h->seen_ops = ops;
    h->idle_ticks = changed ? 0 : h->idle_ticks + 1;
    bool drop_cache = false;
    // (The owner attaches its cache without the handshake: LearnedPredictor::thread_cache publishes the entries
    // last, with release.)
    if (__atomic_load_n(&h->prediction_cache.entries, __ATOMIC_ACQUIRE) != nullptr) {
      uint64_t hits = h->prediction_cache.hits->load(std::memory_order_relaxed);
      bool used = changed || hits != h->seen_cache_hits;
      h->seen_cache_hits = hits;
      h->cache_idle_ticks = used ? 0 : h->cache_idle_ticks + 1;
      drop_cache = h->cache_idle_ticks == cache_idle_passes;
    }
    // An idle heap is swept on its 1st, 2nd and 4th idle passes (its idle spans' pages are purged within a
    // second or so of its last use, frees by other threads that went on meanwhile included) and every 8th after.
    if (!every_heap && !changed && !drop_cache && !sweep_due(h->idle_ticks) &&
        h->notify.load(std::memory_order_relaxed) == nullptr && h->batch_span.load(std::memory_order_relaxed) == nullptr)
      continue;
    h->sweep.store(1, kHandshakeStore);
    ++requested;
  }
  if (requested == 0) return 0;
  // Every thread that runs now passes a full barrier: an owner that had entered its heap is seen busy, and an
  // owner that enters from now on sees the request (and waits until it is withdrawn).
  bool fenced = membarrier_all_threads();
  // The remote-free batches of every heap taken first: a batch pushes into another heap's spans, which this
  // pass then takes in (their owners' frees all counted before their spans are looked at).
  if (fenced)
    for (ThreadHeap* h = g_live_heaps; h != nullptr; h = h->live_next)
      if (h->sweep.load(std::memory_order_relaxed) != 0 && h->busy.load(kHandshakeLoad) == 0)
        ThreadHeapOps::flush_remote_batch(*h);
  unsigned swept = 0;
  for (ThreadHeap* h = g_live_heaps; h != nullptr; h = h->live_next) {
    if (h->sweep.load(std::memory_order_relaxed) == 0) continue;
    if (fenced && h->busy.load(kHandshakeLoad) == 0) {
      ThreadHeapOps::release_all(g_page_heap, *h);
      PurgeResult purge =
          ThreadHeapOps::purge_sparse_spans(g_page_heap, *h, every_heap ? PurgeWhen::kAll : PurgeWhen::kIdle);
      // Frees by other threads went on into its sparse spans since the last look (a cache being trimmed by
      // another thread): look again at the next pass, whatever its idle count.
      if (purge.waiting != 0) h->idle_ticks = 0;
      // (The owner, outside the allocator, waits for the sweep before it next probes or fills its cache.)
      if (__atomic_load_n(&h->prediction_cache.entries, __ATOMIC_ACQUIRE) != nullptr &&
          h->cache_idle_ticks == cache_idle_passes && current_predictor()->drop_thread_cache(h->prediction_cache))
        g_page_heap.counters().prediction_caches_dropped.fetch_add(1, std::memory_order_relaxed);
      ++swept;
    } else {
      h->seen_ops = ~h->seen_ops;  // inside the allocator now: again at the next pass
    }
    h->sweep.store(0, std::memory_order_release);
  }
  g_page_heap.counters().idle_heap_sweeps.fetch_add(swept, std::memory_order_relaxed);
  return swept;
}

namespace {
void sweep_locked_heap(ThreadHeap* h, bool always, uint64_t* slow_paths, uint64_t* retaken_blocks) {
  if (h == nullptr) return;
  LockGuard g(g_page_heap.shared_lock());
  uint32_t ops = h->slow_ops.load(std::memory_order_relaxed);
  bool changed = ops != h->seen_ops;
  uint32_t ran = ThreadHeapOps::program_slow_paths(*h, ops, h->seen_ops, retaken_blocks);
  if (slow_paths != nullptr) *slow_paths += ran;
  h->seen_ops = ops;
  h->idle_ticks = changed ? 0 : h->idle_ticks + 1;
  if (!always && !changed && !sweep_due(h->idle_ticks) && h->notify.load(std::memory_order_relaxed) == nullptr)
    return;
  ThreadHeapOps::release_all(g_page_heap, *h);
  if (ThreadHeapOps::purge_sparse_spans(g_page_heap, *h, always ? PurgeWhen::kAll : PurgeWhen::kIdle).waiting != 0)
    h->idle_ticks = 0;
  g_page_heap.counters().idle_heap_sweeps.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

void sweep_shared_heap(bool always, uint64_t* slow_paths, uint64_t* retaken_blocks) {
  sweep_locked_heap(g_page_heap.shared_heap(), always, slow_paths, retaken_blocks);
  sweep_locked_heap(g_page_heap.sampled_heap(), always, slow_paths, retaken_blocks);
}

void heap_collect() {
  ThreadHeap* h = tl_heap;
  // Every other thread that is not inside the allocator now (idle or not; they take spans again when they next
  // need them) first: their remote-free batches go into the spans of this one too.
  sweep_idle_heaps(true);
  if (h != &g_empty_heap) {
    flush_live_bytes();
    // Its remote frees taken in, its empty spans (the ones it allocates from included) and its span cache given
    // back; spans that still hold objects stay with the thread.
    owner_enter(h);
    if (sweep_requested(h)) ThreadHeapOps::wait_for_sweep(*h);
    ThreadHeapOps::release_all(g_page_heap, *h);
    ThreadHeapOps::purge_sparse_spans(g_page_heap, *h, PurgeWhen::kAll);
    owner_exit(h);
  }
  // And what frees into exited threads' spans have emptied.
  sweep_shared_heap(true);
  ThreadHeapOps::purge_pooled(g_page_heap, g_heap_pool, true);
  g_page_heap.release_empty_open_pages(true);
  g_page_heap.subrelease_free_blocks(true);
}

bool heap_trim() {
  Counters& k = g_page_heap.counters();
  auto given_back = [&k] {
    return k.huge_pages_released.load(std::memory_order_relaxed) + k.blocks_subreleased.load(std::memory_order_relaxed);
  };
  uint64_t before = given_back();
  heap_collect();
  return given_back() != before;
}

}  // namespace llamalloc
