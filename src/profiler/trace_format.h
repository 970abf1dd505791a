// On-disk structures of the files written by libllamalloc_prof.so: the trace (docs/formats/trace.md) and the
// raw profile dump that `llamalloc record` turns into profile.proto (docs/formats/profile.md, "raw dump").
// Both are a fixed header followed by a sequence of records, each an 8-byte RecordHeader and a payload whose
// length is a multiple of 8. Little-endian, x86-64. Readers: python/src/llamalloc/trace.py and profile.py;
// the simulator includes this header.
#pragma once

#include <cstdint>

namespace llamalloc::prof {

inline constexpr char kTraceMagic[8] = {'L', 'L', 'T', 'R', 'A', 'C', 'E', '\0'};
inline constexpr char kRawProfileMagic[8] = {'L', 'L', 'P', 'R', 'A', 'W', '\0', '\0'};
inline constexpr uint32_t kTraceVersion = 1;
inline constexpr uint32_t kRawProfileVersion = 1;
inline constexpr uint32_t kMaxStackDepth = 64;
inline constexpr uint32_t kNoStack = 0xffffffffu;  // stack_id of a free event
inline constexpr int kLifetimeClasses = 8;         // docs/architecture.md: 0 (< 10 ms) ... 6 (>= 1000 s), 7 never freed

// Both files start with this header (64 bytes).
struct FileHeader {
  char magic[8];            // kTraceMagic or kRawProfileMagic
  uint32_t version;         // kTraceVersion or kRawProfileVersion
  uint32_t header_bytes;    // sizeof(FileHeader): lets a later version grow the header
  uint64_t pid;
  uint64_t start_time_ns;   // CLOCK_REALTIME when the profiler started in this process
  uint64_t start_mono_ns;   // CLOCK_MONOTONIC at the same moment, and the program clock's origin (see flags)
  uint64_t sample_bytes;    // mean sampling interval in bytes (1: every allocation); 0 in a trace
  uint64_t flags;           // FileFlags; 0 in files written before the flags existed (wall-clock times)
  uint64_t reserved;
};
static_assert(sizeof(FileHeader) == 64);

enum FileFlags : uint64_t {
  // Event times (trace) and lifetimes (profile) are on the program clock: CLOCK_MONOTONIC less the time the
  // profiler spent in its hooks (program_clock.h; docs/profiler.md, "Program time"). It starts at start_mono_ns
  // like CLOCK_MONOTONIC and runs behind it. Without the flag, times are CLOCK_MONOTONIC.
  kFileProgramTime = 1,
};

enum class RecordType : uint32_t {
  kEvents = 1,     // payload: n TraceEvent (trace only)
  kStack = 2,      // payload: StackRecord, then depth uint64 addresses
  kMapping = 3,    // payload: MappingRecord, then build_id bytes, then path bytes, zero-padded to 8
  kSite = 4,       // payload: SiteRecord (raw profile only)
  kProgram = 5,    // payload: the main executable's path, zero-padded to 8
  kSymbols = 6,    // payload: UTF-8 JSON symbol table, zero-padded (added by `llamalloc symbolize`)
  kEnd = 0x454e44, // payload: EndRecord. A file without it was cut short (the process died or was killed).
};

struct RecordHeader {
  uint32_t type;          // RecordType
  uint32_t payload_bytes; // multiple of 8
};
static_assert(sizeof(RecordHeader) == 8);

enum EventKind : uint32_t {
  kAlloc = 1,
  kFree = 2,
};
inline constexpr uint32_t kEventFromRealloc = 1u << 8;  // or-ed into kind: half of a realloc that moved or resized

// One allocation or free. A free carries size_bytes = 0, alignment_bytes = 0 and stack_id = kNoStack: the reader
// pairs it with the allocation at the same address.
struct TraceEvent {
  uint64_t time_ns;          // the program clock (kFileProgramTime) or CLOCK_MONOTONIC (older files)
  uint64_t address;
  uint64_t size_bytes;       // as requested
  uint32_t stack_id;
  uint32_t thread_id;        // Linux thread id
  uint32_t alignment_bytes;  // requested alignment; 16 for malloc/new/calloc/realloc
  uint32_t kind;             // EventKind | flags
};
static_assert(sizeof(TraceEvent) == 40);

// Stack addresses are return addresses minus one (inside the call instruction), innermost first; the
// profiler's own frames are removed.
struct StackRecord {
  uint32_t stack_id;
  uint32_t depth;
};

struct MappingRecord {
  uint64_t memory_start;
  uint64_t memory_limit;
  uint64_t file_offset;
  uint32_t build_id_bytes;  // raw GNU build id (hex-encoded by readers)
  uint32_t path_bytes;
};

// Per (stack, size class of the request, alignment) in the raw profile dump.
struct SiteRecord {
  uint32_t stack_id;
  uint32_t alignment_bytes;
  uint64_t request_size_bytes;    // the size class (upper bound) of the requests
  uint64_t alloc_count;           // sampled allocations
  uint64_t alloc_bytes;           // their requested bytes
  double alloc_weight;            // sum over sampled allocations of their unbiasing weight (see profile.md)
  uint64_t freed_count;
  uint64_t freed_bytes;
  uint64_t lifetime_sum_ns;
  double lifetime_sumsq_ms2;      // sum of squared lifetimes in milliseconds^2
  uint64_t min_lifetime_ns;       // 0 when nothing was freed
  uint64_t max_lifetime_ns;
  uint64_t live_count;            // sampled objects not freed when the dump was written
  uint64_t live_bytes;
  uint64_t class_counts[kLifetimeClasses];  // freed objects per lifetime class; [7] = live_count
};
static_assert(sizeof(SiteRecord) == 168);

struct EndRecord {
  uint64_t end_time_ns;      // CLOCK_REALTIME when written
  uint64_t end_mono_ns;      // CLOCK_MONOTONIC when written (wall time, like start_mono_ns)
  uint64_t event_count;      // trace: events written; raw profile: sampled allocations
  uint64_t dropped_count;    // samples or stacks that did not fit the profiler's tables
};

}  // namespace llamalloc::prof
