// shapes: a corpus of program shapes (docs/workloads.md, "The corpus of program shapes").
//
// Each shape is a small model of a kind of program that C++ services are made of (a cache, a batch job, a
// pipeline, a compiler, a broker), written the way such programs are written: standard containers, strings,
// per-request temporaries, threads. Every shape has a load peak, then drops most of its data, then keeps the
// rest live through a quiet phase (workloads/common/steady_state.h) in which it samples its own memory. The
// allocations are made by the functions that own the data (each shape in its own namespace, with its own
// call stacks), because the profiler and the model learn lifetimes from the stacks of the allocation sites.
// Each shape is in its own file (lru_cache.cc, ttl_cache.cc, ...), on the common vocabulary of shapes.h; this
// file reads the options, runs the shape named by --shape and prints its report.
//
// usage: shapes --shape NAME [--scale small|default] [--quiet-seconds S] [--threads N] [--seed N]
// Prints one JSON line: "workload" (the shape), "ok" (its own checks passed), "seconds" (the load, without the
// quiet phase), under the profiler "program_seconds" (the same on its program clock, common/program_clock.h),
// "operations" and "operations_per_second", "checksum" where the result does not depend on the
// thread schedule, "peak_live_bytes" and "live_bytes" (its own count of the payload bytes of its data, at the
// peak and after the drop), "peak_rss_bytes" (read at the peak) and "steady_state".
#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/arguments.h"
#include "shapes.h"

namespace shapes {

struct Shape {
  const char* name;
  Report (*run)(const Options&);
  // The shape's threads are its roles when not 0: this many, and --threads does not apply.
  int fixed_threads = 0;
};

const Shape kShapes[] = {
    {"lru-cache", lru::run},
    {"ttl-cache", ttl::run},
    {"hash-trimmed-cache", hash_trimmed::run},
    {"batch-arena", batch::run},
    {"stream-pipeline", stream::run, 3},
    {"producer-consumer", prodcons::run},
    {"session-store", sessions::run},
    {"ast-builder", compiler::run, 1},
    {"message-broker", broker::run},
    {"query-spikes-cache", query_spikes::run},
    {"mixed-lifetime-cache", mixed_lifetime::run},
    {"free-all", free_all::run, 1},
    {"free-all-pool", free_all::run_pool},
};

std::string shape_names() {
  std::string names;
  for (const Shape& shape : kShapes) names += (names.empty() ? "" : ", ") + std::string(shape.name);
  return names;
}

[[noreturn]] void usage_error(const std::string& message) {
  const std::string usage =
      "usage: shapes --shape NAME [--scale small|default] [--quiet-seconds S] [--threads N] [--seed N]\nshapes: " +
      shape_names() + "\n";
  workloads::exit_with_usage("shapes", message, usage.c_str());
}

void help() {
  std::printf("shapes: a corpus of program shapes, each a load peak, a drop and a quiet phase (docs/workloads.md)\n"
              "shapes: %s\n", shape_names().c_str());
}

std::uint64_t parse_number(const char* flag, const char* text, std::uint64_t lo, std::uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || value < lo || value > hi) {
    usage_error(std::string(flag) + ": expected a number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                ", got " + text);
  }
  return value;
}

Options parse_options(int argc, char** argv) {
  Options options;
  workloads::read_flags(argc, argv, usage_error, help, [&](std::string_view arg, workloads::Arguments& args) {
    if (arg == "--shape") {
      options.shape = args.value();
    } else if (arg == "--scale") {
      options.small = args.small_scale();
      if (!options.quiet_seconds_given) options.quiet_seconds = options.small ? 2 : 10;
    } else if (arg == "--quiet-seconds") {
      args.quiet_seconds(options.quiet_seconds, options.quiet_seconds_given);
    } else if (arg == "--threads") {
      options.threads = static_cast<int>(parse_number("--threads", args.value(), 1, 256));
      options.threads_given = true;
    } else if (arg == "--seed") {
      options.seed = parse_number("--seed", args.value(), 0, ~std::uint64_t{0});
    } else {
      return false;
    }
    return true;
  });
  if (options.shape.empty()) usage_error("--shape is required");
  return options;
}

int run_shape(const Options& options) {
  const Shape* shape = nullptr;
  for (const Shape& candidate : kShapes) {
    if (options.shape == candidate.name) shape = &candidate;
  }
  if (shape == nullptr) usage_error("--shape: unknown shape " + options.shape);
  if (shape->fixed_threads != 0 && options.threads_given) {
    usage_error(std::string("--threads: ") + shape->name + " has fixed threads (its roles); --threads does not apply");
  }
  const int threads = shape->fixed_threads != 0 ? shape->fixed_threads : options.threads;
  Report report = shape->run(options);
  char checksum[48] = "";
  if (report.checksum) std::snprintf(checksum, sizeof checksum, ", \"checksum\": \"%016" PRIx64 "\"", *report.checksum);
  std::string failure;
  if (!report.ok) {
    failure = ", \"failure\": \"";
    for (char c : report.failure) failure += (c == '"' || c == '\\') ? '\'' : c;
    failure += "\"";
  }
  char program_seconds[48] = "";
  if (report.program_seconds >= 0) {
    std::snprintf(program_seconds, sizeof program_seconds, ", \"program_seconds\": %.3f", report.program_seconds);
  }
  std::printf("{\"workload\": \"%s\", \"ok\": %s%s, \"seconds\": %.3f%s, \"threads\": %d, \"operations\": %" PRIu64
              ", \"operations_per_second\": %.0f%s, \"peak_live_bytes\": %" PRId64 ", \"live_bytes\": %" PRId64
              ", \"peak_rss_bytes\": %" PRIu64 "%s, \"steady_state\": %s}\n",
              shape->name, report.ok ? "true" : "false", failure.c_str(), report.seconds, program_seconds, threads, report.operations,
              report.seconds > 0 ? static_cast<double>(report.operations) / report.seconds : 0.0, checksum,
              report.peak_live_bytes, report.live_bytes, report.peak_rss_bytes, report.extra.c_str(),
              report.steady_state.c_str());
  std::fflush(stdout);
  if (!report.ok) {
    std::fprintf(stderr, "shapes: %s: %s\n", shape->name, report.failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace shapes

int main(int argc, char** argv) { return shapes::run_shape(shapes::parse_options(argc, argv)); }
