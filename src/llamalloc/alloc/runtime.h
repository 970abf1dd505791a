// The process runtime as the rest of the library sees it: the process-wide page heap, its start, the predictor it
// consults, the live-byte gauge, and giving memory back on request (llamalloc_collect, malloc_trim) and in the
// idle sweep. The runtime is the part of the library that only a real process has (the simulator and the policy
// tests build page heaps and thread heaps of their own, without any of it); its parts are one file each:
//
//   alloc/init.cc              process start and end: options, the page heap's configuration, the predictor,
//                              the library's constructor and destructor.
//   alloc/thread_heap_pool.cc  which thread heap a thread allocates from: made or adopted at its first
//                              allocation, put in the pool at its exit; the live-byte gauge.
//   alloc/collect.cc           giving memory back: the idle sweep of thread heaps, llamalloc_collect, malloc_trim.
//   alloc/sweeper.cc           when the idle sweep and the page passes run: the sweeper thread, or inline from
//                              the slow paths while there is none.
//   alloc/fork.cc              keeping the heap consistent across fork().
//
// Declarations that only these files and the slow paths share are in alloc/runtime_internal.h.
#pragma once

#include <cstdint>

#include "page_heap/page_heap.h"
#include "predictor/predictor.h"

namespace llamalloc {

// The process-wide page heap: the Linux platform, CLOCK_MONOTONIC. Constant-initialised, so it exists before any
// constructor runs (malloc is called before them); configured from the options at the first allocation.
extern PageHeap g_page_heap;

// Initialises the heap once (options, the page heap's configuration, the predictor); safe to call any number of
// times, from any thread.
void ensure_init();
// Installs a predictor (before the first allocation; the learned predictor does this at start).
void set_predictor(Predictor* predictor);
Predictor* predictor();

// Flushes this thread's live-byte delta into the heap's gauges.
void flush_live_bytes();

// llamalloc_collect(): gives back the memory this thread's heap holds that no object needs, the same for every
// other thread not inside the allocator now, and the page heap's empty and sparse pages (include/llamalloc.h).
void heap_collect();
// glibc's malloc_trim: heap_collect(); whether it gave memory back to the OS (huge pages or subreleased blocks).
bool heap_trim();
// The thread heaps used since the last pass (a slow path of their owner or a notify pending; every heap every 8
// passes), and not inside the allocator now, give back their empty spans and take in the frees other threads
// made into them (docs/heap.md, "Idle threads"). One pass; the sweeper thread runs it every LLAMALLOC_SWEEP_MS.
// every_heap: every other thread's heap not inside the allocator now (llamalloc_collect, tests). Returns the
// number of heaps swept; adds to *slow_paths the slow paths their owners ran since the last pass, less those that
// took again a span the previous sweep took (a heap inside the allocator now counts as busy: more than
// Subrelease::kQuietSlowPaths), and to *retaken_blocks those spans' blocks (ThreadHeapOps::program_slow_paths).
unsigned sweep_idle_heaps(bool every_heap = false, uint64_t* slow_paths = nullptr, uint64_t* retaken_blocks = nullptr);
// The passes in a row without a hit or a slow path after which a thread's prediction cache is dropped (about a
// second of LLAMALLOC_SWEEP_MS periods).
uint32_t prediction_cache_idle_passes();

// Checks the page heap and this thread's heap; aborts on a broken invariant (the debug builds' check after every
// allocation and free).
void check_heap();

}  // namespace llamalloc
