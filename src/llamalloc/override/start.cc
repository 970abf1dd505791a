// The snapshot before the program's teardown (the file of LLAMALLOC_STATS_BEFORE_EXIT, the line of
// LLAMALLOC_STATS_SUMMARY): the statistics before the atexit handlers and static destructors that free the program's
// objects (the file and the line at exit, written by the library's destructor, come after them).
//
// - exit() called by the program: interposed; the snapshot comes first, then the C library's exit.
// - main returning: the C library then calls exit internally (not interposable). main is entered through a
//   trampoline that registers an atexit handler and jumps (not calls) to main, so main's frame and return address
//   are the ones it always has: the learned predictor's stack walks, and hence its token contexts, are unchanged
//   (a wrapper frame would change every context). Registered after every constructor, the handler runs before the
//   destructors of global and static objects and the atexit handlers registered before main; those registered
//   while main ran (function-local statics first used in main, atexit() in main) run before it.
// An atexit handler registered at the library's start would run after all of them: too late.
//
// libllamalloc.so only (preloaded or linked): it interposes __libc_start_main, through which a dynamically linked
// program's _start calls main, and exit. Not in libllamalloc.a, where defining them would replace the C library's
// in the program itself.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

#include "alloc/alloc.h"
#include "main_trampoline.h"
#include "options.h"
#include "stats.h"

namespace llamalloc {
namespace {

using MainFn = int (*)(int, char**, char**);
using StartFn = int (*)(MainFn, int, char**, void (*)(), void (*)(), void (*)(), void*);
using ExitFn = void (*)(int);

std::atomic<bool> g_snapshot_taken{false};
std::atomic<ExitFn> g_next_exit{nullptr};  // the C library's exit: looked up before main, not in exit itself

ExitFn next_exit() {
  ExitFn f = g_next_exit.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<ExitFn>(dlsym(RTLD_NEXT, "exit"));
    g_next_exit.store(f, std::memory_order_release);
  }
  return f;
}

bool wants_file_snapshot() {
  const Options& o = options();
  return o.stats_before_exit != 0 && o.stats != nullptr && *o.stats != 0;
}

// The summary line at exit (STATS_SUMMARY) describes this moment too, with or without a statistics file: a
// teardown may free most of what the program held, and the state a person asks about is the one before it.
bool wants_snapshot() { return wants_file_snapshot() || options().stats_summary != 0; }

void snapshot_before_exit() {
  if (!wants_snapshot() || g_snapshot_taken.exchange(true)) return;
  if (wants_file_snapshot()) write_stats_snapshot("before-exit");
  if (options().stats_summary != 0) keep_summary_before_exit();
}

}  // namespace
}  // namespace llamalloc

// The program's main, and what the trampoline calls before jumping to it.
extern "C" {
__attribute__((visibility("hidden"))) llamalloc::MainFn llamalloc_program_main = nullptr;
__attribute__((visibility("hidden"), used)) void llamalloc_register_before_exit() {
  atexit(llamalloc::snapshot_before_exit);
}
}

// main_trampoline(argc, argv, envp): registers the handler, then jumps to main (src/common/main_trampoline.h).
LLAMALLOC_DEFINE_MAIN_TRAMPOLINE(llamalloc_main_trampoline, llamalloc_register_before_exit, llamalloc_program_main)

extern "C" __attribute__((visibility("default"))) int __libc_start_main(llamalloc::MainFn main, int argc, char** argv,
                                                                        void (*init)(), void (*fini)(),
                                                                        void (*rtld_fini)(), void* stack_end) {
  using namespace llamalloc;
  auto next = reinterpret_cast<StartFn>(dlsym(RTLD_NEXT, "__libc_start_main"));
  if (next == nullptr) {
    write_stderr("llamalloc: error: __libc_start_main not found\n");
    _exit(127);
  }
  ensure_init();
  next_exit();
  if (wants_snapshot()) {
    llamalloc_program_main = main;
    main = llamalloc_main_trampoline;
  }
  return next(main, argc, argv, init, fini, rtld_fini, stack_end);
}

extern "C" __attribute__((visibility("default"))) void exit(int status) noexcept {
  using namespace llamalloc;
  snapshot_before_exit();
  if (ExitFn f = next_exit()) f(status);
  _exit(status);  // (no C library exit found: cannot happen in a dynamically linked program)
}
