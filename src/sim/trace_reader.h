// Reads a trace file (docs/formats/trace.md; structs in src/profiler/trace_format.h) as an
// EventSource. The whole file is checked when it is opened, so a truncated, foreign or corrupt
// trace fails before any replay with one line naming the byte offset where it broke.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "profiler/trace_format.h"
#include "sim/engine.h"
#include "sim/trace_stacks.h"

namespace llamalloc::sim {

// A bad input file: what() is one line, "<path>: <problem>".
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TraceReader final : public EventSource, public TraceStacks {
 public:
  // kTime: events are replayed in time order (an index is built when the file is not in it). kFile: the file is
  // checked but no index is built, for a reader that only wants the stacks and mappings.
  enum class Order { kTime, kFile };
  explicit TraceReader(const std::string& path, Order order = Order::kTime);
  ~TraceReader() override;
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  bool next(Event* event) override;
  void rewind() override;
  uint64_t event_count_hint() const override { return event_count_; }

  // Another reader of the same events, with its own position: replays on several threads read one mapped (or
  // decompressed) trace through one cursor each. It must not outlive this reader.
  std::unique_ptr<EventSource> cursor() const;

  uint64_t event_count() const { return event_count_; }
  uint64_t start_mono_ns() const { return start_mono_ns_; }
  // Whether the file's events were not in time order (threads flush their buffers separately) and
  // the reader replays them through a sorted index instead.
  bool reordered() const { return !order_.empty(); }

  // The STACK and MAPPING records (read in place from the mapped file).
  bool stack(uint32_t stack_id, const uint64_t** frames, uint32_t* depth) const override;
  void for_each_stack(const std::function<void(uint32_t, const uint64_t*, uint32_t)>& fn) const override;
  const std::vector<MappingInfo>& mappings() const override { return mappings_; }

 private:
  // Where a reader of the events is: this reader's own, or a cursor's.
  struct Position {
    uint64_t next = 0;
    size_t chunk = 0;
    std::vector<bool> paired;  // allocation halves already replayed with their free half as one kRealloc
  };
  class Cursor;
  bool next_at(Position& position, Event* event) const;
  void rewind_at(Position& position) const;

  [[noreturn]] void fail(uint64_t offset, const std::string& problem) const;
  const void* event_at(uint64_t index) const;
  void sort_by_time();
  // The realloc whose free half is the event at index: its allocation half, the same thread's next event in the
  // same record. False when it is not there (realloc(p, 0), or a buffer flushed between the two halves).
  bool realloc_pair(uint64_t index, const prof::TraceEvent& free_half, prof::TraceEvent* alloc_half) const;

  std::string path_;
  const unsigned char* data_ = nullptr;
  uint64_t size_bytes_ = 0;
  uint64_t start_mono_ns_ = 0;
  struct Chunk {
    uint64_t offset;  // of the first TraceEvent
    uint64_t first_index;
    uint64_t count;
  };
  std::vector<Chunk> chunks_;
  struct StackRef {
    uint64_t offset;  // of the first address
    uint32_t depth;
  };
  std::unordered_map<uint32_t, StackRef> stacks_;
  std::vector<MappingInfo> mappings_;
  std::vector<uint32_t> order_;  // sorted replay order when the file is not in time order
  uint64_t event_count_ = 0;
  Position position_;
};

}  // namespace llamalloc::sim
