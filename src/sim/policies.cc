#include "sim/policies.h"

#include <stdexcept>

#include "alloc/heap_config.h"
#include "options.h"
#include "sim/llama_policy.h"
#include "sim/mesh_policy.h"
#include "sim/online_policy.h"
#include "sim/page_policy.h"
#include "sim/tcmalloc_policy.h"

namespace llamalloc::sim {

std::vector<std::string> policy_names() {
  return {"pages-4k",          "pages-2m",     "mesh-4k",           "mesh-2m",       "tcmalloc",
          "tcmalloc-lifetime", "llama-oracle", "llama-oracle-best", "llama-default", "llama-model",
          "llama-online"};
}

std::vector<std::string> expand_policy_name(const std::string& name) {
  if (name == "mesh") return {"mesh-4k", "mesh-2m"};
  for (const std::string& known : policy_names()) {
    if (known == name) return {name};
  }
  std::string list;
  for (const std::string& known : policy_names()) list += (list.empty() ? "" : ", ") + known;
  throw std::invalid_argument("unknown policy '" + name + "' (known: " + list + ", mesh)");
}

std::unique_ptr<Policy> make_policy(const std::string& name, const PolicySettings& settings) {
  if (name == "pages-4k") return std::make_unique<PagePolicy>(12);
  if (name == "pages-2m") return std::make_unique<PagePolicy>(21);
  if (name == "mesh-4k" || name == "mesh-2m") {
    MeshOptions o;
    o.account_huge_pages = name == "mesh-2m";
    o.mesh_period_ns = settings.mesh_period_ns;
    o.seed = settings.seed;
    return std::make_unique<MeshPolicy>(o);
  }
  if (name == "tcmalloc" || name == "tcmalloc-lifetime") {
    TcmallocOptions o;
    o.lifetime_aware = name == "tcmalloc-lifetime";
    return std::make_unique<TcmallocPolicy>(o);
  }
  if (name == "llama-oracle" || name == "llama-default") {
    LlamaOptions o;
    // llama-default: the library without a model, every object in LLAMALLOC_DEFAULT_CLASS's default.
    o.fixed_class = name == "llama-default" ? int(default_class_of(settings.heap_options)) : -1;
    o.snapshot_times_ns = settings.snapshot_times_ns;
    o.heap_options = settings.heap_options;
    o.thread_idle_ns = settings.thread_idle_ns;
    o.other_threads = settings.other_threads;
    return std::make_unique<LlamaPolicy>(o);
  }
  if (name == "llama-model") {
    if (settings.model.model_path.empty()) throw std::invalid_argument("llama-model needs a model (--model FILE)");
    if (settings.stacks == nullptr) throw std::invalid_argument("llama-model needs the trace's stacks");
    LlamaOptions o;
    o.snapshot_times_ns = settings.snapshot_times_ns;
    o.heap_options = settings.heap_options;
    o.thread_idle_ns = settings.thread_idle_ns;
    o.other_threads = settings.other_threads;
    std::string warning;
    auto policy = make_model_policy(o, settings.model, *settings.stacks, &warning);
    if (!warning.empty() && settings.warn) settings.warn(warning);
    return policy;
  }
  if (name == "llama-online") {
    if (settings.stacks == nullptr) throw std::invalid_argument("llama-online needs the trace's stacks");
    LlamaOptions o;
    o.snapshot_times_ns = settings.snapshot_times_ns;
    o.heap_options = settings.heap_options;
    o.thread_idle_ns = settings.thread_idle_ns;
    o.other_threads = settings.other_threads;
    // The library learning without a model (LLAMALLOC_LEARN 1, or 2, its default): DEFAULT_CLASS until a
    // context's evidence decides it.
    o.class_source = std::make_shared<OnlineClassSource>(settings.heap_options, *settings.stacks, nullptr, nullptr);
    return std::make_unique<LlamaPolicy>(o);
  }
  if (name == "llama-oracle-best")
    throw std::invalid_argument("llama-oracle-best is a search over llama-oracle replays: search_oracle_options");
  throw std::invalid_argument("unknown policy '" + name + "'");
}

}  // namespace llamalloc::sim
