// Lowest layer: attributes, fatal errors, the 256-bit block bitmap and the lock. Includes nothing of the heap.
#pragma once

#include <pthread.h>

#include <cstddef>
#include <cstdint>
#include <mutex>

#define LLAMALLOC_FAST inline __attribute__((always_inline))
#define LLAMALLOC_SLOW __attribute__((noinline, cold))
#define LLAMALLOC_NOINLINE __attribute__((noinline))
#define LLAMALLOC_LIKELY(x) __builtin_expect(!!(x), 1)
#define LLAMALLOC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LLAMALLOC_EXPORT extern "C" __attribute__((visibility("default")))

#ifndef LLAMALLOC_DEBUG_CHECKS
#define LLAMALLOC_DEBUG_CHECKS 0
#endif

namespace llamalloc {

// Writes "llamalloc: <what> <address>: <problem>" to stderr with write(2) (no malloc, no stdio) and aborts.
[[noreturn]] LLAMALLOC_SLOW void fatal_pointer(const char* what, const void* address, const char* problem);
// Writes "llamalloc: <message>" to stderr and aborts: a broken invariant.
[[noreturn]] LLAMALLOC_SLOW void fatal(const char* message);
// Writes the text to stderr with write(2).
void write_stderr(const char* text);

#define LLAMALLOC_CHECK(cond, msg)                            \
  do {                                                        \
    if (LLAMALLOC_UNLIKELY(!(cond))) ::llamalloc::fatal(msg); \
  } while (0)

// Liveness of the 256 blocks of one huge page (the LLAMA paper, section 6.5: "bitmaps with 256 bits").
struct Bitmap256 {
  uint64_t words[4] = {0, 0, 0, 0};

  bool test(size_t i) const { return (words[i >> 6] >> (i & 63)) & 1; }
  void set(size_t i) { words[i >> 6] |= uint64_t{1} << (i & 63); }
  void clear(size_t i) { words[i >> 6] &= ~(uint64_t{1} << (i & 63)); }
  void set_range(size_t first, size_t count) {
    for (size_t i = first; i < first + count; ++i) set(i);
  }
  void clear_range(size_t first, size_t count) {
    for (size_t i = first; i < first + count; ++i) clear(i);
  }
  bool any_in_range(size_t first, size_t count) const {
    for (size_t i = first; i < first + count; ++i)
      if (test(i)) return true;
    return false;
  }
  bool none() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  bool all() const { return (words[0] & words[1] & words[2] & words[3]) == ~uint64_t{0}; }
  size_t count() const {
    return __builtin_popcountll(words[0]) + __builtin_popcountll(words[1]) + __builtin_popcountll(words[2]) +
           __builtin_popcountll(words[3]);
  }
  // Index of the first set bit at or after `from`, or 256.
  size_t next_set(size_t from) const {
    while (from < 256) {
      uint64_t w = words[from >> 6] >> (from & 63);
      if (w) return from + __builtin_ctzll(w);
      from = (from | 63) + 1;
    }
    return 256;
  }
  // Index of the first clear bit at or after `from`, or 256.
  size_t next_clear(size_t from) const {
    while (from < 256) {
      uint64_t w = ~words[from >> 6] >> (from & 63);
      if (w) return from + __builtin_ctzll(w);
      from = (from | 63) + 1;
    }
    return 256;
  }
  Bitmap256 operator&(const Bitmap256& o) const {
    Bitmap256 r;
    for (int i = 0; i < 4; ++i) r.words[i] = words[i] & o.words[i];
    return r;
  }
  Bitmap256 operator|(const Bitmap256& o) const {
    Bitmap256 r;
    for (int i = 0; i < 4; ++i) r.words[i] = words[i] | o.words[i];
    return r;
  }
  Bitmap256 operator~() const {
    Bitmap256 r;
    for (int i = 0; i < 4; ++i) r.words[i] = ~words[i];
    return r;
  }
  bool operator==(const Bitmap256& o) const {
    return words[0] == o.words[0] && words[1] == o.words[1] && words[2] == o.words[2] && words[3] == o.words[3];
  }
  // First `count` contiguous clear bits whose start is a multiple of `align` (a power of two); 256 if none.
  size_t find_clear_run(size_t count, size_t align) const {
    size_t start = next_clear(0);
    while (start + count <= 256) {
      start = (start + align - 1) & ~(align - 1);
      if (start + count > 256) break;
      size_t hit = next_set(start);
      if (hit >= start + count) return start;
      start = next_clear(hit);  // skip the whole obstacle: one step per run of set bits
    }
    return 256;
  }
};

// The lock of the page heap, of the heap pool and of the shared heap (the page heap has one lock: the LLAMA
// paper, section 8, "Locking"). A pthread mutex: it never allocates, sleeps under contention instead of spinning
// on cores that the lock holder may need, and can be made anew in a fork child (reset_after_fork).
class Lock {
 public:
  void lock() { pthread_mutex_lock(&mutex_); }
  bool try_lock() { return pthread_mutex_trylock(&mutex_) == 0; }
  void unlock() { pthread_mutex_unlock(&mutex_); }
  void reset_after_fork() { pthread_mutex_init(&mutex_, nullptr); }

 private:
  pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
};

// A scope that holds a Lock (the standard guard: Lock is BasicLockable; the guard allocates nothing).
using LockGuard = std::lock_guard<Lock>;

}  // namespace llamalloc
