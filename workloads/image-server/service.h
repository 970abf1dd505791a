// image-server's service: the handlers of /v1/transform and /v1/stats, and the bookkeeping thread that updates
// the long-lived state from each request's record.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVICE_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVICE_H

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "http.h"
#include "image.h"
#include "image_server.h"
#include "middleware.h"
#include "server_state.h"

namespace IMGSRV_NAMESPACE::service {

// What a worker hands to the bookkeeping thread after each request: freed on another thread.
struct RequestRecord {
  std::uint64_t request = 0;
  std::string session;
  std::string group;
  std::string operations;
  std::uint64_t input_pixels = 0;
  std::uint64_t output_bytes = 0;
  std::uint64_t micros = 0;
};

class ImageService {
 public:
  explicit ImageService(std::size_t trace_lines) : trace_(trace_lines) {
    bookkeeper_ = std::thread([this] { bookkeeping_loop(); });
  }
  ~ImageService() {
    records_.close();
    bookkeeper_.join();
  }

  http::Response handle(const http::Request& request) {
    if (request.method != "GET") return error(400, "only GET is served");
    if (request.path == "/v1/transform") return transform(request);
    if (request.path == "/v1/stats") return stats();
    return error(404, "no such endpoint: " + request.path);
  }

 private:
  static http::Response error(int status, std::string message) {
    http::Response response;
    response.status = status;
    response.headers.emplace_back("Content-Type", "text/plain");
    response.body = std::move(message) + "\n";
    return response;
  }

  static std::uint64_t number_param(const http::Request& request, const std::string& name, std::uint64_t fallback) {
    auto it = request.query.find(name);
    return it == request.query.end() ? fallback : std::strtoull(it->second.c_str(), nullptr, 10);
  }

#if IMAGE_SERVER_REVISION >= 2
  http::Response transform(const http::Request& request) { return serve_transform_request(request); }

  http::Response serve_transform_request(const http::Request& request) {
#else
  http::Response transform(const http::Request& request) {
#endif
    auto started = std::chrono::steady_clock::now();
    const auto width = static_cast<int>(number_param(request, "w", 0));
    const auto height = static_cast<int>(number_param(request, "h", 0));
    if (width < 1 || height < 1 || width > 4096 || height > 4096) return error(400, "w and h must be in 1..4096");
    const std::uint64_t seed = number_param(request, "seed", 1);
    const std::uint64_t id = number_param(request, "id", 0);
#if IMAGE_SERVER_REVISION >= 2
    std::unique_ptr<IMGSRV_MIDDLEWARE::RequestContext> context = chain_.before(request, id);
#else
    std::unique_ptr<IMGSRV_MIDDLEWARE::RequestContext> context = chain_.begin(request, id);
#endif
    image::Pipeline pipeline;
    auto ops = request.query.find("ops");
    if (ops != request.query.end()) {
      for (const std::string& spec : util::split(ops->second, ',')) {
        if (!pipeline.add(spec)) return error(400, "unknown filter: " + spec);
      }
    }
    image::Image output = pipeline.run(image::synthesize(width, height, seed));
    http::Response response;
    response.body = codec::encode_ppm(output);
    const std::uint64_t checksum = util::fnv1a64(response.body.data(), response.body.size());
    response.headers.emplace_back("Content-Type", "image/x-portable-pixmap");
    response.headers.emplace_back("X-Checksum", util::hex64(checksum));
#if IMAGE_SERVER_REVISION >= 2
    chain_.after(*context, response.headers.back().second, response.body.size());
#else
    chain_.end(*context, response.headers.back().second, response.body.size());
#endif

    auto record = std::make_unique<RequestRecord>();
    record->request = id;
    record->session = request.param("session", "anonymous");
    record->group = request.param("group", "unknown");
    record->operations = pipeline.describe();
    record->input_pixels = static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(height);
    record->output_bytes = response.body.size();
    record->micros = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                    std::chrono::steady_clock::now() - started)
                                                    .count());
    records_.push(std::move(record));
    return response;
  }

  http::Response stats() {
    http::Response response;
    response.headers.emplace_back("Content-Type", "application/json");
    response.body = "{\"sessions\": " + std::to_string(sessions_.size()) + ", \"cluster_nodes\": " +
                    std::to_string(cluster_.size()) + ", \"stat_keys\": " + std::to_string(stats_.keys()) +
                    ", \"trace_lines\": " + std::to_string(trace_.lines()) + "}";
    return response;
  }

  // Runs on its own thread: long-lived state is updated here, and each record is freed here, away from the
  // worker that allocated it.
  void bookkeeping_loop() {
    std::uint64_t handled = 0;
    while (auto record = records_.pop()) {
      const RequestRecord& r = **record;
      std::string summary = r.group + " " + r.operations + " " + std::to_string(r.output_bytes);
      sessions_.touch(r.session, r.request, r.output_bytes, summary);
      stats_.record("transform." + r.group + "." + r.operations, r.micros);
      stats_.record("bytes." + r.group, r.output_bytes);
      trace_.append("request=" + std::to_string(r.request) + " session=" + r.session + " " + summary +
                    " us=" + std::to_string(r.micros));
      if (++handled % 50 == 0) cluster_.heartbeat(r.request);
      if (handled % 500 == 0) sessions_.expire(r.request, 2000);
    }
  }

  state::SessionStore sessions_;
  state::ClusterTable cluster_;
  state::StatsRegistry stats_;
  state::TraceLog trace_;
#if IMAGE_SERVER_REVISION >= 2
  IMGSRV_MIDDLEWARE::InterceptorChain chain_;
#else
  IMGSRV_MIDDLEWARE::Chain chain_;
#endif
  util::BlockingQueue<std::unique_ptr<RequestRecord>> records_;
  std::thread bookkeeper_;
};

}  // namespace IMGSRV_NAMESPACE::service

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVICE_H
