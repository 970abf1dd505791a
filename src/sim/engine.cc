#include "sim/engine.h"

#include <algorithm>
#include <chrono>

#include "sim/after_peak.h"

namespace llamalloc::sim {

std::vector<uint8_t> compute_lifetime_classes(EventSource& source, const Policy* policy) {
  source.rewind();
  std::vector<uint8_t> classes;
  classes.reserve(source.event_count_hint());
  struct Pending {
    uint64_t alloc_index = 0;
    uint64_t time_ns = 0;
    uint64_t size_bytes = 0;  // as allocated
    uint32_t alignment_bytes = 0;
  };
  FlatMap<Pending> live(source.event_count_hint() / 4 + 1024);
  Event e;
  auto end_object = [&](uint64_t address, uint64_t time_ns) {
    Pending p;
    if (live.erase(address, &p)) classes[p.alloc_index] = uint8_t(lifetime_class_of(time_ns - p.time_ns));
  };
  auto begin_object = [&](const Event& event) {
    // Mirror the engine: an address allocated while live ends the old object first.
    end_object(event.address, event.time_ns);
    live.put(event.address, Pending{classes.size(), event.time_ns, event.size_bytes, event.alignment_bytes});
    classes.push_back(kNeverFreedClass);
  };
  while (source.next(&e)) {
    switch (e.kind) {
      case EventKind::kAlloc:
        if (e.address != 0) begin_object(e);
        break;
      case EventKind::kFree:
        end_object(e.address, e.time_ns);
        break;
      case EventKind::kRealloc: {
        Pending* old = e.old_address != 0 ? live.find(e.old_address) : nullptr;
        if (old != nullptr && e.address != 0 && policy != nullptr && old->alignment_bytes <= kDefaultAlignmentBytes &&
            policy->realloc_in_place(old->size_bytes, e.size_bytes)) {
          Pending moved;
          live.erase(e.old_address, &moved);
          end_object(e.address, e.time_ns);
          live.put(e.address, moved);
          break;
        }
        if (e.old_address != 0) end_object(e.old_address, e.time_ns);
        if (e.address != 0) begin_object(e);
        break;
      }
    }
  }
  source.rewind();
  return classes;
}

Engine::Engine(Policy& policy, EngineOptions options, uint64_t expected_live_objects)
    : policy_(policy), options_(options), live_(std::max<uint64_t>(expected_live_objects, 1024)) {
  if (options_.interval_ns == 0) options_.interval_ns = 10'000'000;
  extra_columns_ = policy_.extra_columns();
  summary_.policy = policy_.name();
}

void Engine::take_sample(uint64_t time_ns) {
  TimelineSample s;
  s.time_ns = time_ns;
  s.live_bytes = live_bytes_;
  s.extra.assign(extra_columns_.size(), kMissing);
  policy_.sample(time_ns, s.extra);
  // Sampled after sample(): a policy may do periodic work there (meshing) that changes its footprint.
  s.footprint_bytes = policy_.footprint_bytes();
  s.heap_resident_bytes = policy_.heap_resident_bytes();
  timeline_.push_back(std::move(s));
}

void Engine::sample_up_to(uint64_t time_ns) {
  // Samples at every boundary k * interval that the trace clock has reached: each shows the state
  // just before the first event at or after it.
  while (next_sample_ns_ <= time_ns) {
    policy_.advance_time(next_sample_ns_);
    take_sample(next_sample_ns_);
    next_sample_ns_ += options_.interval_ns;
  }
}

void Engine::note_footprint(uint64_t time_ns) {
  uint64_t footprint = policy_.footprint_bytes();
  if (footprint > summary_.peak_footprint_bytes) {
    summary_.peak_footprint_bytes = footprint;
    summary_.peak_footprint_time_ns = time_ns;
  }
}

void Engine::allocate(const Event& event, uint64_t address, uint64_t size_bytes) {
  if (live_.find(address) != nullptr) {
    // The trace lost the free of the previous object at this address; end it here.
    ++summary_.reused_live_addresses;
    free_object(event.time_ns, address, event.thread);
  }
  ObjectAlloc object;
  object.time_ns = event.time_ns;
  object.address = address;
  object.size_bytes = size_bytes;
  object.alignment_bytes = event.alignment_bytes;
  object.thread = event.thread;
  object.stack_id = event.stack_id;
  if (lifetime_classes_ != nullptr && alloc_index_ < lifetime_classes_->size()) {
    object.lifetime_class = (*lifetime_classes_)[alloc_index_];
  }
  ++alloc_index_;
  if (moved_ids_.size() != 0 && moved_ids_.find(address) != nullptr) {
    // The policy still has an object under this address, kept in place by a realloc that moved it in the trace.
    object.address = next_fresh_id_++;
    moved_ids_.put(object.address, 1);
  }
  live_.put(address, LiveObject{size_bytes, object.address, size_bytes, event.alignment_bytes});
  live_bytes_ += size_bytes;
  summary_.peak_live_bytes = std::max(summary_.peak_live_bytes, live_bytes_);
  policy_.allocate(object);
}

void Engine::free_object(uint64_t time_ns, uint64_t address, uint32_t thread) {
  LiveObject object;
  if (!live_.erase(address, &object)) {
    ++summary_.unknown_frees;
    return;
  }
  live_bytes_ -= object.size_bytes;
  if (object.policy_id != address) moved_ids_.erase(object.policy_id);
  policy_.free(time_ns, object.policy_id, object.policy_size, thread);
}

void Engine::move_in_place(const Event& event) {
  LiveObject object;
  live_.erase(event.old_address, &object);
  if (live_.find(event.address) != nullptr) {
    ++summary_.reused_live_addresses;
    free_object(event.time_ns, event.address, event.thread);
  }
  live_bytes_ = live_bytes_ - object.size_bytes + event.size_bytes;
  summary_.peak_live_bytes = std::max(summary_.peak_live_bytes, live_bytes_);
  object.size_bytes = event.size_bytes;
  if (object.policy_id != event.address) moved_ids_.put(object.policy_id, 1);
  else moved_ids_.erase(object.policy_id);
  live_.put(event.address, object);
}

void Engine::process(const Event& event) {
  if (!started_) {
    started_ = true;
    summary_.first_time_ns = event.time_ns;
    next_sample_ns_ = event.time_ns - event.time_ns % options_.interval_ns;
  }
  // A trace merged from several threads may step back a little; time never runs backwards here.
  uint64_t time_ns = std::max(event.time_ns, summary_.last_time_ns);
  summary_.last_time_ns = time_ns;
  sample_up_to(time_ns);
  policy_.advance_time(time_ns);
  ++summary_.events;
  switch (event.kind) {
    case EventKind::kAlloc:
      ++summary_.allocs;
      if (event.address != 0) allocate(event, event.address, event.size_bytes);
      break;
    case EventKind::kFree:
      ++summary_.frees;
      if (event.address == 0) {
        ++summary_.null_frees;
      } else {
        free_object(time_ns, event.address, event.thread);
      }
      break;
    case EventKind::kRealloc: {
      ++summary_.reallocs;
      const LiveObject* old = event.old_address != 0 ? live_.find(event.old_address) : nullptr;
      if (old != nullptr && event.address != 0 && old->alignment_bytes <= kDefaultAlignmentBytes &&
          policy_.realloc_in_place(old->policy_size, event.size_bytes)) {
        ++summary_.reallocs_in_place;
        move_in_place(event);
        break;
      }
      if (event.old_address != 0) free_object(time_ns, event.old_address, event.thread);
      if (event.address != 0) allocate(event, event.address, event.size_bytes);
      break;
    }
  }
  note_footprint(time_ns);
}

void Engine::finish() {
  if (!started_) return;
  policy_.advance_time(summary_.last_time_ns);
  // The end state, even when a sample at this very time shows the state before its events. A trace ends when the
  // program's teardown begins (docs/profiler.md), while its threads still hold their spans: the final footprint
  // is the one a running server keeps, as the process's steady state measures it, not the one after its thread
  // heaps are given back at exit (at_exit, after it).
  take_sample(summary_.last_time_ns);
  summary_.final_live_bytes = live_bytes_;
  summary_.final_footprint_bytes = timeline_.back().footprint_bytes;
  summary_.final_heap_resident_bytes = timeline_.back().heap_resident_bytes;
  note_footprint(summary_.last_time_ns);
  policy_.at_exit();
  double ratio_sum = 0, footprint_sum = 0, live_sum = 0;
  uint64_t n = 0;
  for (const TimelineSample& s : timeline_) {
    if (s.live_bytes == 0) continue;
    ratio_sum += static_cast<double>(s.footprint_bytes) / static_cast<double>(s.live_bytes);
    footprint_sum += static_cast<double>(s.footprint_bytes);
    live_sum += static_cast<double>(s.live_bytes);
    ++n;
  }
  summary_.average_fragmentation_ratio = n ? ratio_sum / static_cast<double>(n) : 0.0;
  summary_.mean_footprint_over_mean_live = live_sum > 0 ? footprint_sum / live_sum : 0.0;
  summary_.final_fragmentation_ratio =
      live_bytes_ ? static_cast<double>(summary_.final_footprint_bytes) / static_cast<double>(live_bytes_)
                  : 0.0;
  AfterPeak after = after_peak(timeline_);
  summary_.after_peak_start_ns = after.start_ns;
  summary_.after_peak_end_ns = after.end_ns;
  summary_.after_peak_samples = after.end - after.begin;
  summary_.after_peak_footprint_bytes = after.footprint_bytes;
  summary_.after_peak_heap_resident_bytes = after.heap_resident_bytes;
  summary_.after_peak_live_bytes = after.live_bytes;
}

std::vector<std::pair<uint32_t, uint64_t>> compute_thread_ends(EventSource& source) {
  FlatMap<uint64_t> last(64);  // thread id + 1 -> its last event's time
  std::vector<uint32_t> threads;
  Event e;
  while (source.next(&e)) {
    uint64_t key = uint64_t{e.thread} + 1;
    if (uint64_t* t = last.find(key)) {
      *t = std::max(*t, e.time_ns);
    } else {
      last.put(key, e.time_ns);
      threads.push_back(e.thread);
    }
  }
  std::sort(threads.begin(), threads.end());
  std::vector<std::pair<uint32_t, uint64_t>> ends;
  for (uint32_t t : threads) ends.emplace_back(t, *last.find(uint64_t{t} + 1));
  return ends;
}

namespace {

RunResult replay_with(EventSource& source, Policy& policy, EngineOptions options,
                      const std::vector<uint8_t>* given_classes) {
  auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> computed;
  const std::vector<uint8_t>* classes = nullptr;
  if (policy.needs_lifetime_classes()) {
    if (given_classes == nullptr) computed = compute_lifetime_classes(source, &policy);
    classes = given_classes != nullptr ? given_classes : &computed;
  }
  if (policy.needs_thread_ends()) {
    source.rewind();
    policy.set_thread_ends(compute_thread_ends(source));
  }
  source.rewind();
  Engine engine(policy, options, source.event_count_hint() / 4);
  if (classes != nullptr) engine.set_lifetime_classes(classes);
  Event e;
  while (source.next(&e)) engine.process(e);
  engine.finish();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RunResult result;
  result.summary = engine.summary();
  result.summary.replay_seconds = seconds;
  result.summary.events_per_second = seconds > 0 ? static_cast<double>(result.summary.events) / seconds : 0;
  result.extra_columns = engine.extra_columns();
  result.timeline = engine.timeline();
  result.extras = policy.summary_extras();
  result.extra_json = policy.summary_json();
  return result;
}

}  // namespace

RunResult replay(EventSource& source, Policy& policy, EngineOptions options) {
  return replay_with(source, policy, options, nullptr);
}

RunResult replay(EventSource& source, Policy& policy, EngineOptions options,
                 const std::vector<uint8_t>& lifetime_classes) {
  return replay_with(source, policy, options, &lifetime_classes);
}

}  // namespace llamalloc::sim
