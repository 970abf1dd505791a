#include "stack_capture.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cstring>

#include "platform.h"
#include "stack_walk.h"

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

constexpr int kMaxDepthBound = 64;
constexpr int kRootFrames = 2;

uint64_t hash_stack(const uint64_t* pcs, int depth) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(depth);
  for (int i = 0; i < depth; ++i) {
    h ^= pcs[i] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
  }
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

// Frame-pointer stacks that the DWARF unwinder confirmed, each with the full stack DWARF gave. A
// frame-pointer walk can look intact and still be wrong: a function built without frame pointers may use rbp
// for data that happens to end the chain, or leave rbp alone so that the walk silently skips its caller. And
// where it is right it stops early, at the first caller without frame pointers (glibc's
// __libc_start_call_main, start_thread). So a walk is used only when the same walk was once confirmed as a
// prefix of the DWARF stack, and it then stands for that DWARF stack, so that both unwinders give one stack.
// Lock-free lookup; inserts take a lock (after unwinding, never during). When full, new stacks stay on DWARF.
class ConfirmedStacks {
 public:
  static constexpr uint32_t kSlots = 1u << 16;
  static constexpr uint32_t kMaxEntries = kSlots / 2;
  static constexpr uint64_t kArenaWords = uint64_t{kMaxEntries} * 32;

  bool init() {
    slots_ = static_cast<Slot*>(map_zeroed(sizeof(Slot) * kSlots));
    arena_ = static_cast<uint64_t*>(map_zeroed(sizeof(uint64_t) * kArenaWords));
    return slots_ != nullptr && arena_ != nullptr;
  }

  // The confirmed DWARF stack of this frame-pointer walk, copied into pcs; -1 if unknown.
  int find(uint64_t h, const uint64_t* fp_pcs, int fp_depth, uint64_t* pcs, int max_depth) const {
    if (slots_ == nullptr) return -1;
    for (uint32_t i = 0; i < kSlots; ++i) {
      const Slot& s = slots_[(static_cast<uint32_t>(h) + i) & (kSlots - 1)];
      uint64_t v = s.hash.load(std::memory_order_acquire);
      if (v == 0) return -1;
      if (v != h || s.fp_depth != static_cast<uint32_t>(fp_depth) || s.depth > static_cast<uint32_t>(max_depth))
        continue;
      const uint64_t* stored = arena_ + s.offset;
      if (memcmp(stored, fp_pcs, sizeof(uint64_t) * fp_depth) != 0) continue;  // the walk is a prefix
      memcpy(pcs, stored, sizeof(uint64_t) * s.depth);
      return static_cast<int>(s.depth);
    }
    return -1;
  }

  void insert(uint64_t h, int fp_depth, const uint64_t* pcs, int depth) {
    if (slots_ == nullptr) return;
    SpinLockHolder hold(lock_);
    if (count_ >= kMaxEntries || used_ + static_cast<uint64_t>(depth) > kArenaWords) return;
    for (uint32_t i = 0;; ++i) {
      Slot& s = slots_[(static_cast<uint32_t>(h) + i) & (kSlots - 1)];
      uint64_t v = s.hash.load(std::memory_order_relaxed);
      if (v == h && s.fp_depth == static_cast<uint32_t>(fp_depth) &&
          memcmp(arena_ + s.offset, pcs, sizeof(uint64_t) * fp_depth) == 0) {
        return;  // another thread confirmed it first
      }
      if (v != 0) continue;
      memcpy(arena_ + used_, pcs, sizeof(uint64_t) * depth);
      s.offset = used_;
      s.depth = static_cast<uint32_t>(depth);
      s.fp_depth = static_cast<uint32_t>(fp_depth);
      used_ += static_cast<uint64_t>(depth);
      ++count_;
      s.hash.store(h, std::memory_order_release);
      return;
    }
  }

  void reset_after_fork() { lock_.reset_after_fork(); }

 private:
  struct Slot {
    std::atomic<uint64_t> hash;  // of the frame-pointer walk; published last
    uint64_t offset;
    uint32_t depth;
    uint32_t fp_depth;
  };
  Slot* slots_ = nullptr;
  uint64_t* arena_ = nullptr;
  uint64_t used_ = 0;
  uint32_t count_ = 0;
  SpinLock lock_;
};
ConfirmedStacks g_confirmed;
UnwindMode g_mode = UnwindMode::kAuto;
std::atomic<uint64_t> g_fp_walks{0};
std::atomic<uint64_t> g_dwarf_walks{0};

// Bounds of this thread's stack, found once per thread (pthread_getattr_np may allocate; the caller holds
// the reentrancy guard, so that allocation goes straight to the allocator underneath).
__thread uintptr_t t_stack_limit __attribute__((tls_model("initial-exec")));
__thread bool t_stack_known __attribute__((tls_model("initial-exec")));

int collect_ranges(dl_phdr_info* info, size_t, void* data) {
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

void refresh_code_ranges() {
  uint64_t now = monotonic_ns();
  uint64_t last = g_last_refresh_ns.load(std::memory_order_relaxed);
  if (g_code_ranges.load(std::memory_order_acquire) != nullptr && now - last < kRefreshIntervalNs) return;
  if (!g_last_refresh_ns.compare_exchange_strong(last, now)) return;
  auto* fresh = static_cast<CodeRanges*>(map_zeroed(sizeof(CodeRanges) + sizeof(CodeRange) * kMaxCodeRanges));
  if (fresh == nullptr) return;
  dl_iterate_phdr(collect_ranges, fresh);
  g_code_ranges.store(fresh, std::memory_order_release);
}

bool in_code(uintptr_t pc) {
  const CodeRanges* r = g_code_ranges.load(std::memory_order_acquire);
  if (r == nullptr) return false;
  for (int i = 0; i < r->count; ++i) {
    if (pc >= r->ranges[i].start && pc < r->ranges[i].limit) return true;
  }
  return false;
}

bool in_self(uintptr_t pc) { return pc >= g_self.start && pc < g_self.limit; }

int find_self(dl_phdr_info* info, size_t, void*) {
  auto here = reinterpret_cast<uintptr_t>(&find_self);
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

void learn_stack_limit() {
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

// Walks the rbp chain from this function's frame. Returns the depth, and sets *intact when the chain ended where
// a chain should end (a zero frame pointer, as set by _start and clone, or the top of the stack) with every
// return address inside loaded code. (A zero return address does not count as an end: a function without frame
// pointer may leave rbp pointing at any zero word of its frame.) A broken chain means some caller keeps no frame
// pointer: the DWARF unwinder is needed.
int walk_frame_pointers(uint64_t* pcs, int max_depth, bool* intact) {
  *intact = false;
  if (!t_stack_known) learn_stack_limit();
  auto fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t limit = t_stack_limit;
  if (limit == 0) return 0;  // unknown stack: reading through rbp could fault
  int depth = 0;
  stack_walk::ChainEnd end = stack_walk::walk_frame_pointers(fp, fp, limit, [&](uintptr_t pc, const uintptr_t*) {
    if (!in_code(pc)) return stack_walk::Visit::kBroken;  // a saved rbp that was not a frame pointer
    if (in_self(pc)) return stack_walk::Visit::kNext;
    if (depth == max_depth) return stack_walk::Visit::kStop;
    pcs[depth++] = pc;
    return stack_walk::Visit::kNext;
  });
  *intact = end != stack_walk::ChainEnd::kBroken;
  return depth;
}

int walk_dwarf(uint64_t* pcs, int max_depth) {
  int depth = 0;
  auto on_frame = [&](uintptr_t pc) {
    if (in_self(pc)) return true;
    if (depth >= max_depth) return false;
    pcs[depth++] = pc;
    return true;
  };
  stack_walk::unwind_dwarf(on_frame);
  return depth;
}

}  // namespace

void init_stack_capture(UnwindMode mode) {
  g_mode = mode;
  if (mode == UnwindMode::kAuto) g_confirmed.init();
  dl_iterate_phdr(find_self, nullptr);
  g_last_refresh_ns.store(0);
  refresh_code_ranges();
  uint64_t warm[kMaxWarmDepth];
  walk_dwarf(warm, kMaxWarmDepth);  // libgcc's unwinder sets up its caches on first use
  learn_stack_limit();
}

int capture_stack(uint64_t* pcs, int max_depth) {
  if (g_mode == UnwindMode::kFramePointers) {
    bool intact = false;
    g_fp_walks.fetch_add(1, std::memory_order_relaxed);
    return walk_frame_pointers(pcs, max_depth, &intact);
  }
  if (g_mode == UnwindMode::kAuto) {
    uint64_t fp_pcs[kMaxDepthBound];
    int limit = max_depth < kMaxDepthBound ? max_depth : kMaxDepthBound;
    bool intact = false;
    int fp_depth = walk_frame_pointers(fp_pcs, limit, &intact);
    uint64_t h = hash_stack(fp_pcs, fp_depth);
    if (fp_depth > 0) {
      int depth = g_confirmed.find(h, fp_pcs, fp_depth, pcs, limit);
      if (depth >= 0) {
        g_fp_walks.fetch_add(1, std::memory_order_relaxed);
        return depth;
      }
    }
    // Not confirmed yet: the DWARF unwinder decides. The walk is confirmed when it is a prefix of the DWARF
    // stack that stops at most kRootFrames short of its bottom, that is, where the program's own frames end
    // and the C library's thread start begins (__libc_start_main and _start, or clone3 after start_thread).
    // A walk that broke higher up, in a caller without frame pointers, is never trusted: the frames above
    // the break could differ from one call to the next.
    int depth = walk_dwarf(pcs, limit);
    g_dwarf_walks.fetch_add(1, std::memory_order_relaxed);
    if (fp_depth > 0 && fp_depth <= depth && depth - fp_depth <= kRootFrames &&
        memcmp(fp_pcs, pcs, sizeof(uint64_t) * fp_depth) == 0) {
      g_confirmed.insert(h, fp_depth, pcs, depth);
    } else if (!intact) {
      refresh_code_ranges();  // perhaps a newly loaded object; rate-limited
    }
    return depth;
  }
  g_dwarf_walks.fetch_add(1, std::memory_order_relaxed);
  return walk_dwarf(pcs, max_depth);
}

StackCaptureStats stack_capture_stats() {
  return {g_fp_walks.load(std::memory_order_relaxed), g_dwarf_walks.load(std::memory_order_relaxed)};
}

void stack_capture_after_fork() {
  g_last_refresh_ns.store(0, std::memory_order_relaxed);
  g_confirmed.reset_after_fork();
}

}  // namespace llamalloc::prof
