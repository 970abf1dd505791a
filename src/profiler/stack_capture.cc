#include "stack_capture.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <unwind.h>

#include <atomic>

#include "platform.h"

namespace llamalloc::prof {
namespace {

struct CodeRange {
  uintptr_t start;
  uintptr_t limit;
};

// Executable ranges of the loaded objects, published as an immutable array: a refresh builds a new array
// (calling dl_iterate_phdr with no lock of ours held) and swaps the pointer; old arrays are never reused, so a
// reader never sees a half-built one.
struct CodeRanges {
  int count;
  CodeRange ranges[1];
};
constexpr int kMaxCodeRanges = 4096;
constexpr int kMaxWarmDepth = 8;

std::atomic<CodeRanges*> g_code_ranges{nullptr};
std::atomic<uint64_t> g_last_refresh_ns{0};
constexpr uint64_t kRefreshIntervalNs = 200'000'000;  // a stray pointer must not make every walk re-scan

CodeRange g_self{0, 0};
UnwindMode g_mode = UnwindMode::kAuto;
std::atomic<uint64_t> g_fp_walks{0};
std::atomic<uint64_t> g_dwarf_walks{0};

// Bounds of this thread's stack, found once per thread (pthread_getattr_np may allocate; the caller holds
// the reentrancy guard, so that allocation goes straight to the allocator underneath).
__thread uintptr_t t_stack_limit __attribute__((tls_model("initial-exec")));
__thread bool t_stack_known __attribute__((tls_model("initial-exec")));

int CollectRanges(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<CodeRanges*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
    if (out->count >= kMaxCodeRanges) return 1;
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    out->ranges[out->count++] = {start, start + ph.p_memsz};
  }
  return 0;
}

void RefreshCodeRanges() {
  uint64_t now = MonotonicNs();
  uint64_t last = g_last_refresh_ns.load(std::memory_order_relaxed);
  if (g_code_ranges.load(std::memory_order_acquire) != nullptr && now - last < kRefreshIntervalNs) return;
  if (!g_last_refresh_ns.compare_exchange_strong(last, now)) return;
  auto* fresh = static_cast<CodeRanges*>(MapZeroed(sizeof(CodeRanges) + sizeof(CodeRange) * kMaxCodeRanges));
  if (fresh == nullptr) return;
  dl_iterate_phdr(CollectRanges, fresh);
  g_code_ranges.store(fresh, std::memory_order_release);
}

bool InCode(uintptr_t pc) {
  const CodeRanges* r = g_code_ranges.load(std::memory_order_acquire);
  if (r == nullptr) return false;
  for (int i = 0; i < r->count; ++i) {
    if (pc >= r->ranges[i].start && pc < r->ranges[i].limit) return true;
  }
  return false;
}

bool InSelf(uintptr_t pc) { return pc >= g_self.start && pc < g_self.limit; }

int FindSelf(dl_phdr_info* info, size_t, void*) {
  auto here = reinterpret_cast<uintptr_t>(&FindSelf);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
    uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    if (here >= start && here < start + ph.p_memsz) {
      g_self = {start, start + ph.p_memsz};
      return 1;
    }
  }
  return 0;
}

void LearnStackLimit() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* base = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &base, &size) == 0) {
      t_stack_limit = reinterpret_cast<uintptr_t>(base) + size;
    }
    pthread_attr_destroy(&attr);
  }
  t_stack_known = true;
}

// Walks the rbp chain. Returns the depth, and sets *intact when the chain ended where a chain should end
// (a zero frame pointer, as set by _start and clone, or the top of the stack) with every return address
// inside loaded code. A broken chain means some caller keeps no frame pointer: the DWARF unwinder is needed.
int WalkFramePointers(uint64_t* pcs, int max_depth, bool* intact) {
  *intact = false;
  if (!t_stack_known) LearnStackLimit();
  auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t limit = t_stack_limit;
  if (limit == 0) return 0;  // unknown stack: reading through rbp could fault
  auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  int depth = 0;
  while (true) {
    if (fp == 0) {
      *intact = true;
      break;
    }
    if (fp < sp || (fp & 7) != 0 || fp + 16 > limit) break;
    const auto* frame = reinterpret_cast<const uintptr_t*>(fp);
    uintptr_t next = frame[0];
    uintptr_t ret = frame[1];
    if (ret == 0) {
      *intact = true;
      break;
    }
    if (!InCode(ret)) break;
    if (!InSelf(ret)) {
      if (depth == max_depth) {
        *intact = true;
        break;
      }
      pcs[depth++] = ret - 1;
    }
    if (next != 0 && next <= fp) break;
    if (next >= limit) {
      *intact = true;
      break;
    }
    fp = next;
  }
  return depth;
}

struct DwarfState {
  uint64_t* pcs;
  int max_depth;
  int depth;
};

_Unwind_Reason_Code DwarfFrame(_Unwind_Context* ctx, void* arg) {
  auto* st = static_cast<DwarfState*>(arg);
  int before = 0;
  uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
  if (ip == 0) return _URC_END_OF_STACK;
  if (InSelf(ip)) return _URC_NO_REASON;
  if (st->depth >= st->max_depth) return _URC_END_OF_STACK;
  // A signal frame's ip is the interrupted instruction itself, not a return address.
  st->pcs[st->depth++] = before ? ip : ip - 1;
  return _URC_NO_REASON;
}

int WalkDwarf(uint64_t* pcs, int max_depth) {
  DwarfState st{pcs, max_depth, 0};
  _Unwind_Backtrace(DwarfFrame, &st);
  return st.depth;
}

}  // namespace

void InitStackCapture(UnwindMode mode) {
  g_mode = mode;
  dl_iterate_phdr(FindSelf, nullptr);
  g_last_refresh_ns.store(0);
  RefreshCodeRanges();
  uint64_t warm[kMaxWarmDepth];
  WalkDwarf(warm, kMaxWarmDepth);  // libgcc's unwinder sets up its caches on first use
  LearnStackLimit();
}

int CaptureStack(uint64_t* pcs, int max_depth) {
  if (g_mode != UnwindMode::kDwarf) {
    bool intact = false;
    int depth = WalkFramePointers(pcs, max_depth, &intact);
    if (intact || g_mode == UnwindMode::kFramePointers) {
      g_fp_walks.fetch_add(1, std::memory_order_relaxed);
      return depth;
    }
    RefreshCodeRanges();  // perhaps a newly loaded object; rate-limited
  }
  g_dwarf_walks.fetch_add(1, std::memory_order_relaxed);
  return WalkDwarf(pcs, max_depth);
}

StackCaptureStats GetStackCaptureStats() {
  return {g_fp_walks.load(std::memory_order_relaxed), g_dwarf_walks.load(std::memory_order_relaxed)};
}

void StackCaptureAfterFork() { g_last_refresh_ns.store(0, std::memory_order_relaxed); }

}  // namespace llamalloc::prof
