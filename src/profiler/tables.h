// The profiler's tables, all in memory of its own (platform.h map_zeroed), sized once at start:
//  - StackTable: distinct stacks, interned to dense ids (lock-free lookup, locked insert);
//  - SiteTable: per (stack, request size class, alignment) statistics (each site has its own lock);
//  - LiveTable: sampled objects not yet freed, by address (a free that finds an empty bucket takes no lock).
// A table that is full drops what does not fit and counts it; it never allocates.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "platform.h"
#include "sampling.h"
#include "trace_format.h"

namespace llamalloc::prof {

inline uint64_t hash_words(const uint64_t* words, int n, uint64_t seed) {
  uint64_t h = seed ^ 0x9E3779B97F4A7C15ULL;
  for (int i = 0; i < n; ++i) {
    h ^= words[i] + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
  }
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

class StackTable {
 public:
  static constexpr uint32_t kSlots = 1u << 18;        // power of two
  static constexpr uint32_t kMaxStacks = kSlots / 2;  // keeps probes short
  static constexpr uint64_t kArenaWords = uint64_t{kMaxStacks} * 24;  // mean depth 24 fits; deeper ones drop

  bool init() {
    slots_ = static_cast<Slot*>(map_zeroed(sizeof(Slot) * kSlots));
    stacks_ = static_cast<StackRef*>(map_zeroed(sizeof(StackRef) * kMaxStacks));
    arena_ = static_cast<uint64_t*>(map_zeroed(sizeof(uint64_t) * kArenaWords));
    count_.store(0);
    arena_used_ = 0;
    return slots_ != nullptr && stacks_ != nullptr && arena_ != nullptr;
  }

  // Returns the stack's id, or kNoStack when the table is full. *is_new tells the caller to emit it.
  uint32_t intern(const uint64_t* pcs, int depth, bool* is_new) {
    *is_new = false;
    uint64_t h = hash_words(pcs, depth, static_cast<uint64_t>(depth));
    if (uint32_t id = find(pcs, depth, h); id != kNoStack) return id;
    SpinLockHolder hold(lock_);
    if (uint32_t id = find(pcs, depth, h); id != kNoStack) return id;
    uint32_t id = count_.load(std::memory_order_relaxed);
    if (id >= kMaxStacks || arena_used_ + static_cast<uint64_t>(depth) > kArenaWords) return kNoStack;
    uint64_t* words = arena_ + arena_used_;
    memcpy(words, pcs, sizeof(uint64_t) * static_cast<size_t>(depth));
    arena_used_ += static_cast<uint64_t>(depth);
    stacks_[id] = {words, static_cast<uint32_t>(depth)};
    for (uint32_t i = static_cast<uint32_t>(h);; ++i) {
      Slot& s = slots_[i & (kSlots - 1)];
      if (s.hash.load(std::memory_order_relaxed) == 0) {
        s.id = id;
        s.hash.store(h, std::memory_order_release);
        break;
      }
    }
    count_.store(id + 1, std::memory_order_release);
    *is_new = true;
    return id;
  }

  uint32_t count() const { return count_.load(std::memory_order_acquire); }
  const uint64_t* pcs(uint32_t id, uint32_t* depth) const {
    *depth = stacks_[id].depth;
    return stacks_[id].pcs;
  }
  void reset_after_fork() { lock_.reset_after_fork(); }

 private:
  struct Slot {
    std::atomic<uint64_t> hash;  // 0: empty; published last
    uint32_t id;
  };
  struct StackRef {
    const uint64_t* pcs;
    uint32_t depth;
  };

  uint32_t find(const uint64_t* pcs, int depth, uint64_t h) const {
    for (uint32_t i = static_cast<uint32_t>(h);; ++i) {
      const Slot& s = slots_[i & (kSlots - 1)];
      uint64_t sh = s.hash.load(std::memory_order_acquire);
      if (sh == 0) return kNoStack;
      if (sh != h) continue;
      const StackRef& ref = stacks_[s.id];
      if (ref.depth == static_cast<uint32_t>(depth) &&
          memcmp(ref.pcs, pcs, sizeof(uint64_t) * static_cast<size_t>(depth)) == 0) {
        return s.id;
      }
    }
  }

  Slot* slots_ = nullptr;
  StackRef* stacks_ = nullptr;
  uint64_t* arena_ = nullptr;
  uint64_t arena_used_ = 0;
  std::atomic<uint32_t> count_{0};
  SpinLock lock_;
};

struct Site {
  SpinLock lock;
  SiteRecord record;
};

class SiteTable {
 public:
  static constexpr uint32_t kSlots = 1u << 17;
  static constexpr uint32_t kMaxSites = kSlots / 2;

  bool init() {
    slots_ = static_cast<Slot*>(map_zeroed(sizeof(Slot) * kSlots));
    sites_ = static_cast<Site*>(map_zeroed(sizeof(Site) * kMaxSites));
    count_.store(0);
    return slots_ != nullptr && sites_ != nullptr;
  }

  // Index of the site, created empty if new; UINT32_MAX when the table is full.
  uint32_t find_or_insert(uint32_t stack_id, uint64_t size_class, uint32_t alignment_bytes) {
    uint64_t key[2] = {(uint64_t{stack_id} << 32) | alignment_bytes, size_class};
    uint64_t h = hash_words(key, 2, 7);
    if (uint32_t i = find(key, h); i != UINT32_MAX) return i;
    SpinLockHolder hold(lock_);
    if (uint32_t i = find(key, h); i != UINT32_MAX) return i;
    uint32_t index = count_.load(std::memory_order_relaxed);
    if (index >= kMaxSites) return UINT32_MAX;
    SiteRecord& r = sites_[index].record;
    r.stack_id = stack_id;
    r.alignment_bytes = alignment_bytes;
    r.request_size_bytes = size_class;
    for (uint32_t i = static_cast<uint32_t>(h);; ++i) {
      Slot& s = slots_[i & (kSlots - 1)];
      if (s.hash.load(std::memory_order_relaxed) == 0) {
        s.key[0] = key[0];
        s.key[1] = key[1];
        s.index = index;
        s.hash.store(h, std::memory_order_release);
        break;
      }
    }
    count_.store(index + 1, std::memory_order_release);
    return index;
  }

  uint32_t count() const { return count_.load(std::memory_order_acquire); }
  Site& at(uint32_t index) { return sites_[index]; }
  void reset_after_fork() {
    lock_.reset_after_fork();
    for (uint32_t i = 0; i < count(); ++i) sites_[i].lock.reset_after_fork();
  }

 private:
  struct Slot {
    std::atomic<uint64_t> hash;
    uint64_t key[2];
    uint32_t index;
  };

  uint32_t find(const uint64_t* key, uint64_t h) const {
    for (uint32_t i = static_cast<uint32_t>(h);; ++i) {
      const Slot& s = slots_[i & (kSlots - 1)];
      uint64_t sh = s.hash.load(std::memory_order_acquire);
      if (sh == 0) return UINT32_MAX;
      if (sh == h && s.key[0] == key[0] && s.key[1] == key[1]) return s.index;
    }
  }

  Slot* slots_ = nullptr;
  Site* sites_ = nullptr;
  std::atomic<uint32_t> count_{0};
  SpinLock lock_;
};

struct LiveObject {
  uint64_t address;
  uint64_t alloc_time_ns;  // the program clock (program_clock.h)
  uint64_t size_bytes;
  uint32_t site;
  LiveObject* next;
};

class LiveTable {
 public:
  static constexpr uint32_t kBuckets = 1u << 16;
  static constexpr uint64_t kMaxObjects = uint64_t{1} << 22;

  bool init() {
    buckets_ = static_cast<Bucket*>(map_zeroed(sizeof(Bucket) * kBuckets));
    occupied_ = static_cast<std::atomic<uint64_t>*>(map_zeroed(sizeof(uint64_t) * (kBuckets / 64)));
    pool_ = static_cast<LiveObject*>(map_zeroed(sizeof(LiveObject) * kMaxObjects));
    pool_used_ = 0;
    free_list_ = nullptr;
    count_.store(0);
    return buckets_ != nullptr && occupied_ != nullptr && pool_ != nullptr;
  }

  bool insert(const LiveObject& object) {
    LiveObject* node = new_node();
    if (node == nullptr) return false;
    *node = object;
    uint32_t i = bucket_of(object.address);
    Bucket& b = buckets_[i];
    SpinLockHolder hold(b.lock);
    node->next = b.head.load(std::memory_order_relaxed);
    b.head.store(node, std::memory_order_release);
    occupied_[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_release);
    count_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // False when the object at address is certainly not in the table. The allocating thread inserted before
  // returning the pointer, and the program ordered that return before this free: an empty bucket here means
  // the object was not sampled. Most frees stop at this bitmap (8 KiB, stays in cache) instead of missing the
  // cache on the bucket array.
  bool maybe_contains(uint64_t address) const {
    if (count_.load(std::memory_order_relaxed) == 0) return false;
    uint32_t i = bucket_of(address);
    return (occupied_[i / 64].load(std::memory_order_acquire) & (uint64_t{1} << (i % 64))) != 0;
  }

  // Moves the object at address into *out and forgets it; false when it was not sampled.
  bool remove(uint64_t address, LiveObject* out) {
    if (!maybe_contains(address)) return false;
    uint32_t i = bucket_of(address);
    Bucket& b = buckets_[i];
    LiveObject* found = nullptr;
    {
      SpinLockHolder hold(b.lock);
      LiveObject* prev = nullptr;
      for (LiveObject* n = b.head.load(std::memory_order_relaxed); n != nullptr; prev = n, n = n->next) {
        if (n->address == address) {
          if (prev == nullptr) {
            b.head.store(n->next, std::memory_order_release);
          } else {
            prev->next = n->next;
          }
          if (b.head.load(std::memory_order_relaxed) == nullptr) {
            occupied_[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_relaxed);
          }
          found = n;
          break;
        }
      }
    }
    if (found == nullptr) return false;
    *out = *found;
    count_.fetch_sub(1, std::memory_order_relaxed);
    free_node(found);
    return true;
  }

  void reset_after_fork() {
    pool_lock_.reset_after_fork();
    for (uint32_t i = 0; i < kBuckets; ++i) buckets_[i].lock.reset_after_fork();
  }

 private:
  struct Bucket {
    std::atomic<LiveObject*> head;
    SpinLock lock;
  };

  static uint32_t bucket_of(uint64_t address) {
    return static_cast<uint32_t>((address >> 4) * 0x9E3779B97F4A7C15ULL >> 48) & (kBuckets - 1);
  }

  LiveObject* new_node() {
    SpinLockHolder hold(pool_lock_);
    if (free_list_ != nullptr) {
      LiveObject* n = free_list_;
      free_list_ = n->next;
      return n;
    }
    if (pool_used_ == kMaxObjects) return nullptr;
    return &pool_[pool_used_++];
  }

  void free_node(LiveObject* n) {
    SpinLockHolder hold(pool_lock_);
    n->next = free_list_;
    free_list_ = n;
  }

  Bucket* buckets_ = nullptr;
  std::atomic<uint64_t>* occupied_ = nullptr;  // bit i: bucket i is not empty
  LiveObject* pool_ = nullptr;
  uint64_t pool_used_ = 0;
  LiveObject* free_list_ = nullptr;
  SpinLock pool_lock_;
  std::atomic<uint64_t> count_{0};
};

}  // namespace llamalloc::prof
