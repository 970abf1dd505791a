// A buffer replaced again and again: PAIRS times, malloc(BYTES), write its first and last byte, free it, in one
// thread. What servers do with I/O buffers and per-request arenas of a few MiB. Prints the seconds, and VmSize,
// VmData and VmPTE (KiB) after the first pair and after the last, so that growth over the run shows.
//
//     huge_objects_bench [PAIRS=1000000] [BYTES=4194304]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void vm(long out[3]) {
  static const char* const keys[3] = {"VmSize:", "VmData:", "VmPTE:"};
  char line[256];
  FILE* f = fopen("/proc/self/status", "r");
  out[0] = out[1] = out[2] = -1;
  if (f == NULL) return;
  while (fgets(line, sizeof line, f) != NULL)
    for (int i = 0; i < 3; ++i)
      if (strncmp(line, keys[i], strlen(keys[i])) == 0) out[i] = atol(line + strlen(keys[i]));
  fclose(f);
}

static int pair(size_t bytes, long i) {
  volatile char* p = malloc(bytes);
  if (p == NULL) return -1;
  p[0] = (char)i;
  p[bytes - 1] = (char)i;
  free((void*)p);
  return 0;
}

int main(int argc, char** argv) {
  long pairs = argc > 1 ? atol(argv[1]) : 1000000;
  size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : (size_t)4 << 20;
  if (pairs < 1 || bytes < 1) {
    fprintf(stderr, "huge_objects_bench: PAIRS and BYTES must be positive\n");
    return 2;
  }
  long first[3], last[3];
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  if (pair(bytes, 0) != 0) goto oom;
  vm(first);
  for (long i = 1; i < pairs; ++i)
    if (pair(bytes, i) != 0) goto oom;
  clock_gettime(CLOCK_MONOTONIC, &b);
  vm(last);
  printf("seconds %.6f\nVmSize %ld %ld\nVmData %ld %ld\nVmPTE %ld %ld\n",
         (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9, first[0], last[0], first[1], last[1],
         first[2], last[2]);
  return 0;
oom:
  fprintf(stderr, "huge_objects_bench: malloc(%zu) failed\n", bytes);
  return 1;
}
