// The program clock: CLOCK_MONOTONIC less the time the profiler itself spent in its hooks, so that lifetimes
// are measured in the program's own time. Under the tracer (or a profile of every allocation) the allocating
// code runs 8-14x slower while sleeps and I/O do not, so wall-clock lifetimes of a traced run are longer than
// in the real run and objects move into longer lifetime classes (docs/profiler.md, "Program time").
//
// The hooks (profiler.cc): an allocation's slow path (stack walk, table updates, a profile dump) and the write of
// a trace buffer. HookTimer reads CLOCK_MONOTONIC at a hook's entry and exit, and the hook's duration d is
// overhead. A free's own work (a clock read, a table lookup, 40 bytes appended) costs about what timing it
// would, so it reads the clock once, untimed. The program clock is
//   program(t) = t - G(t),   G = the process's overhead,
// and each hook adds d / n to G, n being the number of threads that were in hooks in the current or the
// previous window of 2^kWindowShift ns (the larger of the two counts). Why this rule:
// - One thread: n = 1 and G is exactly the time spent in hooks, so the program clock is the wall clock of the
//   run without the profiler's work in it.
// - N threads in parallel, each spending a fraction f of its time in hooks: G grows at N*f/N = f, the
//   slowdown each of them sees. Summing the threads' overheads (n = 1) would subtract N*f and let the clock run
//   backwards; a thread that sleeps or blocks does not allocate, is not counted, and does not dilute it.
// - One clock for all threads: an object allocated by one thread and freed by another gets a lifetime of
//   program(free) - program(alloc) on the same clock. A per-thread clock (wall less the observing thread's own
//   overhead) would add the difference of the two threads' offsets to such a lifetime, and that difference
//   grows without bound between a producer that allocates and a consumer that frees.
// - Stamps strictly increase (program_ns_at): G grows in steps, at the end of each hook, so t - G alone can step
//   back, and a free on one thread could then get an earlier time than the allocation another thread made just
//   before it; readers that order events by time would not pair them.
// The clock reads themselves: a hook's two reads leave about one read's cost outside the span they measure, and
// a free's read is not timed; each adds the cost of one read, measured once at start (calibrate_program_clock).
// - G grows at most kMaxOverheadRate of the wall time between two of its updates (g_overhead_at_ns), so that
//   the program clock always runs at least 1/16 as fast as the wall clock (the tracer slows allocating code 8-14
//   times, not more). A hook's duration is wall time: a thread descheduled or blocked inside a hook (more
//   threads than cores, a trace buffer's write) counts it all, and n, the threads that ended a hook in the last
//   two windows, misses those still inside longer ones. Unbounded, G then outran the wall clock: four threads on
//   two cores stamped a 1.3 s load as 0.12 s and the program's drop and quiet phase after it (no hooks) had to pay
//   that back before the clock moved again, so that the whole phase got one time.
// Cost: two clock reads per hook and one per free (vDSO, about 20 ns each), a compare-and-swap on one shared word
// per stamp, a shared atomic add per kPublishNs of a thread's overhead (a thread keeps what it has not yet
// published in its own counter), and a compare-and-swap per thread per window. No locks. Overhead a thread has
// not published when it exits is lost (less than kPublishNs).
#pragma once

#include <atomic>
#include <cstdint>

#include "platform.h"

namespace llamalloc::prof {

inline constexpr uint64_t kWindowShift = 20;                  // windows of 2^20 ns, about 1 ms
inline constexpr uint64_t kPublishNs = 256;                   // a thread publishes its overhead every 256 ns
inline constexpr uint32_t kOverheadFractionBits = 8;          // G in 1/256 ns: d / n loses nothing that matters
inline constexpr uint64_t kMaxOverheadRate16 = 15;              // G grows at most 15/16 of the wall time

// G, in 1/256 ns (2^56 ns, 833 days of overhead, fit).
extern std::atomic<uint64_t> g_overhead_fx;
// The current window and its thread counts: window index (32 bits) << 32 | previous window's count << 16 |
// current window's count.
extern std::atomic<uint64_t> g_window_counts;
// CLOCK_MONOTONIC when G last grew (0: not yet; then the process's start bounds it).
extern std::atomic<uint64_t> g_overhead_at_ns;
extern uint64_t g_overhead_start_ns;
// The cost of one CLOCK_MONOTONIC read, in 1/256 ns (calibrate_program_clock).
extern uint64_t g_clock_read_fx;

struct ThreadClock {
  uint64_t pending_fx;  // overhead of this thread not yet added to g_overhead_fx
  uint32_t window;      // the last window this thread was counted in (0: none)
  uint32_t depth;       // hooks open on this thread (a hook inside a hook adds nothing)
  uint32_t last_n;      // the divisor of this thread's last hook (0: none yet)
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

// Adds a thread's pending overhead to G at wall time now_ns, at most kMaxOverheadRate16/16 of the wall time since
// G last grew; the rest is dropped (the overestimate the rule above explains).
inline void add_overhead_fx(uint64_t fx, uint64_t now_ns) {
  ThreadClock& c = t_clock;
  c.pending_fx += fx;
  if (c.pending_fx >= (kPublishNs << kOverheadFractionBits)) {
    uint64_t at = g_overhead_at_ns.exchange(now_ns, std::memory_order_relaxed);
    if (at == 0) at = g_overhead_start_ns;
    uint64_t allowed_fx = now_ns > at ? ((now_ns - at) * kMaxOverheadRate16 / 16) << kOverheadFractionBits : 0;
    g_overhead_fx.fetch_add(c.pending_fx < allowed_fx ? c.pending_fx : allowed_fx, std::memory_order_relaxed);
    c.pending_fx = 0;
  }
}

// The program clock now, for an event that is not inside a timed hook (a free): the read's own cost is the
// profiler's.
inline uint64_t program_ns_untimed() {
  uint64_t wall = monotonic_ns();
  uint64_t now = program_ns_at(wall);
  uint32_t n = t_clock.last_n;
  add_overhead_fx(g_clock_read_fx / (n == 0 ? 1 : n), wall);
  return now;
}

// Counts this thread in the window of now_ns (once per window) and returns the divisor n.
inline uint32_t threads_in_hooks(uint64_t now_ns) {
  uint32_t window = static_cast<uint32_t>(now_ns >> kWindowShift);
  if (window == 0) window = 1;  // 0 is "none"
  uint64_t packed = g_window_counts.load(std::memory_order_relaxed);
  while (t_clock.window != window) {
    uint32_t current = static_cast<uint32_t>(packed >> 32);
    uint64_t next;
    if (current == window) {
      next = (packed & 0xffffu) == 0xffffu ? packed : packed + 1;
    } else if (static_cast<int32_t>(window - current) > 0) {
      // A new window: the one just ended becomes the previous one (an older one counts as empty).
      uint64_t previous = current + 1 == window ? (packed & 0xffffu) : 0;
      next = uint64_t{window} << 32 | previous << 16 | 1u;
    } else {
      break;  // another thread has moved on to a later window already: this hook belongs to it
    }
    if (g_window_counts.compare_exchange_weak(packed, next, std::memory_order_relaxed)) {
      packed = next;
      t_clock.window = window;
    }
  }
  uint32_t previous = static_cast<uint32_t>(packed >> 16) & 0xffffu;
  uint32_t current = static_cast<uint32_t>(packed) & 0xffffu;
  uint32_t n = previous > current ? previous : current;
  return n == 0 ? 1 : n;
}

// Times one of the profiler's hooks; the events it records carry hook_program_ns().
class HookTimer {
 public:
  HookTimer() {
    ThreadClock& c = t_clock;
    if (c.depth++ != 0) return;
    c.entry_ns = monotonic_ns();
    c.entry_program_ns = program_ns_at(c.entry_ns);
  }
  ~HookTimer() {
    ThreadClock& c = t_clock;
    if (--c.depth != 0) return;
    uint64_t exit_ns = monotonic_ns();
    uint64_t spent_ns = exit_ns > c.entry_ns ? exit_ns - c.entry_ns : 0;
    uint32_t n = threads_in_hooks(exit_ns);
    c.last_n = n;
    add_overhead_fx(((spent_ns << kOverheadFractionBits) + g_clock_read_fx) / n, exit_ns);
  }
  HookTimer(const HookTimer&) = delete;
  HookTimer& operator=(const HookTimer&) = delete;
};

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
  g_window_counts.store(0, std::memory_order_relaxed);
  g_last_stamp_ns.store(0, std::memory_order_relaxed);
  t_clock.pending_fx = 0;
  t_clock.window = 0;
}

}  // namespace llamalloc::prof
