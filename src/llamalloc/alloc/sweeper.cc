// The sweeper: when the memory that idle threads and empty pages hold goes back (alloc/collect.cc says how).
//
// Rules, and why:
// - Once the process has a second thread heap, or other threads at all, a background thread (the sweeper) runs
//   a pass every LLAMALLOC_SWEEP_MS: the idle sweep of thread heaps and of the shared heap, the heaps of exited
//   threads, then the page heap's open pages that stayed empty and the free blocks of sparse pages (subrelease),
//   and the predictor's trim. Memory then falls after a peak even while the program makes no allocator call at
//   all (a server idle after its peak), which no pass on the slow paths could reach.
// - It is not started without the expedited membarrier (the sweep handshake needs it), nor with
//   LLAMALLOC_SWEEP_MS=0; idle threads then keep their spans.
// - It runs with every signal blocked: no process-directed signal is delivered to it (programs that sigwait in
//   one thread block them everywhere else), and no handler of the program runs on it. It ends when it is the
//   last thread left, so that a program whose main thread called pthread_exit is not kept alive by it.
// - The page cache (HeapConfig::page_cache_pages) absorbs waves of big buffers only while a sweeper started for
//   other threads runs: its passes are what give cached pages back. Until then each free keeps the cache within what a pass leaves after
//   a peak (HeapConfig::page_cache_bounded_by_use): no pass may follow the last free before the program goes
//   quiet.
// - Until it runs (a single-threaded program, a fork child before its second thread heap), the slow paths run
//   the page passes themselves, at most once per period (run_inline_passes), and look for other threads in the
//   process from time to time: a program that allocates in one thread while others never call malloc gets the
//   sweeper too. No thread is added to a process that has only one (fork() warnings and thread counts would see
//   it) until its heap's footprint reaches LLAMALLOC_SWEEPER_FROM_MIB: a big single-threaded heap then gets the
//   sweeper, because no pass may follow its last slow path before it goes quiet (frag-micro kept 1 GiB of
//   footprint for 5 MiB live through its quiet phase), and its slow paths stop walking cold spans to purge them
//   (60% of frag-micro's time).
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <time.h>

#include <atomic>

#include "alloc/runtime_internal.h"
#include "options.h"

namespace llamalloc {

__thread uint32_t tl_pass_countdown __attribute__((tls_model("initial-exec"))) = 0;

namespace {

// Started once the process has a second thread heap (and again in a fork child).
std::atomic<bool> g_sweeper_started{false};
// Whether it runs (started, and its thread was made).
std::atomic<bool> g_sweeper_running{false};
// When the slow paths last ran the page passes.
std::atomic<uint64_t> g_inline_pass_ns{0};

// When the slow paths last looked for other threads, and how many times they were due to (below).
std::atomic<uint64_t> g_threads_checked_ns{0};
std::atomic<uint64_t> g_thread_check_calls{0};
constexpr uint64_t kThreadCheckNs = 20'000'000;

void* sweeper_main(void*) {
  prctl(PR_SET_NAME, "llamalloc-sweep", 0, 0, 0);
  uint64_t ms = options().sweep_ms;
  // After a pass that saw the blocks in use drop, the next comes after a fifth of the period (Subrelease::
  // kDropBlocks): it is the first whose demand window holds only the program after the drop.
  uint64_t soon_ns = ms * 1'000'000 / 5;
  timespec soon{time_t(soon_ns / 1'000'000'000), long(soon_ns % 1'000'000'000)};
  bool dropped = false;
  // Between passes it looks at the live bytes every fifth of the period (two loads, no handshake): when they fell
  // by a quarter, and by kLiveFallBytes, from the most seen since the last pass, and the thread heaps took at most
  // kIdleSpansPerPoll spans from the page heap since the last look, the pass comes now instead of at the period's
  // end. A program that frees most of what it holds and goes idle (a cache trimmed after its peak) gets its spans
  // purged and its pages' holes given back within a fifth of the period instead of up to a period later: its RSS
  // stayed at the peak for 250-300 ms after hash-trimmed-cache's drop, a tenth of its 2 s quiet phase. Not while
  // it still allocates: message-broker's publishers go on after its subscribers catch up, and took back 5 MiB of
  // what such a pass gave back (its quiet phase 1.10x).
  constexpr int64_t kLiveFallBytes = int64_t(4) << 20;
  constexpr uint64_t kIdleSpansPerPoll = 16;
  const uint32_t polls_per_period = 5;
  int64_t live_high = 0, peak_at_pass = 0;
  uint64_t spans_seen = 0;
  uint32_t polls = 0;
  for (;;) {
    timespec left = soon;
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    int64_t live = g_page_heap.gauges().live_bytes.load(std::memory_order_relaxed);
    // A peak made and left between two looks is seen by the process's high-water mark, once it rose past the one
    // of the last pass (a program that fills and frees its heap within a fifth of the period).
    int64_t peak = g_page_heap.gauges().peak_live_bytes.load(std::memory_order_relaxed);
    if (peak > peak_at_pass && peak > live_high) live_high = peak;
    uint64_t spans = g_page_heap.counters().block_spans_handed_out.load(std::memory_order_relaxed);
    bool idle = spans - spans_seen <= kIdleSpansPerPoll;
    spans_seen = spans;
    if (live > live_high) live_high = live;
    bool fell = idle && live_high - live >= kLiveFallBytes && live_high - live >= live_high / 4;
    if (++polls < polls_per_period && !dropped && !fell) continue;
    polls = 0;
    // The process ends when its last thread does (glibc calls exit(0) then): a program whose main thread called
    // pthread_exit and whose other threads are gone must not be kept alive by this one, which blocks every signal
    // and so could not even be stopped by SIGTERM. Returning ends this thread the same way.
    if (last_thread_running()) return nullptr;
    // The slow paths the thread heaps ran since the last pass: few, with few blocks taken from the page heap, is
    // a quiet process, whose subrelease and span purge reach denser pages (Subrelease, "quiet").
    uint64_t slow_paths = 0, retaken_blocks = 0;
    sweep_idle_heaps(false, &slow_paths, &retaken_blocks);
    sweep_shared_heap(false, &slow_paths, &retaken_blocks);
    // And what other threads' frees have emptied in the heaps of exited threads, and the free pages of the spans
    // they keep parked for a thread that has not come.
    ThreadHeapOps::purge_pooled(g_page_heap, g_heap_pool, false);
    // Open huge pages that have stayed empty since the last pass (the sweep above often empties them), then the
    // free blocks of sparse pages that have had no block taken since (subrelease).
    g_page_heap.release_empty_open_pages(false);
    g_page_heap.subrelease_free_blocks(false, PageHeap::kDemandPasses, slow_paths <= Subrelease::kQuietSlowPaths,
                                       retaken_blocks);
    // A pass brought forward by a fall is followed by another a fifth of the period later: this one's period held
    // the load, so it was not quiet; the next one is, if the program stays idle, and reaches denser pages.
    dropped = g_page_heap.demand_dropped() || fell;
    g_page_heap.collapse_dense_pages(PageHeap::kCollapsePerPass);
    current_predictor()->trim();
    maybe_start_learning();
    live_high = g_page_heap.gauges().live_bytes.load(std::memory_order_relaxed);
    peak_at_pass = g_page_heap.gauges().peak_live_bytes.load(std::memory_order_relaxed);
  }
  return nullptr;
}

}  // namespace

void start_sweeper(bool threads) {
  if (g_sweeper_started.load(std::memory_order_relaxed)) return;
  if (options().sweep_ms == 0 || g_sweeper_started.exchange(true, std::memory_order_acq_rel)) return;
  if (!membarrier_ready()) return;  // stays "started": no second try
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t thread;
  // A small stack, unless the program's thread-local storage (which glibc puts on every thread's stack) does not
  // leave room in it: then the default size (only the pages it touches are memory).
  int err = pthread_attr_setstacksize(&attr, 256 * 1024) == 0 ? pthread_create(&thread, &attr, sweeper_main, nullptr)
                                                                : EINVAL;
  if (err == EINVAL) {
    pthread_attr_destroy(&attr);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = pthread_create(&thread, &attr, sweeper_main, nullptr);
  }
  if (err != 0) {
    write_stderr("llamalloc: warning: cannot start the sweeper thread; idle threads keep their spans\n");
  } else {
    g_sweeper_running.store(true, std::memory_order_relaxed);
    ThreadHeapOps::set_sweeper_running(true);
    // Waves of big buffers from several threads are absorbed between passes. Not for a single thread, which
    // frees and refills at once: each of its frees keeps the cache within what a pass leaves, as before the
    // sweeper (a program that fills memory up to its limit, frees it and measures VmData finds it gone).
    if (threads) g_page_heap.set_page_cache_pages(unsigned(options().page_cache_pages), false);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
}

void forget_sweeper_in_fork_child() {
  // The child starts its own sweeper when it makes a thread heap. The heaps of the parent's other threads stay
  // on the live list; that sweeper takes back their empty spans.
  g_sweeper_started.store(false, std::memory_order_relaxed);
  g_sweeper_running.store(false, std::memory_order_relaxed);
  ThreadHeapOps::set_sweeper_running(false);
  // What the parent had cached goes back; until the child starts its sweeper, its cache is bounded by use.
  g_page_heap.set_page_cache_pages(0);
  g_page_heap.set_page_cache_pages(unsigned(options().page_cache_pages), true);
}

void run_inline_passes() {
  uint64_t ms = options().sweep_ms;
  if (ms == 0 || g_sweeper_running.load(std::memory_order_relaxed)) return;
  uint64_t now = g_clock.now_ns();
  // Other threads in the process (a read of /proc/self/stat): looked for every kThreadCheckNs of slow paths, and
  // at the 4th, 16th, 64th ... of these calls, so that threads made at start are seen before a short first
  // peak is over. Not once the sweeper was started: then, until it runs or where membarrier is missing, no
  // shared counter is bumped.
  if (!g_sweeper_started.load(std::memory_order_relaxed)) {
    // A heap that reached SWEEPER_FROM_MIB gets the sweeper, which does these passes' work from now on.
    uint64_t from = options().sweeper_from_mib;
    if (from != 0 && g_page_heap.peak_footprint() >= from << 20) {
      start_sweeper(false);
      if (g_sweeper_running.load(std::memory_order_relaxed)) return;
    }
    uint64_t checked = g_threads_checked_ns.load(std::memory_order_relaxed);
    uint64_t call = g_thread_check_calls.fetch_add(1, std::memory_order_relaxed) + 1;
    bool power_of_4 = (call & (call - 1)) == 0 && (__builtin_ctzll(call) & 1) == 0;
    if ((power_of_4 || now - checked >= kThreadCheckNs) &&
        g_threads_checked_ns.compare_exchange_strong(checked, now, std::memory_order_relaxed) &&
        process_has_other_threads()) {
      start_sweeper();
      return;
    }
  }
  uint64_t last = g_inline_pass_ns.load(std::memory_order_relaxed);
  if (now - last < ms * 1'000'000 ||
      !g_inline_pass_ns.compare_exchange_strong(last, now, std::memory_order_relaxed))
    return;
  // What the sweeper does to every heap that was used in the period: the caller's empty spans (the ones its
  // queues allocate from included) and its span cache go back, so that the pages they keep can empty and the
  // passes below release them; otherwise a single-threaded program would keep, after its peak, an empty span per
  // queue it had used, on a page each.
  ThreadHeap* h = tl_heap;
  if (h != &g_empty_heap) {
    owner_enter(h);
    if (!sweep_requested(h)) {
      ThreadHeapOps::release_all(g_page_heap, *h);
      ThreadHeapOps::purge_sparse_spans(g_page_heap, *h, PurgeWhen::kIdleOrNotHead);
    }
    owner_exit(h);
  }
  ThreadHeapOps::purge_pooled(g_page_heap, g_heap_pool, false);
  g_page_heap.release_empty_open_pages(false);
  // Only this pass's demand: a pass comes only with a slow path, and none may follow the last one before the
  // program goes quiet.
  g_page_heap.subrelease_free_blocks(false, 1);
  // Fewer collapses than the sweeper's pass: this one runs on a thread of the program.
  g_page_heap.collapse_dense_pages(PageHeap::kCollapsePerPass / 4);
  current_predictor()->trim();
  maybe_start_learning();
}

}  // namespace llamalloc
