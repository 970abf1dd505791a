// image-server: a multi-threaded HTTP/1.1 image-transform server and its load generator, in one process,
// talking over 127.0.0.1 (the LLAMA paper, section 2.1 and Figure 1).
//
// Clients send GET /v1/transform?w=..&h=..&seed=..&ops=blur:2,sharpen,resize:50,...&session=.. on keep-alive
// connections. The server synthesises the image, runs the filter pipeline and answers with the PPM bytes and
// an X-Checksum header. Requests come in two groups, small and large images, whose mix shifts over the run
// (the phases), so the heap swings. Along the way the server keeps long-lived state that is allocated while
// the request data is at its peak: sessions, a cluster table, statistics histograms and a trace log.
//
// Every request is a pure function of its number, so the run's checksum (of all response bodies, in request
// order) is the same under every allocator, thread schedule and revision. The run stops by itself after
// --requests requests and prints one JSON line.
//
// IMAGE_SERVER_REVISION=2 builds the second revision: renamed namespaces, classes and functions and a few
// refactorings (middleware stages reordered and run through an extra wrapper frame), the way a later release
// differs (the LLAMA paper, Table 2). It is built at the same optimisation level as revision 1, so that lifetimes,
// the model's labels, stay comparable between the two (docs/model.md).
//
// The program is one translation unit, in parts: image_server.h (revision switches, utilities), image.h,
// http.h, server_state.h, middleware.h, service.h, server.h and load_generator.h; this file holds the command
// line and runs them.
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "common/arguments.h"
#include "common/program_clock.h"
#include "common/steady_state.h"
#include "image_server.h"
#include "image.h"
#include "http.h"
#include "server_state.h"
#include "middleware.h"
#include "service.h"
#include "server.h"
#include "load_generator.h"

namespace IMGSRV_NAMESPACE::cli {

[[noreturn]] void usage_error(const std::string& message) {
  workloads::exit_with_usage("image-server", message,
                             "usage: image-server [--scale small|default] [--requests N] [--clients N] [--workers N]\n"
                             "                    [--port N] [--phases N] [--quiet-seconds S]\n");
}

void help() { std::printf("image-server: image-transform server and load generator (see docs/workloads.md)\n"); }

struct Options {
  loadgen::Config load;
  int workers = 8;
  int port = 0;
  std::size_t trace_lines = 4096;
  // The quiet phase after the load (docs/workloads.md): default 10 s, small scale 2 s, 0 disables it.
  double quiet_seconds = 10;
  bool quiet_seconds_given = false;
};

Options parse(int argc, char** argv) {
  Options options;
  workloads::read_flags(argc, argv, usage_error, help, [&](std::string_view arg, workloads::Arguments& args) {
    if (arg == "--scale") {
      if (args.small_scale()) {
        options.load.requests = 240;
        options.load.clients = 4;
        options.workers = 4;
        options.load.large_min = 160;
        options.load.large_max = 320;
        options.load.sessions = 40;
        if (!options.quiet_seconds_given) options.quiet_seconds = 2;
      }
    } else if (arg == "--requests") {
      options.load.requests = args.number();
    } else if (arg == "--clients") {
      options.load.clients = static_cast<int>(args.number());
    } else if (arg == "--workers") {
      options.workers = static_cast<int>(args.number());
    } else if (arg == "--port") {
      options.port = static_cast<int>(args.number());
    } else if (arg == "--phases") {
      options.load.phases = static_cast<int>(args.number());
    } else if (arg == "--quiet-seconds") {
      args.quiet_seconds(options.quiet_seconds, options.quiet_seconds_given);
    } else {
      return false;
    }
    return true;
  });
  if (options.load.requests < 1 || options.load.clients < 1 || options.workers < options.load.clients ||
      options.load.phases < 1 || options.port > 65535) {
    usage_error("need requests >= 1, phases >= 1, clients >= 1, workers >= clients, port <= 65535");
  }
  return options;
}

}  // namespace IMGSRV_NAMESPACE::cli

int main(int argc, char** argv) {
  namespace is = IMGSRV_NAMESPACE;
  const is::cli::Options options = is::cli::parse(argc, argv);
  auto started = std::chrono::steady_clock::now();
  const std::int64_t started_program_ns = workloads::program_clock_ns();
  is::loadgen::Outcome outcome;
  steady_state::QuietPhase quiet(options.quiet_seconds);
  std::string quiet_stats;  // the server's /v1/stats as last seen during the quiet phase
  std::uint64_t idle_requests = 0;
  double load_seconds = 0;
  double load_program_seconds = -1;  // on the profiler's program clock (common/program_clock.h)
  std::chrono::steady_clock::time_point teardown_started;
  std::int64_t teardown_program_ns = -1;
  {
    is::service::ImageService service(options.trace_lines);
    is::net::Server server(service, options.workers, options.port);
    is::loadgen::run(options.load, server.port(), outcome);
    load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    load_program_seconds = workloads::program_seconds_since(started_program_ns);
    if (quiet.enabled()) {
      // The quiet phase: the server runs on with its sessions, cluster table, statistics and trace log, and
      // answers a monitoring probe (GET /v1/stats, a few hundred bytes) at each sample, as an idle server does.
      // Transform responses are not touched, so the checksum is the same.
      int fd = is::loadgen::connect_loopback(server.port());
      std::unique_ptr<is::http::Connection> probe;
      if (fd >= 0) probe = std::make_unique<is::http::Connection>(fd);
      quiet.run([&] {
        if (probe) {
          if (auto body = is::loadgen::fetch(*probe, "/v1/stats")) {
            quiet_stats = *body;
            ++idle_requests;
          }
        }
        return -1.0;
      });
    }
    teardown_started = std::chrono::steady_clock::now();
    teardown_program_ns = workloads::program_clock_ns();
    server.stop();
  }
  // The workload's time: the load and the teardown, not the quiet phase.
  double seconds =
      load_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - teardown_started).count();
  const double teardown_program_seconds = workloads::program_seconds_since(teardown_program_ns);
  const double program_seconds =
      load_program_seconds < 0 || teardown_program_seconds < 0 ? -1 : load_program_seconds + teardown_program_seconds;
  const std::string steady =
      quiet.json("\"idle_requests\": " + std::to_string(idle_requests) +
                 ", \"server\": " + (quiet_stats.empty() ? std::string("null") : quiet_stats));
  std::uint64_t checksum = 0xcbf29ce484222325ull;
  for (std::uint64_t body_checksum : outcome.body_checksums) {
    checksum = is::util::fnv1a64(&body_checksum, sizeof body_checksum, checksum);
  }
  const std::uint64_t errors = outcome.errors.load();
  // Under the profiler, "program_seconds": the same time on its program clock.
  char program_json[48] = "";
  if (program_seconds >= 0) std::snprintf(program_json, sizeof program_json, "\"program_seconds\": %.3f, ", program_seconds);
  std::printf("{\"workload\": \"image-server\", \"revision\": %d, \"ok\": %s, \"seconds\": %.3f, %s"
              "\"requests\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"large_requests\": %" PRIu64
              ", \"response_bytes\": %" PRIu64 ", \"requests_per_second\": %.1f, \"checksum\": \"%s\", "
              "\"server\": %s, \"steady_state\": %s}\n",
              IMAGE_SERVER_REVISION, errors == 0 ? "true" : "false", seconds, program_json, options.load.requests, errors,
              outcome.large.load(), outcome.bytes.load(),
              seconds > 0 ? static_cast<double>(options.load.requests) / seconds : 0.0,
              is::util::hex64(checksum).c_str(), outcome.stats_body.empty() ? "null" : outcome.stats_body.c_str(),
              steady.c_str());
  std::fflush(stdout);
  return errors == 0 ? 0 : 1;
}
