/* llamalloc: a learned, lifetime-aware memory allocator (the LLAMA design: "Learning-based Memory Allocation for
 * C++ Server Workloads", Maas et al., ASPLOS 2020).
 *
 * Linked in (-lllamalloc, pkg-config llamalloc) or preloaded (LD_PRELOAD=libllamalloc.so), it replaces
 * malloc, free, free_sized, free_aligned_sized, calloc, realloc, reallocarray, posix_memalign, aligned_alloc,
 * memalign, valloc, pvalloc,
 * malloc_usable_size and every operator new and delete. Options: LLAMALLOC_<NAME> environment variables
 * (docs/options.md). */
#ifndef LLAMALLOC_H
#define LLAMALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Lifetime classes (docs/architecture.md): 0 = under 10 ms, each next class ten times longer, the last
 * class (LLAMALLOC_CLASSES - 1, by default 7) = never freed. */
#define LLAMALLOC_CLASS_10MS 0u
#define LLAMALLOC_CLASS_NEVER_FREED 7u

/* Allocates `size` bytes in lifetime class `lifetime_class`, bypassing the predictor: for programs that know
 * their objects' lifetimes, tests and oracle experiments. A class beyond the configured count means "never
 * freed" (the last class). Free with free(). Returns NULL and sets errno to ENOMEM when memory is exhausted. */
void *llamalloc_malloc_class(size_t size, unsigned lifetime_class);

/* Runtime statistics, while the program runs (as jemalloc's malloc_stats_print, mimalloc's mi_stats_print): the
 * JSON object that LLAMALLOC_STATS=path writes at exit (docs/formats.md), of this moment. Neither allocates.
 * llamalloc_stats_json writes it into buf (not NUL-terminated unless room is left) and returns its length, or 0
 * when it does not fit in `capacity` bytes (8 KiB always suffice). llamalloc_stats_print writes a one-line
 * summary (live, footprint and its ratio, RSS, huge pages, pages by class, subreleased), then the JSON and a
 * newline, to stderr. Live bytes are summed from per-thread counts flushed every 256 KiB, so they may lag by that much per
 * thread. */
size_t llamalloc_stats_json(char *buf, size_t capacity);
void llamalloc_stats_print(void);

/* Gives back the memory thread heaps hold that no object needs: the blocks other threads freed into their
 * spans, their empty spans (also the ones they were allocating from) and their caches of empty spans; the
 * calling thread's heap, every other thread's that is not inside the allocator at that moment, and what frees
 * into exited threads' spans have emptied. Spans that still hold objects stay. The sweeper thread does this on
 * its own every LLAMALLOC_SWEEP_MS for the heaps used since its last pass (docs/heap.md); call this to have it
 * at once, e.g. after a load peak or before measuring memory. Costs one pass over the spans of each heap and a
 * lock round trip per span given back; threads take spans again when they next allocate. */
void llamalloc_collect(void);

#ifdef __cplusplus
}
#endif

#endif /* LLAMALLOC_H */
