// stress-exit-handoff: threads allocate, hand their objects to the main thread and exit; the main thread checks
// and frees the objects after the thread has ended (-n threads in all, -t at a time). The usual shape of worker
// threads that produce results. Nothing stays live for long, so the resident set must stay small: it is checked
// against the cap (-m) every 1024 threads. Any failure prints "stress-exit-handoff: FAIL ..." and aborts.
#include <pthread.h>

#include <vector>

#include "stress.h"

namespace {

constexpr int kObjects = 16;
struct Batch {
  void* p[kObjects];
  std::size_t size[kObjects];
  std::uint64_t id[kObjects];
  std::uint64_t seed;
};

void* producer(void* arg) {
  auto* b = static_cast<Batch*>(arg);
  stress::Rng r(b->seed);
  for (int i = 0; i < kObjects; i++) {
    b->size[i] = stress::random_size(r, 64 * 1024);
    b->id[i] = r.next();
    b->p[i] = std::malloc(b->size[i]);
    if (b->p[i] == nullptr) stress::fail("malloc(%zu) returned NULL", b->size[i]);
    stress::fill(b->p[i], b->size[i], b->id[i]);
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  stress::Options opt = stress::parse(argc, argv, "stress-exit-handoff",
                                      "  -t: threads at a time (default 4); -n: threads in all (default 20000)");
  long total = opt.count ? opt.count : 20000;
  int lanes = opt.threads;
  std::vector<Batch> batches(static_cast<std::size_t>(lanes));
  std::vector<pthread_t> th(static_cast<std::size_t>(lanes));
  long done = 0;
  for (long started = 0; started < total;) {
    int n = 0;
    for (; n < lanes && started < total; n++, started++) {
      batches[n].seed = opt.seed * 1000003 + static_cast<std::uint64_t>(started);
      if (pthread_create(&th[n], nullptr, producer, &batches[n]) != 0) stress::fail("pthread_create failed");
    }
    for (int i = 0; i < n; i++) {
      if (pthread_join(th[i], nullptr) != 0) stress::fail("pthread_join failed");
      Batch& b = batches[i];
      for (int k = 0; k < kObjects; k++) {
        stress::check_usable(b.p[k], b.size[k], "object of an exited thread");
        stress::check(b.p[k], b.size[k], b.id[k], "object of an exited thread");
        std::free(b.p[k]);
      }
      done++;
      if (done % 1024 == 0) {
        char when[96];
        std::snprintf(when, sizeof when, "after %ld threads (at most %d KiB live at a time)", done,
                      lanes * kObjects * 64);
        stress::check_rss(opt, when);
      }
    }
  }
  stress::check_rss(opt, "at the end");
  std::printf("stress-exit-handoff: ok allocator=%s lanes=%d threads=%ld peak-rss=%ldMiB\n",
              stress::allocator_name(), lanes, done, stress::g_peak_rss_mib);
  return 0;
}
