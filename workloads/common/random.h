// The workloads' deterministic arithmetic: splitmix64 (a 64-bit mix, the seed of every pseudo-random choice),
// FNV-1a (the checksums that a run prints) and one xorshift64 step (a fast generator's next state). A run's
// choices and checksums are pure functions of its seeds, so that they are the same under every allocator and
// thread schedule. Nothing here allocates.
#ifndef LLAMALLOC_WORKLOADS_COMMON_RANDOM_H
#define LLAMALLOC_WORKLOADS_COMMON_RANDOM_H

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace workloads {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a over bytes, continuing from `hash` (the offset basis by default).
inline std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

inline std::uint64_t fnv1a64(std::string_view text) { return fnv1a64(text.data(), text.size()); }

// Advances a xorshift64 state (13, 7, 17) and returns the new state; the state must not be 0.
inline std::uint64_t xorshift64(std::uint64_t& state) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

}  // namespace workloads

#endif  // LLAMALLOC_WORKLOADS_COMMON_RANDOM_H
