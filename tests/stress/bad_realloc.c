/* A deliberately broken allocator shim for the stress tests' own test: preloaded before glibc, it forwards realloc
 * to the real one and then damages the first byte of one result in 500. stress-random must catch it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

static void *(*real_realloc)(void *, size_t);
static unsigned long calls;

void *realloc(void *p, size_t n) {
  if (real_realloc == NULL) real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  void *q = real_realloc(p, n);
  if (q != NULL && p != NULL && n > 0 && __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) % 500 == 0)
    ((unsigned char *)q)[0] ^= 0x40;
  return q;
}
