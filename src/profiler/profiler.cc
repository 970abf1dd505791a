// The profiler's core: the LLAMALLOC_PROF_* options, the start, the state both modes share, the child of a
// fork, fatal signals, teardown and exit, and the entry points that pass each event to the mode in force -- the
// sampling profile (profile_mode.cc) or the trace (trace_mode.cc). Rules: the mode (g_mode) is set once the
// mode's tables and files are ready, and goes off before its last file is written, so nothing is recorded into
// a finished file; nothing here runs without the reentrancy guard set (profiler.h).
#include "profiler.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>

#include "base.h"
#include "options.h"
#include "profiler_internal.h"
#include "program_clock.h"

namespace llamalloc::prof {

std::atomic<int> g_mode{static_cast<int>(Mode::kOff)};

Options g_options;
char g_exe_path[kPathBytes];
uint64_t g_pid;
uint64_t g_start_time_ns;
uint64_t g_start_mono_ns;

StackTable g_stacks;
std::atomic<uint64_t> g_sampled{0};
std::atomic<uint64_t> g_dropped{0};
std::atomic<uint64_t> g_events{0};
std::atomic<uint64_t> g_teardown_ns{0};

__thread ThreadState t_state __attribute__((tls_model("initial-exec")));

std::atomic<uint64_t> g_overhead_fx{0};
std::atomic<uint64_t> g_overhead_at_ns{0};
uint64_t g_overhead_start_ns = 0;
std::atomic<uint64_t> g_window_counts{0};
uint64_t g_clock_read_fx;
std::atomic<uint64_t> g_last_stamp_ns{0};
__thread ThreadClock t_clock __attribute__((tls_model("initial-exec")));

namespace {

// The first process's pid: a forked child's output path differs from it.
uint64_t g_first_pid;

}  // namespace

// A forked child whose template has no %p appends ".<pid>", so that it does not overwrite its parent's file. (A
// program started by exec gets the same template and cannot tell: `llamalloc record` and `trace` always use %p.)
void output_path(char* out, size_t capacity) {
  size_t n = 0;
  bool had_pid = false;
  for (const char* p = g_options.output_template; *p != '\0' && n + 24 < capacity; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      n += static_cast<size_t>(snprintf(out + n, capacity - n, "%llu", static_cast<unsigned long long>(g_pid)));
      had_pid = true;
      ++p;
    } else {
      out[n++] = *p;
    }
  }
  if (!had_pid && g_pid != g_first_pid && n + 24 < capacity) {
    n += static_cast<size_t>(snprintf(out + n, capacity - n, ".%llu", static_cast<unsigned long long>(g_pid)));
  }
  out[n] = '\0';
}

namespace {

// ---- fatal signals ----------------------------------------------------------------------------------------
// A program killed by a signal runs no exit handlers. For the signals whose default action ends the process,
// and that the program leaves at their default, the profiler writes its profile (or closes its trace) first,
// then restores the default and re-raises, so the program still dies of the same signal.

constexpr int kFatalSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};

void on_fatal_signal(int signal_number) {
  Mode mode = current_mode();
  if (mode == Mode::kProfile) {
    end_profile_in_signal();
  } else if (mode == Mode::kTrace) {
    end_trace(/*in_signal=*/true);
  }
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(signal_number, &sa, nullptr);
  raise(signal_number);  // delivered when this handler returns (or at once, for a fault: it happens again)
}

void install_fatal_signal_handlers() {
  for (int signal_number : kFatalSignals) {
    if (signal_number == g_options.signal_number) continue;
    struct sigaction old {};
    if (sigaction(signal_number, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(signal_number, &sa, nullptr);
  }
}

// ---- set-up ------------------------------------------------------------------------------------------------

// The LLAMALLOC_PROF_* options, from the table of options.h: a bad value warns and keeps the default, a
// misspelled LLAMALLOC_PROF_ name warns with the closest one.
void read_options() {
  static_assert(int(Mode::kOff) == 0 && int(Mode::kProfile) == 1 && int(Mode::kTrace) == 2,
                "the words of PROF_MODE, in order");
  static_assert(int(UnwindMode::kAuto) == 0 && int(UnwindMode::kFramePointers) == 1 &&
                    int(UnwindMode::kDwarf) == 2,
                "the words of PROF_UNWIND, in order");
  const ProfilerOptions p = read_profiler_options([](const char* name) -> const char* { return getenv(name); });
  check_environment_names(environ, write_stderr, /*profiler_names=*/true);
  Options& o = g_options;
  o.mode = static_cast<Mode>(p.mode);
  o.sample_bytes = p.sample_bytes != 0 ? p.sample_bytes : 1;
  o.interval_ns = p.interval_ns;
  o.signal_number = static_cast<int>(p.signal);
  o.unwind = static_cast<UnwindMode>(p.unwind);
  o.steady_end_ns = p.steady_end_ns;
  o.steady_start_ns = p.steady_start_ns > p.steady_end_ns ? p.steady_end_ns : p.steady_start_ns;
  o.debug = p.debug != 0;
  const char* out = p.output;
  if (*out == '\0') out = o.mode == Mode::kTrace ? "llamalloc-%p.trace" : "llamalloc-%p.rawprof";
  snprintf(o.output_template, sizeof(o.output_template), "%s", out);
}

bool set_up_tables() {
  g_sampled.store(0);
  g_dropped.store(0);
  g_events.store(0);
  return g_stacks.init() && (g_options.mode != Mode::kProfile || init_profile_tables());
}

void child_after_fork() {
  // The child is a new process with one thread: it gets tables and an output of its own.
  Mode mode = current_mode();
  if (mode == Mode::kOff) return;
  g_pid = static_cast<uint64_t>(getpid());
  t_state.tid = 0;
  g_start_time_ns = realtime_ns();
  g_start_mono_ns = monotonic_ns();
  reset_program_clock_after_fork();
  reset_profile_lock_after_fork();
  reset_trace_locks_after_fork();
  stack_capture_after_fork();
  if (!set_up_tables()) {
    g_mode.store(static_cast<int>(Mode::kOff));
    return;
  }
  arm_profile_timers();
  g_teardown_ns.store(0);
  if (mode == Mode::kTrace && !restart_trace_after_fork()) g_mode.store(static_cast<int>(Mode::kOff));
}

void print_counts() {
  StackCaptureStats st = stack_capture_stats();
  char line[256];
  int n = snprintf(line, sizeof(line),
                   "llamalloc_prof[%llu]: sampled %llu, events %llu, dropped %llu, stacks %u, "
                   "frame-pointer walks %llu, dwarf walks %llu\n",
                   static_cast<unsigned long long>(g_pid),
                   static_cast<unsigned long long>(g_sampled.load()),
                   static_cast<unsigned long long>(g_events.load()),
                   static_cast<unsigned long long>(g_dropped.load()), g_stacks.count(),
                   static_cast<unsigned long long>(st.frame_pointer_walks),
                   static_cast<unsigned long long>(st.dwarf_walks));
  if (n > 0) write_all(2, line, static_cast<size_t>(n));
}

}  // namespace

Mode current_mode() { return static_cast<Mode>(g_mode.load(std::memory_order_relaxed)); }

void init_profiler() {
  read_options();
  if (g_options.mode == Mode::kOff) return;
  g_pid = static_cast<uint64_t>(getpid());
  g_first_pid = g_pid;
  g_start_time_ns = realtime_ns();
  g_start_mono_ns = monotonic_ns();
  ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof(g_exe_path) - 1);
  g_exe_path[n > 0 ? n : 0] = '\0';
  bool have_profile_buffer = init_profile_buffer();
  bool have_trace_buffer = init_trace_buffer();
  if (!have_profile_buffer || !have_trace_buffer || !set_up_tables()) return;
  init_stack_capture(g_options.unwind);
  calibrate_program_clock();
  if (g_options.mode == Mode::kTrace) {
    if (!start_trace()) return;
  } else {
    arm_profile_timers();
    g_teardown_ns.store(0);
    install_dump_signal();
  }
  install_fatal_signal_handlers();
  pthread_atfork(nullptr, nullptr, child_after_fork);
  g_mode.store(static_cast<int>(g_options.mode), std::memory_order_release);
}

// The program clock (program_clock.h) times the work that costs: an allocation's hook (a stack walk, table
// updates, a profile dump) and the write of a trace buffer (trace_mode.cc). A free's own work -- a clock read, a
// table lookup, 40 bytes appended to a buffer -- costs about what timing it would, so it is not timed; its time
// is the program clock read once.

void on_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes, uint32_t flags) {
  HookTimer hook;
  Mode mode = current_mode();
  if (mode == Mode::kProfile) {
    profile_alloc(ptr, size_bytes, alignment_bytes);
  } else if (mode == Mode::kTrace) {
    trace_alloc(ptr, size_bytes, alignment_bytes, flags);
  }
}

void begin_free(void* ptr, FreeTicket* ticket) {
  ticket->sampled = false;
  Mode mode = current_mode();
  if (mode == Mode::kOff) return;
  if (mode == Mode::kProfile) {
    // From the start of teardown an object is not freed as far as the profile goes: it stays live (class 7).
    if (g_teardown_ns.load(std::memory_order_relaxed) != 0) return;
    ticket->sampled = g_live.remove(reinterpret_cast<uint64_t>(ptr), &ticket->object);
    if (ticket->sampled) ticket->time_ns = program_ns_untimed();
  } else {
    ticket->time_ns = program_ns_untimed();
  }
}

void commit_free(void* ptr, const FreeTicket& ticket, uint32_t flags) {
  Mode mode = current_mode();
  if (mode == Mode::kProfile) {
    if (ticket.sampled) record_lifetime(ticket.object, ticket.time_ns);
  } else if (mode == Mode::kTrace) {
    trace_free(ptr, ticket.time_ns, flags);
  }
}

void abort_free(const FreeTicket& ticket) {
  if (current_mode() == Mode::kProfile && ticket.sampled) g_live.insert(ticket.object);
}

void moved_in_place(void* ptr, const FreeTicket& ticket) {
  if (current_mode() != Mode::kProfile || !ticket.sampled) return;
  LiveObject moved = ticket.object;
  moved.address = reinterpret_cast<uint64_t>(ptr);
  g_live.insert(moved);
}

void profiler_teardown() {
  Mode mode = current_mode();
  if (mode == Mode::kOff) return;
  uint64_t not_yet = 0;
  if (!g_teardown_ns.compare_exchange_strong(not_yet, monotonic_ns())) return;
  // The trace ends here: every object alive now is live at the end of the trace.
  if (mode == Mode::kTrace) end_trace();
}

void profiler_at_exit() {
  Mode mode = current_mode();
  bool print_statistics = g_options.mode != Mode::kOff && g_options.debug;
  if (mode == Mode::kProfile) {
    end_profile();
  } else if (mode == Mode::kTrace) {
    end_trace();
  }
  if (print_statistics) print_counts();
}

}  // namespace llamalloc::prof

// The program clock for the program itself (workloads/common/program_clock.h finds it with dlsym): a phase timed
// on it lasts what it would without the profiler. 0 while the profiler is off.
extern "C" __attribute__((visibility("default"))) uint64_t llamalloc_prof_program_ns() {
  using namespace llamalloc::prof;
  return current_mode() == Mode::kOff ? 0 : program_ns();
}
