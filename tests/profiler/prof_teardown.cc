// A program whose objects are freed by its teardown, driven by
// python/tests/test_record_teardown_and_steady_state.py. Each site is a separate non-inlined function so that its
// name is the innermost frame of its stack. Modes (argv[1]):
//   return    sites below, then main returns
//   exit      the same, then exit(0) called from a function inside main
//   signals   raises SIGUSR2 twice between allocations (two kept dumps), then returns
//   steady    10 sessions at start, then a request (malloc + free) every 2 ms for 2 s, then frees the sessions
//             in main and returns (a server's run with a load peak at the start)
//
// site                 count  size  freed by                                        class in the profile
// site_global          20     200   the destructor of a global object               7
// site_local_static    15     300   the destructor of a function-local static       7
// site_atexit          12     400   an atexit handler registered in main            7
// site_main_freed      25     40    main, at once                                   0
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#define NOINLINE __attribute__((noinline))

namespace {

void* volatile g_sink;

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

struct Holder {
  void* held[32];
  int n;
  ~Holder() {
    for (int i = 0; i < n; ++i) free(held[i]);
  }
};

Holder g_global_holder;  // constructed before main: its destructor is registered before main runs

NOINLINE Holder& local_static() {
  static Holder holder;  // constructed in main: its destructor is registered while main runs
  return holder;
}

void* g_atexit_held[16];
void free_at_exit() {
  for (void* p : g_atexit_held) free(p);
}

}  // namespace

extern "C" NOINLINE void site_global() {
  for (int i = 0; i < 20; ++i) g_global_holder.held[g_global_holder.n++] = malloc(200);
}

extern "C" NOINLINE void site_local_static() {
  Holder& h = local_static();
  for (int i = 0; i < 15; ++i) h.held[h.n++] = malloc(300);
}

extern "C" NOINLINE void site_atexit() {
  for (int i = 0; i < 12; ++i) g_atexit_held[i] = malloc(400);
  atexit(free_at_exit);
}

extern "C" NOINLINE void site_main_freed() {
  for (int i = 0; i < 25; ++i) {
    g_sink = malloc(40);
    free(g_sink);
  }
}

extern "C" NOINLINE void site_before(Holder& h) {
  for (int i = 0; i < 10; ++i) h.held[h.n++] = malloc(100);
}
extern "C" NOINLINE void site_mid(Holder& h) {
  for (int i = 0; i < 5; ++i) h.held[h.n++] = malloc(100);
}
extern "C" NOINLINE void site_after(Holder& h) {
  for (int i = 0; i < 7; ++i) h.held[h.n++] = malloc(100);
}

extern "C" NOINLINE void site_session(Holder& h) {
  for (int i = 0; i < 10; ++i) h.held[h.n++] = malloc(2000);
}
extern "C" NOINLINE void site_request() {
  g_sink = malloc(64);
  free(g_sink);
}

extern "C" NOINLINE void leave_by_exit() { exit(0); }

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "return";
  if (strcmp(mode, "signals") == 0) {
    Holder h{};
    site_before(h);
    raise(SIGUSR2);  // the profile is written by the next allocation
    site_mid(h);
    sleep_ms(20);
    raise(SIGUSR2);
    site_after(h);
    return 0;
  }
  if (strcmp(mode, "steady") == 0) {
    Holder sessions{};
    site_session(sessions);
    auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(2)) {
      site_request();
      sleep_ms(2);
    }
    for (int i = 0; i < sessions.n; ++i) free(sessions.held[i]);  // the server's own cleanup, inside main
    sessions.n = 0;
    return 0;
  }
  site_global();
  site_local_static();
  site_atexit();
  site_main_freed();
  sleep_ms(50);  // what the teardown frees lived at least this long: class 1 or more, were it counted as freed
  printf("teardown\n");
  fflush(stdout);
  if (strcmp(mode, "exit") == 0) leave_by_exit();
  return 0;
}
