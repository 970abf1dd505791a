// The Linux platform: the only file that calls mmap, mprotect, madvise, munmap and membarrier.
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "base.h"
#include "config.h"
#include "pal/pal.h"

namespace llamalloc {

namespace {

constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

// Address space at exactly `address`: 0, or EEXIST (another mapping there), or ENOMEM (a limit).
// MAP_FIXED_NOREPLACE never replaces a mapping (on kernels older than 4.17 the flag is ignored and the address
// is only a hint, so the result is checked).
int reserve_exactly(uintptr_t address, size_t bytes) {
  void* p = mmap(reinterpret_cast<void*>(address), bytes, PROT_NONE, kReserveFlags | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return errno == EEXIST ? EEXIST : ENOMEM;
  if (reinterpret_cast<uintptr_t>(p) == address) return 0;
  munmap(p, bytes);
  return EEXIST;
}

// `bytes` of PROT_NONE address space at an `alignment`-aligned address, or nullptr.
void* reserve_aligned(size_t bytes, size_t alignment) {
  // PROT_NONE: address space only (no commit charge, nothing against RLIMIT_DATA), so an unbacked huge page
  // faults instead of silently growing the heap. Over-map by the alignment and trim both ends: one try when the
  // address space is not limited.
  void* raw = mmap(nullptr, bytes + alignment, PROT_NONE, kReserveFlags, -1, 0);
  if (raw != MAP_FAILED) {
    uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t{alignment} - 1);
    if (aligned > start) munmap(raw, aligned - start);
    uintptr_t end = start + bytes + alignment;
    if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
    return reinterpret_cast<void*>(aligned);
  }
  // Under RLIMIT_AS the over-mapping itself is refused: learn where the kernel places a mapping of this size,
  // then try the aligned addresses at and below it (the kernel fills the address space top down, so the room
  // above a reservation there stays free longest for it to grow into).
  void* probe = mmap(nullptr, bytes, PROT_NONE, kReserveFlags, -1, 0);
  if (probe == MAP_FAILED) return nullptr;
  uintptr_t at = reinterpret_cast<uintptr_t>(probe);
  if ((at & (alignment - 1)) == 0) return probe;
  munmap(probe, bytes);
  at &= ~(uintptr_t{alignment} - 1);
  for (int tries = 0; tries < 64 && at >= alignment; ++tries, at -= alignment)
    if (reserve_exactly(at, bytes) == 0) return reinterpret_cast<void*>(at);
  return nullptr;
}

}  // namespace

void LinuxPlatform::advise_huge(void* address, size_t bytes) {
  // Where the THP mode is "madvise", the kernel backs the heap with 4 KiB pages without MADV_HUGEPAGE. The flag
  // belongs to the mapping and survives the later mprotect of each huge page; LLAMALLOC_HUGE_PAGES=0 asks for
  // 4 KiB pages even where the THP mode is "always".
  // Mode 2 gives no advice: where the THP mode is "madvise" the kernel then backs 4 KiB pages and khugepaged leaves
  // the heap alone, and MADV_COLLAPSE (which MADV_NOHUGEPAGE would refuse) makes the dense pages huge.
  if (huge_mode_ == 2) return;
  madvise(address, bytes, huge_mode_ == 1 ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

size_t LinuxPlatform::resident_small_pages(void* address, size_t bytes) {
  // (The slow paths of a process without a sweeper thread call this: the program's errno is kept.)
  int saved_errno = errno;
  unsigned char vec[512];
  size_t resident = 0;
  for (size_t done = 0; done < bytes;) {
    size_t chunk = bytes - done < sizeof vec * 4096 ? bytes - done : sizeof vec * 4096;
    if (mincore(static_cast<char*>(address) + done, chunk, vec) != 0) break;
    for (size_t i = 0; i < (chunk + 4095) / 4096; ++i) resident += vec[i] & 1;
    done += chunk;
  }
  errno = saved_errno;
  return resident;
}

void LinuxPlatform::advise_huge_page(void* address, size_t bytes) {
  // Only mode 2 decides page by page (mode 1 advised the whole reservation, mode 0 wants none).
  if (huge_mode_ != 2) return;
  int saved_errno = errno;
  madvise(address, bytes, MADV_HUGEPAGE);
  errno = saved_errno;
}

namespace {
// Whether the running kernel is Linux 6.1 or later (uname), which has MADV_COLLAPSE.
bool kernel_has_collapse() {
  utsname u;
  if (uname(&u) != 0) return true;
  unsigned major = 0, minor = 0;
  const char* c = u.release;
  while (*c >= '0' && *c <= '9') major = major * 10 + unsigned(*c++ - '0');
  if (*c == '.') ++c;
  while (*c >= '0' && *c <= '9') minor = minor * 10 + unsigned(*c++ - '0');
  return major > 6 || (major == 6 && minor >= 1);
}
}  // namespace

Platform::Collapse LinuxPlatform::collapse_huge_page(void* address, size_t bytes) {
#ifndef MADV_COLLAPSE
  constexpr int MADV_COLLAPSE = 25;  // Linux 6.1
#endif
  struct KeepErrno {
    int saved = errno;
    ~KeepErrno() { errno = saved; }
  } keep;
  if (!collapse_unsupported_) {
    if (madvise(address, bytes, MADV_COLLAPSE) == 0) return Collapse::kDone;
    // EINVAL from a kernel before 6.1: it has no MADV_COLLAPSE. From a later one, this range cannot be collapsed
    // (advised MADV_NOHUGEPAGE, as a page taken from the page cache may still be); anything else (EAGAIN, ENOMEM:
    // no huge page free now) is for later.
    if (errno != EINVAL || kernel_has_collapse()) return Collapse::kFailed;
    collapse_unsupported_ = true;
    write_stderr("llamalloc: MADV_COLLAPSE is not available (Linux 6.1 or later has it): dense pages are advised "
                 "MADV_HUGEPAGE and left to khugepaged\n");
  }
  madvise(address, bytes, MADV_HUGEPAGE);
  return Collapse::kUnsupported;
}

void* LinuxPlatform::reserve(size_t bytes, size_t min_bytes, size_t alignment, size_t* got) {
  // Halving down to min_bytes: what RLIMIT_AS or a crowded address space leaves.
  for (size_t want = bytes;;) {
    if (void* p = reserve_aligned(want, alignment)) {
      advise_huge(p, want);
      *got = want;
      return p;
    }
    if (want <= min_bytes) return nullptr;
    want = (want / 2) & ~(kHugePageBytes - 1);
    if (want < min_bytes) want = min_bytes;
  }
}

int LinuxPlatform::extend(void* address, size_t bytes) {
  int error = reserve_exactly(reinterpret_cast<uintptr_t>(address), bytes);
  if (error == 0) advise_huge(address, bytes);
  return error;
}

void LinuxPlatform::unreserve(void* address, size_t bytes) {
  // (Refused only when splitting the mapping would exceed vm.max_map_count: the memory still goes, and the heap
  // finds the range taken when it wants it again, as if another mapping were there.)
  if (munmap(address, bytes) != 0) madvise(address, bytes, MADV_DONTNEED);
}

size_t LinuxPlatform::address_space_left() {
  rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return ~size_t{0};
  // The process's size now: the first field of /proc/self/statm, in pages.
  size_t size = 0;
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char buf[128];
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) size = size * 10 + size_t(buf[i] - '0');
    size *= size_t(sysconf(_SC_PAGESIZE));
  }
  return limit.rlim_cur > size ? size_t(limit.rlim_cur - size) : 0;
}

bool LinuxPlatform::back(void* address, size_t bytes) {
  // Read-write from now on; the kernel backs it on first touch, with one huge page per aligned 2 MiB since the
  // mapping carries VM_HUGEPAGE. Adjacent backed pages merge into one VMA (same protection and flags). Refused
  // (ENOMEM) beyond RLIMIT_DATA, or beyond the commit limit under strict overcommit.
  return mprotect(address, bytes, PROT_READ | PROT_WRITE) == 0;
}

void LinuxPlatform::release(void* address, size_t bytes) {
  // A fresh PROT_NONE mapping over the range, not MADV_DONTNEED alone: the memory, its page tables, its commit
  // charge and its count against RLIMIT_DATA all go, so that what the heap maps read-write tracks what it uses
  // and memory freed after an ENOMEM can be had again; the range stays reserved for the heap to reuse.
  void* p = mmap(address, bytes, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    // (Refused only when the new mapping would exceed vm.max_map_count: the memory still goes.)
    madvise(address, bytes, MADV_DONTNEED);
    return;
  }
  advise_huge(address, bytes);
}

void LinuxPlatform::subrelease(void* address, size_t bytes) {
  // MADV_DONTNEED: RSS drops now. The heap also takes the page out of khugepaged's reach (allow_huge_page) until
  // its blocks are all in use again.
  madvise(address, bytes, MADV_DONTNEED);
}

void LinuxPlatform::allow_huge_page(void* address, size_t bytes, bool allow) {
  // Splits the VMA around the page while it is off (adjacent pages with the same flag merge again). Mode 2 too:
  // a page it advised huge (its class fills densely) is scanned by khugepaged like any, and one whose blocks are
  // all backed again is dense.
  if (huge_mode_ == 0) return;
  madvise(address, bytes, allow ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
}

void* LinuxPlatform::map_metadata(size_t bytes) {
  // Zero-filled, lazily backed 4 KiB pages; MAP_NORESERVE because most of a region's metadata is never touched.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* LinuxPlatform::reserve_metadata(size_t bytes) {
  // PROT_NONE until committed: metadata charges memory, RLIMIT_DATA and the commit limit only for the pages in use.
  void* p = mmap(nullptr, bytes, PROT_NONE, kReserveFlags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void LinuxPlatform::unmap_metadata(void* address, size_t bytes) { munmap(address, bytes); }

bool LinuxPlatform::commit_metadata(void* address, size_t bytes) {
  return mprotect(address, bytes, PROT_READ | PROT_WRITE) == 0;
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

bool process_has_other_threads() {
  int saved_errno = errno;
  char buf[1024];
  ssize_t n = -1;
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
  }
  errno = saved_errno;
  if (n <= 0) return false;
  buf[n] = 0;
  // num_threads is field 20, after the command name in parentheses, which may itself hold spaces and parentheses.
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  int field = 2;  // the command name's
  for (; *p != 0 && field < 20; ++p)
    if (*p == ' ') ++field;
  long threads = 0;
  for (; *p >= '0' && *p <= '9'; ++p) threads = threads * 10 + (*p - '0');
  return threads > 1;
}

namespace {
std::atomic<int> g_membarrier{0};  // 0: not tried, 1: registered, -1: unavailable
}  // namespace

bool membarrier_ready() {
  int state = g_membarrier.load(std::memory_order_acquire);
  if (state == 0) {
    state = syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 ? 1 : -1;
    g_membarrier.store(state, std::memory_order_release);
  }
  return state == 1;
}

bool membarrier_all_threads() {
  return membarrier_ready() && syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}

bool last_thread_running() {
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  // "pid (comm) state ppid ...": the state is the main thread's (Z once it has exited while others run), the
  // 20th field the threads of the process, that exited main thread included.
  const char* at = strrchr(buf, ')');
  if (at == nullptr || at[1] != ' ') return false;
  char state = at[2];
  at += 2;
  for (int field = 3; field < 20 && *at; ++field) {
    at = strchr(at, ' ');
    if (at == nullptr) return false;
    ++at;
  }
  unsigned threads = 0;
  while (*at >= '0' && *at <= '9') threads = threads * 10 + unsigned(*at++ - '0');
  return state == 'Z' && threads <= 2;
}

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
