// Platform layer: the only code that talks to the OS about memory and time. The heap policy above takes a
// Platform and a Clock by reference, so that tests and the simulator run the real policy on fake pages with a
// trace clock (as TCMalloc's huge page filler takes its unback function and clock).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc {

class Platform {
 public:
  // Address space only: `bytes` aligned to `alignment`, not yet usable, charging no memory. The heap never
  // dereferences data addresses itself, so a fake platform may hand out addresses that map nothing.
  // nullptr when the address space is exhausted.
  virtual void* reserve(size_t bytes, size_t alignment) = 0;
  // Makes [address, address + bytes) of a reservation usable memory, as huge pages. false when refused.
  virtual bool back(void* address, size_t bytes) = 0;
  // Gives the memory of [address, address + bytes) back to the OS at once. The heap never uses these
  // addresses again (papers/000 section 8), so nothing needs to be usable afterwards.
  virtual void release(void* address, size_t bytes) = 0;
  // Gives the memory of [address, address + bytes), free blocks of a huge page that stays in use, back to the OS
  // (subrelease): the kernel splits the huge page, and the range reads as zero, on 4 KiB pages, when touched again.
  virtual void subrelease(void* address, size_t bytes) = 0;
  // Whether the kernel may (again) back the huge page at `address` with one 2 MiB page: false once some of its
  // blocks are subreleased, true when they are all in use again. Linux's khugepaged otherwise collapses a
  // subreleased page back into a whole huge page as soon as one of its small pages is present (the default
  // khugepaged/max_ptes_none is 511), zero-filling the rest: measured on image-server, RSS in the quiet phase
  // went from 10 back to 17 MiB within seconds. A fake platform need not do anything.
  virtual void allow_huge_page(void* address, size_t bytes, bool allow) {
    (void)address;
    (void)bytes;
    (void)allow;
  }
  // Zeroed, usable memory for the heap's own metadata (small pages, backed on first touch); nullptr if refused.
  virtual void* map_metadata(size_t bytes) = 0;
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
  void* reserve(size_t bytes, size_t alignment) override;
  bool back(void* address, size_t bytes) override;
  void release(void* address, size_t bytes) override;
  void subrelease(void* address, size_t bytes) override;
  void allow_huge_page(void* address, size_t bytes, bool allow) override;
  void* map_metadata(size_t bytes) override;
  void release_metadata(void* address, size_t bytes) override;
};

// CLOCK_MONOTONIC(_COARSE) through the vDSO: no system call, no allocation, unaffected by wall-clock changes.
class MonotonicClock final : public Clock {
 public:
  constexpr MonotonicClock() = default;
  uint64_t now_ns() override;
};

// Reads Rss and AnonHugePages of this process from /proc/self/smaps_rollup without allocating. false if unreadable.
bool read_resident(uint64_t* rss_bytes, uint64_t* anon_huge_pages_bytes);

}  // namespace llamalloc
