// The vocabulary every part shares -- the heap, the predictor, the model, the profiler and the simulator: the
// lifetime classes and the two size buckets of lifetime data. python/src/llamalloc/model/classes.py is its
// Python copy; python/tests/test_vocabulary.py checks the two agree (llamalloc-options --vocabulary prints
// this header's values as JSON).
//
// Not here: the heap's own size classes (thread_heap/size_class.h: the sizes of the blocks a span is cut into) and the
// simulator's (src/sim/size_classes.h: the size classes of the simulated TCMalloc- and Mesh-like heaps).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc {

// ---- lifetime classes ----------------------------------------------------------------------------------------
// Class c holds lifetimes < 10 ms x 10^c for c below kLongestLifetimeClass, which holds every longer lifetime
// (>= 1000 s); the last, kNeverFreedClass, is not a lifetime but objects never freed (docs/architecture.md). A
// heap configured with fewer classes (LLAMALLOC_CLASSES) keeps the same bounds for its first ones and makes its
// last one "never freed".
inline constexpr unsigned kMaxClasses = 8;
inline constexpr unsigned kNeverFreedClass = kMaxClasses - 1;
inline constexpr unsigned kLongestLifetimeClass = kMaxClasses - 2;
inline constexpr uint64_t kShortestClassNs = 10'000'000;  // 10 ms

// The upper bound of class c's lifetimes (c < kLongestLifetimeClass), and the lower bound of the next.
constexpr uint64_t lifetime_class_bound_ns(unsigned c) {
  uint64_t bound = kShortestClassNs;
  for (unsigned i = 0; i < c; ++i) bound *= 10;
  return bound;
}

// The class of an object that lived lifetime_ns.
constexpr unsigned lifetime_class_of(uint64_t lifetime_ns) {
  for (unsigned c = 0; c < kLongestLifetimeClass; ++c)
    if (lifetime_ns < lifetime_class_bound_ns(c)) return c;
  return kLongestLifetimeClass;
}
static_assert(lifetime_class_of(9'999'999) == 0 && lifetime_class_of(10'000'000) == 1);
static_assert(lifetime_class_of(999'999'999'999) == 5 && lifetime_class_of(1'000'000'000'000) == 6);

// ---- the profiler's size bucket ------------------------------------------------------------------------------
// A profile keeps one sample per stack and bucket of request sizes, so that similar sizes from one site share a
// sample: multiples of 16 bytes up to 1 KiB, then four buckets per power of two. A bucket is named by its upper
// bound in bytes, which is what a profile's `request_size` holds.
constexpr uint64_t profile_size_bucket(uint64_t size_bytes) {
  if (size_bytes <= 16) return 16;
  if (size_bytes <= 1024) return (size_bytes + 15) & ~uint64_t{15};
  int log2 = 63 - __builtin_clzll(size_bytes - 1);  // 2^log2 < size <= 2^(log2+1)
  uint64_t step = uint64_t{1} << (log2 - 2);         // four buckets between 2^log2 and 2^(log2+1)
  return (size_bytes + step - 1) / step * step;
}
static_assert(profile_size_bucket(1) == 16 && profile_size_bucket(1025) == 1280);

// ---- the model's size bucket ---------------------------------------------------------------------------------
// What the model sees of a request's size (its <size:k> token), and what the prediction cache keys on:
// ceil(log2(size)), at most kModelSizeBuckets - 1, and kSmallestModelSizeBucket (4) for every size up to 16
// bytes. A profile records a request of 16 bytes or less as 16 (profile_size_bucket), so training never sees a
// smaller bucket, and the process must give such a request the bucket training gave it.
inline constexpr unsigned kModelSizeBuckets = 48;
inline constexpr unsigned kSmallestModelSizeBucket = 4;
inline __attribute__((always_inline)) constexpr unsigned model_size_bucket(size_t size_bytes) {
  if (size_bytes <= 16) return kSmallestModelSizeBucket;
  unsigned k = 64 - unsigned(__builtin_clzll(uint64_t(size_bytes) - 1));
  return k < kModelSizeBuckets - 1 ? k : kModelSizeBuckets - 1;
}
static_assert(model_size_bucket(16) == 4 && model_size_bucket(17) == 5 && model_size_bucket(128) == 7);
static_assert(model_size_bucket(profile_size_bucket(100)) == model_size_bucket(100),
              "a profile's bucket bound has the model bucket of the sizes it holds");

}  // namespace llamalloc
