// The only file that calls mmap, mprotect, madvise and munmap.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "pal/pal.h"

namespace llamalloc {

void* LinuxPlatform::reserve(size_t bytes, size_t alignment) {
  // PROT_NONE: address space only, so an unbacked huge page faults instead of silently growing the heap.
  // MAP_NORESERVE: 16 GiB per lifetime class must not count against overcommit until backed.
  size_t over = bytes + alignment;
  void* raw = mmap(nullptr, over, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
  // Trim the slack on both sides so that the region is exactly aligned (munmap of the unused ends).
  if (aligned > start) munmap(raw, aligned - start);
  uintptr_t end = start + over;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  // MADV_HUGEPAGE on the whole reservation: this machine's THP mode is "madvise", so without it the kernel backs
  // the heap with 4 KiB pages. The flag survives the later mprotect of each huge page.
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

bool LinuxPlatform::back(void* address, size_t bytes) {
  // Read-write from now on; the kernel backs it on first touch, with one huge page per aligned 2 MiB since the
  // VMA carries VM_HUGEPAGE. Adjacent backed pages merge into one VMA (same protection and flags).
  if (mprotect(address, bytes, PROT_READ | PROT_WRITE) != 0) return false;
  return true;
}

void LinuxPlatform::release(void* address, size_t bytes) {
  // MADV_DONTNEED, not MADV_FREE: the paper returns a free huge page to the OS at once, and RSS must drop now.
  // The range stays read-write (no mprotect back to PROT_NONE) so that released pages never split the VMA;
  // the heap never touches these addresses again.
  madvise(address, bytes, MADV_DONTNEED);
}

void LinuxPlatform::subrelease(void* address, size_t bytes) {
  // MADV_DONTNEED: RSS drops now. The heap also takes the page out of khugepaged's reach (allow_huge_page) until
  // its blocks are all in use again.
  madvise(address, bytes, MADV_DONTNEED);
}

void LinuxPlatform::allow_huge_page(void* address, size_t bytes, bool allow) {
  // Splits the VMA around the page while it is off (adjacent pages with the same flag merge again).
  madvise(address, bytes, allow ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

void* LinuxPlatform::map_metadata(size_t bytes) {
  // Zero-filled, lazily backed 4 KiB pages; MAP_NORESERVE because most of a region's metadata is never touched.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void LinuxPlatform::release_metadata(void* address, size_t bytes) {
  // MADV_DONTNEED on private anonymous memory: freed now, and reads back as zeros (the "unused" state).
  madvise(address, bytes, MADV_DONTNEED);
}

uint64_t MonotonicClock::now_ns() {
  // CLOCK_MONOTONIC_COARSE: the vDSO returns the last tick's time without reading the TSC (a few ns instead of
  // tens on a VM). Its resolution (1-4 ms) is far below the shortest deadline (K x 10 ms).
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000u + uint64_t(ts.tv_nsec);
}

namespace {
uint64_t field_kib(const char* text, const char* name) {
  const char* at = strstr(text, name);
  if (!at) return 0;
  at += strlen(name);
  while (*at == ' ' || *at == '\t') ++at;
  uint64_t v = 0;
  while (*at >= '0' && *at <= '9') v = v * 10 + uint64_t(*at++ - '0');
  return v * 1024;
}
}  // namespace

bool read_resident(uint64_t* rss_bytes, uint64_t* anon_huge_pages_bytes) {
  int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[4096];
  size_t used = 0;
  for (;;) {
    ssize_t n = read(fd, buf + used, sizeof(buf) - 1 - used);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += size_t(n);
    if (used == sizeof(buf) - 1) break;
  }
  close(fd);
  buf[used] = 0;
  *rss_bytes = field_kib(buf, "\nRss:");
  *anon_huge_pages_bytes = field_kib(buf, "\nAnonHugePages:");
  return used > 0;
}

}  // namespace llamalloc
