#include "alloc/alloc.h"

#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <new>

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

}  // namespace

constinit GlobalAllocator g_global(g_platform, g_clock, HeapConfig{});

}  // namespace llamalloc

// The learned predictor (a later part) defines this; without it LLAMALLOC_MODEL cannot be honoured.
extern "C" __attribute__((weak)) llamalloc::Predictor* llamalloc_make_model_predictor(const char* model_path);

namespace llamalloc {

namespace {

void init_once() {
  LocalAllocator::set_pool(&g_heap_pool);
  init_options();
  const Options& o = options();
  g_global.configure(HeapConfig{unsigned(o.classes), unsigned(o.deadline_k), o.early_line_recycling != 0,
                                o.same_class_recycling != 0, unsigned(o.small_heap_pages)});
  unsigned default_class = unsigned(o.default_class);
  if (default_class >= g_global.num_classes()) default_class = g_global.num_classes() - 1;
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

LocalHeap* new_local_heap() {
  {
    // A pooled heap is adopted as it is: its queues and cache are empty (abandon), and the spans that still
    // hold objects come back through its notify list as they are freed into.
    LockGuard g(g_heap_pool.lock);
    if (LocalHeap* h = g_heap_pool.head) {
      g_heap_pool.head = h->next_free;
      h->next_free = nullptr;
      h->prediction_cache = PredictionCacheView{};
      h->abandoned.store(0, std::memory_order_relaxed);
      return h;
    }
  }
  LockGuard g(g_global.lock());
  if (g_heap_chunk_left < sizeof(LocalHeap)) {
    g_heap_chunk = static_cast<char*>(g_platform.map_metadata(kHeapChunkBytes));
    if (g_heap_chunk == nullptr) return nullptr;
    g_heap_chunk_left = kHeapChunkBytes;
  }
  LocalHeap* h = reinterpret_cast<LocalHeap*>(g_heap_chunk);
  g_heap_chunk += (sizeof(LocalHeap) + 63) & ~size_t{63};
  g_heap_chunk_left -= (sizeof(LocalHeap) + 63) & ~size_t{63};
  new (h) LocalHeap();
  return h;
}

void thread_exit(void* arg) {
  LocalHeap* h = static_cast<LocalHeap*>(arg);
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
  h = new_local_heap();
  if (h == nullptr) return nullptr;
  h->fast_class = g_every_allocation ? uint8_t(kMaxClasses) : uint8_t(clamp_class(g_predictor_ptr->predict({0, 0, 0})));
  tl_heap = h;
  // Registers the thread-exit hook; keys below PTHREAD_KEY_2NDLEVEL_SIZE never allocate.
  if (g_key_ready.load(std::memory_order_acquire)) pthread_setspecific(g_thread_key, h);
  return h;
}

// Lock order: the heap pool's, then the global one.
void prepare_fork() {
  g_heap_pool.lock.lock();
  g_global.lock().lock();
}
void parent_after_fork() {
  g_global.lock().unlock();
  g_heap_pool.lock.unlock();
}
void child_after_fork() {
  g_global.lock().reset_after_fork();
  g_heap_pool.lock.reset_after_fork();
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
  if (tl_live_delta != 0) {
    add_live_bytes(g_global.gauges(), tl_live_delta);
    tl_live_delta = 0;
  }
}

void heap_collect() {
  LocalHeap* h = tl_heap;
  if (h != &g_empty_heap) {
    flush_live_bytes();
    // Its remote frees taken in, its empty spans (the ones it allocates from included) and its span cache given
    // back; spans that still hold objects stay with the thread.
    LocalAllocator::release_all(g_global, *h);
  }
  // And what frees into exited threads' spans have emptied.
  LocalAllocator::reclaim_abandoned(g_global, g_heap_pool, true);
}

void check_heap() {
  g_global.check_invariants();
  LLAMALLOC_CHECK(tl_heap->check(g_global), "invariant: thread-local heap inconsistent");
}

void* malloc_slow(size_t size, size_t alignment, unsigned lc, uintptr_t return_address, uintptr_t stack_address) {
  LocalHeap* h = thread_heap();
  if (h == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  if (tl_live_delta > kLiveFlushBytes || tl_live_delta < -kLiveFlushBytes) flush_live_bytes();
  if (lc == kPredictClass) {
    if (stack_address == 0) stack_address = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    AllocationContext context{return_address, stack_address, size};
    lc = clamp_class(g_predictor_ptr->predict(context));
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

void free_slow(void* p) {
  if (p == nullptr) return;
  LocalAllocator::deallocate(g_global, tl_heap, p);
  if (tl_live_delta > kLiveFlushBytes || tl_live_delta < -kLiveFlushBytes) flush_live_bytes();
  debug_check_heap();
}

void* heap_malloc_class(size_t size, unsigned lifetime_class) {
  LocalHeap* h = tl_heap;
  lifetime_class = lifetime_class < kMaxClasses ? lifetime_class : kMaxClasses - 1;
  if (size <= kSmallMaxBytes && h != &g_empty_heap && lifetime_class < g_global.num_classes()) {
    SmallSpan* s = h->spans[lifetime_class][size_class_of(size)];
    if (void* p = span_pop(s)) {
      tl_live_delta += int64_t(s->block_size);
      debug_check_heap();
      return p;
    }
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
  // Huge objects always sit on freshly mapped huge pages, which the kernel zeroed.
  if (p != nullptr && total <= kHugePageBytes) memset(p, 0, total);
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
    LocalAllocator::check_live(s, p, "realloc of");
    usable = LocalAllocator::usable_size(s);
    // In place while the object stays in its size class or shrinks by at most half.
    if (size <= usable && (size > usable / 2 || classify(size, kMinAlignBytes) == s->size_class)) return p;
  } else {
    if (!g_global.owns(p)) fatal_pointer("realloc of", p, "pointer not allocated by llamalloc");
    usable = g_global.large_usable_size(p);
    if (usable == 0) fatal_pointer("realloc of", p, "pointer not the start of a live object");
    if (size <= usable && size > kSmallMaxBytes && size >= usable / 2) return p;
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
  if (tl_heap != &g_empty_heap) LocalAllocator::release_all(g_global, *tl_heap);
  // And what frees by the threads still running have emptied in the heaps of exited ones.
  LocalAllocator::reclaim_abandoned(g_global, g_heap_pool, true);
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
