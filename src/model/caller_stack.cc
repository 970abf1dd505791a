// The walk of the allocating caller's stack for a model run (LearnedPredictor::capture_stack). Rules: the walk
// is the profiler's (src/common/stack_walk.h, with its pc convention), so that a model run sees the stack that
// training saw; it runs on the allocation path, so it never allocates, and it reads only frame records inside
// the thread's stack.
#include <link.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unwind.h>

#include "learned_predictor.h"
#include "stack_walk.h"

namespace llamalloc::model {

using stack_walk::Visit;

void drop_unwind_tables() {
  // The DWARF walk of a model run reads each frame's entry from its object's .eh_frame_hdr and .eh_frame, and
  // a read fault on a file mapping also maps the cached pages around it (the kernel's fault-around, 64 KiB;
  // MADV_RANDOM does not stop it). They stay mapped, and counted in RSS, for the life of the process: model
  // runs on image-server kept 192 KiB more of libstdc++'s read-only segment and 128 KiB more of libc's resident
  // than without a model, beside a 0.2 MiB heap. So the trims that drop the model's own pages drop these too.
  // MADV_DONTNEED only unmaps pages of a private file mapping that nobody wrote: the next read maps them again
  // from the page cache. Hence only whole pages from the start of .eh_frame_hdr to the end of its segment (the
  // unwind tables and the exception tables after them), only where that segment is neither writable nor code
  // (a debugger's breakpoints are private copies of code pages), in objects without text relocations (whose
  // read-only segments the loader writes), and not in the vDSO (no file behind it). The loader's lock, held
  // while this runs, keeps every object mapped.
  static const uintptr_t vdso = getauxval(AT_SYSINFO_EHDR);
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) {
        if (vdso != 0 && reinterpret_cast<uintptr_t>(info->dlpi_phdr) - vdso < (uintptr_t{1} << 16)) return 0;
        const ElfW(Phdr)* eh = nullptr;
        const ElfW(Dyn)* dyn = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) eh = &info->dlpi_phdr[i];
          if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
        }
        if (eh == nullptr) return 0;
        for (; dyn != nullptr && dyn->d_tag != DT_NULL; ++dyn)
          if (dyn->d_tag == DT_TEXTREL || (dyn->d_tag == DT_FLAGS && (dyn->d_un.d_val & DF_TEXTREL) != 0)) return 0;
        const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || eh->p_vaddr < ph.p_vaddr || eh->p_vaddr >= ph.p_vaddr + ph.p_memsz) continue;
          if ((ph.p_flags & (PF_W | PF_X)) != 0) return 0;
          uintptr_t start = (info->dlpi_addr + eh->p_vaddr + page - 1) & ~(page - 1);
          uintptr_t end = (info->dlpi_addr + ph.p_vaddr + ph.p_memsz) & ~(page - 1);
          if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
          return 0;
        }
        return 0;
      },
      nullptr);
}

bool LearnedPredictor::dwarf_allowed(uintptr_t return_address) {
  if (!dwarf_) return false;
  // libgcc's unwinder locks its registered-frames list (frames registered by a JIT) and calls malloc under
  // that lock: an allocation from the unwinder itself must not unwind again.
  Module caller, unwinder;
  if (!modules_.find(stack_walk::pc_of(return_address), &caller)) return true;
  return !(modules_.find(reinterpret_cast<uintptr_t>(&_Unwind_Backtrace), &unwinder) &&
           caller.start == unwinder.start);
}

size_t LearnedPredictor::capture_stack(const AllocationContext& context, uintptr_t stack_top, uintptr_t* pcs,
                                       size_t max, bool* broken) {
  if (broken != nullptr) *broken = false;
  if (max == 0 || context.return_address == 0) return 0;
  const uintptr_t caller_pc = stack_walk::pc_of(context.return_address);
  if (dwarf_allowed(context.return_address)) {
    // The frames up to the caller's are the heap's and are skipped (at most kMaxHeapFrames, with some slack);
    // from the caller's on each frame is kept. Frames of code without frame pointers and the thread's root
    // frames are found as the profile found them.
    size_t depth = 0;
    int skipped = 0;
    bool found = false;
    auto on_frame = [&](uintptr_t pc) {
      if (!found) {
        if (pc != caller_pc) return ++skipped <= kMaxHeapFrames + 4;
        found = true;
      }
      if (depth >= max) return false;
      pcs[depth++] = pc;
      return true;
    };
    stack_walk::unwind_dwarf(on_frame);
    if (found) return depth;
    // The caller's frame was not among the first frames (a heap frame without unwind tables): frame pointers.
  }
  size_t depth = 0;
  pcs[depth++] = caller_pc;
  if (stack_top == 0) return depth;
  // Up the frame-pointer chain from this function through the heap's own frames (its entry points keep frame
  // pointers, see docs/prediction.md) to the frame whose return address is the caller's: from there on, the
  // frames are the program's.
  uintptr_t fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const uintptr_t low = fp;
  bool found = false;
  int hops = 0;
  stack_walk::walk_frame_pointers(fp, low, stack_top, [&](uintptr_t pc, const uintptr_t* record) {
    if (pc == caller_pc) {
      found = true;
      fp = record[0];
      return Visit::kStop;
    }
    return ++hops < kMaxHeapFrames ? Visit::kNext : Visit::kStop;
  });
  // A heap frame without a frame pointer hides the caller's frame record. The frame at context.stack_address
  // (the heap's) then holds the caller's rbp if nothing between clobbered it; a wrong guess fails the walk's
  // checks (records must rise within the stack and return into known code), leaving only the caller's pc.
  if (!found) fp = context.stack_address != 0 ? *reinterpret_cast<const uintptr_t*>(context.stack_address) : 0;
  stack_walk::walk_frame_pointers(fp, low + 1, stack_top, [&](uintptr_t pc, const uintptr_t*) {
    if (depth >= max) return Visit::kStop;
    Module m;
    // A saved rbp that was no frame pointer, or code not known (yet: a library loaded since init).
    if (!modules_.find(pc, &m) && !(modules_.maybe_refresh(tables_, monotonic_ns()) && modules_.find(pc, &m)))
      return Visit::kBroken;
    pcs[depth++] = pc;
    return Visit::kNext;
  });
  // The chain ended before the depth bound: at a frame without frame pointer, or at the zero frame pointer of a
  // thread's start (clone3 clears rbp), with the outermost frames (start_thread ...) not walked either way.
  if (broken != nullptr) *broken = depth < max;
  return depth;
}

}  // namespace llamalloc::model
