/* llamalloc: a learned, lifetime-aware memory allocator (the LLAMA design, papers/000).
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
 * when it does not fit in `capacity` bytes (8 KiB always suffice). llamalloc_stats_print writes it and a newline
 * to stderr. Live bytes are summed from per-thread counts flushed every 256 KiB, so they may lag by that much per
 * thread. */
size_t llamalloc_stats_json(char *buf, size_t capacity);
void llamalloc_stats_print(void);

/* Gives back the memory the calling thread's heap holds that no object needs: the blocks other threads freed
 * into its spans, its empty spans (also the ones it was allocating from) and its cache of empty spans; and what
 * frees into exited threads' spans have emptied. Spans that still hold objects stay. Call it when a thread goes
 * idle after a burst of work (before it blocks on an empty queue, as with tcmalloc's MarkThreadIdle or mimalloc's
 * mi_collect): a thread that sleeps runs no allocator code, so without it the spans it allocated from during the
 * burst stay with it, and each may keep a 2 MiB huge page in use. Costs one pass over the thread's spans and a
 * lock round trip per span given back; the thread's next allocations take spans again. */
void llamalloc_collect(void);

#ifdef __cplusplus
}
#endif

#endif /* LLAMALLOC_H */
