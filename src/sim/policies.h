// The policy names `llamalloc simulate --policy` accepts, and their construction.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/model_policy.h"
#include "sim/policy.h"
#include "sim/trace_stacks.h"

namespace llamalloc::sim {

struct PolicySettings {
  uint64_t seed = 1;
  uint64_t mesh_period_ns = 100'000'000;
  Options heap_options;                   // llama policies: the library's options (sim/heap_options.h)
  uint64_t thread_idle_ns = 500'000'000;  // llama policies: see LlamaOptions
  bool other_threads = false;             // llama policies: see LlamaOptions
  std::vector<uint64_t> snapshot_times_ns;  // heap snapshots (llama policies)
  ModelOptions model;                        // llama-model: the model and its token tables
  const TraceStacks* stacks = nullptr;       // llama-model: the trace's stacks and mappings
  std::function<void(const std::string&)> warn;  // one-line warnings (llama-model: binaries it cannot tokenise)
};

// All accepted names, in the order they are documented.
std::vector<std::string> policy_names();
// Expands aliases ("mesh" = mesh-4k and mesh-2m). Throws std::invalid_argument for an unknown name.
std::vector<std::string> expand_policy_name(const std::string& name);
// Every name but llama-oracle-best, which is a search over llama-oracle's replays (sim/oracle_search.h).
std::unique_ptr<Policy> make_policy(const std::string& name, const PolicySettings& settings);

}  // namespace llamalloc::sim
