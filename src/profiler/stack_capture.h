// Stack capture for the profiler and the tracer: a frame-pointer walk where the frame chain is intact (fast),
// else the DWARF unwinder (_Unwind_Backtrace, from the .eh_frame tables, for code built without frame
// pointers). Bounded depth; the profiler's own frames are left out; no lock of the profiler is held.
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
void InitStackCapture(UnwindMode mode);

// Fills pcs with return addresses minus one, innermost first; returns the depth (0 .. max_depth).
int CaptureStack(uint64_t* pcs, int max_depth);

StackCaptureStats GetStackCaptureStats();

// After fork(): the child's thread is the only one; cached thread stack bounds stay valid.
void StackCaptureAfterFork();

}  // namespace llamalloc::prof
