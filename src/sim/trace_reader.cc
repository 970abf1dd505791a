#include "sim/trace_reader.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <queue>

#include "trace_format.h"

namespace llamalloc::sim {

namespace prof = llamalloc::prof;

namespace {

// zstd-compressed traces (`llamalloc trace` writes them so) are decompressed into anonymous memory with the
// system's libzstd.so.1, loaded at run time: the simulator builds without zstd's headers and needs the library
// only for a compressed trace. The declarations are zstd's stable streaming API (zstd.h, v1.3+).
constexpr unsigned char kZstdMagic[4] = {0x28, 0xB5, 0x2F, 0xFD};
struct ZstdInBuffer {
  const void* src;
  size_t size;
  size_t pos;
};
struct ZstdOutBuffer {
  void* dst;
  size_t size;
  size_t pos;
};

// Returns the decompressed bytes in an anonymous mapping of exactly *out_bytes (munmap it), or throws.
unsigned char* decompress_zstd(const std::string& path, const unsigned char* data, uint64_t bytes,
                              uint64_t* out_bytes) {
  void* lib = ::dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) throw FormatError(path + ": compressed with zstd, and libzstd.so.1 cannot be loaded");
  using Create = void* (*)();
  using Free = size_t (*)(void*);
  using Init = size_t (*)(void*);
  using Decompress = size_t (*)(void*, ZstdOutBuffer*, ZstdInBuffer*);
  using IsError = unsigned (*)(size_t);
  using ErrorName = const char* (*)(size_t);
  auto create = reinterpret_cast<Create>(::dlsym(lib, "ZSTD_createDStream"));
  auto free_stream = reinterpret_cast<Free>(::dlsym(lib, "ZSTD_freeDStream"));
  auto init = reinterpret_cast<Init>(::dlsym(lib, "ZSTD_initDStream"));
  auto decompress = reinterpret_cast<Decompress>(::dlsym(lib, "ZSTD_decompressStream"));
  auto is_error = reinterpret_cast<IsError>(::dlsym(lib, "ZSTD_isError"));
  auto error_name = reinterpret_cast<ErrorName>(::dlsym(lib, "ZSTD_getErrorName"));
  if (!create || !free_stream || !init || !decompress || !is_error || !error_name) {
    throw FormatError(path + ": compressed with zstd, and libzstd.so.1 lacks the streaming API");
  }
  void* stream = create();
  init(stream);
  size_t capacity = std::max<uint64_t>(uint64_t{1} << 20, bytes * 4);
  void* out = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (out == MAP_FAILED) {
    free_stream(stream);
    throw FormatError(path + ": cannot map memory to decompress it");
  }
  ZstdInBuffer in{data, bytes, 0};
  ZstdOutBuffer o{out, capacity, 0};
  size_t last = 1;
  while (in.pos < in.size || o.pos == o.size) {
    if (o.pos == o.size) {
      void* grown = ::mremap(o.dst, o.size, o.size * 2, MREMAP_MAYMOVE);
      if (grown == MAP_FAILED) {
        ::munmap(o.dst, o.size);
        free_stream(stream);
        throw FormatError(path + ": cannot map memory to decompress it");
      }
      o.dst = grown;
      o.size *= 2;
    }
    size_t before_in = in.pos, before_out = o.pos;
    last = decompress(stream, &o, &in);
    if (is_error(last)) {
      std::string why = error_name(last);
      ::munmap(o.dst, o.size);
      free_stream(stream);
      throw FormatError(path + ": corrupt zstd stream (" + why + ")");
    }
    if (in.pos == before_in && o.pos == before_out && o.pos < o.size) break;  // no progress: input used up
  }
  free_stream(stream);
  if (last != 0) {
    ::munmap(o.dst, o.size);
    throw FormatError(path + ": truncated zstd stream (the compressed trace was cut)");
  }
  size_t final_bytes = std::max<size_t>(o.pos, 1);
  void* shrunk = ::mremap(o.dst, o.size, final_bytes, 0);
  if (shrunk == MAP_FAILED) shrunk = o.dst;  // keeps the larger mapping; munmap of the prefix still works
  else o.size = final_bytes;
  *out_bytes = o.pos;
  return static_cast<unsigned char*>(shrunk);
}

}  // namespace

void TraceReader::fail(uint64_t offset, const std::string& problem) const {
  throw FormatError(path_ + ": " + problem + " at byte offset " + std::to_string(offset));
}

TraceReader::TraceReader(const std::string& path, Order order) : path_(path) {
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
    // replay() reads the file front to back, twice for the oracle.
    ::madvise(p, size_bytes_, MADV_SEQUENTIAL);
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
  if (size_bytes_ >= 4 && std::memcmp(data_, kZstdMagic, 4) == 0) {
    uint64_t raw_bytes = 0;
    unsigned char* raw = nullptr;
    try {
      raw = decompress_zstd(path, data_, size_bytes_, &raw_bytes);
    } catch (...) {
      ::munmap(const_cast<unsigned char*>(data_), size_bytes_);
      data_ = nullptr;
      throw;
    }
    ::munmap(const_cast<unsigned char*>(data_), size_bytes_);
    data_ = raw;
    size_bytes_ = raw_bytes;
    if (size_bytes_ == 0) {  // an empty stream: nothing to read (the destructor unmaps one page)
      ::munmap(raw, 1);
      data_ = nullptr;
    }
  }

  prof::FileHeader header{};
  if (size_bytes_ < sizeof(header)) {
    if (size_bytes_ >= 8 && std::memcmp(data_, prof::kTraceMagic, 8) != 0) fail(0, "not a llamalloc trace (bad magic)");
    fail(size_bytes_, "truncated: the 64-byte file header is cut short");
  }
  std::memcpy(&header, data_, sizeof(header));
  if (std::memcmp(header.magic, prof::kTraceMagic, 8) != 0) {
    if (std::memcmp(header.magic, prof::kRawProfileMagic, 8) == 0) fail(0, "a raw profile dump, not a trace");
    fail(0, "not a llamalloc trace (bad magic)");
  }
  if (header.version != prof::kTraceVersion) {
    fail(8, "trace version " + std::to_string(header.version) + ", this simulator reads version " +
                std::to_string(prof::kTraceVersion));
  }
  if (header.header_bytes < sizeof(header) || header.header_bytes % 8 != 0 || header.header_bytes > size_bytes_) {
    fail(12, "corrupt header size " + std::to_string(header.header_bytes));
  }
  start_mono_ns_ = header.start_mono_ns;

  bool seen_end = false;
  uint64_t offset = header.header_bytes;
  uint64_t declared_events = 0;
  while (offset < size_bytes_) {
    if (seen_end) fail(offset, "corrupt: data after the end record");
    if (size_bytes_ - offset < sizeof(prof::RecordHeader)) fail(offset, "truncated: record header cut short");
    prof::RecordHeader rh{};
    std::memcpy(&rh, data_ + offset, sizeof(rh));
    if (rh.payload_bytes % 8 != 0) fail(offset, "corrupt record: payload of " + std::to_string(rh.payload_bytes) + " bytes is not a multiple of 8");
    uint64_t payload = offset + sizeof(rh);
    if (size_bytes_ - payload < rh.payload_bytes) {
      fail(offset, "truncated: record of type " + std::to_string(rh.type) + " needs " + std::to_string(rh.payload_bytes) +
                       " payload bytes, the file ends " + std::to_string(size_bytes_ - payload) + " bytes later");
    }
    switch (static_cast<prof::RecordType>(rh.type)) {
      case prof::RecordType::kEvents: {
        if (rh.payload_bytes % sizeof(prof::TraceEvent) != 0) fail(offset, "corrupt event record: payload is not a whole number of events");
        uint64_t n = rh.payload_bytes / sizeof(prof::TraceEvent);
        for (uint64_t i = 0; i < n; ++i) {
          prof::TraceEvent e;
          std::memcpy(&e, data_ + payload + i * sizeof(e), sizeof(e));
          uint32_t kind = e.kind & 0xff;
          if ((kind != prof::kAlloc && kind != prof::kFree) || (e.kind & ~(0xffu | prof::kEventFromRealloc)) != 0) {
            fail(payload + i * sizeof(e), "corrupt event: kind " + std::to_string(e.kind));
          }
        }
        if (n > 0) chunks_.push_back({payload, event_count_, n});
        event_count_ += n;
        break;
      }
      case prof::RecordType::kEnd: {
        if (rh.payload_bytes < sizeof(prof::EndRecord)) fail(offset, "corrupt end record");
        prof::EndRecord end{};
        std::memcpy(&end, data_ + payload, sizeof(end));
        declared_events = end.event_count;
        seen_end = true;
        break;
      }
      case prof::RecordType::kStack: {
        prof::StackRecord sr{};
        if (rh.payload_bytes < sizeof(sr)) fail(offset, "corrupt stack record");
        std::memcpy(&sr, data_ + payload, sizeof(sr));
        if (sizeof(sr) + 8ull * sr.depth != rh.payload_bytes) fail(offset, "corrupt stack record: depth and length differ");
        stacks_[sr.stack_id] = StackRef{payload + sizeof(sr), sr.depth};
        break;
      }
      case prof::RecordType::kMapping: {
        prof::MappingRecord mr{};
        if (rh.payload_bytes < sizeof(mr)) fail(offset, "corrupt mapping record");
        std::memcpy(&mr, data_ + payload, sizeof(mr));
        if (sizeof(mr) + uint64_t(mr.build_id_bytes) + mr.path_bytes > rh.payload_bytes) fail(offset, "corrupt mapping record: lengths");
        MappingInfo m;
        m.memory_start = mr.memory_start;
        m.memory_limit = mr.memory_limit;
        m.file_offset = mr.file_offset;
        const char* bytes = reinterpret_cast<const char*>(data_ + payload + sizeof(mr));
        m.build_id.assign(bytes, mr.build_id_bytes);
        m.path.assign(bytes + mr.build_id_bytes, mr.path_bytes);
        mappings_.push_back(std::move(m));
        break;
      }
      case prof::RecordType::kSite:
      case prof::RecordType::kProgram:
      case prof::RecordType::kSymbols:
        break;
      default:
        fail(offset, "corrupt: unknown record type " + std::to_string(rh.type));
    }
    offset = payload + rh.payload_bytes;
  }
  if (!seen_end) fail(size_bytes_, "truncated: no end record (the traced process was cut short)");
  if (declared_events != event_count_) {
    fail(size_bytes_, "corrupt: the end record counts " + std::to_string(declared_events) + " events, the file holds " +
                          std::to_string(event_count_));
  }
  if (event_count_ > UINT32_MAX) throw FormatError(path_ + ": more than 2^32 events are not supported");

  // Threads flush their buffers separately, so the file may step back in time; replay needs time order.
  uint64_t last_ns = 0;
  bool sorted = true;
  for (uint64_t i = 0; i < event_count_ && sorted; ++i) {
    uint64_t t;
    std::memcpy(&t, event_at(i), sizeof(t));
    sorted = t >= last_ns;
    last_ns = t;
  }
  if (!sorted && order == Order::kTime) sort_by_time();
}

void TraceReader::sort_by_time() {
  // Each EVENTS record is one thread's buffer, in that thread's order: its times do not decrease. The time order
  // is then a merge of the records (ties: the earlier record first, as a stable sort of the file's order gives),
  // sequential reads instead of a sort's random ones over a file that may be many GiB.
  auto time_at = [this](const Chunk& c, uint64_t i) {
    uint64_t t;
    std::memcpy(&t, data_ + c.offset + i * sizeof(prof::TraceEvent), sizeof(t));
    return t;
  };
  bool chunks_sorted = true;
  for (const Chunk& c : chunks_) {
    for (uint64_t i = 1; i < c.count && chunks_sorted; ++i) chunks_sorted = time_at(c, i) >= time_at(c, i - 1);
    if (!chunks_sorted) break;
  }
  order_.clear();
  order_.reserve(event_count_);
  if (chunks_sorted) {
    using Head = std::pair<uint64_t, uint32_t>;  // (time of the record's next event, record index)
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    std::vector<uint64_t> position(chunks_.size(), 0);
    for (uint32_t c = 0; c < chunks_.size(); ++c) heads.push({time_at(chunks_[c], 0), c});
    while (!heads.empty()) {
      uint32_t c = heads.top().second;
      heads.pop();
      const Chunk& chunk = chunks_[c];
      order_.push_back(static_cast<uint32_t>(chunk.first_index + position[c]));
      if (++position[c] < chunk.count) heads.push({time_at(chunk, position[c]), c});
    }
    return;
  }
  order_.resize(event_count_);
  std::iota(order_.begin(), order_.end(), 0u);
  std::stable_sort(order_.begin(), order_.end(), [this](uint32_t a, uint32_t b) {
    uint64_t ta, tb;
    std::memcpy(&ta, event_at(a), sizeof(ta));
    std::memcpy(&tb, event_at(b), sizeof(tb));
    return ta < tb;
  });
}

bool TraceReader::stack(uint32_t stack_id, const uint64_t** frames, uint32_t* depth) const {
  auto it = stacks_.find(stack_id);
  if (it == stacks_.end()) return false;
  // Records are 8-byte aligned in the file and the mapping is page aligned: the addresses are read in place.
  *frames = reinterpret_cast<const uint64_t*>(data_ + it->second.offset);
  *depth = it->second.depth;
  return true;
}

void TraceReader::for_each_stack(const std::function<void(uint32_t, const uint64_t*, uint32_t)>& fn) const {
  for (const auto& [id, ref] : stacks_) fn(id, reinterpret_cast<const uint64_t*>(data_ + ref.offset), ref.depth);
}

TraceReader::~TraceReader() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_bytes_);
}

const void* TraceReader::event_at(uint64_t index) const {
  // Chunks are few and in index order; binary search them.
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), index,
                             [](uint64_t i, const Chunk& c) { return i < c.first_index; });
  const Chunk& c = *std::prev(it);
  return data_ + c.offset + (index - c.first_index) * sizeof(prof::TraceEvent);
}

void TraceReader::rewind() { rewind_at(position_); }

void TraceReader::rewind_at(Position& position) const {
  position.next = 0;
  position.chunk = 0;
  std::fill(position.paired.begin(), position.paired.end(), false);
}

class TraceReader::Cursor final : public EventSource {
 public:
  explicit Cursor(const TraceReader& reader) : reader_(reader) {}
  bool next(Event* event) override { return reader_.next_at(position_, event); }
  void rewind() override { reader_.rewind_at(position_); }
  uint64_t event_count_hint() const override { return reader_.event_count_; }

 private:
  const TraceReader& reader_;
  Position position_;
};

std::unique_ptr<EventSource> TraceReader::cursor() const { return std::make_unique<Cursor>(*this); }

bool TraceReader::realloc_pair(uint64_t index, const prof::TraceEvent& free_half, prof::TraceEvent* alloc_half) const {
  auto it = std::upper_bound(chunks_.begin(), chunks_.end(), index,
                             [](uint64_t i, const Chunk& c) { return i < c.first_index; });
  const Chunk& c = *std::prev(it);
  if (index + 1 >= c.first_index + c.count) return false;
  std::memcpy(alloc_half, data_ + c.offset + (index + 1 - c.first_index) * sizeof(prof::TraceEvent), sizeof(*alloc_half));
  return alloc_half->kind == (prof::kAlloc | prof::kEventFromRealloc) && alloc_half->thread_id == free_half.thread_id;
}

bool TraceReader::next(Event* event) { return next_at(position_, event); }

bool TraceReader::next_at(Position& position, Event* event) const {
  uint64_t index;
  do {
    if (position.next >= event_count_) return false;
    index = order_.empty() ? position.next : order_[position.next];
    ++position.next;
  } while (!position.paired.empty() && position.paired[index]);
  const void* raw;
  if (!order_.empty()) {
    raw = event_at(index);
  } else {
    while (index >= chunks_[position.chunk].first_index + chunks_[position.chunk].count) ++position.chunk;
    const Chunk& c = chunks_[position.chunk];
    raw = data_ + c.offset + (index - c.first_index) * sizeof(prof::TraceEvent);
  }
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
  // The two halves of one realloc (the profiler writes them one after the other) are one kRealloc event, at the
  // free half's time, so that a policy can keep the object in place (Policy::realloc_in_place).
  prof::TraceEvent a;
  if (e.kind == (prof::kFree | prof::kEventFromRealloc) && realloc_pair(index, e, &a)) {
    if (position.paired.empty()) position.paired.assign(event_count_, false);
    position.paired[index + 1] = true;
    event->kind = EventKind::kRealloc;
    event->old_address = e.address;
    event->address = a.address;
    event->size_bytes = a.size_bytes;
    event->alignment_bytes = a.alignment_bytes;
    event->stack_id = a.stack_id;
  }
  return true;
}

}  // namespace llamalloc::sim
