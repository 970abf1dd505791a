// The only OS-facing layer of the profiler: anonymous memory, a spin lock, clocks and raw I/O. Nothing here
// calls malloc, so the profiler's own memory never comes from the allocator it observes.
#pragma once

#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <mutex>

#define LLPROF_LIKELY(x) __builtin_expect(!!(x), 1)
#define LLPROF_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace llamalloc::prof {

// Reserves address space without committing it: tables are sized for the worst case and only the pages that
// are touched cost memory (MAP_NORESERVE: no swap accounting for the untouched part).
inline void* map_zeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// A test-and-test-and-set lock. Held only around a few stores into the profiler's own tables: never while
// unwinding, never around a call that may allocate or take the dynamic loader's lock.
class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(1, std::memory_order_acquire) != 0) {
      while (locked_.load(std::memory_order_relaxed) != 0) __builtin_ia32_pause();
    }
  }
  bool try_lock() { return locked_.exchange(1, std::memory_order_acquire) == 0; }
  void unlock() { locked_.store(0, std::memory_order_release); }
  // After fork() only the forking thread exists: a lock another thread held is simply released.
  void reset_after_fork() { locked_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<uint32_t> locked_{0};
};

// A scope that holds a SpinLock (the standard guard: SpinLock is BasicLockable).
using SpinLockHolder = std::lock_guard<SpinLock>;

// In a fatal-signal handler the interrupted thread may hold a lock for good: try for a while, then go on
// without it (a torn read of one site beats no profile at all). True when the lock is held.
inline bool lock_bounded(SpinLock& lock) {
  for (int i = 0; i < 1'000'000; ++i) {
    if (lock.try_lock()) return true;
    __builtin_ia32_pause();
  }
  return false;
}

inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint32_t current_thread_id() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

inline bool write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = write(fd, p, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace llamalloc::prof
