/* A library that allocates, for the dlopen race of predict-contexts (its frames are unknown until the
 * predictor refreshes its module map). */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) void* plugin_make(size_t n) {
  void* p = malloc(n);
  memset(p, 5, n);
  return p;
}
