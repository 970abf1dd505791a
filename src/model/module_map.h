// The module map: the process's executable mappings, read from /proc/self/maps, each placed over its binary in
// the token tables (address -> module, ELF virtual address). Rules: the lookups run on the allocation path, so
// they take no lock and never allocate; a refresh reads the file with open/read only (no stdio, which
// allocates), fills the table that readers are not using and publishes it with one release store.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#include "token_table.h"

namespace llamalloc::model {

// CLOCK_MONOTONIC in nanoseconds: the clock of ModuleMap::maybe_refresh's rate limit and of a model run's timing.
inline uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Executable mappings of the process, from /proc/self/maps, each with its binary in the token tables.
struct Module {
  uintptr_t start, end;
  uintptr_t vaddr_bias;  // ELF virtual address = address - vaddr_bias
  int32_t binary;        // index in the token tables, or -1
};

class ModuleMap {
 public:
  static constexpr unsigned kMaxModules = 2048;
  // Re-reads /proc/self/maps (open/read syscalls only). Safe while other threads look up: two tables, the new
  // one is published with a release store; a refresh happens at most every kMinRefreshNs.
  void refresh(const TokenTables& tables);
  // Asks for a refresh when `pc` is outside every known module (a library loaded by dlopen since).
  bool maybe_refresh(const TokenTables& tables, uint64_t now_ns);
  // The module holding pc, copied out (a torn read after two refreshes gives a wrong module, never a fault).
  bool find(uintptr_t pc, Module* out) const;
  // Installs a fixed list of modules (sorted by start, not overlapping) instead of this process's mappings,
  // and stops refreshes: the trace simulator maps another process's addresses (src/model/trace_predictor.h).
  // Not for use while other threads look up.
  void load(const Module* modules, uint32_t count);

  static constexpr uint64_t kMinRefreshNs = 50'000'000;

 private:
  struct Table {
    uint32_t count;
    Module modules[kMaxModules];
  };
  Table tables_[2];
  std::atomic<Table*> current_{nullptr};
  std::atomic<int> refreshing_pid_{0};
  std::atomic<uint64_t> last_refresh_ns_{0};
  bool frozen_ = false;  // load() was used: the table is not this process's
};

// "PATH+0xOFFSET" of `address` (its mapping's file and the file offset, which addr2line takes for a binary
// without relocations, or after the load bias), written into out (NUL-terminated, cut to capacity); false when
// no mapped file holds it.
bool describe_address(uintptr_t address, char* out, size_t capacity);

// The end of the mapping holding `address` (a thread's stack top), from /proc/self/maps; 0 if not found.
// *is_main_stack: the mapping is the process's [stack]; *start: where the mapping begins.
uintptr_t mapping_end(uintptr_t address, bool* is_main_stack = nullptr, uintptr_t* start = nullptr);

}  // namespace llamalloc::model
