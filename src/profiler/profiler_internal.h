// What the parts of the profiler share, inside libllamalloc_prof.so only: the options, the process's identity,
// the stack table and the counts (defined in profiler.cc), and the interface of the two modes that profiler.cc
// drives -- the sampling profile (profile_mode.cc) and the trace (trace_mode.cc). Rules of every function
// declared here: it runs with the reentrancy guard set, takes the profiler's own locks only around table updates
// and file writes (never while unwinding), and allocates only the profiler's own memory (platform.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "platform.h"
#include "profiler.h"
#include "record_file.h"
#include "stack_capture.h"
#include "tables.h"

namespace llamalloc::prof {

constexpr size_t kPathBytes = 4096;
constexpr size_t kWriterBytes = 1 << 20;  // the write buffer of a profile dump, and that of the trace

// The LLAMALLOC_PROF_* options, read once at start (profiler.cc, read_options).
struct Options {
  Mode mode;
  uint64_t sample_bytes;
  uint64_t interval_ns;  // 0: only at exit and on the signal
  int signal_number;     // 0: none
  UnwindMode unwind;
  uint64_t steady_start_ns;  // --steady-state: sampling stops this long after start (UINT64_MAX: never)
  uint64_t steady_end_ns;    // ... and the steady-state profile is written this long after start (UINT64_MAX: none)
  bool debug;                // print the counts at exit
  char output_template[kPathBytes];
};

// ---- shared state (profiler.cc) ----------------------------------------------------------------------------
extern Options g_options;
extern char g_exe_path[kPathBytes];
extern uint64_t g_pid;
extern uint64_t g_start_time_ns;
extern uint64_t g_start_mono_ns;

extern StackTable g_stacks;                  // both modes intern their stacks here
extern std::atomic<uint64_t> g_sampled;      // profile mode: allocations sampled
extern std::atomic<uint64_t> g_dropped;      // events lost to a full table or no buffer
extern std::atomic<uint64_t> g_events;       // trace mode: events written
extern std::atomic<uint64_t> g_teardown_ns;  // when the program's teardown began; 0: not yet

struct ThreadState {
  uint32_t tid;
  bool sampler_ready;
};
extern __thread ThreadState t_state __attribute__((tls_model("initial-exec")));

inline uint32_t thread_id() {
  if (LLPROF_UNLIKELY(t_state.tid == 0)) t_state.tid = current_thread_id();
  return t_state.tid;
}

inline ProcessIdentity process_identity() { return {g_pid, g_start_time_ns, g_start_mono_ns, g_exe_path}; }

// The output path for this process: the template with %p replaced by the pid (profiler.cc).
void output_path(char* out, size_t capacity);

// ---- the sampling profile (profile_mode.cc) ----------------------------------------------------------------
bool init_profile_buffer();  // the dump's write buffer, once at start
bool init_profile_tables();  // the site and live tables, at start and in a forked child
void arm_profile_timers();   // the periodic dump and the steady-state window, from this process's start
void install_dump_signal();  // PROF_SIGNAL asks for a dump
void reset_profile_lock_after_fork();
void profile_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes);  // an allocation the countdown stopped at
void record_lifetime(const LiveObject& object, uint64_t free_time_ns);    // the free of a sampled object
void end_profile();            // at exit: the mode goes off and the final profile is written
void end_profile_in_signal();  // the same from a fatal-signal handler, unless a dump is under way

// ---- the trace (trace_mode.cc) -----------------------------------------------------------------------------
bool init_trace_buffer();  // the trace's write buffer, once at start
bool start_trace();        // the thread-exit flush, and the trace file with its header
void reset_trace_locks_after_fork();
bool restart_trace_after_fork();  // the child's buffers emptied and its own trace file opened
void trace_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes, uint32_t flags);
void trace_free(void* ptr, uint64_t time_ns, uint32_t flags);
void end_trace(bool in_signal = false);  // the mode goes off, every buffer is flushed and the file closed

}  // namespace llamalloc::prof
