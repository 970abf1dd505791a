// The bookkeeping the simulated heaps (mesh_policy.cc, tcmalloc_policy.cc) share: elements of a vector named by
// their index, whose ids are reused once given back, and unordered lists of ids in which each element knows its
// position, so that it leaves in constant time.
#pragma once

#include <cstdint>
#include <vector>

namespace llamalloc::sim {

// An id for a new element of `items`: the last one given back to `free_ids` when there is one (its element keeps
// what it held: the caller resets it), else the next index, for which a default element is appended.
template <class T>
uint32_t take_id(std::vector<T>& items, std::vector<uint32_t>& free_ids) {
  if (!free_ids.empty()) {
    uint32_t id = free_ids.back();
    free_ids.pop_back();
    return id;
  }
  items.emplace_back();
  return static_cast<uint32_t>(items.size() - 1);
}

// Removes the id at position `pos` of an unordered list by moving the list's last id there; position_of(id) is
// where an element's position is kept, so the moved one's is updated.
template <class PositionOf>
void remove_at(std::vector<uint32_t>& list, uint32_t pos, PositionOf&& position_of) {
  uint32_t last = list.back();
  list[pos] = last;
  position_of(last) = pos;
  list.pop_back();
}

}  // namespace llamalloc::sim
