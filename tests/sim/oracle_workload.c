/* A single-threaded program whose every allocation dies within microseconds (true lifetime class 0, the class
 * libllamalloc.so gives every allocation without a model), so that the library run and the llama-oracle
 * replay of its trace place the same objects in the same classes. No stdio: nothing allocates behind our back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t state = 88172645463325252ULL;
static uint64_t next(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 40;
  enum { kObjects = 400 };
  static void* objects[kObjects];
  for (int r = 0; r < rounds; ++r) {
    int n = kObjects / 2 + (int)(next() % (kObjects / 2));
    for (int i = 0; i < n; ++i) {
      uint64_t pick = next() % 100;
      size_t size = pick < 90 ? 16 + next() % 1000 : pick < 98 ? 1024 + next() % 7000 : 16384 + next() % (1 << 20);
      objects[i] = malloc(size);
      if (objects[i] == NULL) return 1;
      memset(objects[i], 1, size < 64 ? size : 64);
    }
    for (int i = n - 1; i > 0; --i) {  /* free in a shuffled order */
      int j = (int)(next() % (uint64_t)(i + 1));
      void* t = objects[i];
      objects[i] = objects[j];
      objects[j] = t;
    }
    for (int i = 0; i < n; ++i) free(objects[i]);
  }
  return 0;
}
