// The replay engine: feeds one policy every event of a trace, keeps the live-object table (what is
// live, how big, which allocation it was), samples a timeline at a fixed interval of trace time and
// sums up the run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/event.h"
#include "sim/flat_map.h"
#include "sim/policy.h"

namespace llamalloc::sim {

// Where events come from: the trace reader, or a vector in tests. rewind() allows a second pass (the
// oracle's lifetime classes need the future).
class EventSource {
 public:
  virtual ~EventSource() = default;
  // Fills *event and returns true, or returns false at the end. Throws FormatError on a bad trace.
  virtual bool next(Event* event) = 0;
  virtual void rewind() = 0;
  // A hint for sizing tables up front (0 = unknown).
  virtual uint64_t event_count_hint() const { return 0; }
};

class VectorEventSource final : public EventSource {
 public:
  explicit VectorEventSource(std::vector<Event> events) : events_(std::move(events)) {}
  bool next(Event* event) override {
    if (next_ >= events_.size()) return false;
    *event = events_[next_++];
    return true;
  }
  void rewind() override { next_ = 0; }
  uint64_t event_count_hint() const override { return events_.size(); }

 private:
  std::vector<Event> events_;
  size_t next_ = 0;
};

// The true lifetime class of every allocation, in allocation order (allocs and reallocs that return
// an object, numbered as the engine numbers them). Objects never freed get kNeverFreedClass. With a policy,
// its in-place reallocs (Policy::realloc_in_place) continue an object, as the engine replays them.
std::vector<uint8_t> compute_lifetime_classes(EventSource& source, const Policy* policy = nullptr);

// Each traced thread's id and the time of its last event (allocation, free or realloc), by thread id.
std::vector<std::pair<uint32_t, uint64_t>> compute_thread_ends(EventSource& source);

struct TimelineSample {
  uint64_t time_ns = 0;
  uint64_t live_bytes = 0;
  uint64_t footprint_bytes = 0;
  uint64_t heap_resident_bytes = 0;  // Policy::heap_resident_bytes
  std::vector<int64_t> extra;  // Policy::extra_columns() order
};

struct RunSummary {
  std::string policy;
  uint64_t events = 0;
  uint64_t allocs = 0;
  uint64_t frees = 0;
  uint64_t reallocs = 0;
  uint64_t reallocs_in_place = 0;   // of those, kept where they were (Policy::realloc_in_place)
  uint64_t unknown_frees = 0;       // free/realloc of an address that is not live: counted, skipped
  uint64_t reused_live_addresses = 0;  // alloc of an address still live: the trace missed a free
  uint64_t null_frees = 0;
  uint64_t first_time_ns = 0;
  uint64_t last_time_ns = 0;
  uint64_t final_live_bytes = 0;
  uint64_t peak_live_bytes = 0;
  uint64_t final_footprint_bytes = 0;
  uint64_t peak_footprint_bytes = 0;
  uint64_t peak_footprint_time_ns = 0;
  // The footprint less the bytes given back inside it (Policy::heap_resident_bytes), at the end.
  uint64_t final_heap_resident_bytes = 0;
  // Mean over timeline samples with live > 0 of footprint/live (the paper's "average fragmentation").
  double average_fragmentation_ratio = 0;
  // Sum of footprint over sum of live over the same samples (weights busy periods by their size).
  double mean_footprint_over_mean_live = 0;
  double final_fragmentation_ratio = 0;
  // After the peak (sim/after_peak.h, docs/bench.md): the window's first and last sample times, its sample count
  // and the medians of footprint, heap-resident and live bytes over it.
  uint64_t after_peak_start_ns = 0;
  uint64_t after_peak_end_ns = 0;
  uint64_t after_peak_samples = 0;
  uint64_t after_peak_footprint_bytes = 0;
  uint64_t after_peak_heap_resident_bytes = 0;
  uint64_t after_peak_live_bytes = 0;
  double replay_seconds = 0;
  double events_per_second = 0;
};

struct EngineOptions {
  uint64_t interval_ns = 10'000'000;  // timeline sample period in trace time
};

class Engine {
 public:
  Engine(Policy& policy, EngineOptions options, uint64_t expected_live_objects = 0);

  // Supplies the oracle's classes (compute_lifetime_classes); index = allocation number.
  void set_lifetime_classes(const std::vector<uint8_t>* classes) { lifetime_classes_ = classes; }

  void process(const Event& event);
  // Takes the final sample (at the last event's time) and completes the summary.
  void finish();

  const std::vector<std::string>& extra_columns() const { return extra_columns_; }
  const std::vector<TimelineSample>& timeline() const { return timeline_; }
  const RunSummary& summary() const { return summary_; }
  uint64_t live_bytes() const { return live_bytes_; }

 private:
  struct LiveObject {
    uint64_t size_bytes = 0;    // as the program last asked (live bytes)
    uint64_t policy_id = 0;     // the address the policy knows it by: its first one, when reallocs kept it
    uint64_t policy_size = 0;   // the size the policy allocated
    uint32_t alignment_bytes = 0;
  };
  void sample_up_to(uint64_t time_ns);
  void take_sample(uint64_t time_ns);
  void allocate(const Event& event, uint64_t address, uint64_t size_bytes);
  void free_object(uint64_t time_ns, uint64_t address, uint32_t thread);
  // A realloc the policy keeps in place: the object at old_address goes on at address.
  void move_in_place(const Event& event);
  void note_footprint(uint64_t time_ns);

  Policy& policy_;
  EngineOptions options_;
  const std::vector<uint8_t>* lifetime_classes_ = nullptr;
  FlatMap<LiveObject> live_;
  // Policy ids held by live objects now at another address: a new object at such an address gets a fresh id.
  FlatMap<uint8_t> moved_ids_{64};
  uint64_t next_fresh_id_ = uint64_t{1} << 63;  // above every user-space address
  uint64_t live_bytes_ = 0;
  uint64_t alloc_index_ = 0;
  uint64_t next_sample_ns_ = 0;
  bool started_ = false;
  std::vector<std::string> extra_columns_;
  std::vector<TimelineSample> timeline_;
  RunSummary summary_;
};

// Replays a whole source through one policy (with the lifetime pre-pass if the policy needs it),
// timing the replay.
struct RunResult {
  RunSummary summary;
  std::vector<std::string> extra_columns;
  std::vector<TimelineSample> timeline;
  std::vector<std::pair<std::string, double>> extras;
  std::vector<std::pair<std::string, std::string>> extra_json;
};
RunResult replay(EventSource& source, Policy& policy, EngineOptions options);
// The same with the lifetime pre-pass's result given (compute_lifetime_classes over this source, with a policy of
// the same realloc rule): replays of one trace through several configurations of a policy compute it once.
RunResult replay(EventSource& source, Policy& policy, EngineOptions options,
                 const std::vector<uint8_t>& lifetime_classes);

}  // namespace llamalloc::sim
