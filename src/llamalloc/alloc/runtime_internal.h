// What the process runtime's files (alloc/runtime.h lists them) and the allocation slow paths (alloc/alloc.cc)
// share, and nothing else includes: the process-wide objects, and the first steps of the two calls every slow
// path makes (the calling thread's heap, the inline page passes). Those first steps are inline, so that a slow
// path pays a call only when there is work to do: a thread's first allocation, a page pass that is due.
#pragma once

#include <atomic>
#include <cstdint>

#include "alloc/heap_config.h"
#include "alloc/runtime.h"
#include "base.h"
#include "thread_heap/thread_heap.h"
#include "pal/pal.h"
#include "predictor/predictor.h"

namespace llamalloc {

// ---- Process start (alloc/init.cc) ----

extern LinuxPlatform g_platform;
extern MonotonicClock g_clock;
// The predictor every slow path consults: the default one (every allocation in LLAMALLOC_DEFAULT_CLASS), or the
// learned one LLAMALLOC_MODEL names. g_every_allocation: it must see every allocation (a context-sensitive
// model), so the fast path always misses (fast_class kMaxClasses) unless the thread's prediction cache hits.
extern Predictor* g_predictor_ptr;
extern bool g_every_allocation;
// The predictor samples allocations (online learning, LLAMALLOC_LEARN): g_sampled_heap serves them, and frees
// that may be of sampled objects go to the predictor.
extern bool g_learning;
extern ThreadHeap g_sampled_heap;
// Online learning without a model waits until the footprint first reaches LLAMALLOC_LEARN_FROM_MIB: the page
// passes (sweeper.cc) call this, and the first one past the mark installs the learned predictor, which the other
// threads take at their next slow path. Rule and reason: lifetimes pay by keeping survivors off the pages of a
// heap's temporaries, which a heap of a few dozen huge pages cannot gain much from, while the prediction cache's
// probe and the samples cost every program time and spans; below the mark the process runs as without learning.
void maybe_start_learning();
// The three above as other threads read them: set_predictor and maybe_start_learning change them while the
// program runs (the predictor and g_learning published with release, so that a thread that sees them sees what
// they need: the sampled heap and its free hook).
inline Predictor* current_predictor() { return __atomic_load_n(&g_predictor_ptr, __ATOMIC_ACQUIRE); }
inline bool every_allocation() { return __atomic_load_n(&g_every_allocation, __ATOMIC_RELAXED); }
inline bool learning() { return __atomic_load_n(&g_learning, __ATOMIC_ACQUIRE); }

// A class the process's page heap has (alloc/heap_config.h).
inline unsigned clamp_class(unsigned lc) { return clamp_class(lc, g_page_heap.num_classes()); }

// ---- The thread-heap pool (alloc/thread_heap_pool.cc) ----

// Heaps of exited threads, adopted by new ones. Its lock also guards the list of live heaps below; it is taken
// after the shared heap's lock and before the page heap's.
extern HeapPool g_heap_pool;
// Heaps of live threads, for the idle sweep (g_heap_pool.lock; linked by live_next and live_prev). A heap is on
// it from its creation or adoption until its thread's exit hook runs.
extern ThreadHeap* g_live_heaps;
// LLAMALLOC_SHARED_CLASS names a class the page heap has: the shared heap of long-lived classes is used once a
// second thread heap exists (set at start).
extern bool g_share_long_lived;

// The calling thread's first allocation (or its first after its exit hook ran): initialises the process if it is
// not, gives the thread a heap (adopted from the pool, or new), and starts the sweeper thread at the process's
// second heap. nullptr when no metadata memory can be had for a new heap.
ThreadHeap* attach_thread_heap();

// The calling thread's heap, or nullptr (attach_thread_heap).
inline ThreadHeap* thread_heap() {
  ThreadHeap* h = tl_heap;
  if (LLAMALLOC_LIKELY(h != &g_empty_heap)) return h;
  return attach_thread_heap();
}

// Registers the thread-exit hook that puts a thread's heap in the pool (the library's constructor).
void install_thread_exit_hook();

// ---- Giving memory back (alloc/collect.cc) ----

// The shared heap of long-lived classes and the sampled heap, swept as a thread heap is (`always`: now, whether
// used or not).
void sweep_shared_heap(bool always, uint64_t* slow_paths = nullptr, uint64_t* retaken_blocks = nullptr);

// ---- The sweeper (alloc/sweeper.cc) ----

// Starts the sweeper thread once (from the slow path that made the process's second thread heap, or that found
// other threads in the process). Call with no lock held.
// `threads`: started for other threads (not for a big single-threaded heap, SWEEPER_FROM_MIB), which lifts the
// page cache's bound by use (its passes trim it now).
void start_sweeper(bool threads = true);
// In a fork child: the sweeper thread is not copied, nor its passes.
void forget_sweeper_in_fork_child();

// Slow paths of this thread until the next look at the clock (run_inline_passes).
extern __thread uint32_t tl_pass_countdown __attribute__((tls_model("initial-exec")));
// Without a sweeper thread, the page passes of its loop, when a period has gone by since the last (and the
// start of the sweeper thread once the process turns out to have other threads).
void run_inline_passes();

// Called at the end of the slow paths (the allocation's, the free's, the owner's free in the thread heap): the
// clock is read on every 4th slow path of a thread only, since a program whose fast path misses on every
// allocation (a window of live objects that fills its span exactly) would otherwise read it on each.
inline void maybe_pass_inline() {
  if (tl_pass_countdown-- != 0) return;
  tl_pass_countdown = 3;
  run_inline_passes();
}

// ---- fork() (alloc/fork.cc) ----

// Registers the fork handlers (the library's constructor).
void install_fork_handlers();

}  // namespace llamalloc
