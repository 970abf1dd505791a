// The program clock: CLOCK_MONOTONIC less the time the profiler itself spent in its hooks, so that lifetimes
// are measured in the program's own time. Under the tracer (or a profile of every allocation) the allocating
// code runs 8-14x slower while sleeps and I/O do not, so wall-clock lifetimes of a traced run are longer than
// in the real run and objects move into longer lifetime classes (docs/profiler.md, "Program time").
//
// The hooks (profiler.cc, trace_mode.cc): an allocation's slow path (stack walk, table updates, a profile dump),
// a traced free's two halves (its time stamp, and its event appended to the thread's buffer) and the write of a
// trace buffer. HookTimer reads CLOCK_MONOTONIC at a hook's entry and exit, and the hook's duration d is
// overhead. The program clock is
//   program(t) = t - G(t),   G = the process's overhead,
// and each hook adds d / max(P, 1) to G, where P is the process's parallelism: its CPU time
// (CLOCK_PROCESS_CPUTIME_ID) per wall-clock time over the last window of 2^kWindowShift ns (about 17 ms),
// measured by the first thread to end a hook in each window. Why this rule: removing the hooks saves their CPU
// time, and the process runs P CPU-seconds per second, so the run without them is shorter by (CPU time in
// hooks) / P; a hook's wall duration d stands for its CPU time and for the part of the run-queue wait that falls
// inside it.
// - One thread: G is exactly the time spent in hooks. On a loaded machine a thread is descheduled inside its
//   hooks as often as elsewhere, and d counts that wait too.
// - N threads in parallel, each a fraction f of its time in hooks: G grows at N*f/P; on N free cores P = N and
//   that is f, the slowdown each of them sees. With more threads than cores P is the cores the process gets.
// - Threads that wait on a lock a thread in a hook holds use no CPU: P falls towards 1 and the hook's whole
//   length is taken out (the waiting threads would not have waited without it). Dividing by the number of
//   threads in hooks in the last millisecond, as the clock did before, took a quarter to a half of the overhead
//   of four threads on two cores that share locks (lru-cache, session-store: a traced load of 1.1 s lasted 2.0 s
//   of program time).
// - P below 1 (the process partly idle, or short of cores): a hook costs its own length, no more, so that a
//   sleep after it keeps its length. (Taking d / P there, as the run-queue wait its CPU time causes, took time
//   from the sleeps that followed allocations.)
// - P is taken over many scheduler time slices: within a slice a thread runs at full speed.
// - One clock for all threads: an object allocated by one thread and freed by another gets a lifetime of
//   program(free) - program(alloc) on the same clock. A per-thread clock (wall less the observing thread's own
//   overhead) would add the difference of the two threads' offsets to such a lifetime, and that difference
//   grows without bound between a producer that allocates and a consumer that frees.
// - Stamps strictly increase (program_ns_at): G grows in steps, at the end of each hook, so t - G alone can step
//   back, and a free on one thread could then get an earlier time than the allocation another thread made just
//   before it; readers that order events by time would not pair them.
// The clock reads themselves: a hook's two reads leave about one read's cost outside the span they measure;
// each hook adds the cost of one read, measured once at start (calibrate_program_clock).
// - G grows at most kMaxOverheadRate16/16 of the wall time (add_overhead_fx), so that the program clock always
//   runs at least 1/16 as fast as the wall clock: an overestimate (P is the last window's) cannot make the
//   clock outrun the wall clock, after which the quiet time that follows a load would pay it back and a whole
//   phase would get one time. The allowance kept is at most kCreditNs: a hook in which the thread was
//   descheduled for longer counts that much of it (a single thread beside two CPU hogs keeps most of the wall
//   time of its traced bursts). Letting a hook's allowance reach back to its start took that time from the
//   stamps other threads made meanwhile: a 200 ms sleep after an 8-thread load measured 199.7 ms.
// - A hook's wait for a lock another thread holds (lock_in_hook) is not its time.
// What it leaves in: the profiler's cache footprint, which slows the program's own code and the allocator
// between hooks (about half of the CPU time the tracer adds to session-store: its hooks sum to 0.65 s of the
// 1.4 s), and the entry points' few instructions around each hook.
// Cost: two clock reads per hook (vDSO, 20-80 ns each), a compare-and-swap on one shared word per stamp, a
// publish to G per kPublishNs of a thread's overhead (a thread keeps what it has not yet published in its own
// counter), and a process CPU clock read (a system call, about 2 us) per window. No locks. Overhead a thread has
// not published when it exits is lost (less than kPublishNs).
#pragma once

#include <atomic>
#include <cstdint>

#include "platform.h"

namespace llamalloc::prof {

inline constexpr uint64_t kWindowShift = 24;                  // P over windows of 2^24 ns, about 17 ms
inline constexpr uint32_t kUnitShift = 16;                    // P and the factor in 1/65536
// A thread publishes its overhead every 256 ns of it: what it holds back is missing from G during the lives
// of the objects it allocates meanwhile (at 4 us, a sampled object that lived across a 30 ms sleep measured
// 1.3 us less than the program's own lower bound on its lifetime).
inline constexpr uint64_t kPublishNs = 256;
inline constexpr uint64_t kCreditNs = uint64_t{1} << 25;      // G's unused wall-time credit: at most 34 ms
inline constexpr uint32_t kOverheadFractionBits = 8;          // G in 1/256 ns: d / n loses nothing that matters
inline constexpr uint64_t kMaxOverheadRate16 = 15;              // G grows at most 15/16 of the wall time

// G, in 1/256 ns (2^56 ns, 833 days of overhead, fit).
extern std::atomic<uint64_t> g_overhead_fx;
// The window of the last measurement of P (window index, 2^kWindowShift ns).
extern std::atomic<uint64_t> g_window;
// P, the process's CPU time per wall time over the last window, in 1/65536 (1 until measured).
extern std::atomic<uint64_t> g_parallelism_u;
// The process's CPU time and CLOCK_MONOTONIC at the last measurement of P (0: none yet).
extern std::atomic<uint64_t> g_cpu_at_ns;
extern std::atomic<uint64_t> g_cpu_wall_at_ns;
// The wall-time credit of G's growth used up to here (0: none yet; then the process's start bounds it).
extern std::atomic<uint64_t> g_overhead_at_ns;
extern uint64_t g_overhead_start_ns;
// The cost of one CLOCK_MONOTONIC read, in 1/256 ns (calibrate_program_clock).
extern uint64_t g_clock_read_fx;

struct ThreadClock {
  uint64_t pending_fx;  // overhead of this thread not yet added to g_overhead_fx
  uint64_t window;      // the last window this thread looked at P in (0: none)
  uint32_t depth;       // hooks open on this thread (a hook inside a hook adds nothing)
  uint64_t waited_ns;   // time the open hook has waited for a lock another thread holds (not_overhead_since)
  uint64_t entry_ns;    // CLOCK_MONOTONIC at the outermost hook's entry
  uint64_t entry_program_ns;  // the program clock at the same moment: the time of the hook's events
};
extern __thread ThreadClock t_clock __attribute__((tls_model("initial-exec")));

// The last time stamped: stamps only go forward (see stamp).
extern std::atomic<uint64_t> g_last_stamp_ns;

// The program clock at wall time wall_ns. G grows in steps, at the end of each hook, so t - G alone can step
// back; stamp() makes the times given to events strictly increasing.
inline uint64_t program_ns_at(uint64_t wall_ns) {
  uint64_t overhead_ns = g_overhead_fx.load(std::memory_order_relaxed) >> kOverheadFractionBits;
  uint64_t candidate = wall_ns > overhead_ns ? wall_ns - overhead_ns : 0;
  // Strictly increasing across the process, 1 ns past the last stamp where the clock stands still: a free that
  // follows an allocation in real time (another thread frees what one allocated) always has the later time, so
  // readers that order events by time pair every free with its allocation. The clock stands still while G
  // catches up after a step: overhead another thread has just finished is then taken from the time after it.
  uint64_t last = g_last_stamp_ns.load(std::memory_order_relaxed);
  while (true) {
    uint64_t next = candidate > last ? candidate : last + 1;
    if (g_last_stamp_ns.compare_exchange_weak(last, next, std::memory_order_relaxed)) return next;
  }
}

inline uint64_t program_ns() { return program_ns_at(monotonic_ns()); }

// Adds fx to this thread's pending overhead and publishes it to G at wall time now_ns once it reaches
// kPublishNs. G's growth is bounded (kMaxOverheadRate16): wall-time credit accrues at 16/15 ns of wall per ns
// of G, g_overhead_at_ns marks what has been used, and at most kCreditNs of it is kept, so that G never jumps by
// more than that after an idle time; a publish beyond the credit is cut to it (the overestimate the rule above
// explains). The shared atomics of a publish contend between threads: their time, read after them, counts as
// overhead (factor_u, the hook's factor), in the next publish.
inline void add_overhead_fx(uint64_t fx, uint64_t now_ns, uint64_t factor_u) {
  ThreadClock& c = t_clock;
  c.pending_fx += fx;
  if (c.pending_fx < (kPublishNs << kOverheadFractionBits)) return;
  uint64_t pending_ns = c.pending_fx >> kOverheadFractionBits;
  uint64_t granted_fx = c.pending_fx;
  uint64_t at = g_overhead_at_ns.load(std::memory_order_relaxed);
  while (true) {
    uint64_t from = at == 0 ? g_overhead_start_ns : at;
    if (now_ns > kCreditNs && from < now_ns - kCreditNs) from = now_ns - kCreditNs;
    uint64_t need_ns = pending_ns * 16 / kMaxOverheadRate16;
    uint64_t next;
    if (from + need_ns <= now_ns) {
      next = from + need_ns;
      granted_fx = c.pending_fx;
    } else {
      next = from > now_ns ? from : now_ns;
      granted_fx = now_ns > from ? ((now_ns - from) * kMaxOverheadRate16 / 16) << kOverheadFractionBits : 0;
    }
    if (g_overhead_at_ns.compare_exchange_weak(at, next, std::memory_order_relaxed)) break;
  }
  g_overhead_fx.fetch_add(granted_fx, std::memory_order_relaxed);
  uint64_t after_ns = monotonic_ns();
  c.pending_fx = after_ns > now_ns ? (((after_ns - now_ns) << kOverheadFractionBits) * factor_u) >> kUnitShift : 0;
}

// Measures P over the time since its last measurement (called by the first thread to end a hook in a window).
void measure_parallelism(uint64_t now_ns);

// The factor 1 / max(P, 1) of this thread's hooks at now_ns, in 1/65536; has P measured once per window.
inline uint64_t overhead_factor_u(uint64_t now_ns) {
  ThreadClock& c = t_clock;
  uint64_t window = now_ns >> kWindowShift;
  if (c.window != window) {
    c.window = window;
    uint64_t last = g_window.load(std::memory_order_relaxed);
    if (last < window && g_window.compare_exchange_strong(last, window, std::memory_order_relaxed)) {
      measure_parallelism(now_ns);
    }
  }
  constexpr uint64_t kOne = uint64_t{1} << kUnitShift;
  uint64_t parallelism = g_parallelism_u.load(std::memory_order_relaxed);
  return parallelism > kOne ? (kOne << kUnitShift) / parallelism : kOne;
}

// The program clock now, for an event that is not inside a timed hook (a sampled object's free in a profile):
// the read's own cost is the profiler's.
inline uint64_t program_ns_untimed() {
  uint64_t wall = monotonic_ns();
  uint64_t now = program_ns_at(wall);
  uint64_t factor_u = overhead_factor_u(wall);
  add_overhead_fx((g_clock_read_fx * factor_u) >> kUnitShift, wall, factor_u);
  return now;
}

// Times one of the profiler's hooks; the events it records carry hook_program_ns().
class HookTimer {
 public:
  HookTimer() {
    ThreadClock& c = t_clock;
    if (c.depth++ != 0) return;
    c.waited_ns = 0;
    c.entry_ns = monotonic_ns();
    c.entry_program_ns = program_ns_at(c.entry_ns);
  }
  ~HookTimer() {
    ThreadClock& c = t_clock;
    if (--c.depth != 0) return;
    uint64_t exit_ns = monotonic_ns();
    uint64_t spent_ns = exit_ns > c.entry_ns ? exit_ns - c.entry_ns : 0;
    spent_ns = spent_ns > c.waited_ns ? spent_ns - c.waited_ns : 0;
    uint64_t factor_u = overhead_factor_u(exit_ns);
    if (spent_ns >= (uint64_t{1} << 40)) spent_ns = uint64_t{1} << 40;  // a stopped process: 1100 s is enough
    uint64_t fx = (spent_ns << kOverheadFractionBits) + g_clock_read_fx;
    add_overhead_fx((fx * factor_u) >> kUnitShift, exit_ns, factor_u);
  }
  HookTimer(const HookTimer&) = delete;
  HookTimer& operator=(const HookTimer&) = delete;
};

// Takes a lock inside a hook, the wait for it left out of the hook's time: the thread that holds the lock is in a
// hook of its own (a trace buffer's write), whose time is counted; a waiter's wait uses no CPU and runs alongside
// it, and counting it too took the time of one write once per waiting thread (eight threads flushing their
// buffers as they exit).
template <typename Lock>
inline void lock_in_hook(Lock&& lock) {
  uint64_t before = monotonic_ns();
  lock();
  uint64_t after = monotonic_ns();
  if (t_clock.depth != 0 && after > before) t_clock.waited_ns += after - before;
}

// The program-clock time of the hook this thread is in: its entry.
inline uint64_t hook_program_ns() { return t_clock.entry_program_ns; }

// Measures g_clock_read_fx: the mean of a run of reads, once at start (before the mode is on).
inline void calibrate_program_clock() {
  constexpr int kReads = 256;
  monotonic_ns();
  uint64_t start = monotonic_ns();
  for (int i = 0; i < kReads; ++i) monotonic_ns();
  uint64_t end = monotonic_ns();
  g_clock_read_fx = ((end - start) << kOverheadFractionBits) / (kReads + 1);
  g_overhead_start_ns = end;
}

// A forked child starts its clock again from its own start (its files' start_mono_ns): no overhead yet.
inline void reset_program_clock_after_fork() {
  g_overhead_fx.store(0, std::memory_order_relaxed);
  g_overhead_at_ns.store(0, std::memory_order_relaxed);
  g_overhead_start_ns = monotonic_ns();
  g_window.store(0, std::memory_order_relaxed);
  g_parallelism_u.store(uint64_t{1} << kUnitShift, std::memory_order_relaxed);
  g_cpu_at_ns.store(0, std::memory_order_relaxed);
  g_cpu_wall_at_ns.store(0, std::memory_order_relaxed);
  g_last_stamp_ns.store(0, std::memory_order_relaxed);
  t_clock.pending_fx = 0;
  t_clock.window = 0;

}

}  // namespace llamalloc::prof
