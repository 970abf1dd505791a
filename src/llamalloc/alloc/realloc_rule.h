// When llamalloc's realloc keeps an object where it is, in one place for the heap (heap_realloc), the profiler
// (a realloc the heap would serve in place makes no new object in the profile) and the simulator (the same in a
// replay). Header only, constexpr: the profiler, which does not link the heap, includes it too.
#pragma once

#include <cstddef>

#include "config.h"
#include "thread_heap/size_class.h"

namespace llamalloc {

// A small object stays in its block while the new size fits and either stays in its size class or shrinks by
// at most half (a larger shrink moves it, so that a block is not kept for a much smaller object).
constexpr bool realloc_keeps_small(size_t usable, unsigned size_class, size_t new_size) {
  return new_size <= usable && (new_size > usable / 2 || size_class_of(new_size) == size_class);
}

// A large or huge object stays in its blocks or pages while the new size fits, is still large, and uses at
// least half of them.
constexpr bool realloc_keeps_large(size_t usable, size_t new_size) {
  return new_size <= usable && new_size > kSmallMaxBytes && new_size >= usable / 2;
}

// The usable size the heap gives a request of this many bytes at the default alignment: its size class's block,
// whole 8 KiB blocks up to a huge page, whole 4 KiB pages above (a huge object maps its bytes, not its last huge
// page's slack). (A never-freed huge object whose slack was donated ends on whole 8 KiB blocks instead: there the
// heap's usable size is up to 4 KiB larger, so a realloc that grows into that last block stays where this rule
// says it moves.)
constexpr size_t usable_bytes_of_request(size_t request) {
  if (request <= kSmallMaxBytes) return size_class_bytes(size_class_of(request));
  if (request <= kHugePageBytes) return (request + kBlockBytes - 1) & ~(kBlockBytes - 1);
  return (request + kSmallPageBytes - 1) & ~(kSmallPageBytes - 1);
}

// Whether realloc(p, new_size) of an object allocated with old_request bytes (default alignment) returns p.
constexpr bool realloc_stays_in_place(size_t old_request, size_t new_size) {
  if (new_size == 0) return false;  // realloc(p, 0) frees
  size_t usable = usable_bytes_of_request(old_request);
  if (old_request <= kSmallMaxBytes) return realloc_keeps_small(usable, size_class_of(old_request), new_size);
  return realloc_keeps_large(usable, new_size);
}

static_assert(realloc_stays_in_place(7000, 6000) && !realloc_stays_in_place(7000, 3000));
static_assert(realloc_stays_in_place(100, 110) && !realloc_stays_in_place(100, 200));
static_assert(realloc_stays_in_place(40, 30) && !realloc_stays_in_place(40, 20) && !realloc_stays_in_place(64, 16));
static_assert(realloc_stays_in_place(100000, 60000) && !realloc_stays_in_place(100000, 30000));
static_assert(!realloc_stays_in_place(100, 0));

}  // namespace llamalloc
