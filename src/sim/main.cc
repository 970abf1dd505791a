// llamalloc-sim: replays a trace through placement policies (called by `llamalloc simulate`).
//   llamalloc-sim TRACE --policy P [--policy P ...] --out FILE.json [--timeline FILE.csv]
//                 [--interval-ms N] [--mesh-period-ms N] [--seed N] [--option NAME=VALUE ...]
//                 [--thread-idle-ms N] [--other-threads] [--snapshot-ms T ...] [--quiet]
//                 [--search NAME=V1,V2,... ...] [--jobs N]   (llama-oracle-best)
//                 [--model MODEL [--tokens FILE] [--predict-log FILE]]   (llama-model)
//   --option: any option of the library's table (LLAMALLOC_NAME; sim/heap_options.h), repeatable; --heap-option is
//   its former spelling.
//   llamalloc-sim TRACE --list-mappings    the trace's executable mappings: "path<TAB>build id (hex)" per line
//   --search: the values llama-oracle-best tries for a placement option (sim/oracle_search.h), repeatable.
//   llamalloc-sim --option NAME=VALUE ... [--search ...] --check-heap-options    checks them only (no trace read)
// Exit status: 0 done, 2 bad input (the trace, an option), 1 anything else. Errors are one line.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine.h"
#include "sim/heap_options.h"
#include "sim/oracle_search.h"
#include "sim/output.h"
#include "sim/policies.h"
#include "sim/trace_reader.h"

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

}  // namespace

int main(int argc, char** argv) {
  using namespace llamalloc::sim;
  try {
    std::string trace, out, timeline;
    std::vector<std::string> policies;
    double interval_ms = 10, mesh_period_ms = 100;
    bool quiet = false, list_mappings = false, check_heap_options = false;
    PolicySettings settings;
    std::vector<std::string> heap_options;
    OracleSearchSettings search;
    bool searched = false;
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
      } else if (a == "--option" || a == "--heap-option") {
        heap_options.push_back(value());
      } else if (a == "--search") {
        apply_search_spec(search.space, value());
        searched = true;
      } else if (a == "--jobs") {
        uint64_t jobs = parse_number(a, value());
        if (jobs == 0 || jobs > 1024) throw UsageError("--jobs wants a number of threads from 1 to 1024, got '" + args[i] + "'");
        search.jobs = static_cast<unsigned>(jobs);
      } else if (a == "--thread-idle-ms") {
        settings.thread_idle_ns = static_cast<uint64_t>(parse_ms(a, value()) * 1e6);
      } else if (a == "--other-threads") {
        settings.other_threads = true;
      } else if (a == "--seed") {
        settings.seed = parse_number(a, value());
      } else if (a == "--snapshot-ms") {
        settings.snapshot_times_ns.push_back(static_cast<uint64_t>(parse_ms(a, value()) * 1e6));
      } else if (a == "--model") {
        settings.model.model_path = value();
      } else if (a == "--tokens") {
        settings.model.tokens_path = value();
      } else if (a == "--predict-log") {
        settings.model.predict_log = value();
      } else if (a == "--check-heap-options") {
        check_heap_options = true;
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
    auto warn = [](const std::string& line) { std::fprintf(stderr, "llamalloc-sim: warning: %s\n", line.c_str()); };
    settings.heap_options = parse_heap_options(heap_options, warn);
    if (check_heap_options) return 0;
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

    bool wants_model = false, wants_search = false;
    for (const std::string& p : policies) {
      wants_model |= p == "llama-model";
      wants_search |= p == "llama-oracle-best";
    }
    if (searched && !wants_search) throw UsageError("--search is for --policy llama-oracle-best");
    if (wants_model && settings.model.model_path.empty()) throw UsageError("llama-model needs --model FILE");
    if (!wants_model && !settings.model.model_path.empty()) throw UsageError("--model is for --policy llama-model");
    TraceReader reader(trace);
    settings.stacks = &reader;
    settings.warn = warn;
    SimulationOutput output;
    output.trace_path = std::filesystem::absolute(trace).string();
    output.interval_ns = static_cast<uint64_t>(interval_ms * 1e6);
    output.seed = settings.seed;
    EngineOptions options;
    options.interval_ns = output.interval_ns;
    if (!quiet) search.progress = [](const std::string& line) { std::fprintf(stderr, "llamalloc-sim: %s\n", line.c_str()); };
    for (const std::string& name : policies) {
      // The policy first (a bad model file is then the one line of the run), the progress line after.
      std::unique_ptr<Policy> policy = name == "llama-oracle-best" ? nullptr : make_policy(name, settings);
      if (!quiet) std::fprintf(stderr, "llamalloc-sim: replaying %llu events through %s\n",
                               static_cast<unsigned long long>(reader.event_count()), name.c_str());
      if (policy == nullptr) {
        output.runs.push_back(search_oracle_options(reader, settings, options, search));
      } else {
        output.runs.push_back(replay(reader, *policy, options));
      }
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
