// stress-threads: many short-lived threads (-n, default 100000) passing memory between them.
//
// -t lanes run at once. In each lane, thread k receives a bag of objects from thread k-1 of its lane (which has
// exited by then), checks every object, frees about half of them (memory of a thread that no longer exists),
// allocates new ones of random sizes, and hands the bag to thread k+1; it also leaves one object in a
// thread-specific key whose destructor frees it at thread exit, and swaps one object with a shared slot that
// all lanes use (so frees also come from threads that are still running). Every object is checked before it is
// freed. Any failure prints "stress-threads: FAIL ..." and exits non-zero.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "stress.h"

namespace {

struct Obj {
  void* p;
  std::size_t size;
  std::uint64_t id;
};

constexpr int kBag = 8;
struct Bag {
  Obj objs[kBag];
  std::uint64_t seed;
  long thread_number;
};

constexpr std::size_t kShared = 64;
std::atomic<Obj*> g_shared[kShared];
pthread_key_t g_key;
std::atomic<long> g_key_frees{0}, g_objects{0};

void new_obj(Obj& o, stress::Rng& r, std::uint64_t id) {
  o.size = stress::random_size(r, 32 * 1024);
  o.id = id;
  o.p = std::malloc(o.size);
  if (o.p == nullptr) stress::fail("malloc(%zu) returned NULL", o.size);
  stress::fill(o.p, o.size, id);
}

void free_obj(Obj& o, const char* what) {
  stress::check_usable(o.p, o.size, what);
  stress::check(o.p, o.size, o.id, what);
  std::free(o.p);
  o.p = nullptr;
}

void key_destructor(void* v) {
  auto* o = static_cast<Obj*>(v);
  free_obj(*o, "thread-specific object at thread exit");
  std::free(o);
  g_key_frees++;
}

void* lane_thread(void* arg) {
  auto* bag = static_cast<Bag*>(arg);
  stress::Rng r(bag->seed);
  std::uint64_t id = static_cast<std::uint64_t>(bag->thread_number + 1) << 20;
  long made = 0;
  for (Obj& o : bag->objs) {
    if (o.p != nullptr) {
      stress::check(o.p, o.size, o.id, "received from the previous thread");
      if (r.chance(50)) free_obj(o, "free of the previous thread's object");
    }
    if (o.p == nullptr) {
      new_obj(o, r, id++);
      made++;
    }
  }
  // One object swapped with a slot shared by every lane.
  Obj& mine = bag->objs[r.below(kBag)];
  auto* boxed = static_cast<Obj*>(std::malloc(sizeof(Obj)));
  if (boxed == nullptr) stress::fail("malloc returned NULL");
  *boxed = mine;
  Obj* got = g_shared[r.below(kShared)].exchange(boxed, std::memory_order_acq_rel);
  if (got != nullptr) {
    stress::check(got->p, got->size, got->id, "taken from the shared slot");
    mine = *got;
    std::free(got);
  } else {
    new_obj(mine, r, id++);
    made++;
  }
  // One object freed by the thread-specific key's destructor at exit.
  auto* leave = static_cast<Obj*>(std::malloc(sizeof(Obj)));
  if (leave == nullptr) stress::fail("malloc returned NULL");
  new_obj(*leave, r, id++);
  pthread_setspecific(g_key, leave);
  g_objects.fetch_add(made + 1, std::memory_order_relaxed);
  bag->seed = r.next();
  return bag;
}

}  // namespace

int main(int argc, char** argv) {
  stress::Options opt = stress::parse(argc, argv, "stress-threads",
                                      "  -t: lanes of threads running at once (default 4)\n"
                                      "  -n: threads in all (default 100000); -s is not used");
  long total = opt.count ? opt.count : 100000;
  if (pthread_key_create(&g_key, key_destructor) != 0) stress::fail("pthread_key_create failed");
  int lanes = opt.threads;
  std::vector<Bag*> bags(lanes);
  std::vector<pthread_t> running(lanes);
  std::vector<bool> busy(lanes, false);
  for (int l = 0; l < lanes; l++) {
    bags[l] = static_cast<Bag*>(std::calloc(1, sizeof(Bag)));
    if (bags[l] == nullptr) stress::fail("calloc returned NULL");
    bags[l]->seed = opt.seed * 31 + l;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  long started = 0;
  while (started < total || std::find(busy.begin(), busy.end(), true) != busy.end()) {
    for (int l = 0; l < lanes; l++) {
      if (busy[l]) {
        void* ret = nullptr;
        if (pthread_join(running[l], &ret) != 0) stress::fail("pthread_join failed");
        if (ret != bags[l]) stress::fail("a thread returned the wrong bag");
        busy[l] = false;
      }
      if (started < total) {
        bags[l]->thread_number = started++;
        int rc = pthread_create(&running[l], &attr, lane_thread, bags[l]);
        if (rc != 0) stress::fail("pthread_create failed after %ld threads: error %d", started - 1, rc);
        busy[l] = true;
      }
    }
    if (started % 1024 < static_cast<long>(lanes)) {
      char when[96];
      std::snprintf(when, sizeof when, "after %ld threads (the live objects are at most %zu KiB)", started,
                    (static_cast<std::size_t>(lanes) * (kBag + 2) + kShared) * 32);
      stress::check_rss(opt, when);
    }
  }
  for (Bag* b : bags) {
    for (Obj& o : b->objs)
      if (o.p != nullptr) free_obj(o, "free at end");
    std::free(b);
  }
  stress::drain_slots(g_shared, [](Obj* o) {
    free_obj(*o, "free of a shared slot at end");
    std::free(o);
  });
  if (g_key_frees.load() != total)
    stress::fail("%ld thread-exit destructors ran, %ld threads", g_key_frees.load(), total);
  stress::check_rss(opt, "at the end");
  std::printf("stress-threads: ok allocator=%s lanes=%d threads=%ld objects=%ld peak-rss=%ldMiB\n",
              stress::allocator_name(), lanes, total, g_objects.load(), stress::g_peak_rss_mib);
  return 0;
}
