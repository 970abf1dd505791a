// A placement policy replayed by the engine: it sees every allocation and free of the trace and
// says, at any moment, how many bytes of memory the OS would have to back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/event.h"

namespace llamalloc::sim {

// One allocation as the policies see it. address identifies the object (the traced program's own
// address); policies that simulate a heap place it somewhere else and keep their own table.
struct ObjectAlloc {
  uint64_t time_ns = 0;
  uint64_t address = 0;
  uint64_t size_bytes = 0;
  uint32_t alignment_bytes = 0;
  uint32_t thread = 0;
  uint32_t stack_id = 0;
  // The true lifetime class from the trace (the object's own free time), or kUnknownClass when the
  // engine was not asked to compute it.
  uint8_t lifetime_class = kUnknownClass;
  static constexpr uint8_t kUnknownClass = 0xff;
};

// Extra per-sample figures a policy reports besides live and footprint. kMissing leaves the CSV cell
// empty (e.g. the meshing analysis runs only at some samples).
inline constexpr int64_t kMissing = INT64_MIN;

class Policy {
 public:
  virtual ~Policy() = default;

  virtual std::string name() const = 0;
  // Whether ObjectAlloc::lifetime_class must be filled (needs a pre-pass over the trace).
  virtual bool needs_lifetime_classes() const { return false; }
  // Whether the policy wants each traced thread's last event time before the replay (set_thread_ends: a pre-pass
  // over the trace).
  virtual bool needs_thread_ends() const { return false; }
  // Each traced thread's id and the time of its last event in the trace.
  virtual void set_thread_ends(const std::vector<std::pair<uint32_t, uint64_t>>& /*ends*/) {}

  virtual void allocate(const ObjectAlloc& object) = 0;
  // Whether this allocator's realloc keeps an object of old_size_bytes (as allocated, default alignment) where
  // it is for new_size_bytes. Then the engine neither frees nor allocates: the object goes on under its first
  // address with its first allocation's placement (and lifetime). Default: every realloc moves.
  virtual bool realloc_in_place(uint64_t /*old_size_bytes*/, uint64_t /*new_size_bytes*/) const { return false; }
  // size_bytes is the size recorded at allocation (frees in traces do not carry a trustworthy size).
  virtual void free(uint64_t time_ns, uint64_t address, uint64_t size_bytes, uint32_t thread) = 0;
  // Called with the time of every event before it is applied (deadlines, periodic work).
  virtual void advance_time(uint64_t /*time_ns*/) {}
  // The end of the trace: what the process did at exit before its statistics were taken (the library's thread
  // heaps give their empty spans back).
  virtual void at_exit() {}

  // The bytes the OS backs now under this policy (its own definition; see docs/simulator.md).
  virtual uint64_t footprint_bytes() const = 0;
  // The footprint less what the policy gave back to the OS inside it while keeping it (the llama policies'
  // subreleased blocks and purged span pages): the bytes of it that are resident. The others give back nothing
  // inside a page they keep: their footprint.
  virtual uint64_t heap_resident_bytes() const { return footprint_bytes(); }

  // Names of the extra timeline columns and their values now (same order). Called at each sample.
  virtual std::vector<std::string> extra_columns() const { return {}; }
  virtual void sample(uint64_t /*time_ns*/, std::vector<int64_t>& /*extra_values*/) {}

  // Policy-specific figures for the summary (counters, parameters), as name -> number.
  virtual std::vector<std::pair<std::string, double>> summary_extras() const { return {}; }
  // Optional JSON values (already serialised) added to the summary under their names, e.g. heap
  // snapshots.
  virtual std::vector<std::pair<std::string, std::string>> summary_json() const { return {}; }
};

}  // namespace llamalloc::sim
