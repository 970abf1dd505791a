// The entry points of libllamalloc_prof.so: malloc and friends, operator new and delete. Each one forwards to
// the next allocator in the lookup order (dlsym RTLD_NEXT: glibc, or whatever is preloaded after this library)
// and tells the profiler. A thread-local guard makes every allocation the profiler itself causes (dlsym,
// pthread_getattr_np, an operator new that calls malloc) go straight through, unrecorded.
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <new>

#include "alloc/realloc_rule.h"
#include "main_trampoline.h"
#include "platform.h"
#include "profiler.h"

using namespace llamalloc::prof;

namespace {

__thread bool t_guard __attribute__((tls_model("initial-exec")));
__thread bool t_initialising __attribute__((tls_model("initial-exec")));

class Guard {
 public:
  Guard() : was_(t_guard) { t_guard = true; }
  ~Guard() { t_guard = was_; }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  bool was_;
};

using MallocFn = void* (*)(size_t);
using FreeFn = void (*)(void*);
using CallocFn = void* (*)(size_t, size_t);
using ReallocFn = void* (*)(void*, size_t);
using MemalignFn = void* (*)(size_t, size_t);
using PosixMemalignFn = int (*)(void**, size_t, size_t);
using NewFn = void* (*)(size_t);
using NewNothrowFn = void* (*)(size_t, const std::nothrow_t&);
using NewAlignFn = void* (*)(size_t, std::align_val_t);
using NewAlignNothrowFn = void* (*)(size_t, std::align_val_t, const std::nothrow_t&);
using DeleteFn = void (*)(void*);
using UsableSizeFn = size_t (*)(void*);

struct Next {
  MallocFn malloc;
  FreeFn free;
  CallocFn calloc;
  ReallocFn realloc;
  MemalignFn memalign;
  PosixMemalignFn posix_memalign;
  MemalignFn aligned_alloc;
  MallocFn valloc;
  MallocFn pvalloc;
  UsableSizeFn usable_size;  // may be null: an allocator underneath without malloc_usable_size
};
Next g_next;
std::atomic<int> g_state{0};  // 0: not started, 1: resolving, 2: ready

// dlsym allocates (its error buffer, through calloc) before the allocator underneath is known: those few
// requests are served from this buffer and their frees ignored.
alignas(64) char g_bootstrap[64 * 1024];
std::atomic<size_t> g_bootstrap_used{0};
constexpr size_t kBootstrapHeader = 16;

bool is_bootstrap(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto base = reinterpret_cast<uintptr_t>(g_bootstrap);
  return a >= base && a < base + sizeof(g_bootstrap);
}

void* bootstrap_alloc(size_t size, size_t alignment) {
  if (alignment < kBootstrapHeader) alignment = kBootstrapHeader;
  size_t used = g_bootstrap_used.load();
  while (true) {
    size_t start = (used + kBootstrapHeader + alignment - 1) & ~(alignment - 1);
    size_t end = start + size;
    if (end > sizeof(g_bootstrap)) return nullptr;
    if (g_bootstrap_used.compare_exchange_weak(used, end)) {
      memcpy(g_bootstrap + start - sizeof(size_t), &size, sizeof(size_t));
      return g_bootstrap + start;  // zeroed: static storage never reused
    }
  }
}

size_t bootstrap_size(const void* p) {
  size_t size;
  memcpy(&size, static_cast<const char*>(p) - sizeof(size_t), sizeof(size_t));
  return size;
}

template <typename T>
T resolve(const char* name) {
  return reinterpret_cast<T>(dlsym(RTLD_NEXT, name));
}

void initialise() {
  int expected = 0;
  if (g_state.compare_exchange_strong(expected, 1)) {
    t_initialising = true;
    Guard guard;
    Next n;
    n.malloc = resolve<MallocFn>("malloc");
    n.free = resolve<FreeFn>("free");
    n.calloc = resolve<CallocFn>("calloc");
    n.realloc = resolve<ReallocFn>("realloc");
    n.memalign = resolve<MemalignFn>("memalign");
    n.posix_memalign = resolve<PosixMemalignFn>("posix_memalign");
    n.aligned_alloc = resolve<MemalignFn>("aligned_alloc");
    n.valloc = resolve<MallocFn>("valloc");
    n.pvalloc = resolve<MallocFn>("pvalloc");
    n.usable_size = resolve<UsableSizeFn>("malloc_usable_size");
    g_next = n;
    g_state.store(2, std::memory_order_release);
    init_profiler();  // after g_state: from here on, its own allocations go to the allocator underneath
    t_initialising = false;
    return;
  }
  if (t_initialising) return;  // dlsym calling back into us: the bootstrap buffer serves it
  while (g_state.load(std::memory_order_acquire) != 2) __builtin_ia32_pause();
}

inline bool ready() {
  if (LLPROF_LIKELY(g_state.load(std::memory_order_acquire) == 2)) return true;
  initialise();
  return g_state.load(std::memory_order_acquire) == 2;
}

constexpr size_t kDefaultAlignment = alignof(std::max_align_t);

inline void* allocated(void* p, size_t size, size_t alignment) {
  if (p != nullptr) on_alloc(p, size, alignment, 0);
  return p;
}

inline void recorded_free(void* p, void (*release)(void*)) {
  FreeTicket ticket;
  begin_free(p, &ticket);
  release(p);
  commit_free(p, ticket, 0);
}

void* realloc_impl(void* old, size_t size) {
  if (old != nullptr && is_bootstrap(old)) {
    void* p = malloc(size);
    if (p != nullptr) {
      size_t old_size = bootstrap_size(old);
      memcpy(p, old, old_size < size ? old_size : size);
    }
    return p;
  }
  if (!ready()) return bootstrap_alloc(size, kDefaultAlignment);
  if (t_guard) return g_next.realloc(old, size);
  Guard guard;
  if (old == nullptr) return allocated(g_next.realloc(nullptr, size), size, kDefaultAlignment);
  FreeTicket ticket;
  begin_free(old, &ticket);
  // A profile records what llamalloc would do (alloc/realloc_rule.h): where its realloc keeps the object in its
  // block, the process makes no new object and the allocation context stays the first one, so the profile keeps
  // the object too, under its new address if the allocator underneath moved it. The old request's size is the
  // sampled object's; an unsampled one's is taken as the usable size underneath (a few bytes more). A trace
  // records both halves; the simulator applies the rule (docs/simulator.md).
  bool in_place = false;
  if (size != 0 && current_mode() == Mode::kProfile) {
    size_t old_size = ticket.sampled ? ticket.object.size_bytes
                      : g_next.usable_size != nullptr ? g_next.usable_size(old) : 0;
    in_place = old_size != 0 && llamalloc::realloc_stays_in_place(old_size, size);
  }
  void* p = g_next.realloc(old, size);
  if (p == nullptr && size != 0) {
    abort_free(ticket);  // the old object is still there
    return nullptr;
  }
  if (in_place) {
    moved_in_place(p, ticket);
    return p;
  }
  commit_free(old, ticket, kEventFromRealloc);
  if (p != nullptr) on_alloc(p, size, kDefaultAlignment, kEventFromRealloc);
  return p;
}

}  // namespace

extern "C" {

// malloc, free and calloc are the hot ones: the allocator underneath is called without the guard (nothing of
// the profiler runs inside it), and the profiler only when its inlined fast path says so.
__attribute__((visibility("default"))) void* malloc(size_t size) {
  if (LLPROF_UNLIKELY(!ready())) return bootstrap_alloc(size, kDefaultAlignment);
  void* p = g_next.malloc(size);
  if (LLPROF_LIKELY(t_guard || alloc_is_quiet(size)) || p == nullptr) return p;
  Guard guard;
  on_alloc(p, size, kDefaultAlignment, 0);
  return p;
}

__attribute__((visibility("default"))) void free(void* p) {
  if (p == nullptr || LLPROF_UNLIKELY(is_bootstrap(p))) return;
  if (LLPROF_UNLIKELY(!ready())) return;  // cannot happen: p came from an allocator we found
  if (LLPROF_LIKELY(t_guard || free_is_quiet(p))) return g_next.free(p);
  Guard guard;
  recorded_free(p, g_next.free);
}

__attribute__((visibility("default"))) void* calloc(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  if (LLPROF_UNLIKELY(!ready())) return bootstrap_alloc(total, kDefaultAlignment);
  void* p = g_next.calloc(n, size);
  if (LLPROF_LIKELY(t_guard || alloc_is_quiet(total)) || p == nullptr) return p;
  Guard guard;
  on_alloc(p, total, kDefaultAlignment, 0);
  return p;
}

__attribute__((visibility("default"))) void* realloc(void* old, size_t size) { return realloc_impl(old, size); }

__attribute__((visibility("default"))) void* reallocarray(void* old, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc_impl(old, total);
}

__attribute__((visibility("default"))) void* memalign(size_t alignment, size_t size) {
  if (LLPROF_UNLIKELY(!ready())) return bootstrap_alloc(size, alignment);
  if (t_guard) return g_next.memalign(alignment, size);
  Guard guard;
  return allocated(g_next.memalign(alignment, size), size, alignment);
}

__attribute__((visibility("default"))) void* aligned_alloc(size_t alignment, size_t size) {
  if (LLPROF_UNLIKELY(!ready())) return bootstrap_alloc(size, alignment);
  if (t_guard) return g_next.aligned_alloc(alignment, size);
  Guard guard;
  return allocated(g_next.aligned_alloc(alignment, size), size, alignment);
}

__attribute__((visibility("default"))) int posix_memalign(void** out, size_t alignment, size_t size) {
  if (LLPROF_UNLIKELY(!ready())) {
    *out = bootstrap_alloc(size, alignment);
    return *out != nullptr ? 0 : ENOMEM;
  }
  if (t_guard) return g_next.posix_memalign(out, alignment, size);
  Guard guard;
  int rc = g_next.posix_memalign(out, alignment, size);
  if (rc == 0) allocated(*out, size, alignment);
  return rc;
}

__attribute__((visibility("default"))) void* valloc(size_t size) {
  if (LLPROF_UNLIKELY(!ready())) return bootstrap_alloc(size, 4096);
  if (t_guard) return g_next.valloc(size);
  Guard guard;
  return allocated(g_next.valloc(size), size, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
}

__attribute__((visibility("default"))) void* pvalloc(size_t size) {
  if (LLPROF_UNLIKELY(!ready())) return bootstrap_alloc(size, 4096);
  if (t_guard) return g_next.pvalloc(size);
  Guard guard;
  return allocated(g_next.pvalloc(size), size, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
}

}  // extern "C"

// ---- operator new and delete ----------------------------------------------------------------------------------
// Forwarded to the next definition (libstdc++'s, which calls malloc, or a peer allocator's own) under the guard,
// so that a libstdc++ operator new is recorded once, as new, not again as its inner malloc.

namespace {

template <typename Fn>
Fn next_operator(std::atomic<Fn>& slot, const char* name) {
  Fn f = slot.load(std::memory_order_acquire);
  if (LLPROF_UNLIKELY(f == nullptr)) {
    Guard guard;
    f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    slot.store(f, std::memory_order_release);
  }
  return f;
}

#define LLPROF_NEXT(type, name)                    \
  ([]() {                                          \
    static std::atomic<type> slot{nullptr};        \
    return next_operator<type>(slot, name);         \
  }())

template <typename Call>
void* new_impl(size_t size, size_t alignment, Call call) {
  if (!ready() || t_guard) return call();
  void* p;
  {
    Guard guard;  // libstdc++'s operator new calls malloc: that inner call is not a second allocation
    p = call();   // may throw std::bad_alloc: the guard is restored on the way out
  }
  if (LLPROF_LIKELY(alloc_is_quiet(size)) || p == nullptr) return p;
  Guard guard;
  on_alloc(p, size, alignment, 0);
  return p;
}

template <typename Call>
void delete_impl(void* p, Call call) {
  if (p == nullptr) return;
  if (!ready() || t_guard || free_is_quiet(p)) return call();
  Guard guard;
  FreeTicket ticket;
  begin_free(p, &ticket);
  call();
  commit_free(p, ticket, 0);
}

}  // namespace

#define LLPROF_EXPORT __attribute__((visibility("default")))

LLPROF_EXPORT void* operator new(size_t size) {
  return new_impl(size, kDefaultAlignment, [&] { return LLPROF_NEXT(NewFn, "_Znwm")(size); });
}
LLPROF_EXPORT void* operator new[](size_t size) {
  return new_impl(size, kDefaultAlignment, [&] { return LLPROF_NEXT(NewFn, "_Znam")(size); });
}
LLPROF_EXPORT void* operator new(size_t size, const std::nothrow_t& nt) noexcept {
  return new_impl(size, kDefaultAlignment,
                 [&] { return LLPROF_NEXT(NewNothrowFn, "_ZnwmRKSt9nothrow_t")(size, nt); });
}
LLPROF_EXPORT void* operator new[](size_t size, const std::nothrow_t& nt) noexcept {
  return new_impl(size, kDefaultAlignment,
                 [&] { return LLPROF_NEXT(NewNothrowFn, "_ZnamRKSt9nothrow_t")(size, nt); });
}
LLPROF_EXPORT void* operator new(size_t size, std::align_val_t al) {
  return new_impl(size, static_cast<size_t>(al),
                 [&] { return LLPROF_NEXT(NewAlignFn, "_ZnwmSt11align_val_t")(size, al); });
}
LLPROF_EXPORT void* operator new[](size_t size, std::align_val_t al) {
  return new_impl(size, static_cast<size_t>(al),
                 [&] { return LLPROF_NEXT(NewAlignFn, "_ZnamSt11align_val_t")(size, al); });
}
LLPROF_EXPORT void* operator new(size_t size, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  return new_impl(size, static_cast<size_t>(al), [&] {
    return LLPROF_NEXT(NewAlignNothrowFn, "_ZnwmSt11align_val_tRKSt9nothrow_t")(size, al, nt);
  });
}
LLPROF_EXPORT void* operator new[](size_t size, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  return new_impl(size, static_cast<size_t>(al), [&] {
    return LLPROF_NEXT(NewAlignNothrowFn, "_ZnamSt11align_val_tRKSt9nothrow_t")(size, al, nt);
  });
}

using DeleteSizedFn = void (*)(void*, size_t);
using DeleteNothrowFn = void (*)(void*, const std::nothrow_t&);
using DeleteAlignFn = void (*)(void*, std::align_val_t);
using DeleteSizedAlignFn = void (*)(void*, size_t, std::align_val_t);
using DeleteAlignNothrowFn = void (*)(void*, std::align_val_t, const std::nothrow_t&);

LLPROF_EXPORT void operator delete(void* p) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteFn, "_ZdlPv")(p); });
}
LLPROF_EXPORT void operator delete[](void* p) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteFn, "_ZdaPv")(p); });
}
LLPROF_EXPORT void operator delete(void* p, size_t n) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteSizedFn, "_ZdlPvm")(p, n); });
}
LLPROF_EXPORT void operator delete[](void* p, size_t n) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteSizedFn, "_ZdaPvm")(p, n); });
}
LLPROF_EXPORT void operator delete(void* p, const std::nothrow_t& nt) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteNothrowFn, "_ZdlPvRKSt9nothrow_t")(p, nt); });
}
LLPROF_EXPORT void operator delete[](void* p, const std::nothrow_t& nt) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteNothrowFn, "_ZdaPvRKSt9nothrow_t")(p, nt); });
}
LLPROF_EXPORT void operator delete(void* p, std::align_val_t al) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteAlignFn, "_ZdlPvSt11align_val_t")(p, al); });
}
LLPROF_EXPORT void operator delete[](void* p, std::align_val_t al) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteAlignFn, "_ZdaPvSt11align_val_t")(p, al); });
}
LLPROF_EXPORT void operator delete(void* p, size_t n, std::align_val_t al) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteSizedAlignFn, "_ZdlPvmSt11align_val_t")(p, n, al); });
}
LLPROF_EXPORT void operator delete[](void* p, size_t n, std::align_val_t al) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteSizedAlignFn, "_ZdaPvmSt11align_val_t")(p, n, al); });
}
LLPROF_EXPORT void operator delete(void* p, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteAlignNothrowFn, "_ZdlPvSt11align_val_tRKSt9nothrow_t")(p, al, nt); });
}
LLPROF_EXPORT void operator delete[](void* p, std::align_val_t al, const std::nothrow_t& nt) noexcept {
  delete_impl(p, [&] { LLPROF_NEXT(DeleteAlignNothrowFn, "_ZdaPvSt11align_val_tRKSt9nothrow_t")(p, al, nt); });
}

namespace {

// initialise at load time as well (the first malloc usually comes earlier), and write the profile last: this
// library is loaded first, so its destructor runs after those of the program and the other libraries.
__attribute__((constructor)) void load_time() { ready(); }

__attribute__((destructor)) void unload_time() {
  Guard guard;
  profiler_at_exit();
}

}  // namespace

// ---- teardown ---------------------------------------------------------------------------------------------------
// The program's teardown begins when main returns or exit() is called: from then on the profiler counts what is
// freed as live at exit (profiler.h, profiler_teardown). Caught as libllamalloc.so catches it for its snapshot
// before exit (src/llamalloc/override/start.cc), with names of our own so that both libraries may be preloaded
// together (each chains to the next definition):
// - exit() called by the program: interposed; teardown begins, then the C library's exit.
// - main returning: the C library then calls its exit internally (not interposable). main is entered through a
//   trampoline that registers an exit handler and jumps (not calls) to main, so main's frame and return address,
//   and hence every recorded stack, are unchanged. Exit handlers run last registered first: one registered
//   while main runs (a function-local static's destructor, atexit() in main) would run before ours, so
//   __cxa_atexit is interposed too, and after every registration made once main has started, our handler is
//   registered again behind it (it acts once). Thread-local destructors of the main thread run before any of
//   them.
// Only while the profiler is on; otherwise main is called as it is.

namespace {

using MainFn = int (*)(int, char**, char**);
using StartFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
using ExitFn = void (*)(int);
using CxaAtexitFn = int (*)(void (*)(void*), void*, void*);

std::atomic<ExitFn> g_next_exit{nullptr};
std::atomic<CxaAtexitFn> g_next_cxa_atexit{nullptr};
std::atomic<bool> g_main_started{false};

// The next definitions (the C library's, or another preloaded library's), looked up once as the operators are.
ExitFn next_exit() { return next_operator(g_next_exit, "exit"); }
CxaAtexitFn next_cxa_atexit() { return next_operator(g_next_cxa_atexit, "__cxa_atexit"); }

void teardown_begins() {
  if (!ready()) return;
  Guard guard;
  profiler_teardown();
}

void teardown_handler(void*) { teardown_begins(); }

}  // namespace

extern "C" {
extern void* __dso_handle;
__attribute__((visibility("hidden"))) MainFn llamalloc_prof_program_main = nullptr;
__attribute__((visibility("hidden"), used)) void llamalloc_prof_before_main() {
  if (CxaAtexitFn next = next_cxa_atexit()) next(teardown_handler, nullptr, &__dso_handle);
  g_main_started.store(true, std::memory_order_release);
}
}

// llamalloc_prof_main_trampoline(argc, argv, envp): registers the handler, then jumps to main with the registers
// and stack as they were, so that main's frame (and every calling context) is unchanged.
LLAMALLOC_DEFINE_MAIN_TRAMPOLINE(llamalloc_prof_main_trampoline, llamalloc_prof_before_main,
                                 llamalloc_prof_program_main)

extern "C" {

LLPROF_EXPORT int __libc_start_main(MainFn main, int argc, char** argv, void (*init)(), void (*fini)(),
                                    void (*rtld_fini)(), void* stack_end) {
  StartFn next;
  {
    ready();
    Guard guard;
    next = reinterpret_cast<StartFn>(dlsym(RTLD_NEXT, "__libc_start_main"));
  }
  if (next == nullptr) {
    static const char kMessage[] = "llamalloc_prof: error: __libc_start_main not found\n";
    write_all(2, kMessage, sizeof(kMessage) - 1);
    _exit(127);
  }
  next_exit();  // looked up now, not in exit
  next_cxa_atexit();
  if (current_mode() != Mode::kOff) {
    llamalloc_prof_program_main = main;
    main = llamalloc_prof_main_trampoline;
  }
  return next(main, argc, argv, init, fini, rtld_fini, stack_end);
}

LLPROF_EXPORT int __cxa_atexit(void (*fn)(void*), void* arg, void* dso) {
  CxaAtexitFn next = next_cxa_atexit();
  if (next == nullptr) return -1;
  int rc = next(fn, arg, dso);
  if (rc == 0 && g_main_started.load(std::memory_order_acquire) && current_mode() != Mode::kOff) {
    next(teardown_handler, nullptr, &__dso_handle);
  }
  return rc;
}

LLPROF_EXPORT void exit(int status) noexcept {
  teardown_begins();
  if (ExitFn f = next_exit()) f(status);
  _exit(status);  // (no C library exit found: cannot happen in a dynamically linked program)
}

}  // extern "C"
