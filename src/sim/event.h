// The simulator's view of one traced allocator event, independent of the trace file's layout.
// The trace reader (trace_reader.h) turns the on-disk records into these; tests build them by hand.
#pragma once

#include <cstdint>

#include "llamalloc/config.h"

namespace llamalloc::sim {

enum class EventKind : uint8_t {
  kAlloc,    // malloc, calloc, new, aligned_alloc, posix_memalign, memalign
  kFree,     // free, delete (size is not trusted: the live table knows it)
  kRealloc,  // old_address freed, address allocated with size_bytes (either may be 0)
};

struct Event {
  uint64_t time_ns = 0;       // trace clock, nanoseconds since the trace started
  EventKind kind = EventKind::kAlloc;
  uint64_t address = 0;       // the object (new object for realloc)
  uint64_t old_address = 0;   // realloc only: the object given back
  uint64_t size_bytes = 0;    // requested size (alloc, realloc)
  uint32_t alignment_bytes = 0;  // 0 = the allocator's default
  uint32_t thread = 0;
  uint32_t stack_id = 0;
};

// malloc's alignment (alignof(max_align_t)); an event's alignment_bytes at or below it is the default.
inline constexpr uint32_t kDefaultAlignmentBytes = 16;

}  // namespace llamalloc::sim
