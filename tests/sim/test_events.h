// Hand-made traces for the simulator's tests.
#pragma once

#include <vector>

#include "sim/event.h"

namespace llamalloc::sim::testing {

inline constexpr uint64_t kMs = 1'000'000;

inline Event alloc_event(uint64_t time_ns, uint64_t address, uint64_t size_bytes) {
  Event e;
  e.time_ns = time_ns;
  e.kind = EventKind::kAlloc;
  e.address = address;
  e.size_bytes = size_bytes;
  return e;
}

inline Event free_event(uint64_t time_ns, uint64_t address) {
  Event e;
  e.time_ns = time_ns;
  e.kind = EventKind::kFree;
  e.address = address;
  return e;
}

inline Event realloc_event(uint64_t time_ns, uint64_t old_address, uint64_t address, uint64_t size_bytes) {
  Event e;
  e.time_ns = time_ns;
  e.kind = EventKind::kRealloc;
  e.old_address = old_address;
  e.address = address;
  e.size_bytes = size_bytes;
  return e;
}

}  // namespace llamalloc::sim::testing
