// image-server's load generator: the plan of each request (a pure function of its number, in phases of small
// and large images), the clients that send them over keep-alive connections, and what they saw.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_LOAD_GENERATOR_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_LOAD_GENERATOR_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <unistd.h>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "http.h"
#include "image_server.h"

namespace IMGSRV_NAMESPACE::loadgen {

struct Config {
  std::uint64_t requests = 2000;
  int clients = 8;
  int phases = 6;
  int large_min = 640, large_max = 1280;
  int small_min = 24, small_max = 160;
  std::uint64_t sessions = 400;
};

// The share of large images in each phase: the request mix shifts over the run, so the heap swings.
inline double large_share(int phase) {
  static constexpr double kShares[] = {0.05, 0.45, 0.10, 0.60, 0.02, 0.35, 0.15, 0.50};
  return kShares[phase % 8];
}

struct Plan {
  std::string target;
  bool large = false;
};

Plan plan_request(const Config& config, std::uint64_t id) {
  std::uint64_t h = util::splitmix64(id * 7919 + 17);
  const int phase = static_cast<int>(id * static_cast<std::uint64_t>(config.phases) / config.requests);
  const bool large = static_cast<double>(h % 10000) / 10000.0 < large_share(phase);
  const int lo = large ? config.large_min : config.small_min;
  const int hi = large ? config.large_max : config.small_max;
  h = util::splitmix64(h);
  const int width = lo + static_cast<int>(h % static_cast<std::uint64_t>(hi - lo + 1));
  h = util::splitmix64(h);
  const int height = lo + static_cast<int>(h % static_cast<std::uint64_t>(hi - lo + 1));
  static const char* const kOps[] = {"blur:1", "blur:2", "sharpen", "edges", "gray", "resize:50", "resize:150", "rotate"};
  std::string ops;
  h = util::splitmix64(h);
  const int count = 1 + static_cast<int>(h % 3);
  for (int i = 0; i < count; ++i) {
    h = util::splitmix64(h);
    ops += (i ? "," : "") + std::string(kOps[h % 8]);
  }
  h = util::splitmix64(h);
  // Most clients keep one session for a while; the session id space slides over the run.
  const std::uint64_t session = (id / 97 + h % config.sessions) % (config.sessions * 4);
  Plan plan;
  plan.large = large;
  plan.target = "/v1/transform?id=" + std::to_string(id) + "&w=" + std::to_string(width) + "&h=" +
                std::to_string(height) + "&seed=" + std::to_string(h >> 20) + "&ops=" + ops +
                "&session=s" + std::to_string(session) + "&group=" + (large ? "large" : "small");
  return plan;
}

struct Outcome {
  std::vector<std::uint64_t> body_checksums;  // indexed by request id
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> large{0};
  std::atomic<std::uint64_t> bytes{0};
  std::string stats_body;
};

int connect_loopback(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends one GET and reads the response; returns the body when the status is 200 and the checksum matches.
std::optional<std::string> fetch(http::Connection& connection, const std::string& target) {
  std::string request = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n";
  if (!connection.write_all(request)) return std::nullopt;
  auto head = connection.read_head();
  if (!head || head->rfind("HTTP/1.1 200", 0) != 0) return std::nullopt;
  std::size_t length = 0;
  std::string expected_checksum;
  for (const std::string& line : util::split(*head, '\n')) {
    std::string lowered = http::lower(line);
    if (!lowered.empty() && lowered.back() == '\r') lowered.pop_back();
    if (lowered.rfind("content-length:", 0) == 0) length = std::strtoull(lowered.c_str() + 15, nullptr, 10);
    if (lowered.rfind("x-checksum:", 0) == 0) {
      expected_checksum = lowered.substr(11);
      expected_checksum.erase(0, expected_checksum.find_first_not_of(' '));
    }
  }
  auto body = connection.read_body(length);
  if (!body) return std::nullopt;
  if (!expected_checksum.empty() && expected_checksum != util::hex64(util::fnv1a64(body->data(), body->size()))) {
    return std::nullopt;
  }
  return body;
}

void run(const Config& config, int port, Outcome& outcome) {
  outcome.body_checksums.assign(config.requests, 0);
  std::atomic<std::uint64_t> next{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < config.clients; ++c) {
    clients.emplace_back([&] {
      int fd = connect_loopback(port);
      if (fd < 0) {
        outcome.errors += 1;
        return;
      }
      http::Connection connection(fd);
      for (;;) {
        std::uint64_t id = next.fetch_add(1);
        if (id >= config.requests) break;
        Plan plan = plan_request(config, id);
        auto body = fetch(connection, plan.target);
        if (!body) {
          outcome.errors += 1;
          continue;
        }
        outcome.body_checksums[id] = util::fnv1a64(body->data(), body->size());
        outcome.bytes += body->size();
        if (plan.large) outcome.large += 1;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  int fd = connect_loopback(port);
  if (fd >= 0) {
    http::Connection connection(fd);
    if (auto body = fetch(connection, "/v1/stats")) outcome.stats_body = *body;
  }
}

}  // namespace IMGSRV_NAMESPACE::loadgen

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_LOAD_GENERATOR_H
