// The profiler as the entry points of interpose.cc see it: its mode, the slow paths they call, and the fast
// paths inlined into them. The slow paths are in profiler.cc, which passes each event to the mode in force
// (profile_mode.cc, trace_mode.cc). Every function here runs with the reentrancy guard set (an allocation it
// causes goes straight to the allocator underneath) and takes its own locks only around table updates, never
// while unwinding.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "sampling.h"
#include "tables.h"

namespace llamalloc::prof {

enum class Mode { kOff, kProfile, kTrace };

// Reads the LLAMALLOC_PROF_* options (options.h; docs/options.md, "Profiler") and sets the profiler up. Called
// once, after the allocator underneath has been found.
void init_profiler();
Mode current_mode();

// The slow paths. The entry points call them only when the fast paths below say there is something to do,
// with the reentrancy guard set.
void on_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes, uint32_t flags);

// A free is recorded in two steps around the real free: Begin before it (afterwards another thread may already
// have been given the same address), Commit once it is done, Abort when a failed realloc kept the object.
struct FreeTicket {
  uint64_t time_ns;  // the program clock at the free (program_clock.h)
  bool sampled;
  LiveObject object;
};
void begin_free(void* ptr, FreeTicket* ticket);
void commit_free(void* ptr, const FreeTicket& ticket, uint32_t flags);
void abort_free(const FreeTicket& ticket);
// A realloc that llamalloc would serve in place (alloc/realloc_rule.h): in a profile the object goes on, now at
// ptr, with its allocation's time and context. Profile mode only: a trace records both halves (interpose.cc).
void moved_in_place(void* ptr, const FreeTicket& ticket);

// The program's teardown begins: main returned or exit() was called (interpose.cc). In profile mode, frees
// after this are not lifetimes (the object stays live: class 7 in the final profile) and allocations are no
// longer sampled; in trace mode the trace ends here (docs/profiler.md, "Teardown"). Once per process.
void profiler_teardown();

// Writes the final profile or closes the trace. After it the profiler records nothing more.
void profiler_at_exit();

// ---- fast paths, inlined into the entry points --------------------------------------------------------------
extern std::atomic<int> g_mode;             // a Mode
extern std::atomic<bool> g_dump_requested;  // set by the signal handler
extern LiveTable g_live;
extern __thread Sampler t_sampler __attribute__((tls_model("initial-exec")));

// True when an allocation of this size needs nothing from the profiler: it is off, or the byte countdown of
// this thread has not run out and no profile was asked for.
inline bool alloc_is_quiet(size_t size_bytes) {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode == static_cast<int>(Mode::kOff)) return true;
  if (mode != static_cast<int>(Mode::kProfile) || g_dump_requested.load(std::memory_order_relaxed)) return false;
  return t_sampler.try_count_down(size_bytes);
}

// True when a free needs nothing from the profiler: it is off, or the object was not sampled.
inline bool free_is_quiet(const void* ptr) {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode == static_cast<int>(Mode::kOff)) return true;
  return mode == static_cast<int>(Mode::kProfile) && !g_live.maybe_contains(reinterpret_cast<uint64_t>(ptr));
}

}  // namespace llamalloc::prof
