// stress-random: randomised multi-threaded malloc / calloc / realloc / posix_memalign / aligned_alloc / memalign /
// valloc / free, with content checks and cross-thread frees.
//
// Each thread owns a table of slots. An operation picks a slot: an empty one gets a new object (a random size from
// 1 B to 4 MiB, a random allocation function); a full one is checked and then freed, realloc'd (the common prefix
// must survive, the rest is refilled), or swapped through a shared exchange table with whatever another thread
// left there (so objects move between threads and most of them are freed by a thread that did not allocate them).
// Every object is filled with a pattern derived from its identity and checked before every free, realloc and
// swap; alignment, calloc's zeroes and malloc_usable_size are checked too. Any mismatch prints one line
// "stress-random: FAIL ..." and aborts. The timed part runs -s seconds; then every object is checked and freed.
#include <atomic>
#include <thread>
#include <vector>

#include "stress.h"

namespace {

struct Obj {
  void* p;
  std::size_t size;
  std::uint64_t id;
  std::size_t align;  // 0: the default alignment
};

constexpr std::size_t kExchange = 256;
std::atomic<Obj*> g_exchange[kExchange];
std::atomic<long> g_ops{0}, g_swaps{0}, g_reallocs{0}, g_live_max{0};
std::atomic<bool> g_stop{false};

void verify(const Obj* o, const char* what) {
  std::size_t a = o->align ? o->align : alignof(std::max_align_t);
  if (reinterpret_cast<std::uintptr_t>(o->p) % a != 0) stress::fail("%s: %p not aligned to %zu", what, o->p, a);
  stress::check_usable(o->p, o->size, what);
  stress::check(o->p, o->size, o->id, what);
}

Obj* make(stress::Rng& r, std::uint64_t id) {
  std::size_t n = stress::random_size(r, 4 << 20);
  Obj* o = static_cast<Obj*>(std::malloc(sizeof(Obj)));
  if (o == nullptr) stress::fail("malloc(%zu) returned NULL", sizeof(Obj));
  o->size = n;
  o->id = id;
  o->align = 0;
  void* p = nullptr;
  switch (r.below(9)) {
    case 0: case 1: case 2: p = std::malloc(n); break;
    case 3: {
      std::size_t count = r.between(1, 8);
      n = (n + count - 1) / count * count;
      o->size = n;
      p = std::calloc(count, n / count);
      if (p) stress::check_zero(p, n, "calloc");
      break;
    }
    case 4: p = std::realloc(nullptr, n); break;
    case 5: {
      std::size_t a = std::size_t{8} << r.below(10);  // 8 B .. 4 KiB
      o->align = a;
      int rc = posix_memalign(&p, a, n);
      if (rc != 0) stress::fail("posix_memalign(%zu, %zu) = %d", a, n, rc);
      break;
    }
    case 6: {
      std::size_t a = std::size_t{16} << r.below(13);  // 16 B .. 64 KiB
      o->align = a;
      p = std::aligned_alloc(a, (n + a - 1) / a * a);
      break;
    }
    case 7: {
      std::size_t a = std::size_t{32} << r.below(8);
      o->align = a;
      p = memalign(a, n);
      break;
    }
    default: {
      o->align = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
      p = valloc(n);
      break;
    }
  }
  if (p == nullptr) stress::fail("allocation of %zu bytes (alignment %zu) returned NULL", n, o->align);
  o->p = p;
  stress::fill(p, n, id);
  return o;
}

void destroy(Obj* o, const char* what) {
  verify(o, what);
  std::free(o->p);
  std::free(o);
}

void worker(int t, const stress::Options& opt, std::size_t slots) {
  stress::Rng r(opt.seed * 1000003 + t);
  std::vector<Obj*> table(slots, nullptr);
  std::uint64_t next_id = (static_cast<std::uint64_t>(t + 1) << 40);
  long ops = 0, swaps = 0, reallocs = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    for (int i = 0; i < 256; i++, ops++) {
      Obj*& o = table[r.below(slots)];
      if (o == nullptr) {
        o = make(r, next_id++);
        continue;
      }
      unsigned c = static_cast<unsigned>(r.below(100));
      if (c < 40) {
        destroy(o, "free");
        o = nullptr;
      } else if (c < 65) {
        verify(o, "before realloc");
        std::size_t n = stress::random_size(r, 4 << 20);
        void* q = std::realloc(o->p, n);
        if (q == nullptr) stress::fail("realloc(%p, %zu) returned NULL", o->p, n);
        std::size_t keep = n < o->size ? n : o->size;
        stress::check(q, keep, o->id, "realloc kept prefix");
        o->p = q;
        o->size = n;
        o->align = 0;
        o->id = next_id++;
        stress::fill(q, n, o->id);
        reallocs++;
      } else if (c < 90) {
        verify(o, "before hand-over");
        Obj* got = g_exchange[r.below(kExchange)].exchange(o, std::memory_order_acq_rel);
        if (got != nullptr) verify(got, "taken over from another thread");
        o = got;
        swaps++;
      } else {
        verify(o, "check in place");
      }
    }
  }
  for (Obj*& o : table)
    if (o != nullptr) destroy(o, "free at end");
  g_ops += ops;
  g_swaps += swaps;
  g_reallocs += reallocs;
}

}  // namespace

int main(int argc, char** argv) {
  stress::Options opt = stress::parse(argc, argv, "stress-random",
                                      "  -n: slots per thread (default 512); -s: seconds (default 2)");
  std::size_t slots = opt.count ? static_cast<std::size_t>(opt.count) : 512;
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.threads; t++) threads.emplace_back(worker, t, std::cref(opt), slots);
  stress::run_checking_rss(opt, "while threads allocate");
  g_stop = true;
  for (auto& th : threads) th.join();
  stress::drain_slots(g_exchange, [](Obj* o) { destroy(o, "free from the exchange at end"); });
  std::printf("stress-random: ok allocator=%s threads=%d ops=%ld reallocs=%ld hand-overs=%ld peak-rss=%ldMiB\n",
              stress::allocator_name(), opt.threads, g_ops.load(), g_reallocs.load(), g_swaps.load(),
              stress::g_peak_rss_mib);
  return 0;
}
