// The programs behind docs/heap-memory.md, "Huge pages where dense": what a heap keeps resident and on huge pages
// for a sparse and a dense use of memory, and what the TLB costs a dense live set read at random. Plain
// malloc/free, so that the same binary runs under each allocator's LD_PRELOAD (bench/heap/huge_pages.py).
//
//   huge_pages sparse              4,096 blocks of 64 KiB, one byte written in each
//   huge_pages mib                 200 live objects of 1 MiB + 33 B, written whole
//   huge_pages randread [MiB] [N]  a live set of MiB (default 256) in 256-byte objects, written, then N (default
//                                  200 million) reads at random places of it
//
// Each prints one JSON line: rss_kib and anon_huge_kib (smaps_rollup) after the allocations, again 2 s later (the
// heap's background work done), and for randread the seconds of the reads. A second thread sleeps throughout, as a
// server's would, so that allocators with a background thread run it.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void resident(long* rss, long* ahp) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  *rss = *ahp = -1;
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "Rss:", 4)) *rss = atol(line + 4);
    if (!strncmp(line, "AnonHugePages:", 14)) *ahp = atol(line + 14);
  }
  if (f) fclose(f);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void* idle(void* arg) {
  for (;;) sleep(60);
  return arg;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: huge_pages sparse | mib | randread [MiB] [reads]\n");
    return 2;
  }
  pthread_t t;
  pthread_create(&t, NULL, idle, NULL);
  free(malloc(16));
  const char* mode = argv[1];
  double seconds = 0;
  unsigned long long checksum = 0;
  long rss, ahp, rss2, ahp2;
  if (!strcmp(mode, "sparse")) {
    for (int i = 0; i < 4096; ++i) {
      char* b = malloc(65536);
      if (!b) return 1;
      b[0] = 1;
    }
    resident(&rss, &ahp);
    sleep(2);
    resident(&rss2, &ahp2);
  } else if (!strcmp(mode, "mib")) {
    for (int i = 0; i < 200; ++i) {
      char* b = malloc((1u << 20) + 33);
      if (!b) return 1;
      memset(b, i, (1u << 20) + 33);
    }
    resident(&rss, &ahp);
    sleep(2);
    resident(&rss2, &ahp2);
  } else if (!strcmp(mode, "randread")) {
    size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 256;
    unsigned long long reads = argc > 3 ? strtoull(argv[3], NULL, 10) : 200000000ull;
    size_t n = (mib << 20) / 256;
    uint64_t** v = malloc(n * sizeof *v);
    if (!v) return 1;
    for (size_t i = 0; i < n; ++i) {
      v[i] = malloc(256);
      if (!v[i]) return 1;
      for (int w = 0; w < 32; ++w) v[i][w] = i * 32 + (uint64_t)w;
    }
    resident(&rss, &ahp);
    uint64_t x = 88172645463325252ull;
    double t0 = now();
    for (unsigned long long r = 0; r < reads; ++r) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      checksum += v[x % n][(x >> 40) & 31];
    }
    seconds = now() - t0;
    resident(&rss2, &ahp2);
  } else {
    fprintf(stderr, "huge_pages: unknown mode %s\n", mode);
    return 2;
  }
  printf("{\"mode\": \"%s\", \"rss_kib\": %ld, \"anon_huge_kib\": %ld, \"later_rss_kib\": %ld, "
         "\"later_anon_huge_kib\": %ld, \"seconds\": %.3f, \"checksum\": %llu}\n",
         mode, rss, ahp, rss2, ahp2, seconds, checksum);
  return 0;
}
