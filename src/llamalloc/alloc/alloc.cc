#include "alloc/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "alloc/heap_config.h"
#include "alloc/realloc_rule.h"
#include "options.h"
#include "stats.h"

namespace llamalloc {

namespace {
constinit LinuxPlatform g_platform;
constinit MonotonicClock g_clock;
constinit DefaultPredictor g_default_predictor(0);
Predictor* g_predictor_ptr = &g_default_predictor;
bool g_every_allocation = false;
pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
pthread_key_t g_thread_key;
std::atomic<bool> g_key_ready{false};

// Thread heaps come from metadata pages (never from malloc) and are reused after their thread exits.
constinit HeapPool g_heap_pool;      // heaps of exited threads (its own lock, taken before the global one)
char* g_heap_chunk = nullptr;       // global lock
size_t g_heap_chunk_left = 0;       // global lock
constexpr size_t kHeapChunkBytes = 64 * 1024;
// How long a thread's prediction cache stays resident with neither a hit nor a slow path (sweep_idle_heaps).
constexpr uint64_t kCacheIdleMs = 1000;

// Small objects of long-lived classes, for every thread (HeapConfig::shared_class_min; g_global.shared_lock()).
constinit LocalHeap g_shared_heap;
// LLAMALLOC_SHARED_CLASS names a class below the last: the shared heap is used once a second thread heap exists.
bool g_share_long_lived = false;

// Heaps of live threads, for the idle sweep (g_heap_pool.lock). A heap is on it from its creation or adoption
// until its thread's exit hook runs.
LocalHeap* g_live_heaps = nullptr;
unsigned g_live_count = 0;
// The sweeper thread: started once the process has a second thread heap (and again in a fork child).
std::atomic<bool> g_sweeper_started{false};
// Whether it runs. Until it does (a single-threaded program, or a fork child before its second thread heap), the
// slow path runs the sweeper's page passes itself, at most once per LLAMALLOC_SWEEP_MS (maybe_pass_inline).
std::atomic<bool> g_sweeper_running{false};
std::atomic<uint64_t> g_inline_pass_ns{0};

}  // namespace

constinit GlobalAllocator g_global(g_platform, g_clock, HeapConfig{});

}  // namespace llamalloc

// The learned predictor (a later part) defines this; without it LLAMALLOC_MODEL cannot be honoured.
extern "C" __attribute__((weak)) llamalloc::Predictor* llamalloc_make_model_predictor(const char* model_path);

namespace llamalloc {

namespace {

void maybe_pass_inline();  // (below)

void init_once() {
  LocalAllocator::set_pool(&g_heap_pool);
  LocalAllocator::set_slow_free_hook(maybe_pass_inline);
  init_options();
  const Options& o = options();
  unsigned default_class = default_class_of(o);
  HeapConfig config = heap_config_of(o);
  unsigned shared_from = config.shared_class_min;
  g_global.configure(config);
  g_platform.set_huge_pages(o.huge_pages != 0);
  g_share_long_lived = shared_from < g_global.num_classes();  // (from the second thread heap on: thread_heap)
  g_default_predictor.set_class(default_class);
  if (o.model != nullptr && *o.model) {
    Predictor* model = llamalloc_make_model_predictor ? llamalloc_make_model_predictor(o.model) : nullptr;
    if (model != nullptr) g_predictor_ptr = model;
    else if (!llamalloc_make_model_predictor)  // (the predictor has said what is wrong with the file)
      write_stderr("llamalloc: warning: LLAMALLOC_MODEL is set but no learned predictor could load it; "
                      "using the default class\n");
  }
  g_every_allocation = g_predictor_ptr->consult() == Consult::kEveryAllocation;
}

unsigned clamp_class(unsigned lc) {
  return lc < g_global.num_classes() ? lc : g_global.num_classes() - 1;
}

// g_heap_pool.lock held.
void register_live(LocalHeap* h) {
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
void unregister_live(LocalHeap* h) {
  if (h->live_prev != nullptr) h->live_prev->live_next = h->live_next;
  else g_live_heaps = h->live_next;
  if (h->live_next != nullptr) h->live_next->live_prev = h->live_prev;
  h->live_next = h->live_prev = nullptr;
  --g_live_count;
}

// *second: the process now has more than one live thread heap.
LocalHeap* new_local_heap(bool* second) {
  {
    // A pooled heap is adopted as it is: its queues and cache are empty (abandon), and the spans that still
    // hold objects come back through its notify list as they are freed into.
    LockGuard g(g_heap_pool.lock);
    if (LocalHeap* h = g_heap_pool.head) {
      g_heap_pool.head = h->next_free;
      h->next_free = nullptr;
      h->prediction_cache = PredictionCacheView{};
      h->abandoned.store(0, std::memory_order_relaxed);
      register_live(h);
      *second = g_live_count >= 2;
      return h;
    }
  }
  LocalHeap* h;
  {
    LockGuard g(g_global.lock());
    if (g_heap_chunk_left < sizeof(LocalHeap)) {
      g_heap_chunk = static_cast<char*>(g_platform.map_metadata(kHeapChunkBytes));
      if (g_heap_chunk == nullptr) return nullptr;
      g_heap_chunk_left = kHeapChunkBytes;
    }
    h = reinterpret_cast<LocalHeap*>(g_heap_chunk);
    g_heap_chunk += (sizeof(LocalHeap) + 63) & ~size_t{63};
    g_heap_chunk_left -= (sizeof(LocalHeap) + 63) & ~size_t{63};
    new (h) LocalHeap();
  }
  LockGuard g(g_heap_pool.lock);
  register_live(h);
  *second = g_live_count >= 2;
  return h;
}

// The process-private expedited membarrier (Linux 4.14), registered once (a fork child inherits it). Without it
// no heap but the caller's is ever swept.
std::atomic<int> g_membarrier{0};  // 0: not tried, 1: registered, -1: unavailable
bool membarrier_ready() {
  int state = g_membarrier.load(std::memory_order_acquire);
  if (state == 0) {
    state = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
    g_membarrier.store(state, std::memory_order_release);
  }
  return state == 1;
}
bool membarrier_all_threads() {
  return membarrier_ready() && syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

// The shared heap of long-lived classes: swept as a thread heap is (`always`: now). Every free into it is a
// remote free, so only a sweep (or an allocation of the same size class) takes them in. Every operation on it
// holds its lock, so no handshake is needed. Takes its lock, then the global one: never with the pool's lock held
// (an allocation from it may take the pool's lock after its own).
void sweep_shared_heap(bool always) {
  LocalHeap* h = g_global.shared_heap();
  if (h == nullptr) return;
  LockGuard g(g_global.shared_lock());
  uint32_t ops = h->slow_ops.load(std::memory_order_relaxed);
  bool changed = ops != h->seen_ops;
  h->seen_ops = ops;
  h->idle_ticks = changed ? 0 : h->idle_ticks + 1;
  if (!always && !changed && h->idle_ticks % 8 != 0 && h->notify.load(std::memory_order_relaxed) == nullptr) return;
  LocalAllocator::release_all(g_global, *h);
  g_global.counters().idle_heap_sweeps.fetch_add(1, std::memory_order_relaxed);
}

void* sweeper_main(void*) {
  prctl(PR_SET_NAME, "llamalloc-sweep", 0, 0, 0);
  uint64_t ms = options().sweep_ms;
  timespec period{time_t(ms / 1000), long(ms % 1000) * 1'000'000};
  for (;;) {
    timespec left = period;
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    // The process ends when its last thread does (glibc calls exit(0) then): a program whose main thread called
    // pthread_exit and whose other threads are gone must not be kept alive by this one, which blocks every signal
    // and so could not even be stopped by SIGTERM. Returning ends this thread the same way.
    if (last_thread_running()) return nullptr;
    sweep_idle_heaps();
    sweep_shared_heap(false);
    // And what other threads' frees have emptied in the heaps of exited threads.
    LocalAllocator::reclaim_abandoned(g_global, g_heap_pool);
    // Open huge pages that have stayed empty since the last pass (the sweep above often empties them), then the
    // free blocks of sparse pages that have had no block taken since (subrelease).
    g_global.release_empty_open_pages(false);
    g_global.subrelease_free_blocks(false);
    g_predictor_ptr->trim();
  }
  return nullptr;
}

// Starts the sweeper thread unless LLAMALLOC_SWEEP_MS is 0 or the kernel has no expedited membarrier (then idle
// threads keep their spans, as before). Called with no lock held, from the slow path that made a second heap.
void start_sweeper() {
  if (options().sweep_ms == 0 || g_sweeper_started.exchange(true, std::memory_order_acq_rel)) return;
  if (!membarrier_ready()) return;  // stays "started": no second try
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  // Every signal blocked, so that no process-directed signal is delivered to it (programs that sigwait in one
  // thread block them everywhere else) and no handler of the program runs on it.
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
    LocalAllocator::set_sweeper_running(true);
    // Its passes give cached pages back: the page cache only while it runs (a program without one, or idle,
    // would keep freed huge objects' memory until its next slow path).
    g_global.set_page_cache_pages(unsigned(options().page_cache_pages));
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
}

void thread_exit(void* arg) {
  LocalHeap* h = static_cast<LocalHeap*>(arg);
  {
    // Off the sweeper's list first (a sweep of it in progress ends before this lock is had).
    LockGuard g(g_heap_pool.lock);
    unregister_live(h);
  }
  LocalAllocator::abandon(g_global, *h);
  flush_live_bytes();
  if (tl_heap == h) tl_heap = &g_empty_heap;
  LockGuard g(g_heap_pool.lock);
  h->next_free = g_heap_pool.head;
  g_heap_pool.head = h;
}

LocalHeap* thread_heap() {
  LocalHeap* h = tl_heap;
  if (LLAMALLOC_LIKELY(h != &g_empty_heap)) return h;
  ensure_init();
  bool second = false;
  h = new_local_heap(&second);
  if (h == nullptr) return nullptr;
  h->fast_class = g_every_allocation ? uint8_t(kMaxClasses) : uint8_t(clamp_class(g_predictor_ptr->predict({0, 0, 0})));
  tl_heap = h;
  // Registers the thread-exit hook; keys below PTHREAD_KEY_2NDLEVEL_SIZE never allocate.
  if (g_key_ready.load(std::memory_order_acquire)) pthread_setspecific(g_thread_key, h);
  if (second && g_share_long_lived && g_global.shared_heap() == nullptr) g_global.set_shared_heap(&g_shared_heap);
  if (second && !g_sweeper_started.load(std::memory_order_relaxed)) start_sweeper();
  return h;
}

// Lock order: the shared heap's, the heap pool's, then the global one.
void prepare_fork() {
  g_global.shared_lock().lock();
  g_heap_pool.lock.lock();
  g_global.lock().lock();
}
void parent_after_fork() {
  g_global.lock().unlock();
  g_heap_pool.lock.unlock();
  g_global.shared_lock().unlock();
}
void child_after_fork() {
  g_global.lock().reset_after_fork();
  g_heap_pool.lock.reset_after_fork();
  g_global.shared_lock().reset_after_fork();
  // The sweeper thread is not copied: the child starts its own when it makes a thread heap. The heaps of the
  // parent's other threads stay on the live list; the sweeper takes back their empty spans.
  g_sweeper_started.store(false, std::memory_order_relaxed);
  g_sweeper_running.store(false, std::memory_order_relaxed);
  LocalAllocator::set_sweeper_running(false);
  // Nor are its passes: no page cache until the child starts one (this gives back what the parent had cached).
  g_global.set_page_cache_pages(0);
}

}  // namespace

void ensure_init() { pthread_once(&g_init_once, init_once); }
void set_predictor(Predictor* p) {
  ensure_init();
  g_predictor_ptr = p;
  g_every_allocation = p->consult() == Consult::kEveryAllocation;
  // Threads pick this up at their next slow path; the calling thread at once.
  LocalHeap* h = tl_heap;
  if (h != &g_empty_heap) h->fast_class = g_every_allocation ? kMaxClasses : uint8_t(clamp_class(p->predict({0, 0, 0})));
}
Predictor* predictor() { return g_predictor_ptr; }

void flush_live_bytes() {
  if (tl_live_delta != 0) flush_live_delta(g_global);
}

void heap_collect() {
  LocalHeap* h = tl_heap;
  if (h != &g_empty_heap) {
    flush_live_bytes();
    // Its remote frees taken in, its empty spans (the ones it allocates from included) and its span cache given
    // back; spans that still hold objects stay with the thread.
    owner_enter(h);
    if (sweep_requested(h)) LocalAllocator::wait_for_sweep(*h);
    LocalAllocator::release_all(g_global, *h);
    owner_exit(h);
  }
  // The same for every other thread that is not inside the allocator now (idle or not; they take spans again
  // when they next need them), and what frees into exited threads' spans have emptied.
  sweep_idle_heaps(true);
  sweep_shared_heap(true);
  LocalAllocator::reclaim_abandoned(g_global, g_heap_pool, true);
  g_global.release_empty_open_pages(true);
  g_global.subrelease_free_blocks(true);
}

bool heap_trim() {
  Counters& k = g_global.counters();
  auto given_back = [&k] {
    return k.huge_pages_released.load(std::memory_order_relaxed) + k.blocks_subreleased.load(std::memory_order_relaxed);
  };
  uint64_t before = given_back();
  heap_collect();
  return given_back() != before;
}

uint32_t prediction_cache_idle_passes() {
  // (LLAMALLOC_SWEEP_MS=0: passes come only from llamalloc_collect and tests; count them as default periods.)
  uint64_t period_ms = options().sweep_ms != 0 ? options().sweep_ms : Options{}.sweep_ms;
  return uint32_t(1 + (kCacheIdleMs - 1) / period_ms);
}

unsigned sweep_idle_heaps(bool every_heap) {
  LocalHeap* self = tl_heap;
  LockGuard g(g_heap_pool.lock);
  // A heap is swept when its owner has run a slow path since the last pass (it may have taken spans it no longer
  // needs), when another thread's free has brought back one of its full spans, and every 8 passes (frees into
  // spans still on its queues); a heap that has done nothing since it was swept has nothing to give.
  // A thread's prediction cache that has had no hit and its heap no slow path for about a second is dropped
  // (its pages given back; it reads as empty, so the thread's next allocations run the model again): 32 KiB a
  // thread, which in a server idle after its peak is about as much as its objects.
  const uint32_t cache_idle_passes = prediction_cache_idle_passes();
  unsigned requested = 0;
  for (LocalHeap* h = g_live_heaps; h != nullptr; h = h->live_next) {
    if (h == self) continue;  // (the caller's own: llamalloc_collect takes it as its owner)
    uint32_t ops = h->slow_ops.load(std::memory_order_relaxed);
    bool changed = ops != h->seen_ops;
    h->seen_ops = ops;
    h->idle_ticks = changed ? 0 : h->idle_ticks + 1;
    bool drop_cache = false;
    if (h->prediction_cache.entries != nullptr) {
      uint64_t hits = h->prediction_cache.hits->load(std::memory_order_relaxed);
      bool used = changed || hits != h->seen_cache_hits;
      h->seen_cache_hits = hits;
      h->cache_idle_ticks = used ? 0 : h->cache_idle_ticks + 1;
      drop_cache = h->cache_idle_ticks == cache_idle_passes;
    }
    if (!every_heap && !changed && !drop_cache && h->idle_ticks % 8 != 0 &&
        h->notify.load(std::memory_order_relaxed) == nullptr)
      continue;
    h->sweep.store(1, kHandshakeStore);
    ++requested;
  }
  if (requested == 0) return 0;
  // Every thread that runs now passes a full barrier: an owner that had entered its heap is seen busy, and an
  // owner that enters from now on sees the request (and waits until it is withdrawn).
  bool fenced = membarrier_all_threads();
  unsigned swept = 0;
  for (LocalHeap* h = g_live_heaps; h != nullptr; h = h->live_next) {
    if (h->sweep.load(std::memory_order_relaxed) == 0) continue;
    if (fenced && h->busy.load(kHandshakeLoad) == 0) {
      LocalAllocator::release_all(g_global, *h);
      // (The owner, outside the allocator, waits for the sweep before it next probes or fills its cache.)
      if (h->prediction_cache.entries != nullptr && h->cache_idle_ticks == cache_idle_passes &&
          g_predictor_ptr->drop_thread_cache(h->prediction_cache))
        g_global.counters().prediction_caches_dropped.fetch_add(1, std::memory_order_relaxed);
      ++swept;
    } else {
      h->seen_ops = ~h->seen_ops;  // inside the allocator now: again at the next pass
    }
    h->sweep.store(0, std::memory_order_release);
  }
  g_global.counters().idle_heap_sweeps.fetch_add(swept, std::memory_order_relaxed);
  return swept;
}

void check_heap() {
  g_global.check_invariants();
  LocalHeap* h = tl_heap;
  owner_enter(h);
  if (h != &g_empty_heap && sweep_requested(h)) LocalAllocator::wait_for_sweep(*h);
  LLAMALLOC_CHECK(h->check(g_global), "invariant: thread-local heap inconsistent");
  owner_exit(h);
}

namespace {
void* malloc_slow_entered(LocalHeap* h, size_t size, size_t alignment, unsigned lc, uintptr_t return_address,
                          uintptr_t stack_address) {
  if (tl_live_delta > kLiveFlushBytes || tl_live_delta < -kLiveFlushBytes) flush_live_bytes();
  if (lc == kPredictClass) {
    AllocationContext context{return_address, stack_address, size};
    // The prediction runs outside the owner's handshake: a model run may allocate (a signal handler during
    // it, or the unwinder's first use), and that nested allocation's owner_exit must not end this one's.
    owner_exit(h);
    lc = clamp_class(g_predictor_ptr->predict(context));
    owner_enter(h);
    if (LLAMALLOC_UNLIKELY(sweep_requested(h))) LocalAllocator::wait_for_sweep(*h);
    h->fast_class = g_every_allocation ? uint8_t(kMaxClasses) : uint8_t(lc);
    // The first prediction of a thread with a cached predictor hands its cache to the fast path.
    if (g_every_allocation && h->prediction_cache.entries == nullptr) g_predictor_ptr->thread_cache(&h->prediction_cache);
  } else {
    lc = clamp_class(lc);
  }
  void* p = LocalAllocator::allocate(g_global, *h, lc, size, alignment);
  debug_check_heap();
  return p;
}
}  // namespace

namespace {
// Whether the process has a thread besides the caller: num_threads, field 20 of /proc/self/stat (after the
// command name in parentheses, which may itself hold spaces and parentheses). Without malloc; errno kept.
bool process_has_other_threads() {
  int saved_errno = errno;
  char buf[1024];
  ssize_t n = -1;
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
  }
  errno = saved_errno;
  if (n <= 0) return false;
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  int field = 2;  // the command name's
  for (; *p != 0 && field < 20; ++p)
    if (*p == ' ') ++field;
  long threads = 0;
  for (; *p >= '0' && *p <= '9'; ++p) threads = threads * 10 + (*p - '0');
  return threads > 1;
}

// Without a sweeper thread, the page passes of its loop (empty open pages, subrelease) run here, from a slow
// path, once per period: a single-threaded server's memory falls after a peak as a threaded one's does.
__thread uint32_t tl_pass_countdown __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint64_t> g_threads_checked_ns{0};
std::atomic<uint64_t> g_thread_check_calls{0};
constexpr uint64_t kThreadCheckNs = 20'000'000;
void maybe_pass_inline() {
  // The clock is read on every 4th slow path of a thread only: a program whose fast path missed on every
  // allocation (a window of live objects that filled its span exactly) spent 15% of its time reading it.
  if (tl_pass_countdown-- != 0) return;
  tl_pass_countdown = 3;
  uint64_t ms = options().sweep_ms;
  if (ms == 0 || g_sweeper_running.load(std::memory_order_relaxed)) return;
  uint64_t now = g_clock.now_ns();
  // A program that allocates in one thread but has others (redis: its bio threads never call malloc) gets the
  // sweeper thread too: it adds no thread to a single-threaded process (which fork() warnings and thread counts
  // would see), and its passes run when the program makes no allocator call at all (a server idle after its
  // peak, which the passes below, on slow paths only, never reach: redis at small scale kept 18 MiB through its
  // quiet phase, 10 MiB as soon as it served a few requests). Looked at (a read of /proc/self/stat, about
  // 10 us) every 20 ms of slow paths, and at the 4th, 16th, 64th ... of these calls, so that threads made at
  // start are seen before a short first peak is over.
  // (Not once it was started: then, until it runs or where membarrier is missing, no shared counter is bumped.)
  if (!g_sweeper_started.load(std::memory_order_relaxed)) {
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
  // passes below release them. (Without it a single-threaded program kept, after its peak, an empty span per
  // queue it had used, on a page each: frag-micro with a model, pages of classes 1 and 2 holding only those.)
  LocalHeap* h = tl_heap;
  if (h != &g_empty_heap) {
    owner_enter(h);
    if (!sweep_requested(h)) LocalAllocator::release_all(g_global, *h);
    owner_exit(h);
  }
  g_global.release_empty_open_pages(false);
  g_global.subrelease_free_blocks(false);
  g_predictor_ptr->trim();
}
}  // namespace

void* malloc_slow(size_t size, size_t alignment, unsigned lc, uintptr_t return_address, uintptr_t stack_address) {
  if (stack_address == 0) stack_address = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  LocalHeap* h = thread_heap();
  if (h == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  owner_enter(h);
  if (LLAMALLOC_UNLIKELY(sweep_requested(h))) LocalAllocator::wait_for_sweep(*h);
  owner_count_slow(h);
  void* p = malloc_slow_entered(h, size, alignment, lc, return_address, stack_address);
  owner_exit(h);
  if (LLAMALLOC_LIKELY(p != nullptr)) maybe_pass_inline();  // (not after a failure, which must keep its errno)
  return p;
}

void free_slow(void* p) {
  if (p == nullptr) return;
  LocalAllocator::deallocate(g_global, tl_heap, p);
  if (tl_live_delta > kLiveFlushBytes || tl_live_delta < -kLiveFlushBytes) flush_live_bytes();
  debug_check_heap();
  maybe_pass_inline();
}

void* heap_malloc_class(size_t size, unsigned lifetime_class) {
  LocalHeap* h = tl_heap;
  lifetime_class = lifetime_class < kMaxClasses ? lifetime_class : kMaxClasses - 1;
  if (size <= kSmallMaxBytes && h != &g_empty_heap && lifetime_class < g_global.num_classes()) {
    owner_enter(h);
    if (!sweep_requested(h)) {
      SmallSpan* s = h->spans[lifetime_class][size_class_of(size)];
      if (void* p = span_pop(s)) {
        tl_live_delta += int64_t(s->block_size);
        debug_check_heap();
        owner_exit(h);
        return p;
      }
    }
    owner_exit(h);
  }
  return malloc_slow(size, kMinAlignBytes, lifetime_class, 0);
}

void* heap_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  void* p = heap_malloc(total);
  // A huge object on fresh huge pages needs no memset: the kernel zeroed them. One on pages from the page
  // cache (HeapConfig::page_cache_pages) does.
  if (p != nullptr && (total <= kHugePageBytes || g_global.huge_object_recycled(p))) memset(p, 0, total);
  return p;
}

size_t heap_usable_size(const void* p) {
  if (p == nullptr) return 0;
  if (SmallSpan* s = LocalAllocator::span_of(g_global, p)) return LocalAllocator::usable_size(s);
  return g_global.large_usable_size(p);
}

void* heap_realloc(void* p, size_t size) {
  if (p == nullptr) return heap_malloc(size);
  if (size == 0) {
    heap_free(p);
    return nullptr;
  }
  size_t usable;
  if (SmallSpan* s = LocalAllocator::span_of(g_global, p)) {
    LocalHeap* h = tl_heap;
    bool own = s->owner == h;  // then its lists are read while no sweeper works on them
    if (own) {
      owner_enter(h);
      if (sweep_requested(h)) LocalAllocator::wait_for_sweep(*h);
    }
    LocalAllocator::check_live(s, p, "realloc of");
    if (own) owner_exit(h);
    usable = LocalAllocator::usable_size(s);
    if (realloc_keeps_small(usable, s->size_class, size)) return p;  // alloc/realloc_rule.h
  } else {
    if (!g_global.owns(p)) fatal_pointer("realloc of", p, "pointer not allocated by llamalloc");
    usable = g_global.large_usable_size(p);
    if (usable == 0) fatal_pointer("realloc of", p, "pointer not the start of a live object");
    if (realloc_keeps_large(usable, size)) return p;
  }
  void* q = heap_malloc(size);
  if (q == nullptr) return nullptr;  // the old object stays valid (C semantics)
  memcpy(q, p, size < usable ? size : usable);
  heap_free(p);
  return q;
}

void* heap_reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return heap_realloc(p, total);
}

void* heap_memalign(size_t alignment, size_t size) {
  if (alignment <= kMinAlignBytes) return heap_malloc(size);
  if ((alignment & (alignment - 1)) != 0) {
    // glibc's memalign rounds a non-power-of-two alignment up.
    size_t a = kMinAlignBytes;
    while (a < alignment && a != 0) a <<= 1;
    if (a == 0) {
      errno = EINVAL;
      return nullptr;
    }
    alignment = a;
  }
  return malloc_slow(size, alignment, kPredictClass, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

int heap_posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  int saved = errno;
  void* p = heap_memalign(alignment, size);
  if (p == nullptr) {
    errno = saved;
    return ENOMEM;
  }
  *out = p;
  return 0;
}

void* heap_aligned_alloc(size_t alignment, size_t size) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  return heap_memalign(alignment, size);
}

void* heap_valloc(size_t size) { return heap_memalign(kSmallPageBytes, size); }

void* heap_pvalloc(size_t size) {
  size_t rounded = (size + kSmallPageBytes - 1) & ~(kSmallPageBytes - 1);
  if (rounded < size) {
    errno = ENOMEM;
    return nullptr;
  }
  return heap_memalign(kSmallPageBytes, rounded == 0 ? kSmallPageBytes : rounded);
}

void* heap_new_nothrow(size_t size) noexcept { return heap_malloc(size); }
void* heap_new_aligned_nothrow(size_t size, size_t alignment) noexcept { return heap_memalign(alignment, size); }

}  // namespace llamalloc

// Library start and end: runs before main (after anything that malloc'ed during loading) and at exit.
__attribute__((constructor)) static void llamalloc_start() {
  using namespace llamalloc;
  ensure_init();
  if (pthread_key_create(&g_thread_key, thread_exit) == 0) g_key_ready.store(true, std::memory_order_release);
  if (tl_heap != &g_empty_heap && g_key_ready.load()) pthread_setspecific(g_thread_key, tl_heap);
  // Forked children inherit the heap: hold the global lock across fork() so it is consistent in the child.
  pthread_atfork(prepare_fork, parent_after_fork, child_after_fork);
  install_stats_hooks();
}

__attribute__((destructor)) static void llamalloc_finish() {
  using namespace llamalloc;
  // The main thread never passes through thread_exit: hand its spans back now, as every other thread's were, so
  // that huge pages held only by its cached (empty) spans are free in the statistics. Its heap stays usable for
  // destructors that run after this one.
  if (LocalHeap* h = tl_heap; h != &g_empty_heap) {
    owner_enter(h);
    if (sweep_requested(h)) LocalAllocator::wait_for_sweep(*h);
    LocalAllocator::release_all(g_global, *h);
    owner_exit(h);
  }
  // And what frees by the threads still running have emptied in the heaps of exited ones and the shared heap.
  LocalAllocator::reclaim_abandoned(g_global, g_heap_pool, true);
  sweep_shared_heap(true);
  // No page cache from here on: what the teardown frees goes back at once.
  g_global.set_page_cache_pages(0);
  flush_live_bytes();
  const char* path = options().stats;
  if (path != nullptr && *path) {
    g_predictor_ptr->report(g_global.counters());
    if (!write_stats_file(g_global, path)) {
      write_stderr("llamalloc: warning: cannot write the statistics file LLAMALLOC_STATS=");
      write_stderr(path);
      write_stderr("\n");
    }
  }
}
