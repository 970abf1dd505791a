// The profiler's program clock, for the phase times a workload prints beside its wall-clock ones
// (docs/profiler.md, "Program time"): under `llamalloc trace` or `llamalloc record` the preloaded profiler
// exports llamalloc_prof_program_ns, CLOCK_MONOTONIC less the profiler's own work, the clock of the lifetimes it
// records. A traced phase's program time is what its untraced run would take; its wall time is not.
#pragma once

#include <dlfcn.h>

#include <cstdint>

namespace workloads {

// The program clock now, in ns; -1 when the program runs without the profiler (or with it off).
inline std::int64_t program_clock_ns() {
  using Fn = std::uint64_t (*)();
  static const Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "llamalloc_prof_program_ns"));
  const std::uint64_t now = fn != nullptr ? fn() : 0;
  return now != 0 ? static_cast<std::int64_t>(now) : -1;
}

// Seconds on the program clock since `start_ns` (a program_clock_ns()); -1 without the profiler.
inline double program_seconds_since(std::int64_t start_ns) {
  const std::int64_t now = program_clock_ns();
  return start_ns < 0 || now < 0 ? -1.0 : static_cast<double>(now - start_ns) / 1e9;
}

}  // namespace workloads
