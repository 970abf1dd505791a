/* A test program for the learned predictor (python/tests/test_predict_*.py). Built with frame pointers.
 *   footprint ROUNDS   long-lived objects (never freed) from one calling context, interleaved with short-lived
 *                      buffers of similar size from another, ROUNDS x 0.8 MiB of them live at once: without a
 *                      model the long-lived ones pin every huge page the buffers used.
 *   wrapped ROUNDS     as footprint, but both contexts allocate through one wrapper (xmalloc) at the same depth and
 *                      model size bucket: one prediction-cache key for both, which the cache must tell apart
 *   frameless ROUNDS   as footprint, but both contexts allocate through a function built without frame pointer
 *                      (as libstdc++'s and glibc's internals are): the frame-pointer chain skips its caller, the
 *                      one frame that tells the records from the buffers
 *   sites ROUNDS       as footprint, but records and buffers come from two calls of malloc in one function, the
 *                      same size: only the call sites (their call-site words) tell them apart
 *   periodic ROUNDS    ROUNDS x 2000 requests, each making four 64-byte objects from four calls of one function (as
 *                      image-server's Chain::end calls Tracer::start four times): four call paths of one
 *                      prediction-cache key, in turn, with a period that divides the fast path's check interval
 *   threads N          N threads allocating from several contexts at once (many threads predicting at once)
 *   serial N           N threads as in `threads`, one after another (a thread per task: each on the last one's stack)
 *   dlopen LIB N       a thread dlopens/dlcloses LIB and calls its allocating function while N threads allocate
 *   fork               allocates, forks; the child allocates from new contexts and exits 0
 *   deep DEPTH COUNT   COUNT malloc/free pairs at the bottom of a DEPTH-frame recursion (model-run timing with
 *                      LLAMALLOC_REPREDICT_EVERY=1: every allocation after the first runs the model)
 *   learn ROUNDS MS    a server's phases for online learning (LLAMALLOC_LEARN): each round makes footprint's
 *                      buffers (handle_request) and records (store_records), sleeps MS ms and frees the buffers;
 *                      the records are never freed
 *   learn-freed ROUNDS MS  as learn, but the records are freed with their round's buffers
 *   idle N MS          N threads allocate as `threads` does, then stay alive without allocating for MS ms; then
 *                      prints "resident <KiB> <KiB>": the process's anonymous resident memory outside the heap's
 *                      huge-page regions, and that of libllamalloc's zero-initialised data (the mapping after
 *                      its last segment), before the threads exit
 * Prints "ok <checksum>" on success. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void* volatile g_sink;

NOINLINE void* keep_record(size_t n) { void* p = malloc(n); memset(p, 1, n); return p; }
NOINLINE void* temp_buffer(size_t n) { void* p = malloc(n); memset(p, 2, n); return p; }
NOINLINE void* request_scratch(size_t n) { void* p = malloc(n); memset(p, 3, n); return p; }

NOINLINE void store_records(void** kept, int count) {
  for (int i = 0; i < count; ++i) kept[i] = keep_record(256);
}

NOINLINE void handle_request(void** temps, int count) {
  for (int i = 0; i < count; ++i) temps[i] = temp_buffer(200);
}

/* A wrapper, as redis's zmalloc: every allocation below returns into it, at the same stack height. */
NOINLINE void* xmalloc(size_t n) {
  void* p = malloc(n);
  if (p == NULL) abort();
  return p;
}
NOINLINE void* keep_wrapped(size_t n) { void* p = xmalloc(n); memset(p, 1, n); return p; }
NOINLINE void* temp_wrapped(size_t n) { void* p = xmalloc(n); memset(p, 2, n); return p; }

/* Built without a frame pointer (it leaves rbp as its caller set it): the allocator's frame record is followed
   by its caller's caller. Same size for both contexts, so that only that caller tells them apart. */
__attribute__((noinline, optimize("omit-frame-pointer"))) void* frameless_alloc(size_t n) {
  void* p = malloc(n);
  if (p == NULL) abort();
  g_sink = p;
  return p;
}
NOINLINE void* keep_frameless(size_t n) { void* p = frameless_alloc(n); memset(p, 1, n); return p; }
NOINLINE void* temp_frameless(size_t n) { void* p = frameless_alloc(n); memset(p, 2, n); return p; }

/* Two calls of one function, the same size and stack: only where the function calls malloc tells the request
   buffers from the record (a call-site word, docs/model.md), as word-count's two maps of one type. */
NOINLINE void two_sites(void** temps, int count, void** kept) {
  for (int i = 0; i < count; ++i) {
    temps[i] = malloc(256);
    memset(temps[i], 2, 256);
  }
  *kept = malloc(256);
  memset(*kept, 1, 256);
}

/* via: 0 the contexts' own functions call malloc, 1 through xmalloc, 2 through frameless_alloc, 3 two call
   sites of one function. */
static int footprint(int rounds, int via) {
  /* Each round: 4000 request buffers of 200 bytes (about 0.8 MiB), all live at once, with a 256-byte record
     kept after every 200 of them; then the buffers die. Buffers and records are small objects of the same
     cursor, so without a model the records end up spread over every huge page the buffers filled and pin
     them all; with one they sit together on a page of the "never freed" class. */
  enum { kTemps = 4000, kKeepEvery = 200 };
  size_t n_temps = (size_t)rounds * kTemps, n_kept = n_temps / kKeepEvery;
  void** temps = calloc(n_temps, sizeof(void*));
  void** kept = calloc(n_kept, sizeof(void*));
  unsigned long sum = 0;
  for (size_t k = 0; k < n_kept; ++k) {
    if (via == 1) {
      for (int i = 0; i < kKeepEvery; ++i) temps[k * kKeepEvery + i] = temp_wrapped(200);
      kept[k] = keep_wrapped(256);
    } else if (via == 3) {
      two_sites(temps + k * kKeepEvery, kKeepEvery, kept + k);
    } else if (via == 2) {
      for (int i = 0; i < kKeepEvery; ++i) temps[k * kKeepEvery + i] = temp_frameless(256);
      kept[k] = keep_frameless(256);
    } else {
      handle_request(temps + k * kKeepEvery, kKeepEvery);
      store_records(kept + k, 1);
    }
  }
  for (size_t i = 0; i < n_temps; ++i) {
    sum += ((unsigned char*)temps[i])[7];
    free(temps[i]);
  }
  free(temps);
  for (size_t i = 0; i < n_kept; ++i) sum += ((unsigned char*)kept[i])[3];
  g_sink = kept;  /* kept objects are never freed */
  printf("ok %lu\n", sum);
  return 0;
}

/* Rounds of request buffers and records, MS ms apart (online learning learns from the objects' lifetimes as it
   goes: the buffers die after MS ms, the records never, or with the buffers when free_records). */
static int learn_rounds(int rounds, int ms, int free_records) {
  enum { kTemps = 40000, kKeepEvery = 200 };  /* 8 MiB of buffers a round */
  void** temps = calloc(kTemps, sizeof(void*));
  void** kept = calloc((size_t)rounds * (kTemps / kKeepEvery), sizeof(void*));
  unsigned long sum = 0;
  for (int r = 0; r < rounds; ++r) {
    void** round_kept = kept + (size_t)r * (kTemps / kKeepEvery);
    for (int k = 0; k < kTemps / kKeepEvery; ++k) {
      handle_request(temps + k * kKeepEvery, kKeepEvery);
      store_records(round_kept + k, 1);
    }
    usleep((useconds_t)ms * 1000);
    for (int i = 0; i < kTemps; ++i) {
      sum += ((unsigned char*)temps[i])[7];
      free(temps[i]);
    }
    for (int k = 0; k < kTemps / kKeepEvery; ++k) {
      sum += ((unsigned char*)round_kept[k])[3];
      if (free_records) free(round_kept[k]);
    }
  }
  free(temps);
  g_sink = kept;  /* the records of `learn` are never freed */
  printf("ok %lu\n", sum);
  return 0;
}

/* One helper called from four places per request: the same return address into the allocator and the same
   stack height from each, so one prediction-cache key; only the call site in four_spans tells them apart. */
NOINLINE void* span_alloc(void) {
  void* p = malloc(64);
  if (p == NULL) abort();
  memset(p, 3, 64);
  return p;
}
NOINLINE void four_spans(void** out) {
  out[0] = span_alloc();
  out[1] = span_alloc();
  out[2] = span_alloc();
  out[3] = span_alloc();
}
static int periodic(int rounds) {
  unsigned long sum = 0;
  for (long r = 0; r < (long)rounds * 2000; ++r) {
    void* spans[4];
    four_spans(spans);
    for (int i = 0; i < 4; ++i) {
      sum += ((unsigned char*)spans[i])[i];
      free(spans[i]);
    }
  }
  printf("ok %lu\n", sum);
  return 0;
}

NOINLINE static void* worker(void* arg) {
  uintptr_t id = (uintptr_t)arg;
  unsigned long sum = 0;
  for (int i = 0; i < 20000; ++i) {
    void* a = request_scratch(16 + (i % 7) * 24);
    void* b = temp_buffer(64 << (i % 5));
    sum += ((unsigned char*)a)[0] + ((unsigned char*)b)[0];
    free(a);
    free(b);
    if (i % 1000 == 0) g_sink = keep_record(32 + id);
  }
  return (void*)sum;
}

static int threads(int n) {
  pthread_t t[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; ++i) pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)i);
  unsigned long sum = 0;
  for (int i = 0; i < n; ++i) {
    void* r;
    pthread_join(t[i], &r);
    sum += (unsigned long)r;
  }
  printf("ok %lu\n", sum);
  return 0;
}

// N threads one after another, each started when the previous one has been joined: a program that starts a
// thread per task. glibc gives each the stack of the one before, so the prediction cache an exited thread leaves
// serves the next one (docs/prediction.md).
static int serial_threads(int n) {
  unsigned long sum = 0;
  for (int i = 0; i < n; ++i) {
    pthread_t t;
    void* r;
    pthread_create(&t, NULL, worker, (void*)(uintptr_t)i);
    pthread_join(t, &r);
    sum += (unsigned long)r;
  }
  printf("ok %lu\n", sum);
  return 0;
}

static const char* g_lib;
static volatile int g_stop;

static void* loader(void* arg) {
  (void)arg;
  unsigned long sum = 0;
  for (int i = 0; i < 40; ++i) {
    void* h = dlopen(g_lib, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      exit(3);
    }
    void* (*make)(size_t) = (void* (*)(size_t))dlsym(h, "plugin_make");
    for (int k = 0; k < 50; ++k) {
      void* p = make(100 + k);
      sum += ((unsigned char*)p)[0];
      free(p);
    }
    dlclose(h);
  }
  g_stop = 1;
  return (void*)sum;
}

static void* allocator_thread(void* arg) {
  (void)arg;
  unsigned long sum = 0;
  while (!g_stop) {
    void* p = request_scratch(48);
    sum += ((unsigned char*)p)[0];
    free(p);
  }
  return (void*)sum;
}

static int dlopen_race(const char* lib, int n) {
  g_lib = lib;
  pthread_t l, t[16];
  if (n > 16) n = 16;
  for (int i = 0; i < n; ++i) pthread_create(&t[i], NULL, allocator_thread, NULL);
  pthread_create(&l, NULL, loader, NULL);
  void* r;
  pthread_join(l, &r);
  unsigned long sum = (unsigned long)r;
  for (int i = 0; i < n; ++i) {
    pthread_join(t[i], &r);
    sum += (unsigned long)r > 0;
  }
  printf("ok %lu\n", sum);
  return 0;
}

NOINLINE static int child_work(void) {
  unsigned long sum = 0;
  for (int i = 0; i < 5000; ++i) {
    void* p = request_scratch(24 + i % 100);
    sum += ((unsigned char*)p)[0];
    free(p);
  }
  return sum == 5000 * 3 ? 0 : 1;
}

static int fork_test(void) {
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)i);
  int failures = 0;
  for (int k = 0; k < 8; ++k) {
    pid_t pid = fork();
    if (pid == 0) _exit(child_work());
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  if (failures) {
    printf("children failed: %d\n", failures);
    return 1;
  }
  printf("ok %d\n", child_work());
  return 0;
}

NOINLINE static unsigned long deep_recurse(int depth, int count) {
  unsigned long sum = 0;
  if (depth > 1) {
    sum = deep_recurse(depth - 1, count);
    __asm__ volatile("" ::: "memory");  /* not a tail call: the frame stays */
    return sum + 1;
  }
  for (int i = 0; i < count; ++i) {
    void* p = request_scratch(40);
    sum += ((unsigned char*)p)[0];
    free(p);
  }
  return sum;
}

/* A recursion that allocates at every depth (a recursive descent parser's nodes): one call path, at DEPTH stack
   heights. */
NOINLINE static unsigned long nested(int depth) {
  unsigned char* p = request_scratch(48);
  unsigned long sum = p[0];
  if (depth > 1) sum += nested(depth - 1);
  __asm__ volatile("" ::: "memory");  /* not a tail call: the frame stays */
  free(p);
  return sum;
}

/* Resident KiB of anonymous mappings that are not the heap's huge-page regions (those carry MADV_HUGEPAGE or,
   once subreleased, MADV_NOHUGEPAGE: "hg" or "nh" in VmFlags): stacks, the allocator's metadata, the prediction
   caches, static data; and of the anonymous mapping right after libllamalloc's file mappings (its .bss). */
static void resident_outside_heap(long* anon_kib, long* bss_kib) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  unsigned long lib_end = 0;
  int anon = 0, is_bss = 0;
  long rss = 0;
  *anon_kib = *bss_kib = 0;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    int path_at = 0;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &path_at) == 3 && path_at > 0) {
      const char* path = line + path_at;
      anon = *path == '\n' || *path == 0;
      is_bss = anon && lo == lib_end;
      rss = 0;
      if (strstr(path, "libllamalloc") != NULL) lib_end = hi;
    } else if (strncmp(line, "Rss:", 4) == 0) {
      rss = atol(line + 4);
      if (is_bss) *bss_kib = rss;
    } else if (strncmp(line, "VmFlags:", 8) == 0) {
      if (anon && strstr(line, " hg") == NULL && strstr(line, " nh") == NULL) *anon_kib += rss;
    }
  }
  if (f) fclose(f);
}

static volatile int g_idle_done;

NOINLINE static void* idle_worker(void* arg) {
  void* r = worker(arg);
  while (!g_idle_done) usleep(1000);
  return r;
}

static int idle_threads(int n, int ms) {
  pthread_t t[64];
  if (n > 64) n = 64;
  for (int i = 0; i < n; ++i) pthread_create(&t[i], NULL, idle_worker, (void*)(uintptr_t)i);
  usleep((useconds_t)ms * 1000);
  long anon, bss;
  resident_outside_heap(&anon, &bss);
  g_idle_done = 1;
  unsigned long sum = 0;
  for (int i = 0; i < n; ++i) {
    void* r;
    pthread_join(t[i], &r);
    sum += (unsigned long)r;
  }
  printf("ok %lu\nresident %ld %ld\n", sum, anon, bss);
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 4 && strcmp(argv[1], "deep") == 0) {
    printf("ok %lu\n", deep_recurse(atoi(argv[2]), atoi(argv[3])));
    return 0;
  }
  if (argc >= 4 && strcmp(argv[1], "recursion") == 0) {
    unsigned long sum = 0;
    for (int i = 0; i < atoi(argv[3]); ++i) sum += nested(atoi(argv[2]));
    printf("ok %lu\n", sum);
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "footprint") == 0) return footprint(atoi(argv[2]), 0);
  if (argc >= 3 && strcmp(argv[1], "wrapped") == 0) return footprint(atoi(argv[2]), 1);
  if (argc >= 3 && strcmp(argv[1], "frameless") == 0) return footprint(atoi(argv[2]), 2);
  if (argc >= 3 && strcmp(argv[1], "sites") == 0) return footprint(atoi(argv[2]), 3);
  if (argc >= 3 && strcmp(argv[1], "periodic") == 0) return periodic(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "threads") == 0) return threads(atoi(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "serial") == 0) return serial_threads(atoi(argv[2]));
  if (argc >= 4 && strcmp(argv[1], "dlopen") == 0) return dlopen_race(argv[2], atoi(argv[3]));
  if (argc >= 2 && strcmp(argv[1], "fork") == 0) return fork_test();
  if (argc >= 4 && strcmp(argv[1], "idle") == 0) return idle_threads(atoi(argv[2]), atoi(argv[3]));
  if (argc >= 4 && strcmp(argv[1], "learn") == 0) return learn_rounds(atoi(argv[2]), atoi(argv[3]), 0);
  if (argc >= 4 && strcmp(argv[1], "learn-freed") == 0) return learn_rounds(atoi(argv[2]), atoi(argv[3]), 1);
  fprintf(stderr, "usage: predict-contexts footprint ROUNDS | wrapped ROUNDS | frameless ROUNDS | threads N"
                  " | serial N | dlopen LIB N | fork | idle N MS | learn ROUNDS MS | learn-freed ROUNDS MS"
                  " | deep DEPTH N | recursion DEPTH N\n");
  return 2;
}
