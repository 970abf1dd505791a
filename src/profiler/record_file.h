// Writing the profiler's files (trace_format.h): a buffered writer over a file descriptor, and the records that
// both a profile and a trace hold -- the header with the process's identity, stacks, the mappings of the loaded
// objects and the end record. Nothing here allocates: the buffers are the profiler's own memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "platform.h"
#include "trace_format.h"

namespace llamalloc::prof {

// Buffered record writer over a file descriptor, with a buffer of the profiler's own memory.
class Writer {
 public:
  bool open(int fd, char* buffer, size_t capacity) {
    fd_ = fd;
    buffer_ = buffer;
    capacity_ = capacity;
    used_ = 0;
    ok_ = fd >= 0 && buffer != nullptr;
    return ok_;
  }
  void append(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0 && ok_) {
      if (used_ == capacity_) flush();
      size_t n = bytes < capacity_ - used_ ? bytes : capacity_ - used_;
      memcpy(buffer_ + used_, p, n);
      used_ += n;
      p += n;
      bytes -= n;
    }
  }
  void pad() {
    static const char kZeros[8] = {};
    if (size_t r = written_plus_used() % 8; r != 0) append(kZeros, 8 - r);
  }
  void record(RecordType type, uint32_t payload_bytes) {
    RecordHeader h{static_cast<uint32_t>(type), payload_bytes};
    append(&h, sizeof(h));
  }
  void flush() {
    if (ok_ && used_ > 0) ok_ = write_all(fd_, buffer_, used_);
    written_ += used_;
    used_ = 0;
  }
  bool ok() const { return ok_; }

 private:
  size_t written_plus_used() const { return written_ + used_; }
  int fd_ = -1;
  char* buffer_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t written_ = 0;
  bool ok_ = false;
};

// The identity of the process that every file starts with.
struct ProcessIdentity {
  uint64_t pid;
  uint64_t start_time_ns;  // CLOCK_REALTIME
  uint64_t start_mono_ns;  // CLOCK_MONOTONIC
  const char* exe_path;
};

// A record's payload size, padded to 8 bytes.
uint32_t padded(size_t bytes);
// Every file the profiler writes has its times on the program clock (kFileProgramTime).
void write_header(Writer& w, const char magic[8], uint32_t version, uint64_t sample_bytes,
                  const ProcessIdentity& process);
void write_stack(Writer& w, uint32_t id, const uint64_t* pcs, uint32_t depth);
// One record per executable segment of every loaded object (the main program, unnamed by the loader, as exe_path).
void write_mappings(Writer& w, const char* exe_path);
void write_end(Writer& w, uint64_t count, uint64_t dropped);

}  // namespace llamalloc::prof
