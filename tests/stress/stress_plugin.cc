// A plugin for stress-dlopen, built three times (STRESS_PLUGIN_ID 0, 1, 2). It allocates in its static
// constructors (C++ globals and a constructor function), keeps thread_local objects with destructors, hands memory
// to its caller and frees the caller's memory, and checks and frees everything in its destructors, which run at
// dlclose (or at thread exit for the thread_local ones). Any mismatch prints one line and aborts.
#include <map>
#include <string>
#include <vector>

#include "stress.h"

#ifndef STRESS_PLUGIN_ID
#error "STRESS_PLUGIN_ID must be defined"
#endif

namespace {

constexpr std::uint64_t kId = 0x9100000000ull + STRESS_PLUGIN_ID * 0x1000000ull;

struct Table {
  std::vector<std::string> names;
  std::map<int, std::vector<int>> index;
  Table() {
    for (int i = 0; i < 300; i++) {
      names.push_back("plugin " + std::to_string(STRESS_PLUGIN_ID) + " entry " + std::to_string(i) +
                      std::string(static_cast<std::size_t>(i % 97), 'x'));
      index[i].assign(static_cast<std::size_t>(i % 50) + 1, i);
    }
  }
  ~Table() {
    for (int i = 0; i < 300; i++) {
      std::string want = "plugin " + std::to_string(STRESS_PLUGIN_ID) + " entry " + std::to_string(i) +
                         std::string(static_cast<std::size_t>(i % 97), 'x');
      if (names[static_cast<std::size_t>(i)] != want) stress::fail("plugin table entry %d changed", i);
      const auto& v = index.at(i);
      if (v.size() != static_cast<std::size_t>(i % 50) + 1 || v.back() != i) stress::fail("plugin index %d changed", i);
    }
  }
};

Table g_table;  // constructed at dlopen, destroyed at dlclose

constexpr int kRaw = 64;
void* g_raw[kRaw];
std::size_t g_raw_size[kRaw];

__attribute__((constructor)) void plugin_init() {
  for (int i = 0; i < kRaw; i++) {
    g_raw_size[i] = static_cast<std::size_t>(16) << (i % 14);  // 16 B .. 128 KiB
    g_raw[i] = std::malloc(g_raw_size[i]);
    if (g_raw[i] == nullptr) stress::fail("plugin constructor: malloc returned NULL");
    stress::fill(g_raw[i], g_raw_size[i], kId + static_cast<std::uint64_t>(i));
  }
}

__attribute__((destructor)) void plugin_fini() {
  for (int i = 0; i < kRaw; i++) {
    stress::check(g_raw[i], g_raw_size[i], kId + static_cast<std::uint64_t>(i), "plugin destructor");
    std::free(g_raw[i]);
  }
}

struct PerThread {
  std::string text;
  void* block = nullptr;
  std::size_t size = 0;
  std::uint64_t id = 0;
  ~PerThread() {
    if (block != nullptr) {
      stress::check(block, size, id, "plugin thread_local at thread exit");
      std::free(block);
    }
  }
};
thread_local PerThread t_state;

}  // namespace

extern "C" {

// A new object of `size` bytes filled with the pattern of `id`: the caller frees it (after dlclose, often).
void* stress_plugin_make(std::size_t size, std::uint64_t id) {
  void* p = std::malloc(size);
  if (p == nullptr) stress::fail("plugin: malloc(%zu) returned NULL", size);
  stress::fill(p, size, id);
  // The thread's own state: replaced on each call, freed at thread exit (a thread_local destructor in a DSO).
  if (t_state.block != nullptr) {
    stress::check(t_state.block, t_state.size, t_state.id, "plugin thread_local");
    std::free(t_state.block);
  }
  t_state.size = size % 4096 + 1;
  t_state.id = id ^ 0x5555;
  t_state.block = std::malloc(t_state.size);
  if (t_state.block == nullptr) stress::fail("plugin: malloc returned NULL");
  stress::fill(t_state.block, t_state.size, t_state.id);
  t_state.text.assign(size % 300, 'p');
  return p;
}

// Checks and frees an object the caller allocated.
void stress_plugin_take(void* p, std::size_t size, std::uint64_t id) {
  stress::check(p, size, id, "plugin frees the caller's object");
  std::free(p);
}

int stress_plugin_id() { return STRESS_PLUGIN_ID + static_cast<int>(g_table.names.size()) - 300; }

}  // extern "C"
