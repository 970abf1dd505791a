// An open-addressing hash map from a non-zero 64-bit key to a small value, sized up front.
// The replay touches one of these per event, so it must not allocate per insert (std::unordered_map
// allocates a node each time) and must stay cache-friendly: linear probing, backward-shift deletion
// (no tombstones, so long replays do not degrade), power-of-two capacity, load factor <= 1/2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace llamalloc::sim {

template <typename Value>
class FlatMap {
 public:
  explicit FlatMap(size_t expected_entries = 1024) { rehash(capacity_for(expected_entries)); }

  size_t size() const { return size_; }

  // Returns the value for key, or nullptr. Key 0 is never present.
  Value* find(uint64_t key) {
    if (key == 0) return nullptr;
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == 0) return nullptr;
    }
  }
  const Value* find(uint64_t key) const { return const_cast<FlatMap*>(this)->find(key); }

  // Inserts or overwrites; returns the stored value. key must not be 0.
  Value& put(uint64_t key, const Value& value) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return values_[i] = value;
      if (keys_[i] == 0) {
        keys_[i] = key;
        ++size_;
        return values_[i] = value;
      }
    }
  }

  // Returns the value for key, inserting a value-initialised one if absent.
  Value& get_or_insert(uint64_t key) {
    if (Value* v = find(key)) return *v;
    return put(key, Value{});
  }

  // Removes key; returns false if it was absent. Backward-shift keeps every probe chain unbroken.
  bool erase(uint64_t key, Value* removed = nullptr) {
    if (key == 0) return false;
    size_t i = hash(key) & mask_;
    for (;; i = (i + 1) & mask_) {
      if (keys_[i] == key) break;
      if (keys_[i] == 0) return false;
    }
    if (removed) *removed = std::move(values_[i]);
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; keys_[j] != 0; j = (j + 1) & mask_) {
      size_t home = hash(keys_[j]) & mask_;
      // Move j into the hole if its home is not in the cyclic range (hole, j].
      bool home_in_range = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_in_range) {
        keys_[hole] = keys_[j];
        values_[hole] = std::move(values_[j]);
        hole = j;
      }
    }
    keys_[hole] = 0;
    values_[hole] = Value{};
    --size_;
    return true;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (keys_[i] != 0) f(keys_[i], values_[i]);
    }
  }

 private:
  static size_t capacity_for(size_t entries) {
    size_t capacity = 16;
    while (capacity < entries * 2) capacity *= 2;
    return capacity;
  }
  static size_t hash(uint64_t key) {
    // Addresses share low zero bits and high prefixes; a multiplicative mix spreads both.
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return static_cast<size_t>(key);
  }
  void rehash(size_t capacity) {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Value> old_values = std::move(values_);
    keys_.assign(capacity, 0);
    values_.assign(capacity, Value{});
    mask_ = capacity - 1;
    size_ = 0;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] != 0) put(old_keys[i], old_values[i]);
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace llamalloc::sim
