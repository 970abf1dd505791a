// llamalloc-sim: replays a trace through placement policies (called by `llamalloc simulate`).
//   llamalloc-sim TRACE --policy P [--policy P ...] --out FILE.json [--timeline FILE.csv]
//                 [--interval-ms N] [--mesh-period-ms N] [--seed N] [--deadline-k K] [--heap-option NAME=VALUE ...] [--thread-idle-ms N] [--snapshot-ms T ...] [--quiet]
//                 [--model MODEL [--tokens FILE] [--repredict-every N] [--repredict-backoff N] [--min-confidence PCT] [--min-class N] [--unseen-trial N] [--predict-log FILE]]   (llama-model)
//   llamalloc-sim TRACE --list-mappings    the trace's executable mappings: "path<TAB>build id (hex)" per line
// Exit status: 0 done, 2 bad input (the trace, an option), 1 anything else. Errors are one line.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine.h"
#include "sim/output.h"
#include "sim/policies.h"
#include "sim/trace_reader.h"
#include "options.h"
#include "sim/llama_policy.h"

namespace {

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

uint64_t parse_number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0) throw UsageError(flag + " wants a non-negative number, got '" + text + "'");
  return static_cast<uint64_t>(v);
}

double parse_ms(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0)) throw UsageError(flag + " wants milliseconds >= 0, got '" + text + "'");
  return v;
}

// --heap-option NAME=VALUE (NAME with or without LLAMALLOC_), checked against the options table's bounds.
void set_heap_option(llamalloc::Options& options, const std::string& assignment) {
  using llamalloc::sim::kHeapOptionNames;
  size_t eq = assignment.find('=');
  if (eq == std::string::npos) throw UsageError("--heap-option wants NAME=VALUE, got '" + assignment + "'");
  std::string name = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  if (name.rfind("LLAMALLOC_", 0) == 0) name = name.substr(10);
  bool placement = false;
  std::string names;
  for (const char* n : kHeapOptionNames) {
    placement = placement || name == n;
    names += names.empty() ? n : std::string(", ") + n;
  }
  uint64_t lo = 0, hi = 0;
  uint64_t* field = placement ? llamalloc::sim::integer_option(options, name, &lo, &hi) : nullptr;
  if (field == nullptr) throw UsageError("--heap-option " + name + ": not a heap placement option (one of " + names + ")");
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0 || v < lo || v > hi)
    throw UsageError("--heap-option " + name + "=" + text + ": not an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
  *field = v;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llamalloc::sim;
  try {
    std::string trace, out, timeline;
    std::vector<std::string> policies;
    double interval_ms = 10, mesh_period_ms = 100;
    bool quiet = false, list_mappings = false;
    PolicySettings settings;
    std::vector<std::string> args(argv + 1, argv + argc);
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw UsageError(a + " needs a value");
        return args[++i];
      };
      if (a == "--policy") {
        for (const std::string& p : expand_policy_name(value())) policies.push_back(p);
      } else if (a == "--out") {
        out = value();
      } else if (a == "--timeline") {
        timeline = value();
      } else if (a == "--interval-ms") {
        interval_ms = parse_ms(a, value());
        if (interval_ms <= 0) throw UsageError("--interval-ms must be > 0");
      } else if (a == "--mesh-period-ms") {
        mesh_period_ms = parse_ms(a, value());
        if (mesh_period_ms <= 0) throw UsageError("--mesh-period-ms must be > 0");
      } else if (a == "--deadline-k") {
        uint64_t k = parse_number(a, value());
        if (k < 1 || k > 1000) throw UsageError("--deadline-k must be in 1..1000");
        settings.heap_options.deadline_k = k;
      } else if (a == "--heap-option") {
        set_heap_option(settings.heap_options, value());
      } else if (a == "--thread-idle-ms") {
        settings.thread_idle_ns = static_cast<uint64_t>(parse_ms(a, value()) * 1e6);
      } else if (a == "--seed") {
        settings.seed = parse_number(a, value());
      } else if (a == "--snapshot-ms") {
        settings.snapshot_times_ns.push_back(static_cast<uint64_t>(parse_ms(a, value()) * 1e6));
      } else if (a == "--model") {
        settings.model.model_path = value();
      } else if (a == "--tokens") {
        settings.model.tokens_path = value();
      } else if (a == "--repredict-every") {
        uint64_t n = parse_number(a, value());
        if (n > UINT32_MAX) throw UsageError("--repredict-every is too large");
        settings.model.repredict_every = static_cast<uint32_t>(n);
      } else if (a == "--repredict-backoff") {
        uint64_t n = parse_number(a, value());
        if (n > 16) throw UsageError("--repredict-backoff must be in 0..16");
        settings.model.repredict_backoff = static_cast<unsigned>(n);
      } else if (a == "--min-confidence") {
        uint64_t n = parse_number(a, value());
        if (n > 100) throw UsageError("--min-confidence must be in 0..100");
        settings.model.min_confidence = static_cast<unsigned>(n);
      } else if (a == "--min-class") {
        uint64_t n = parse_number(a, value());
        if (n > 7) throw UsageError("--min-class must be in 0..7");
        settings.model.min_class = static_cast<unsigned>(n);
      } else if (a == "--unseen-trial") {
        uint64_t n = parse_number(a, value());
        if (n > 1000000) throw UsageError("--unseen-trial must be in 0..1000000");
        settings.model.unseen_trial = static_cast<uint32_t>(n);
      } else if (a == "--predict-log") {
        settings.model.predict_log = value();
      } else if (a == "--list-mappings") {
        list_mappings = true;
      } else if (a == "--quiet") {
        quiet = true;
      } else if (a == "--list-policies") {
        for (const std::string& p : policy_names()) std::printf("%s\n", p.c_str());
        return 0;
      } else if (!a.empty() && a[0] == '-') {
        throw UsageError("unknown option " + a);
      } else if (trace.empty()) {
        trace = a;
      } else {
        throw UsageError("unexpected argument " + a);
      }
    }
    if (trace.empty()) throw UsageError("no trace given");
    if (list_mappings) {
      // For `llamalloc simulate`, which prepares the token tables of these binaries before a llama-model replay.
      TraceReader reader(trace, TraceReader::Order::kFile);
      for (const MappingInfo& m : reader.mappings()) {
        std::string hex;
        for (unsigned char c : m.build_id) {
          static const char* kDigits = "0123456789abcdef";
          hex += kDigits[c >> 4];
          hex += kDigits[c & 15];
        }
        std::printf("%s\t%s\n", m.path.c_str(), hex.c_str());
      }
      return 0;
    }
    if (policies.empty()) throw UsageError("no --policy given");
    if (out.empty()) throw UsageError("no --out given");
    if (timeline.empty()) {
      std::filesystem::path p(out);
      timeline = (p.parent_path() / (p.stem().string() + ".timeline.csv")).string();
    }
    settings.mesh_period_ns = static_cast<uint64_t>(mesh_period_ms * 1e6);

    bool wants_model = false;
    for (const std::string& p : policies) wants_model |= p == "llama-model";
    if (wants_model && settings.model.model_path.empty()) throw UsageError("llama-model needs --model FILE");
    if (!wants_model && !settings.model.model_path.empty()) throw UsageError("--model is for --policy llama-model");
    TraceReader reader(trace);
    settings.stacks = &reader;
    settings.warn = [](const std::string& line) { std::fprintf(stderr, "llamalloc-sim: warning: %s\n", line.c_str()); };
    SimulationOutput output;
    output.trace_path = std::filesystem::absolute(trace).string();
    output.interval_ns = static_cast<uint64_t>(interval_ms * 1e6);
    output.seed = settings.seed;
    EngineOptions options;
    options.interval_ns = output.interval_ns;
    for (const std::string& name : policies) {
      auto policy = make_policy(name, settings);
      if (!quiet) std::fprintf(stderr, "llamalloc-sim: replaying %llu events through %s\n",
                               static_cast<unsigned long long>(reader.event_count()), name.c_str());
      output.runs.push_back(replay(reader, *policy, options));
      const RunSummary& s = output.runs.back().summary;
      if (!quiet) std::fprintf(stderr, "llamalloc-sim: %s done in %.2f s (%.3g events/s)\n", name.c_str(),
                               s.replay_seconds, s.events_per_second);
    }
    write_file_atomically(timeline, timeline_csv(output));
    write_file_atomically(out, summary_json(output, std::filesystem::path(timeline).filename().string()));
    return 0;
  } catch (const FormatError& e) {
    std::fprintf(stderr, "llamalloc-sim: error: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "llamalloc-sim: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llamalloc-sim: error: %s\n", e.what());
    return 1;
  }
}
