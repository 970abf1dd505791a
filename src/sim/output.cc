#include "sim/output.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

namespace llamalloc::sim {

namespace {

std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  if (v == std::floor(v) && std::fabs(v) < 9e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string json_number(uint64_t v) { return std::to_string(v); }

}  // namespace

std::string summary_json(const SimulationOutput& output, const std::string& timeline_file_name) {
  std::ostringstream j;
  j << "{\n  \"format\": \"llamalloc-sim\",\n  \"version\": 1,\n";
  j << "  \"trace\": " << json_quote(output.trace_path) << ",\n";
  j << "  \"interval_ns\": " << output.interval_ns << ",\n";
  j << "  \"seed\": " << output.seed << ",\n";
  j << "  \"timeline_csv\": " << json_quote(timeline_file_name) << ",\n";
  j << "  \"policies\": [";
  for (size_t i = 0; i < output.runs.size(); ++i) {
    const RunResult& r = output.runs[i];
    const RunSummary& s = r.summary;
    j << (i ? ",\n" : "\n") << "    {\n      \"policy\": " << json_quote(s.policy) << ",\n";
    j << "      \"summary\": {";
    std::vector<std::pair<std::string, std::string>> fields = {
        {"events", json_number(s.events)},
        {"allocs", json_number(s.allocs)},
        {"frees", json_number(s.frees)},
        {"reallocs", json_number(s.reallocs)},
        {"reallocs_in_place", json_number(s.reallocs_in_place)},
        {"unknown_frees", json_number(s.unknown_frees)},
        {"reused_live_addresses", json_number(s.reused_live_addresses)},
        {"null_frees", json_number(s.null_frees)},
        {"first_time_ns", json_number(s.first_time_ns)},
        {"last_time_ns", json_number(s.last_time_ns)},
        {"final_live_bytes", json_number(s.final_live_bytes)},
        {"peak_live_bytes", json_number(s.peak_live_bytes)},
        {"final_footprint_bytes", json_number(s.final_footprint_bytes)},
        {"peak_footprint_bytes", json_number(s.peak_footprint_bytes)},
        {"peak_footprint_time_ns", json_number(s.peak_footprint_time_ns)},
        {"final_heap_resident_bytes", json_number(s.final_heap_resident_bytes)},
        {"average_fragmentation_ratio", json_number(s.average_fragmentation_ratio)},
        {"mean_footprint_over_mean_live", json_number(s.mean_footprint_over_mean_live)},
        {"final_fragmentation_ratio", json_number(s.final_fragmentation_ratio)},
        {"after_peak_start_ns", json_number(s.after_peak_start_ns)},
        {"after_peak_end_ns", json_number(s.after_peak_end_ns)},
        {"after_peak_samples", json_number(s.after_peak_samples)},
        {"after_peak_footprint_bytes", json_number(s.after_peak_footprint_bytes)},
        {"after_peak_heap_resident_bytes", json_number(s.after_peak_heap_resident_bytes)},
        {"after_peak_live_bytes", json_number(s.after_peak_live_bytes)},
        {"replay_seconds", json_number(s.replay_seconds)},
        {"events_per_second", json_number(s.events_per_second)},
    };
    for (size_t f = 0; f < fields.size(); ++f) {
      j << (f ? ",\n" : "\n") << "        " << json_quote(fields[f].first) << ": " << fields[f].second;
    }
    j << "\n      },\n      \"extras\": {";
    for (size_t f = 0; f < r.extras.size(); ++f) {
      j << (f ? ",\n" : "\n") << "        " << json_quote(r.extras[f].first) << ": " << json_number(r.extras[f].second);
    }
    j << "\n      }";
    for (const auto& [name, json] : r.extra_json) j << ",\n      " << json_quote(name) << ": " << json;
    j << "\n    }";
  }
  j << "\n  ]\n}\n";
  return j.str();
}

std::string timeline_csv(const SimulationOutput& output) {
  // One table for all policies: the union of their extra columns, empty where a policy has none.
  std::vector<std::string> columns;
  std::set<std::string> seen;
  for (const RunResult& r : output.runs) {
    for (const std::string& c : r.extra_columns) {
      if (seen.insert(c).second) columns.push_back(c);
    }
  }
  std::ostringstream csv;
  csv << "policy,time_ns,live_bytes,footprint_bytes,heap_resident_bytes";
  for (const std::string& c : columns) csv << ',' << c;
  csv << '\n';
  for (const RunResult& r : output.runs) {
    std::vector<int> index(columns.size(), -1);
    for (size_t c = 0; c < columns.size(); ++c) {
      for (size_t k = 0; k < r.extra_columns.size(); ++k) {
        if (r.extra_columns[k] == columns[c]) index[c] = static_cast<int>(k);
      }
    }
    for (const TimelineSample& s : r.timeline) {
      csv << r.summary.policy << ',' << s.time_ns << ',' << s.live_bytes << ',' << s.footprint_bytes << ','
          << s.heap_resident_bytes;
      for (size_t c = 0; c < columns.size(); ++c) {
        csv << ',';
        if (index[c] >= 0 && s.extra[index[c]] != kMissing) csv << s.extra[index[c]];
      }
      csv << '\n';
    }
  }
  return csv.str();
}

void write_file_atomically(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
  }
}

}  // namespace llamalloc::sim
