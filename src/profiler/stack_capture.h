// Stack capture for the profiler and the tracer, with the walker the learned predictor uses as well
// (src/common/stack_walk.h, which also states the pc convention): a frame-pointer walk where the frame chain is
// intact (fast), else the DWARF unwinder (for code built without frame pointers). LLAMALLOC_PROF_UNWIND picks
// one technique instead (UnwindMode). Bounded depth; the profiler's own frames are left out; no lock of the
// profiler is held.
#pragma once

#include <cstdint>

namespace llamalloc::prof {

enum class UnwindMode { kAuto, kFramePointers, kDwarf };

struct StackCaptureStats {
  uint64_t frame_pointer_walks;
  uint64_t dwarf_walks;
};

// Called once at start, outside any lock, with the reentrancy guard set: finds the profiler's own code range,
// the executable ranges of the loaded objects, and warms the DWARF unwinder up (its first use may allocate).
void init_stack_capture(UnwindMode mode);

// Fills pcs with the pcs of the stack (stack_walk.h: return address - 1; a signal frame's interrupted
// instruction), innermost first; returns the depth (0 .. max_depth).
int capture_stack(uint64_t* pcs, int max_depth);

StackCaptureStats stack_capture_stats();

// After fork(): the child's thread is the only one; cached thread stack bounds stay valid.
void stack_capture_after_fork();

}  // namespace llamalloc::prof
