// A program with known allocation sites whose objects live known times, driven by the profiler's tests
// (python/tests/test_profiler_*.py). Each site is a separate non-inlined function so that its name is the
// innermost frame of its stack. Modes (argv[1]):
//   sites     the sites of the exact-profile test (counts, sizes and lifetime classes in the table below)
//   scale     one site with many small allocations, for the sampling-rate test
//   threads   objects allocated on one thread and freed on another
//   sequence  a known sequence of calls, printed as it happens, for the trace round-trip test
//   fork      forks a child that allocates and exits, and a child that execs this program ("sites")
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace {

// Keeps the compiler from removing an allocation whose result is not otherwise used.
void* volatile g_sink;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Bounds on the lifetimes of a timed site's objects, as the program saw them: at least from the return of the
// last allocation to the start of the first free, at most from before the first allocation to after the last
// free. On a loaded machine a sleep may overrun; the test takes the classes from these bounds.
struct LifetimeBounds {
  uint64_t min_ns;
  uint64_t max_ns;
};
LifetimeBounds g_tens_bounds;
LifetimeBounds g_medium_bounds;

struct record_120 {
  char bytes[120];
};

}  // namespace

// site               calls                     count  size  lifetime   class
// site_short         malloc(40), free          200    40    ~0         0
// site_tens          calloc(10, 100)           10     1000  30 ms      1
// site_medium        new record_120             30     120   150 ms     2
// site_never         malloc(5000)              7      5000  never      7
// site_aligned       aligned_alloc(256, 512)   5      512   ~0         0
// site_inlined       (inlined_helper) malloc   3      64    ~0         0
// site_resized       malloc(7000)              6      7000  ~0         0  (until resize_moved moves it)
// resize_in_place    realloc to 6000           -      -     -          -  (llamalloc keeps it: no new object)
// resize_moved       realloc to 20000          6      20000 ~0         0
extern "C" NOINLINE void site_short() {
  for (int i = 0; i < 200; ++i) {
    g_sink = malloc(40);
    free(g_sink);
  }
}

extern "C" NOINLINE void site_tens() {
  void* held[10];
  uint64_t t0 = now_ns();
  for (auto& p : held) p = calloc(10, 100);
  uint64_t t1 = now_ns();
  sleep_ms(30);
  uint64_t t2 = now_ns();
  for (auto& p : held) free(p);
  g_tens_bounds = {t2 - t1, now_ns() - t0};
}

extern "C" NOINLINE void site_medium() {
  record_120* held[30];
  uint64_t t0 = now_ns();
  for (auto& p : held) p = new record_120();
  uint64_t t1 = now_ns();
  sleep_ms(150);
  uint64_t t2 = now_ns();
  for (auto& p : held) delete p;
  g_medium_bounds = {t2 - t1, now_ns() - t0};
}

extern "C" NOINLINE void site_never() {
  for (int i = 0; i < 7; ++i) {
    void* p = malloc(5000);
    memset(p, 1, 5000);
    g_sink = p;  // and never freed
  }
}

extern "C" NOINLINE void site_aligned() {
  for (int i = 0; i < 5; ++i) {
    g_sink = aligned_alloc(256, 512);
    free(g_sink);
  }
}

static inline __attribute__((always_inline)) void* inlined_helper(size_t n) { return malloc(n); }

extern "C" NOINLINE void site_inlined() {
  for (int i = 0; i < 3; ++i) {
    g_sink = inlined_helper(64);
    free(g_sink);
  }
}

extern "C" NOINLINE void site_resized(void** held, int n) {
  for (int i = 0; i < n; ++i) held[i] = malloc(7000);
}

extern "C" NOINLINE void resize_in_place(void** held, int n) {
  for (int i = 0; i < n; ++i) held[i] = realloc(held[i], 6000);
}

extern "C" NOINLINE void resize_moved(void** held, int n) {
  for (int i = 0; i < n; ++i) held[i] = realloc(held[i], 20000);
}

extern "C" NOINLINE void site_scale(int n) {
  for (int i = 0; i < n; ++i) {
    g_sink = malloc(256);
    free(g_sink);
  }
}

extern "C" NOINLINE void* site_cross_thread() { return malloc(72); }

extern "C" NOINLINE void site_child() {
  for (int i = 0; i < 11; ++i) {
    g_sink = malloc(900);
    free(g_sink);
  }
}

static int run_sites() {
  site_short();
  site_tens();
  site_medium();
  site_never();
  site_aligned();
  site_inlined();
  void* resized[6];
  site_resized(resized, 6);
  resize_in_place(resized, 6);
  resize_moved(resized, 6);
  for (void* p : resized) free(p);
  printf("lifetime site_tens %llu %llu\n", static_cast<unsigned long long>(g_tens_bounds.min_ns),
         static_cast<unsigned long long>(g_tens_bounds.max_ns));
  printf("lifetime site_medium %llu %llu\n", static_cast<unsigned long long>(g_medium_bounds.min_ns),
         static_cast<unsigned long long>(g_medium_bounds.max_ns));
  return 0;
}

static int run_threads() {
  constexpr int kObjects = 2000;
  std::vector<void*> objects(kObjects);
  std::thread producer([&] {
    for (auto& p : objects) p = site_cross_thread();
  });
  producer.join();
  std::thread consumer([&] {
    for (auto p : objects) free(p);
  });
  consumer.join();
  return 0;
}

static int run_sequence() {
  // The markers bound the sequence in the trace; everything between them is printed in order.
  void* begin_marker = malloc(12345);
  printf("alloc %p 12345\n", begin_marker);
  void* p1 = malloc(100);
  printf("alloc %p 100\n", p1);
  void* p2 = malloc(200);
  printf("alloc %p 200\n", p2);
  printf("free %p\n", p1);
  free(p1);
  void* p3 = calloc(3, 50);
  printf("alloc %p 150\n", p3);
  printf("free %p\n", p2);
  void* p4 = realloc(p2, 5000);
  printf("alloc %p 5000\n", p4);
  printf("free %p\n", p3);
  free(p3);
  printf("free %p\n", p4);
  free(p4);
  int* q = new int[10];
  printf("alloc %p 40\n", static_cast<void*>(q));
  printf("free %p\n", static_cast<void*>(q));
  delete[] q;
  void* a = nullptr;
  if (posix_memalign(&a, 64, 300) != 0) return 1;
  printf("alloc %p 300\n", a);
  printf("free %p\n", a);
  free(a);
  printf("free %p\n", begin_marker);
  fflush(stdout);
  free(begin_marker);
  return 0;
}

static int run_fork(const char* self) {
  pid_t forked = fork();
  if (forked == 0) {
    site_child();
    exit(0);
  }
  pid_t execed = fork();
  if (execed == 0) {
    execl(self, self, "sites", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status_forked = 0;
  int status_execed = 0;
  waitpid(forked, &status_forked, 0);
  waitpid(execed, &status_execed, 0);
  site_short();
  return (WIFEXITED(status_forked) && WEXITSTATUS(status_forked) == 0 && WIFEXITED(status_execed) &&
          WEXITSTATUS(status_execed) == 0)
             ? 0
             : 1;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "sites";
  int rc = 2;
  if (strcmp(mode, "sites") == 0) rc = run_sites();
  if (strcmp(mode, "scale") == 0) {
    site_scale(argc > 2 ? atoi(argv[2]) : 200000);
    rc = 0;
  }
  if (strcmp(mode, "threads") == 0) rc = run_threads();
  if (strcmp(mode, "sequence") == 0) rc = run_sequence();
  if (strcmp(mode, "fork") == 0) rc = run_fork(argv[0]);
  if (argc > 2 && strcmp(mode, "sites") == 0) rc = atoi(argv[2]);  // exit status for the pass-through test
  return rc;
}
