// The stacks and executable mappings of a trace (its STACK and MAPPING records), for the policies that need the
// calling context of an allocation (llama-model). TraceReader provides them; tests build them by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

namespace llamalloc::sim {

struct MappingInfo {
  uint64_t memory_start = 0, memory_limit = 0, file_offset = 0;
  std::string path;
  std::string build_id;  // raw bytes
};

class TraceStacks {
 public:
  virtual ~TraceStacks() = default;
  // The frames of stack `stack_id` (return address - 1, innermost first); false when the trace has no such stack.
  virtual bool stack(uint32_t stack_id, const uint64_t** frames, uint32_t* depth) const = 0;
  virtual void for_each_stack(const std::function<void(uint32_t, const uint64_t*, uint32_t)>& fn) const = 0;
  virtual const std::vector<MappingInfo>& mappings() const = 0;
};

// Stacks held in memory (tests, hand-made traces).
class VectorTraceStacks final : public TraceStacks {
 public:
  void add(uint32_t stack_id, std::vector<uint64_t> frames) { stacks_[stack_id] = std::move(frames); }
  void add_mapping(MappingInfo m) { mappings_.push_back(std::move(m)); }
  bool stack(uint32_t stack_id, const uint64_t** frames, uint32_t* depth) const override {
    auto it = stacks_.find(stack_id);
    if (it == stacks_.end()) return false;
    *frames = it->second.data();
    *depth = static_cast<uint32_t>(it->second.size());
    return true;
  }
  void for_each_stack(const std::function<void(uint32_t, const uint64_t*, uint32_t)>& fn) const override {
    for (const auto& [id, frames] : stacks_) fn(id, frames.data(), static_cast<uint32_t>(frames.size()));
  }
  const std::vector<MappingInfo>& mappings() const override { return mappings_; }

 private:
  std::unordered_map<uint32_t, std::vector<uint64_t>> stacks_;
  std::vector<MappingInfo> mappings_;
};

}  // namespace llamalloc::sim
