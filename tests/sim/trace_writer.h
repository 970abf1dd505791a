// Writes trace files byte for byte as docs/formats/trace.md lays them out, so the reader's tests
// can build good, truncated and corrupt traces.
#pragma once

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "trace_format.h"

namespace llamalloc::sim::testing {

class TraceBytes {
 public:
  explicit TraceBytes(uint64_t start_mono_ns = 1'000'000'000) {
    prof::FileHeader h{};
    std::memcpy(h.magic, prof::kTraceMagic, 8);
    h.version = prof::kTraceVersion;
    h.header_bytes = sizeof(h);
    h.pid = 42;
    h.start_mono_ns = start_mono_ns;
    append(&h, sizeof(h));
  }
  void events(const std::vector<prof::TraceEvent>& events) {
    record(prof::RecordType::kEvents, events.data(), events.size() * sizeof(prof::TraceEvent));
    event_count_ += events.size();
  }
  void stack(uint32_t id, std::vector<uint64_t> frames) {
    std::vector<unsigned char> payload(sizeof(prof::StackRecord) + frames.size() * 8);
    prof::StackRecord s{id, static_cast<uint32_t>(frames.size())};
    std::memcpy(payload.data(), &s, sizeof(s));
    std::memcpy(payload.data() + sizeof(s), frames.data(), frames.size() * 8);
    record(prof::RecordType::kStack, payload.data(), payload.size());
  }
  void end() {
    prof::EndRecord e{};
    e.event_count = event_count_;
    record(prof::RecordType::kEnd, &e, sizeof(e));
  }
  void record(prof::RecordType type, const void* payload, size_t n) {
    prof::RecordHeader rh{static_cast<uint32_t>(type), static_cast<uint32_t>(n)};
    append(&rh, sizeof(rh));
    append(payload, n);
  }
  std::string& bytes() { return bytes_; }
  std::string write(const std::string& path, size_t keep_bytes = SIZE_MAX) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes_.data(), static_cast<std::streamsize>(std::min(keep_bytes, bytes_.size())));
    return path;
  }

 private:
  void append(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
  uint64_t event_count_ = 0;
};

inline prof::TraceEvent trace_alloc_event(uint64_t time_ns, uint64_t address, uint64_t size, uint32_t stack = 1) {
  return prof::TraceEvent{time_ns, address, size, stack, 7, 16, prof::kAlloc};
}
inline prof::TraceEvent trace_free_event(uint64_t time_ns, uint64_t address) {
  return prof::TraceEvent{time_ns, address, 0, prof::kNoStack, 7, 0, prof::kFree};
}

}  // namespace llamalloc::sim::testing
