// Hand-made traces and allocations for the simulator's tests.
#pragma once

#include <vector>

#include "sim/event.h"
#include "sim/policy.h"

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

// An allocation as a policy sees it, for the tests that call a policy without the engine.
inline ObjectAlloc object_alloc(uint64_t address, uint64_t size_bytes) {
  return ObjectAlloc{.address = address, .size_bytes = size_bytes};
}

}  // namespace llamalloc::sim::testing
