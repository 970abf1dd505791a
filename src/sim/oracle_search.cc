#include "sim/oracle_search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "sim/heap_options.h"
#include "sim/llama_policy.h"

namespace llamalloc::sim {

namespace {

constexpr size_t kOptionCount = std::size(kPlacementOptionNames);
using Values = std::array<uint64_t, kOptionCount>;  // one value per kPlacementOptionNames entry

size_t option_index(const std::string& name) {
  for (size_t i = 0; i < kOptionCount; ++i)
    if (name == kPlacementOptionNames[i]) return i;
  throw std::invalid_argument(name + " is not a placement option");
}

Values values_of(const Options& options) {
  Values v;
  for (size_t i = 0; i < kOptionCount; ++i) v[i] = integer_option(options, kPlacementOptionNames[i]);
  return v;
}

Options options_of(Options base, const Values& values) {
  for (size_t i = 0; i < kOptionCount; ++i) set_integer_option(base, kPlacementOptionNames[i], values[i]);
  return base;
}

struct Candidate {
  Values values{};
  const char* phase = "";  // "base", "grid" or "descent"
  uint64_t after_peak_footprint_bytes = 0;
  uint64_t final_footprint_bytes = 0;
  uint64_t peak_footprint_bytes = 0;
  double mean_footprint_bytes = 0;
};

// Better: less kept after the peak, then at the end, then on average; a tie keeps the earlier (index) candidate.
bool better(const Candidate& a, size_t a_index, const Candidate& b, size_t b_index) {
  if (a.after_peak_footprint_bytes != b.after_peak_footprint_bytes)
    return a.after_peak_footprint_bytes < b.after_peak_footprint_bytes;
  if (a.final_footprint_bytes != b.final_footprint_bytes) return a.final_footprint_bytes < b.final_footprint_bytes;
  if (a.mean_footprint_bytes != b.mean_footprint_bytes) return a.mean_footprint_bytes < b.mean_footprint_bytes;
  return a_index < b_index;
}

double mean_footprint(const std::vector<TimelineSample>& timeline) {
  if (timeline.empty()) return 0;
  double sum = 0;
  for (const TimelineSample& s : timeline) sum += static_cast<double>(s.footprint_bytes);
  return sum / static_cast<double>(timeline.size());
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1 << 20));
  return buf;
}

std::string options_json(const Values& v) {
  std::string j = "{";
  for (size_t i = 0; i < kOptionCount; ++i)
    j += std::string(i ? ", " : "") + "\"" + kPlacementOptionNames[i] + "\": " + std::to_string(v[i]);
  return j + "}";
}

std::string candidate_json(const Candidate& c) {
  char mean[32];
  std::snprintf(mean, sizeof mean, "%.0f", c.mean_footprint_bytes);
  return std::string("{\"phase\": \"") + c.phase + "\", \"options\": " + options_json(c.values) +
         ", \"after_peak_footprint_bytes\": " + std::to_string(c.after_peak_footprint_bytes) +
         ", \"final_footprint_bytes\": " + std::to_string(c.final_footprint_bytes) +
         ", \"peak_footprint_bytes\": " + std::to_string(c.peak_footprint_bytes) +
         ", \"mean_footprint_bytes\": " + mean + "}";
}

class Search {
 public:
  Search(const TraceReader& reader, const PolicySettings& settings, EngineOptions options,
         const OracleSearchSettings& search)
      : reader_(reader), settings_(settings), options_(options), search_(search) {
    jobs_ = search.jobs != 0 ? search.jobs : std::max(1u, std::thread::hardware_concurrency());
    // The classes depend on the trace and the library's realloc rule, which no option changes.
    LlamaPolicy rule{LlamaOptions{}};
    std::unique_ptr<EventSource> source = reader.cursor();
    classes_ = compute_lifetime_classes(*source, &rule);
  }

  RunResult run() {
    Values base = values_of(settings_.heap_options);
    const auto& dims = search_.space.dimensions;
    std::vector<Values> batch = {base};
    run_batch(batch, "base");
    // The grid: every combination of the grid options' values, the others at the base.
    std::vector<size_t> grid;
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d].grid) grid.push_back(d);
    batch.clear();
    std::vector<size_t> digit(grid.size(), 0);
    for (bool more = true; more;) {
      Values v = base;
      for (size_t g = 0; g < grid.size(); ++g) v[option_index(dims[grid[g]].name)] = dims[grid[g]].values[digit[g]];
      batch.push_back(v);
      more = false;
      for (size_t g = 0; g < grid.size() && !more; ++g) {
        if (++digit[g] < dims[grid[g]].values.size()) more = true;
        else digit[g] = 0;
      }
    }
    run_batch(batch, "grid");
    // Coordinate descent from the best so far, a round over every option at a time, until a round changes nothing.
    for (bool moved = true; moved;) {
      moved = false;
      for (const SearchDimension& dim : dims) {
        Values from = candidates_[best_].values;
        batch.clear();
        for (uint64_t value : dim.values) {
          Values v = from;
          v[option_index(dim.name)] = value;
          batch.push_back(v);
        }
        run_batch(batch, "descent");
        moved |= candidates_[best_].values != from;
      }
    }
    return result(base);
  }

 private:
  // Replays the candidates not tried yet, on up to jobs_ threads.
  void run_batch(const std::vector<Values>& batch, const char* phase) {
    std::vector<size_t> pending;
    for (const Values& v : batch) {
      if (!tried_.emplace(v, candidates_.size()).second) continue;
      pending.push_back(candidates_.size());
      candidates_.push_back(Candidate{v, phase});
    }
    if (pending.empty()) return;
    std::atomic<size_t> next{0};
    std::exception_ptr error;
    auto work = [&] {
      std::unique_ptr<EventSource> source = reader_.cursor();
      for (size_t k; (k = next.fetch_add(1)) < pending.size();) {
        try {
          replay_candidate(*source, pending[k], phase);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          if (!error) error = std::current_exception();
          next = pending.size();
        }
      }
    };
    size_t threads = std::min<size_t>(jobs_, pending.size());
    if (threads <= 1) {
      work();
    } else {
      std::vector<std::thread> pool;
      for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
      for (std::thread& t : pool) t.join();
    }
    if (error) std::rethrow_exception(error);
  }

  void replay_candidate(EventSource& source, size_t index, const char* phase) {
    LlamaOptions o;
    o.heap_options = options_of(settings_.heap_options, candidates_[index].values);
    o.snapshot_times_ns = settings_.snapshot_times_ns;
    o.thread_idle_ns = settings_.thread_idle_ns;
    o.other_threads = settings_.other_threads;
    LlamaPolicy policy(o);
    RunResult r = replay(source, policy, options_, classes_);
    std::lock_guard<std::mutex> lock(mutex_);
    Candidate& c = candidates_[index];
    c.final_footprint_bytes = r.summary.final_footprint_bytes;
    c.peak_footprint_bytes = r.summary.peak_footprint_bytes;
    c.mean_footprint_bytes = mean_footprint(r.timeline);
    c.after_peak_footprint_bytes = r.summary.after_peak_footprint_bytes;  // sim/after_peak.h
    if (!best_run_ || better(c, index, candidates_[best_], best_)) {
      best_ = index;
      best_run_ = std::make_unique<RunResult>(std::move(r));
    }
    if (search_.progress) {
      std::string line = "llama-oracle-best: candidate " + std::to_string(index + 1) + " (" + phase + "):";
      for (const SearchDimension& dim : search_.space.dimensions)
        line += " " + dim.name + "=" + std::to_string(c.values[option_index(dim.name)]);
      line += ": after the peak " + mib(double(c.after_peak_footprint_bytes)) + ", final " +
              mib(double(c.final_footprint_bytes)) + ", peak " + mib(double(c.peak_footprint_bytes)) +
              ", mean " + mib(c.mean_footprint_bytes);
      search_.progress(line);
    }
  }

  RunResult result(const Values& base) {
    RunResult r = std::move(*best_run_);
    const Candidate& best = candidates_[best_];
    const Candidate& base_run = candidates_[tried_.at(base)];
    r.summary.policy = "llama-oracle-best";
    double ratio = best.final_footprint_bytes != 0
                       ? double(base_run.final_footprint_bytes) / double(best.final_footprint_bytes)
                       : base_run.final_footprint_bytes == 0 ? 1.0 : std::numeric_limits<double>::quiet_NaN();
    double after_ratio = best.after_peak_footprint_bytes != 0
                             ? double(base_run.after_peak_footprint_bytes) / double(best.after_peak_footprint_bytes)
                             : base_run.after_peak_footprint_bytes == 0 ? 1.0 : std::numeric_limits<double>::quiet_NaN();
    r.extras.push_back({"search_candidates", double(candidates_.size())});
    r.extras.push_back({"base_after_peak_footprint_bytes", double(base_run.after_peak_footprint_bytes)});
    r.extras.push_back({"base_over_best_after_peak_footprint", after_ratio});
    r.extras.push_back({"base_final_footprint_bytes", double(base_run.final_footprint_bytes)});
    r.extras.push_back({"base_over_best_final_footprint", ratio});
    // The library's environment for the best options: those that differ from its defaults.
    Values defaults = values_of(Options{});
    std::string settings = "[";
    for (size_t i = 0; i < kOptionCount; ++i) {
      if (best.values[i] == defaults[i]) continue;
      settings += std::string(settings.size() > 1 ? ", " : "") + "\"LLAMALLOC_" + kPlacementOptionNames[i] + "=" +
                  std::to_string(best.values[i]) + "\"";
    }
    settings += "]";
    std::string space = "{", grid = "[", descent = "[";
    for (const SearchDimension& dim : search_.space.dimensions) {
      space += std::string(space.size() > 1 ? ", " : "") + "\"" + dim.name + "\": [";
      for (size_t k = 0; k < dim.values.size(); ++k) space += (k ? ", " : "") + std::to_string(dim.values[k]);
      space += "]";
      std::string& list = dim.grid ? grid : descent;
      list += std::string(list.size() > 1 ? ", " : "") + "\"" + dim.name + "\"";
    }
    char ratio_text[32], after_text[32];
    if (ratio == ratio) std::snprintf(ratio_text, sizeof ratio_text, "%.6g", ratio);
    else std::snprintf(ratio_text, sizeof ratio_text, "null");
    if (after_ratio == after_ratio) std::snprintf(after_text, sizeof after_text, "%.6g", after_ratio);
    else std::snprintf(after_text, sizeof after_text, "null");
    std::string j = "{\n        \"space\": " + space + "},\n        \"grid\": " + grid + "],\n        \"descent\": " +
                    descent + "],\n        \"base\": " + candidate_json(base_run) + ",\n        \"best\": " +
                    candidate_json(best) + ",\n        \"base_over_best_final_footprint\": " + ratio_text +
                    ",\n        \"base_over_best_after_peak_footprint\": " + after_text +
                    ",\n        \"defaults\": " + options_json(defaults) + ",\n        \"settings\": " + settings + ",\n        \"candidates\": [";
    for (size_t i = 0; i < candidates_.size(); ++i) j += (i ? ",\n          " : "\n          ") + candidate_json(candidates_[i]);
    j += "\n        ]\n      }";
    r.extra_json.push_back({"search", j});
    return r;
  }

  const TraceReader& reader_;
  const PolicySettings& settings_;
  EngineOptions options_;
  const OracleSearchSettings& search_;
  unsigned jobs_ = 1;
  std::vector<uint8_t> classes_;
  std::mutex mutex_;
  std::vector<Candidate> candidates_;  // in the order tried
  std::map<Values, size_t> tried_;     // values -> index in candidates_
  size_t best_ = 0;
  std::unique_ptr<RunResult> best_run_;
};

}  // namespace

SearchSpace default_search_space() {
  SearchSpace s;
  s.dimensions = {
      {"LONG_CLASS", {4, 8}, true},          {"SHARED_CLASS", {3, 8}, true},         {"SPAN_RECYCLING", {1, 0}, true},
      {"DENSE_FIRST", {1, 0}, true},         {"DEADLINE_K", {4, 2}, true},           {"SAME_CLASS_RECYCLING", {1, 0}, false},
      {"SMALL_HEAP_PAGES", {8, 0}, false},
  };
  return s;
}

void apply_search_spec(SearchSpace& space, const std::string& spec) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw std::invalid_argument("--search wants NAME=V1,V2,..., got '" + spec + "'");
  std::string name = spec.substr(0, eq), list = spec.substr(eq + 1);
  if (name.rfind("LLAMALLOC_", 0) == 0) name = name.substr(10);
  bool placement = false;
  for (const char* n : kPlacementOptionNames) placement |= name == n;
  if (!placement) {
    // The library's words for a name that is not an option at all; else which ones the search takes.
    if (!is_option_name(name)) (void)option_value("--search", name, list);
    std::string names;
    for (const char* n : kPlacementOptionNames) names += std::string(names.empty() ? "" : ", ") + n;
    throw std::invalid_argument("--search " + spec + ": " + name + " is not a placement option (the search takes " +
                                names + ")");
  }
  std::vector<uint64_t> values;
  for (size_t start = 0;;) {
    size_t comma = list.find(',', start);
    std::string text = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (text.empty()) throw std::invalid_argument("--search " + spec + ": an empty value");
    uint64_t v = option_value("--search", name, text);
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (SearchDimension& dim : space.dimensions) {
    if (dim.name != name) continue;
    dim.values = values;
    dim.grid = true;
    return;
  }
  space.dimensions.push_back({name, values, true});
}

RunResult search_oracle_options(const TraceReader& reader, const PolicySettings& settings, EngineOptions options,
                                const OracleSearchSettings& search) {
  auto start = std::chrono::steady_clock::now();
  RunResult r = Search(reader, settings, options, search).run();
  // The whole search's time: the pre-pass and every candidate's replay; its speed counts every replayed event.
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double candidates = 0;
  for (const auto& [name, value] : r.extras)
    if (name == "search_candidates") candidates = value;
  r.summary.replay_seconds = seconds;
  r.summary.events_per_second = seconds > 0 ? static_cast<double>(r.summary.events) * candidates / seconds : 0;
  return r;
}

}  // namespace llamalloc::sim
