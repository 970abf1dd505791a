// stress-dlopen: threads dlopen and dlclose shared libraries that allocate in their constructors and free in
// their destructors, while other threads allocate.
//
// The plugins (libstress-plugin-{0,1,2}.so, beside this program) allocate C++ globals and a malloc'd table when
// loaded and check and free them when unloaded, keep thread_local objects with destructors, hand objects to the
// caller and free the caller's objects. -t threads loop for -s seconds: open a random plugin, take objects from it
// and give it objects, close it (often the last reference, so it is unloaded), then check and free what it
// handed out; objects also pass between threads through a shared table. Every object is checked before it is
// freed. Any failure prints "stress-dlopen: FAIL ..." and exits non-zero.
#include <dlfcn.h>
#include <limits.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "stress.h"

namespace {

struct Obj {
  void* p;
  std::size_t size;
  std::uint64_t id;
};

constexpr int kPlugins = 3;
std::string g_plugin_path[kPlugins];
constexpr std::size_t kShared = 128;
std::atomic<Obj*> g_shared[kShared];
std::atomic<bool> g_stop{false};
std::atomic<long> g_loads{0}, g_objects{0};

using MakeFn = void* (*)(std::size_t, std::uint64_t);
using TakeFn = void (*)(void*, std::size_t, std::uint64_t);
using IdFn = int (*)();

void destroy(Obj* o, const char* what) {
  stress::check_usable(o->p, o->size, what);
  stress::check(o->p, o->size, o->id, what);
  std::free(o->p);
  std::free(o);
}

void worker(int t, std::uint64_t seed) {
  stress::Rng r(seed * 104729 + t);
  std::uint64_t id = static_cast<std::uint64_t>(t + 1) << 40;
  long loads = 0, objects = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    int k = static_cast<int>(r.below(kPlugins));
    void* h = dlopen(g_plugin_path[k].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) stress::fail("dlopen(%s): %s", g_plugin_path[k].c_str(), dlerror());
    auto make = reinterpret_cast<MakeFn>(dlsym(h, "stress_plugin_make"));
    auto take = reinterpret_cast<TakeFn>(dlsym(h, "stress_plugin_take"));
    auto which = reinterpret_cast<IdFn>(dlsym(h, "stress_plugin_id"));
    if (make == nullptr || take == nullptr || which == nullptr) stress::fail("dlsym: %s", dlerror());
    if (which() != k) stress::fail("plugin %d answers %d", k, which());
    std::vector<Obj*> got;
    int n = static_cast<int>(r.between(1, 16));
    for (int i = 0; i < n; i++) {
      auto* o = static_cast<Obj*>(std::malloc(sizeof(Obj)));
      if (o == nullptr) stress::fail("malloc returned NULL");
      o->size = stress::random_size(r, 256 * 1024);
      o->id = id++;
      o->p = make(o->size, o->id);
      got.push_back(o);
      std::size_t size = stress::random_size(r, 64 * 1024);
      void* mine = std::malloc(size);
      if (mine == nullptr) stress::fail("malloc(%zu) returned NULL", size);
      stress::fill(mine, size, id);
      take(mine, size, id++);
    }
    if (dlclose(h) != 0) stress::fail("dlclose: %s", dlerror());
    loads++;
    // What the (perhaps unloaded) plugin allocated: freed here, or passed to another thread.
    for (Obj* o : got) {
      if (r.chance(30)) {
        stress::check(o->p, o->size, o->id, "before publishing");
        o = g_shared[r.below(kShared)].exchange(o, std::memory_order_acq_rel);
      }
      if (o != nullptr) destroy(o, "free of a plugin's object");
      objects++;
    }
  }
  g_loads += loads;
  g_objects += objects;
}

}  // namespace

int main(int argc, char** argv) {
  stress::Options opt = stress::parse(argc, argv, "stress-dlopen",
                                      "  -t: threads (default 4); -s: seconds (default 2)");
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) stress::fail("readlink(/proc/self/exe) failed");
  self[n] = 0;
  std::string dir(self);
  dir.resize(dir.rfind('/'));
  for (int k = 0; k < kPlugins; k++) g_plugin_path[k] = dir + "/libstress-plugin-" + std::to_string(k) + ".so";
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.threads; t++) threads.emplace_back(worker, t, opt.seed);
  stress::run_checking_rss(opt, "while plugins are loaded and unloaded");
  g_stop = true;
  for (auto& th : threads) th.join();
  stress::drain_slots(g_shared, [](Obj* o) { destroy(o, "free at end"); });
  std::printf("stress-dlopen: ok allocator=%s threads=%d loads=%ld objects=%ld peak-rss=%ldMiB\n",
              stress::allocator_name(), opt.threads, g_loads.load(), g_objects.load(), stress::g_peak_rss_mib);
  return 0;
}
