// Writes a simulation's results: one JSON document (summaries) and one CSV timeline (docs/simulator.md
// describes both). Each file is written to a temporary name in its folder and renamed into place.
#pragma once

#include <string>
#include <vector>

#include "sim/engine.h"

namespace llamalloc::sim {

struct SimulationOutput {
  std::string trace_path;
  uint64_t interval_ns = 0;
  uint64_t seed = 0;
  std::vector<RunResult> runs;
};

// Returns the JSON text (the CSV is referenced by its file name relative to the JSON's folder).
std::string summary_json(const SimulationOutput& output, const std::string& timeline_file_name);
std::string timeline_csv(const SimulationOutput& output);

// Writes content to path atomically; throws std::runtime_error with a one-line message.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace llamalloc::sim
