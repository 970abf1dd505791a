#include "sim/trace_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>

#include "trace_format.h"

namespace llamalloc::sim {

namespace prof = llamalloc::prof;

void TraceReader::Fail(uint64_t offset, const std::string& problem) const {
  throw FormatError(path_ + ": " + problem + " at byte offset " + std::to_string(offset));
}

TraceReader::TraceReader(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(path + ": not a regular file");
  }
  size_bytes_ = static_cast<uint64_t>(st.st_size);
  if (size_bytes_ > 0) {
    void* p = ::mmap(nullptr, size_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw FormatError(path + ": cannot map: " + std::strerror(errno));
    }
    // Replay reads the file front to back, twice for the oracle.
    ::madvise(p, size_bytes_, MADV_SEQUENTIAL);
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);

  prof::FileHeader header{};
  if (size_bytes_ < sizeof(header)) {
    if (size_bytes_ >= 8 && std::memcmp(data_, prof::kTraceMagic, 8) != 0) Fail(0, "not a llamalloc trace (bad magic)");
    Fail(size_bytes_, "truncated: the 64-byte file header is cut short");
  }
  std::memcpy(&header, data_, sizeof(header));
  if (std::memcmp(header.magic, prof::kTraceMagic, 8) != 0) {
    if (std::memcmp(header.magic, prof::kRawProfileMagic, 8) == 0) Fail(0, "a raw profile dump, not a trace");
    Fail(0, "not a llamalloc trace (bad magic)");
  }
  if (header.version != prof::kTraceVersion) {
    Fail(8, "trace version " + std::to_string(header.version) + ", this simulator reads version " +
                std::to_string(prof::kTraceVersion));
  }
  if (header.header_bytes < sizeof(header) || header.header_bytes % 8 != 0 || header.header_bytes > size_bytes_) {
    Fail(12, "corrupt header size " + std::to_string(header.header_bytes));
  }
  start_mono_ns_ = header.start_mono_ns;

  bool seen_end = false;
  uint64_t offset = header.header_bytes;
  uint64_t declared_events = 0;
  while (offset < size_bytes_) {
    if (seen_end) Fail(offset, "corrupt: data after the end record");
    if (size_bytes_ - offset < sizeof(prof::RecordHeader)) Fail(offset, "truncated: record header cut short");
    prof::RecordHeader rh{};
    std::memcpy(&rh, data_ + offset, sizeof(rh));
    if (rh.payload_bytes % 8 != 0) Fail(offset, "corrupt record: payload of " + std::to_string(rh.payload_bytes) + " bytes is not a multiple of 8");
    uint64_t payload = offset + sizeof(rh);
    if (size_bytes_ - payload < rh.payload_bytes) {
      Fail(offset, "truncated: record of type " + std::to_string(rh.type) + " needs " + std::to_string(rh.payload_bytes) +
                       " payload bytes, the file ends " + std::to_string(size_bytes_ - payload) + " bytes later");
    }
    switch (static_cast<prof::RecordType>(rh.type)) {
      case prof::RecordType::kEvents: {
        if (rh.payload_bytes % sizeof(prof::TraceEvent) != 0) Fail(offset, "corrupt event record: payload is not a whole number of events");
        uint64_t n = rh.payload_bytes / sizeof(prof::TraceEvent);
        for (uint64_t i = 0; i < n; ++i) {
          prof::TraceEvent e;
          std::memcpy(&e, data_ + payload + i * sizeof(e), sizeof(e));
          uint32_t kind = e.kind & 0xff;
          if ((kind != prof::kAlloc && kind != prof::kFree) || (e.kind & ~(0xffu | prof::kEventFromRealloc)) != 0) {
            Fail(payload + i * sizeof(e), "corrupt event: kind " + std::to_string(e.kind));
          }
        }
        if (n > 0) chunks_.push_back({payload, event_count_, n});
        event_count_ += n;
        break;
      }
      case prof::RecordType::kEnd: {
        if (rh.payload_bytes < sizeof(prof::EndRecord)) Fail(offset, "corrupt end record");
        prof::EndRecord end{};
        std::memcpy(&end, data_ + payload, sizeof(end));
        declared_events = end.event_count;
        seen_end = true;
        break;
      }
      case prof::RecordType::kStack:
      case prof::RecordType::kMapping:
      case prof::RecordType::kSite:
      case prof::RecordType::kProgram:
      case prof::RecordType::kSymbols:
        break;  // stacks and mappings matter to the model, not to placement
      default:
        Fail(offset, "corrupt: unknown record type " + std::to_string(rh.type));
    }
    offset = payload + rh.payload_bytes;
  }
  if (!seen_end) Fail(size_bytes_, "truncated: no end record (the traced process was cut short)");
  if (declared_events != event_count_) {
    Fail(size_bytes_, "corrupt: the end record counts " + std::to_string(declared_events) + " events, the file holds " +
                          std::to_string(event_count_));
  }
  if (event_count_ > UINT32_MAX) throw FormatError(path_ + ": more than 2^32 events are not supported");

  // Threads flush their buffers separately, so the file may step back in time; replay needs time order.
  uint64_t last_ns = 0;
  bool sorted = true;
  for (uint64_t i = 0; i < event_count_ && sorted; ++i) {
    uint64_t t;
    std::memcpy(&t, EventAt(i), sizeof(t));
    sorted = t >= last_ns;
    last_ns = t;
  }
  if (!sorted) {
    order_.resize(event_count_);
    std::iota(order_.begin(), order_.end(), 0u);
    std::stable_sort(order_.begin(), order_.end(), [this](uint32_t a, uint32_t b) {
      uint64_t ta, tb;
      std::memcpy(&ta, EventAt(a), sizeof(ta));
      std::memcpy(&tb, EventAt(b), sizeof(tb));
      return ta < tb;
    });
  }
}

TraceReader::~TraceReader() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_bytes_);
}

const void* TraceReader::EventAt(uint64_t index) const {
  // Chunks are few and in index order; binary search them.
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), index,
                             [](uint64_t i, const Chunk& c) { return i < c.first_index; });
  const Chunk& c = *std::prev(it);
  return data_ + c.offset + (index - c.first_index) * sizeof(prof::TraceEvent);
}

void TraceReader::Rewind() {
  next_ = 0;
  chunk_ = 0;
}

bool TraceReader::Next(Event* event) {
  if (next_ >= event_count_) return false;
  const void* raw;
  if (!order_.empty()) {
    raw = EventAt(order_[next_]);
  } else {
    while (next_ >= chunks_[chunk_].first_index + chunks_[chunk_].count) ++chunk_;
    const Chunk& c = chunks_[chunk_];
    raw = data_ + c.offset + (next_ - c.first_index) * sizeof(prof::TraceEvent);
  }
  ++next_;
  prof::TraceEvent e;
  std::memcpy(&e, raw, sizeof(e));
  *event = Event{};
  event->time_ns = e.time_ns >= start_mono_ns_ ? e.time_ns - start_mono_ns_ : 0;
  event->kind = (e.kind & 0xff) == prof::kAlloc ? EventKind::kAlloc : EventKind::kFree;
  event->address = e.address;
  event->size_bytes = e.size_bytes;
  event->alignment_bytes = e.alignment_bytes;
  event->thread = e.thread_id;
  event->stack_id = e.stack_id;
  return true;
}

}  // namespace llamalloc::sim
