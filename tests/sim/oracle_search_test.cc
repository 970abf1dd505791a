#include "sim/oracle_search.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>

#include "sim/heap_options.h"
#include "sim/llama_policy.h"
#include "trace_writer.h"

namespace llamalloc::sim {
namespace {

using testing::TraceBytes;

const uint64_t kStart = 1'000'000'000;
const uint64_t kMs = 1'000'000;

std::string error_of(const std::string& spec) {
  SearchSpace space = default_search_space();
  try {
    apply_search_spec(space, spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

const SearchDimension* dimension(const SearchSpace& space, const std::string& name) {
  for (const SearchDimension& d : space.dimensions)
    if (d.name == name) return &d;
  return nullptr;
}

TEST(OracleSearch, TheDefaultSpaceIsAGridOfFiveOptionsAndADescentOverTwo) {
  SearchSpace space = default_search_space();
  size_t grid = 1;
  for (const SearchDimension& d : space.dimensions) {
    if (d.grid) grid *= d.values.size();
    for (uint64_t v : d.values) EXPECT_EQ(option_value("--search", d.name, std::to_string(v)), v) << d.name;
  }
  EXPECT_EQ(grid, 32u);
  for (const char* name : {"LONG_CLASS", "SHARED_CLASS", "SPAN_RECYCLING", "DENSE_FIRST", "DEADLINE_K"})
    EXPECT_TRUE(dimension(space, name) != nullptr && dimension(space, name)->grid) << name;
  for (const char* name : {"SAME_CLASS_RECYCLING", "SMALL_HEAP_PAGES"})
    EXPECT_TRUE(dimension(space, name) != nullptr && !dimension(space, name)->grid) << name;
}

TEST(OracleSearch, ASearchSpecSetsAnOptionsValuesInTheGrid) {
  SearchSpace space = default_search_space();
  apply_search_spec(space, "LLAMALLOC_SMALL_HEAP_PAGES=0,8,64,8");
  apply_search_spec(space, "DEFAULT_CLASS=1,2");
  const SearchDimension* small = dimension(space, "SMALL_HEAP_PAGES");
  ASSERT_NE(small, nullptr);
  EXPECT_TRUE(small->grid);
  EXPECT_EQ(small->values, (std::vector<uint64_t>{0, 8, 64}));  // a repeated value once
  ASSERT_NE(dimension(space, "DEFAULT_CLASS"), nullptr);
  EXPECT_EQ(dimension(space, "DEFAULT_CLASS")->values, (std::vector<uint64_t>{1, 2}));
}

TEST(OracleSearch, BadSearchSpecsAreOneLineErrors) {
  EXPECT_EQ(error_of("LONG_CLASS=4,9"), "--search LONG_CLASS=9: not an integer in [1, 8]");
  EXPECT_EQ(error_of("LONG_CLAS=4"),
            "--search LONG_CLAS=4: LLAMALLOC_LONG_CLAS is not a llamalloc option (did you mean LLAMALLOC_LONG_CLASS?)");
  EXPECT_EQ(error_of("LONG_CLASS=,4"), "--search LONG_CLASS=,4: an empty value");
  EXPECT_EQ(error_of("=4"), "--search wants NAME=V1,V2,..., got '=4'");
  EXPECT_EQ(error_of("SWEEP_MS=100").rfind("--search SWEEP_MS=100: SWEEP_MS is not a placement option", 0), 0u);
}

// Four threads make small objects for 5 s: half die within 50 ms, a third live 12-40 s (all freed by the end,
// at 60 s), the rest are never freed.
std::string long_lived_trace(const std::string& name) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unit(0, 1);
  const uint64_t sizes[] = {48, 64, 256, 1024};
  std::vector<prof::TraceEvent> events;
  uint64_t address = 0x10000000;
  for (uint32_t thread = 1; thread <= 4; ++thread) {
    for (int i = 0; i < 1500; ++i) {
      uint64_t t = kStart + uint64_t(i) * 3 * kMs + thread;
      address += 0x1000;
      events.push_back({t, address, sizes[rng() % 4], 1, thread, 16, prof::kAlloc});
      double r = unit(rng);
      if (r < 0.85) {
        uint64_t life = r < 0.5 ? uint64_t(1 + 49 * unit(rng)) * kMs : uint64_t(12'000 + 28'000 * unit(rng)) * kMs;
        events.push_back({t + life, address, 0, prof::kNoStack, thread, 0, prof::kFree});
      }
    }
  }
  events.push_back({kStart + 60'000 * kMs, address + 0x1000, 16, 1, 1, 16, prof::kAlloc});
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.time_ns < b.time_ns; });
  TraceBytes t(kStart);
  t.stack(1, {0x401000});
  t.events(events);
  t.end();
  return t.write((std::filesystem::temp_directory_path() /
                  ("llamalloc_sim_test_" + std::to_string(::getpid()) + "_" + name)).string());
}

std::string json_of(const RunResult& r, const std::string& name) {
  for (const auto& [key, json] : r.extra_json)
    if (key == name) return json;
  return "";
}

double extra_of(const RunResult& r, const std::string& name) {
  for (const auto& [key, value] : r.extras)
    if (key == name) return value;
  return -1;
}

TEST(OracleSearch, TheBestRunIsALlamaOracleReplayUnderItsOptionsAndNoWorseThanTheBase) {
  std::string path = long_lived_trace("search.trace");
  TraceReader reader(path);
  EngineOptions engine;
  engine.interval_ns = 1000 * kMs;
  PolicySettings settings;
  OracleSearchSettings search;
  search.jobs = 1;
  std::vector<std::string> lines;
  search.progress = [&](const std::string& line) { lines.push_back(line); };
  RunResult best = search_oracle_options(reader, settings, engine, search);
  EXPECT_EQ(best.summary.policy, "llama-oracle-best");
  EXPECT_GE(extra_of(best, "search_candidates"), 32);
  EXPECT_EQ(lines.size(), size_t(extra_of(best, "search_candidates")));

  // The base candidate is llama-oracle under the default options.
  LlamaPolicy oracle{LlamaOptions{}};
  RunResult plain = replay(reader, oracle, engine);
  EXPECT_EQ(extra_of(best, "base_final_footprint_bytes"), double(plain.summary.final_footprint_bytes));
  EXPECT_LE(best.summary.final_footprint_bytes, plain.summary.final_footprint_bytes);

  // llama-oracle under the options the best run reports keeps what it kept.
  LlamaOptions o;
  std::string heap_options = json_of(best, "heap_options");
  for (const char* name : kPlacementOptionNames) {
    std::string key = std::string("\"") + name + "\": ";
    size_t at = heap_options.find(key);
    ASSERT_NE(at, std::string::npos) << name;
    set_integer_option(o.heap_options, name, std::stoull(heap_options.substr(at + key.size())));
  }
  LlamaPolicy under_best(o);
  RunResult again = replay(reader, under_best, engine);
  EXPECT_EQ(again.summary.final_footprint_bytes, best.summary.final_footprint_bytes);
  EXPECT_EQ(again.summary.peak_footprint_bytes, best.summary.peak_footprint_bytes);

  // Threads change nothing of the search's result.
  search.jobs = 3;
  search.progress = nullptr;
  RunResult threaded = search_oracle_options(reader, settings, engine, search);
  EXPECT_EQ(json_of(threaded, "search"), json_of(best, "search"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llamalloc::sim
