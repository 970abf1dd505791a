// stress-fork: fork from a multi-threaded parent while its other threads allocate and free.
//
// -t threads allocate, check and free objects of random sizes without pause and publish some of them in a shared
// table (taking over what was there, so objects move between threads). The main thread forks again and again
// for -s seconds. Each child, in which only the forking thread exists: checks and frees objects that the
// parent's other threads allocated (taken from the shared table: their heaps' owners do not exist in the child),
// allocates and frees on its own and on a new thread, sometimes forks a grandchild that does the same, and
// returns from its function through exit(0) (atexit handlers and the allocator's exit path run). A child that
// deadlocks is killed by its own alarm (30 s) and reported. Every object is checked before it is freed.
// Any failure prints "stress-fork: FAIL ..." and exits non-zero.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <thread>
#include <vector>

#include "stress.h"

namespace {

struct Obj {
  void* p;
  std::size_t size;
  std::uint64_t id;
};

constexpr std::size_t kShared = 512;
std::atomic<Obj*> g_shared[kShared];
std::atomic<bool> g_stop{false};
std::atomic<long> g_worker_ops{0};

Obj* make(stress::Rng& r, std::uint64_t id, std::size_t max_size) {
  auto* o = static_cast<Obj*>(std::malloc(sizeof(Obj)));
  if (o == nullptr) stress::fail("malloc(%zu) returned NULL", sizeof(Obj));
  o->size = stress::random_size(r, max_size);
  o->id = id;
  o->p = r.chance(20) ? std::calloc(1, o->size) : std::malloc(o->size);
  if (o->p == nullptr) stress::fail("allocation of %zu bytes returned NULL", o->size);
  stress::fill(o->p, o->size, id);
  return o;
}

void destroy(Obj* o, const char* what) {
  stress::check_usable(o->p, o->size, what);
  stress::check(o->p, o->size, o->id, what);
  std::free(o->p);
  std::free(o);
}

// Allocation churn with checks: `ops` operations over `slots` slots, everything freed at the end.
void churn(stress::Rng& r, std::uint64_t id_base, long ops, std::size_t slots, std::size_t max_size,
           bool share) {
  std::vector<Obj*> table(slots, nullptr);
  std::uint64_t id = id_base;
  for (long i = 0; i < ops; i++) {
    Obj*& o = table[r.below(slots)];
    if (o == nullptr) {
      o = make(r, id++, max_size);
    } else if (share && r.chance(30)) {
      stress::check(o->p, o->size, o->id, "before publishing");
      o = g_shared[r.below(kShared)].exchange(o, std::memory_order_acq_rel);
    } else {
      destroy(o, "free");
      o = nullptr;
    }
  }
  for (Obj* o : table)
    if (o != nullptr) destroy(o, "free at end of churn");
}

void worker(int t, std::uint64_t seed) {
  stress::Rng r(seed * 7919 + t);
  std::uint64_t id = static_cast<std::uint64_t>(t + 1) << 44;
  while (!g_stop.load(std::memory_order_relaxed)) {
    churn(r, id, 2000, 64, 256 * 1024, true);
    id += 1 << 20;
    g_worker_ops += 2000;
  }
}

void* child_thread(void* arg) {
  auto* r = static_cast<stress::Rng*>(arg);
  stress::Rng mine(r->next());
  churn(mine, 0xC0000000ull << 20, 1000, 32, 256 * 1024, false);
  return nullptr;
}

[[noreturn]] void child(std::uint64_t seed, int depth) {
  alarm(30);  // a deadlock (e.g. a lock held by a thread that does not exist here) ends as SIGALRM
  stress::Rng r(seed);
  // Objects of the parent's threads: check and free some, leave the rest (exit frees nothing: also fine).
  for (std::size_t i = 0; i < kShared; i++) {
    if (!r.chance(50)) continue;
    Obj* o = g_shared[i].exchange(nullptr, std::memory_order_acq_rel);
    if (o != nullptr) destroy(o, "child frees a parent thread's object");
  }
  churn(r, 0xB0000000ull << 20, 1000, 64, 1024 * 1024, false);
  pthread_t th;
  if (pthread_create(&th, nullptr, child_thread, &r) != 0) stress::fail("pthread_create in the child failed");
  churn(r, 0xB8000000ull << 20, 1000, 64, 64 * 1024, false);
  pthread_join(th, nullptr);
  if (depth == 0 && r.chance(25)) {
    pid_t g = fork();
    if (g < 0) stress::fail("fork in the child failed");
    if (g == 0) child(r.next(), depth + 1);
    int status = 0;
    if (waitpid(g, &status, 0) != g) stress::fail("waitpid(grandchild) failed");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      stress::fail("grandchild ended with status 0x%x", status);
  }
  std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  stress::Options opt = stress::parse(argc, argv, "stress-fork",
                                      "  -t: allocating threads besides the forking one (default 4)\n"
                                      "  -s: seconds of forking (default 2); -n: at least this many forks");
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.threads; t++) threads.emplace_back(worker, t, opt.seed);
  stress::Rng r(opt.seed);
  double end = stress::now() + opt.seconds;
  long forks = 0;
  long min_forks = opt.count ? opt.count : 10;
  while (stress::now() < end || forks < min_forks) {
    // The forking thread allocates too, so that fork happens with its own heap in use.
    churn(r, (0xA0000000ull + forks) << 20, 200, 32, 128 * 1024, true);
    pid_t pid = fork();
    if (pid < 0) stress::fail("fork failed: errno %d", errno);
    if (pid == 0) child(r.next(), 0);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) stress::fail("waitpid failed: errno %d", errno);
    if (WIFSIGNALED(status))
      stress::fail("child %ld killed by signal %d%s", forks, WTERMSIG(status),
                   WTERMSIG(status) == SIGALRM ? " (deadlocked for 30 s)" : "");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      stress::fail("child %ld exited with status %d", forks, WEXITSTATUS(status));
    forks++;
    stress::check_rss(opt, "in the forking parent");
  }
  g_stop = true;
  for (auto& th : threads) th.join();
  stress::drain_slots(g_shared, [](Obj* o) { destroy(o, "free at end"); });
  std::printf("stress-fork: ok allocator=%s threads=%d forks=%ld worker-ops=%ld peak-rss=%ldMiB\n",
              stress::allocator_name(), opt.threads, forks, g_worker_ops.load(), stress::g_peak_rss_mib);
  return 0;
}
