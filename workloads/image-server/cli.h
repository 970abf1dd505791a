// image-server's command line: the options, the scales and the usage message.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_CLI_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_CLI_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/steady_state.h"
#include "image_server.h"
#include "load_generator.h"

namespace IMGSRV_NAMESPACE::cli {

struct Options {
  loadgen::Config load;
  int workers = 8;
  int port = 0;
  std::size_t trace_lines = 4096;
  // The quiet phase after the load (docs/workloads.md): default 10 s, small scale 2 s, 0 disables it.
  double quiet_seconds = 10;
  bool quiet_seconds_given = false;
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "image-server: %s\n", message.c_str());
  std::fprintf(stderr, "usage: image-server [--scale small|default] [--requests N] [--clients N] [--workers N]\n"
                       "                    [--port N] [--phases N] [--quiet-seconds S]\n");
  std::exit(2);
}

std::uint64_t number(const std::string& flag, const char* text) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') usage_error(flag + ": expected a number, got " + text);
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--scale") {
      std::string scale = value();
      if (scale == "small") {
        options.load.requests = 240;
        options.load.clients = 4;
        options.workers = 4;
        options.load.large_min = 160;
        options.load.large_max = 320;
        options.load.sessions = 40;
        if (!options.quiet_seconds_given) options.quiet_seconds = 2;
      } else if (scale != "default") {
        usage_error("--scale: expected small or default, got " + scale);
      }
    } else if (arg == "--requests") {
      options.load.requests = number(arg, value());
    } else if (arg == "--clients") {
      options.load.clients = static_cast<int>(number(arg, value()));
    } else if (arg == "--workers") {
      options.workers = static_cast<int>(number(arg, value()));
    } else if (arg == "--port") {
      options.port = static_cast<int>(number(arg, value()));
    } else if (arg == "--phases") {
      options.load.phases = static_cast<int>(number(arg, value()));
    } else if (arg == "--quiet-seconds") {
      const char* text = value();
      if (!steady_state::parse_seconds(text, options.quiet_seconds)) {
        usage_error("--quiet-seconds: expected a number of seconds >= 0, got " + std::string(text));
      }
      options.quiet_seconds_given = true;
    } else if (arg == "-h" || arg == "--help") {
      std::printf("image-server: image-transform server and load generator (see docs/workloads.md)\n");
      std::exit(0);
    } else {
      usage_error("unknown option " + arg);
    }
  }
  if (options.load.requests < 1 || options.load.clients < 1 || options.workers < options.load.clients ||
      options.load.phases < 1 || options.port > 65535) {
    usage_error("need requests >= 1, phases >= 1, clients >= 1, workers >= clients, port <= 65535");
  }
  return options;
}

}  // namespace IMGSRV_NAMESPACE::cli

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_CLI_H
