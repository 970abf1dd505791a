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

#ifdef __cplusplus
}
#endif

#endif /* LLAMALLOC_H */
