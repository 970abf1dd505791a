// The profiler's state and its two modes, driven by the entry points of interpose.cc. Every function here runs
// with the reentrancy guard set (an allocation it causes goes straight to the allocator underneath) and takes
// its own locks only around table updates, never while unwinding.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tables.h"

namespace llamalloc::prof {

enum class Mode { kOff, kProfile, kTrace };

// Reads the LLAMALLOC_PROF_* variables (docs/profiler.md) and sets the profiler up. Called once, after the
// allocator underneath has been found.
void InitProfiler();
Mode CurrentMode();

void OnAlloc(void* ptr, size_t size_bytes, size_t alignment_bytes, uint32_t flags);

// A free is recorded in two steps around the real free: Begin before it (afterwards another thread may already
// have been given the same address), Commit once it is done, Abort when a failed realloc kept the object.
struct FreeTicket {
  uint64_t time_ns;
  bool sampled;
  LiveObject object;
};
void BeginFree(void* ptr, FreeTicket* ticket);
void CommitFree(void* ptr, const FreeTicket& ticket, uint32_t flags);
void AbortFree(const FreeTicket& ticket);

// Writes the final profile or closes the trace. After it the profiler records nothing more.
void ProfilerAtExit();

}  // namespace llamalloc::prof
