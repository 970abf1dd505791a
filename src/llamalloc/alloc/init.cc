// Process start and end.
//
// Rules, and why:
// - Every process-wide object (the page heap, its platform and clock, the default predictor, the heap pool) is
//   constant-initialised: malloc is called before any constructor runs, by the dynamic loader and by other
//   libraries' constructors, and must find them ready.
// - The options are read once, at the first allocation or the library's constructor, whichever comes first
//   (ensure_init, under pthread_once): they configure the page heap before it hands out its first page, and a
//   page heap's configuration never changes afterwards.
// - The learned predictor is linked weakly: a library without it runs every allocation in the default class
//   and says so once when LLAMALLOC_MODEL or LLAMALLOC_MODEL_DIR asks for a model.
// - The library's constructor registers what needs the C library to be up (the thread-exit hook, the fork
//   handlers, the statistics hooks); its destructor gives back the main thread's empty spans (the main thread
//   never runs the thread-exit hook) and writes the statistics file.
#include <pthread.h>

#include <cstring>

#include "alloc/heap_config.h"
#include "alloc/runtime_internal.h"
#include "options.h"
#include "stats.h"

namespace llamalloc {

namespace {
constinit DefaultPredictor g_default_predictor(0);
pthread_once_t g_init_once = PTHREAD_ONCE_INIT;
// Learning that waits for its footprint (maybe_start_learning): the learned predictor, made at init, and the
// footprint at which it starts. Written once at init; g_waiting_learner is cleared, under its once, by the pass
// that starts it.
constinit Predictor* g_waiting_learner = nullptr;
constinit uint64_t g_learn_from_bytes = 0;
pthread_once_t g_learning_once = PTHREAD_ONCE_INIT;

// Online learning's sampled objects come from their own thread heap, whose frees all reach the predictor.
void enable_sampling() {
  g_page_heap.set_sampled_heap(&g_sampled_heap);
  ThreadHeapOps::set_sampled_free_hook([](void* p) { current_predictor()->freed(p); });
  __atomic_store_n(&g_learning, true, __ATOMIC_RELEASE);
}

void start_waiting_learner() {
  Predictor* p = g_waiting_learner;
  enable_sampling();
  set_predictor(p);
  __atomic_store_n(&g_waiting_learner, nullptr, __ATOMIC_RELEASE);
}
}  // namespace

constinit LinuxPlatform g_platform;
constinit MonotonicClock g_clock;
constinit Predictor* g_predictor_ptr = &g_default_predictor;
constinit bool g_every_allocation = false;
constinit bool g_learning = false;
constinit PageHeap g_page_heap(g_platform, g_clock, HeapConfig{});

}  // namespace llamalloc

// The learned predictor defines these; without it LLAMALLOC_MODEL and LLAMALLOC_MODEL_DIR cannot be honoured.
extern "C" __attribute__((weak)) llamalloc::Predictor* llamalloc_make_model_predictor(const char* model_path,
                                                                                      const char* tokens_path);
extern "C" __attribute__((weak)) bool llamalloc_model_of_directory(const char* dir, const char** model_path,
                                                                   const char** tokens_path);

namespace llamalloc {

namespace {

void init_once() {
  ThreadHeapOps::set_pool(&g_heap_pool);
  ThreadHeapOps::set_slow_free_hook(maybe_pass_inline);
  ThreadHeapOps::set_attach_heap_hook(attach_thread_heap);
  init_options();
  const Options& o = options();
  unsigned default_class = default_class_of(o);
  HeapConfig config = heap_config_of(o);
  unsigned shared_from = config.shared_class_min;
  g_page_heap.configure(config);
  // The page cache, within what a pass would leave after every free until the sweeper makes the passes.
  g_page_heap.set_page_cache_pages(unsigned(o.page_cache_pages), true);
  g_platform.set_huge_pages(unsigned(o.huge_pages));
  g_share_long_lived = shared_from < g_page_heap.num_classes();  // (from the second thread heap on)
  g_default_predictor.set_class(default_class);
  // LLAMALLOC_MODEL_DIR without LLAMALLOC_MODEL: the model and token tables prepared there for this executable's
  // build, as if LLAMALLOC_MODEL and LLAMALLOC_TOKENS named them (none: it has said so in one line).
  const char* model_path = o.model != nullptr ? o.model : "";
  const char* tokens_path = o.tokens;
  if (*model_path == 0 && o.model_dir != nullptr && *o.model_dir && llamalloc_model_of_directory)
    llamalloc_model_of_directory(o.model_dir, &model_path, &tokens_path);
  bool has_model = *model_path != 0;
  if (has_model || learning_on(o, false)) {
    Predictor* model =
        llamalloc_make_model_predictor ? llamalloc_make_model_predictor(model_path, tokens_path) : nullptr;
    if (model != nullptr) g_predictor_ptr = model;
    else if (!llamalloc_make_model_predictor)  // (the predictor has said what is wrong with the file)
      write_stderr("llamalloc: warning: LLAMALLOC_MODEL is set but no learned predictor could load it; "
                      "using the default class\n");
  } else if (o.model_dir != nullptr && *o.model_dir && !llamalloc_model_of_directory) {
    write_stderr("llamalloc: warning: LLAMALLOC_MODEL_DIR is set but this library has no learned predictor; "
                 "using the default class\n");
  }
  // Learning alone (no model) waits for its footprint; with a model, the model runs from the start and learns
  // beside it.
  if (!has_model && o.learn_from_mib != 0 && g_predictor_ptr != &g_default_predictor && g_predictor_ptr->samples()) {
    g_waiting_learner = g_predictor_ptr;
    g_learn_from_bytes = uint64_t(o.learn_from_mib) << 20;
    g_predictor_ptr = &g_default_predictor;
  }
  g_every_allocation = g_predictor_ptr->consult() == Consult::kEveryAllocation;
  if (g_predictor_ptr->samples()) enable_sampling();
}

}  // namespace

void ensure_init() { pthread_once(&g_init_once, init_once); }

void set_predictor(Predictor* p) {
  ensure_init();
  __atomic_store_n(&g_every_allocation, p->consult() == Consult::kEveryAllocation, __ATOMIC_RELAXED);
  __atomic_store_n(&g_predictor_ptr, p, __ATOMIC_RELEASE);
  // Threads pick this up at their next slow path; the calling thread at once.
  ThreadHeap* h = tl_heap;
  if (h != &g_empty_heap)
    h->fast_class = g_every_allocation ? kMaxClasses : uint8_t(clamp_class(p->predict({0, 0, 0})));
}

Predictor* predictor() { return g_predictor_ptr; }

void maybe_start_learning() {
  if (LLAMALLOC_LIKELY(__atomic_load_n(&g_waiting_learner, __ATOMIC_ACQUIRE) == nullptr)) return;
  uint64_t footprint;
  {
    LockGuard g(g_page_heap.lock());  // (a pass a period: the lock's cost does not show)
    footprint = g_page_heap.gauges().footprint_bytes;
  }
  if (footprint < g_learn_from_bytes) return;
  pthread_once(&g_learning_once, start_waiting_learner);
}

}  // namespace llamalloc

// The library's start: runs before main (after anything that allocated while the program was being loaded).
__attribute__((constructor)) static void llamalloc_start() {
  using namespace llamalloc;
  ensure_init();
  install_thread_exit_hook();
  install_fork_handlers();
  install_stats_hooks();
}

// The library's end: runs at exit.
__attribute__((destructor)) static void llamalloc_finish() {
  using namespace llamalloc;
  // The main thread never passes through the thread-exit hook: hand its spans back now, as every other thread's
  // were, so that huge pages held only by its cached (empty) spans are free in the statistics. Its heap stays
  // usable for destructors that run after this one.
  if (ThreadHeap* h = tl_heap; h != &g_empty_heap) {
    owner_enter(h);
    if (sweep_requested(h)) ThreadHeapOps::wait_for_sweep(*h);
    ThreadHeapOps::release_all(g_page_heap, *h);
    owner_exit(h);
  }
  // And what frees by the threads still running have emptied in the heaps of exited ones and the shared heap.
  ThreadHeapOps::reclaim_abandoned(g_page_heap, g_heap_pool, true);
  sweep_shared_heap(true);
  // No page cache from here on: what the teardown frees goes back at once.
  g_page_heap.set_page_cache_pages(0);
  flush_live_bytes();
  const char* path = options().stats;
  if (path != nullptr && *path) {
    g_predictor_ptr->report(g_page_heap.counters());
    if (!write_stats_file(g_page_heap, path)) {
      write_stderr("llamalloc: warning: cannot write the statistics file LLAMALLOC_STATS=");
      write_stderr(path);
      write_stderr("\n");
    }
  }
  // The summary line is printed with or without a statistics file: asked for alone, it is all there is to see.
  // With the snapshot before the teardown (llamalloc run --stats), the line of that moment comes first, each
  // line named by its moment.
  if (options().stats_summary != 0) {
    char summary[512];
    if (format_stats_summary(g_page_heap, summary, sizeof(summary)) != 0) {
      static constexpr char kPrefix[] = "llamalloc: ";
      constexpr size_t kPrefixLength = sizeof(kPrefix) - 1;
      const char* before = kept_summary_before_exit();
      if (before != nullptr && strncmp(before, kPrefix, kPrefixLength) == 0 &&
          strncmp(summary, kPrefix, kPrefixLength) == 0) {
        write_stderr("llamalloc: before teardown: ");
        write_stderr(before + kPrefixLength);
        write_stderr("llamalloc: at exit: ");
        write_stderr(summary + kPrefixLength);
      } else {
        write_stderr(summary);
      }
    }
  }
}
