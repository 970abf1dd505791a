// The stack walker of the profiler (src/profiler/stack_capture.cc: the stacks of a profile or trace) and of the
// learned predictor (src/model/caller_stack.cc: the allocating caller's stack, for a model run). A model is
// trained on the profile's stacks and predicts from the live ones, so both walk the same way and yield the same
// pcs.
//
// The pc convention: a frame's pc is an address inside its call instruction, its return address - 1 (the return
// address itself may be the first byte of the next function, after a call that does not return). A signal frame
// (a frame interrupted by a signal) has no return address: its pc is the interrupted instruction's address.
// Profiles and traces record these pcs; the token tables of `llamalloc prepare` are keyed by return address
// (return_address_of), and look up the function holding the pc.
//
// Two techniques, header-only so that each library compiles them with its own flags:
//   unwind_dwarf         libgcc's _Unwind_Backtrace, from the .eh_frame tables: finds the callers of code built
//                        without frame pointers. Its first use in a process may allocate (warm it up before the
//                        allocation path needs it); frames registered at run time (a JIT's) are guarded by a lock
//                        under which libgcc calls malloc, so an allocation from the unwinder must not unwind.
//   walk_frame_pointers  the rbp chain: a few loads per frame, but it skips a caller that keeps no frame pointer
//                        (or ends at one that uses rbp for data). Each record is [saved rbp, return address].
// Neither allocates, takes a lock of ours or calls into the loader; the frame-pointer walk reads only records
// inside the bounds it is given.
#pragma once

#include <unwind.h>

#include <cstdint>

namespace llamalloc::stack_walk {

// The pc of a frame whose return address is `return_address`.
inline constexpr uintptr_t pc_of(uintptr_t return_address) { return return_address - 1; }
// The return address of a (non-signal) frame whose pc is `pc`.
inline constexpr uintptr_t return_address_of(uintptr_t pc) { return pc + 1; }

// Calls on_frame(pc) for each frame the DWARF unwinder finds, innermost first (the first is the frame that
// calls unwind_dwarf); on_frame returns false to stop. Ends at the first frame without a pc.
template <typename OnFrame>
__attribute__((always_inline)) inline void unwind_dwarf(OnFrame& on_frame) {
  _Unwind_Backtrace(
      [](_Unwind_Context* ctx, void* arg) -> _Unwind_Reason_Code {
        int before = 0;  // 1: a signal frame, whose ip is the interrupted instruction itself
        uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
        if (ip == 0) return _URC_END_OF_STACK;
        return (*static_cast<OnFrame*>(arg))(before ? ip : pc_of(ip)) ? _URC_NO_REASON : _URC_END_OF_STACK;
      },
      &on_frame);
}

// What a frame-pointer walk's on_frame asks for.
enum class Visit {
  kNext,    // go on to the caller's record
  kStop,    // stop here: the walk has what it needs
  kBroken,  // the record is not a frame record (its return address is no code): the chain is broken
};
// Why a frame-pointer walk ended.
enum class ChainEnd {
  kBottom,   // the chain's end: a zero frame pointer (set by _start and clone) or the top of the stack
  kBroken,   // a record outside [low, top), misaligned, not above the previous one, or refused by on_frame
  kStopped,  // on_frame said kStop
};

// Walks the frame-pointer chain from the record at `fp`, innermost first, calling on_frame(pc, record) for each
// record (record[0]: the caller's frame pointer, record[1]: the return address). Records must lie in
// [low, top - 16], 8-aligned, each above the one before.
template <typename OnFrame>
inline ChainEnd walk_frame_pointers(uintptr_t fp, uintptr_t low, uintptr_t top, OnFrame&& on_frame) {
  while (true) {
    if (fp == 0) return ChainEnd::kBottom;
    if (fp < low || (fp & 7) != 0 || fp + 16 > top) return ChainEnd::kBroken;
    const auto* record = reinterpret_cast<const uintptr_t*>(fp);
    uintptr_t next = record[0];
    Visit v = on_frame(pc_of(record[1]), record);
    if (v == Visit::kStop) return ChainEnd::kStopped;
    if (v == Visit::kBroken) return ChainEnd::kBroken;
    if (next != 0 && next <= fp) return ChainEnd::kBroken;
    if (next >= top) return ChainEnd::kBottom;
    fp = next;
  }
}

}  // namespace llamalloc::stack_walk
