// Platform layer: the only code that talks to the OS about memory, time and the process's threads. The heap
// policy above takes a Platform and a Clock by reference, so that tests and the simulator run the real policy on
// fake pages with a trace clock (as TCMalloc's huge page filler takes its unback function and clock).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc {

class Platform {
 public:
  // Address space only, not yet usable and charging no memory: at most `bytes` at an `alignment`-aligned
  // address, and as much of it as the process's limits allow but at least `min_bytes` (a multiple of
  // kHugePageBytes); *got says how much. The heap never dereferences data addresses itself, so a fake platform may
  // hand out addresses that map nothing. nullptr when not even min_bytes can be had.
  virtual void* reserve(size_t bytes, size_t min_bytes, size_t alignment, size_t* got) = 0;
  // Reserves exactly [address, address + bytes), next to or inside the heap's reservations (growing one, or taking
  // back a range given back with unreserve). 0, or EEXIST when another mapping is there, or ENOMEM when the limits
  // refuse.
  virtual int extend(void* address, size_t bytes) = 0;
  // Gives [address, address + bytes) of a reservation back to the OS's address space (another mapping may take
  // it; extend() may reserve it again).
  virtual void unreserve(void* address, size_t bytes) = 0;
  // How much address space the heap may still reserve: the room under RLIMIT_AS, or SIZE_MAX without a limit
  // (the heap then reserves whole regions at once).
  virtual size_t address_space_left() { return ~size_t{0}; }
  // Makes [address, address + bytes) of a reservation usable memory, as huge pages. false when refused (the
  // commit charge or RLIMIT_DATA would be exceeded).
  virtual bool back(void* address, size_t bytes) = 0;
  // Gives [address, address + bytes) back to the OS at once: its memory, its commit charge, its page tables and
  // its count against RLIMIT_DATA. It stays reserved, and back() makes it usable again (the heap reuses the
  // address range).
  virtual void release(void* address, size_t bytes) = 0;
  // Gives the memory of [address, address + bytes), free blocks of a huge page that stays in use, back to the OS
  // (subrelease): the kernel splits the huge page, and the range reads as zero, on 4 KiB pages, when touched again.
  virtual void subrelease(void* address, size_t bytes) = 0;
  // Whether the kernel may (again) back the huge page at `address` with one 2 MiB page: false once some of its
  // blocks are subreleased, true when they are all in use again. Linux's khugepaged otherwise collapses a
  // subreleased page back into a whole huge page as soon as one of its small pages is present (the default
  // khugepaged/max_ptes_none is 511), zero-filling the rest. A fake platform need not do anything.
  virtual void allow_huge_page(void* address, size_t bytes, bool allow) {
    (void)address;
    (void)bytes;
    (void)allow;
  }
  // How many 4 KiB pages of [address, address + bytes) are resident. A fake platform says all of them.
  virtual size_t resident_small_pages(void* address, size_t bytes) { return (void)address, bytes / 4096; }
  // Backs the huge page [address, address + bytes) with one 2 MiB page now, its resident 4 KiB pages copied in and
  // the rest zero-filled (Linux's MADV_COLLAPSE). kUnsupported: the kernel cannot (before Linux 6.1), and the
  // page was advised for the kernel's background collapse instead; kFailed: not now (no free huge page).
  enum class Collapse { kDone, kFailed, kUnsupported };
  // Asks for the huge page [address, address + bytes), not yet touched, to be backed by one 2 MiB page at its first
  // touch (MADV_HUGEPAGE), for a page the heap expects to fill. A fake platform need not do anything.
  virtual void advise_huge_page(void* address, size_t bytes) { (void)address, (void)bytes; }
  virtual Collapse collapse_huge_page(void* address, size_t bytes) { return (void)address, (void)bytes, Collapse::kDone; }
  // Zeroed, usable memory for the heap's own metadata (small pages, backed on first touch); nullptr if refused.
  virtual void* map_metadata(size_t bytes) = 0;
  // Address space for metadata that is made usable later, in parts (commit_metadata); nullptr if refused.
  virtual void* reserve_metadata(size_t bytes) = 0;
  // Gives back a whole metadata reservation (one that its region could not use).
  virtual void unmap_metadata(void* address, size_t bytes) = 0;
  // Makes [address, address + bytes) of a metadata reservation usable, reading as zero. false when refused.
  virtual bool commit_metadata(void* address, size_t bytes) = 0;
  // Drops the memory behind whole small pages of metadata; they read as zero afterwards.
  virtual void release_metadata(void* address, size_t bytes) = 0;

 protected:
  ~Platform() = default;
};

class Clock {
 public:
  virtual uint64_t now_ns() = 0;

 protected:
  ~Clock() = default;
};

// Linux: mmap/mprotect/madvise. Constant-initialisable, so the process-wide instance exists before any
// constructor runs (malloc is called before them).
class LinuxPlatform final : public Platform {
 public:
  constexpr LinuxPlatform() = default;
  void* reserve(size_t bytes, size_t min_bytes, size_t alignment, size_t* got) override;
  int extend(void* address, size_t bytes) override;
  void unreserve(void* address, size_t bytes) override;
  size_t address_space_left() override;
  bool back(void* address, size_t bytes) override;
  void release(void* address, size_t bytes) override;
  void subrelease(void* address, size_t bytes) override;
  void allow_huge_page(void* address, size_t bytes, bool allow) override;
  void* map_metadata(size_t bytes) override;
  void* reserve_metadata(size_t bytes) override;
  void unmap_metadata(void* address, size_t bytes) override;
  bool commit_metadata(void* address, size_t bytes) override;
  void release_metadata(void* address, size_t bytes) override;
  size_t resident_small_pages(void* address, size_t bytes) override;
  Collapse collapse_huge_page(void* address, size_t bytes) override;
  void advise_huge_page(void* address, size_t bytes) override;
  // How the heap asks for transparent huge pages (LLAMALLOC_HUGE_PAGES; set before the first allocation): 0 never
  // (MADV_NOHUGEPAGE), 1 every page from its first byte (MADV_HUGEPAGE), 2 no advice, so that the kernel backs
  // 4 KiB pages as they are touched and the heap collapses the pages that are dense (collapse_huge_page).
  void set_huge_pages(unsigned mode) { huge_mode_ = mode; }

 private:
  void advise_huge(void* address, size_t bytes);
  unsigned huge_mode_ = 1;
  bool collapse_unsupported_ = false;
};

// CLOCK_MONOTONIC(_COARSE) through the vDSO: no system call, no allocation, unaffected by wall-clock changes.
class MonotonicClock final : public Clock {
 public:
  constexpr MonotonicClock() = default;
  uint64_t now_ns() override;
};

// Whether the process has a thread besides the caller (num_threads of /proc/self/stat). Without malloc; errno kept;
// false if unreadable.
bool process_has_other_threads();

// The process-private expedited membarrier (Linux 4.14): registers the process for it once (a fork child inherits
// the registration), and says whether it can be used.
bool membarrier_ready();
// Makes every running thread of the process execute a full memory barrier before it returns (the sweep
// handshake's half that the owners do not pay for: thread_heap/thread_heap.h). false when unavailable.
bool membarrier_all_threads();

// Whether the calling thread is the last one of this process that still runs: the main thread has exited (with
// pthread_exit; the process stays while any thread does) and no other is left. Reads /proc/self/stat without
// allocating; false if unreadable.
bool last_thread_running();

// Reads Rss and AnonHugePages of this process from /proc/self/smaps_rollup without allocating. false if unreadable.
bool read_resident(uint64_t* rss_bytes, uint64_t* anon_huge_pages_bytes);

}  // namespace llamalloc
