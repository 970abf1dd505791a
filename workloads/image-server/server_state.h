// image-server's long-lived state: sessions, the cluster table, statistics histograms and the trace log. Each
// part is allocated while requests are in flight, i.e. at the heap's peak, and lives on after it.
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVER_STATE_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVER_STATE_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "image_server.h"

namespace IMGSRV_NAMESPACE::state {

// The size of a table that threads share, read under the table's mutex.
template <typename Table>
std::size_t locked_size(std::mutex& mutex, const Table& table) {
  std::lock_guard<std::mutex> lock(mutex);
  return table.size();
}

struct Session {
  std::string id;
  std::uint64_t created_request = 0;
  std::uint64_t last_request = 0;
  std::uint64_t bytes_served = 0;
  std::vector<std::string> history;  // short summaries of the session's requests
};

class SessionStore {
 public:
  void touch(const std::string& id, std::uint64_t request, std::uint64_t bytes, const std::string& summary) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& session = sessions_[id];
    if (!session) {
      session = std::make_unique<Session>();
      session->id = id;
      session->created_request = request;
    }
    session->last_request = std::max(session->last_request, request);
    session->bytes_served += bytes;
    session->history.push_back(summary);
    if (session->history.size() > 64) session->history.erase(session->history.begin());
  }

  // Sessions idle for `idle_requests` requests end (their memory is freed); the others live on.
  std::size_t expire(std::uint64_t now_request, std::uint64_t idle_requests) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t expired = 0;
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      if (it->second->last_request + idle_requests < now_request) {
        it = sessions_.erase(it);
        ++expired;
      } else {
        ++it;
      }
    }
    return expired;
  }

  std::size_t size() { return locked_size(mutex_, sessions_); }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Session>> sessions_;
};

struct NodeInfo {
  std::string address;
  std::vector<double> load_samples;
  std::map<std::string, std::string> labels;
};

// The cluster environment as the server sees it: nodes come and go, and their load history grows.
class ClusterTable {
 public:
  void heartbeat(std::uint64_t request) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t h = util::splitmix64(request);
    std::string name = "node-" + std::to_string(h % 48);
    auto& node = nodes_[name];
    if (node.address.empty()) {
      node.address = "10.0." + std::to_string((h >> 8) % 256) + "." + std::to_string((h >> 16) % 256) + ":8080";
      node.labels["zone"] = "zone-" + std::to_string((h >> 24) % 4);
      node.labels["build"] = util::hex64(h);
    }
    node.load_samples.push_back(static_cast<double>((h >> 32) % 1000) / 10.0);
    if ((h >> 40) % 23 == 0) nodes_.erase(name);  // a node left the cluster
  }
  std::size_t size() { return locked_size(mutex_, nodes_); }

 private:
  std::mutex mutex_;
  std::map<std::string, NodeInfo> nodes_;
};

template <std::size_t Buckets>
class Histogram {
 public:
  void record(std::uint64_t value) {
    std::size_t bucket = 0;
    while (value > 1 && bucket + 1 < Buckets) {
      value >>= 1;
      ++bucket;
    }
    ++counts_[bucket];
    ++total_;
  }
  std::uint64_t total() const { return total_; }

 private:
  std::uint64_t counts_[Buckets] = {};
  std::uint64_t total_ = 0;
};

class StatsRegistry {
 public:
  using LatencyHistogram = Histogram<32>;
  void record(const std::string& key, std::uint64_t value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& histogram = histograms_[key];
    if (!histogram) histogram = std::make_unique<LatencyHistogram>();
    histogram->record(value);
  }
  std::size_t keys() { return locked_size(mutex_, histograms_); }

 private:
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<LatencyHistogram>> histograms_;
};

// Log tracing: a bounded ring of recent lines (medium lifetimes) and an audit trail kept for good.
class TraceLog {
 public:
  explicit TraceLog(std::size_t recent_lines) : recent_limit_(recent_lines) {}
  void append(std::string line) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (++lines_ % 64 == 0) audit_.push_back(line);
    recent_.push_back(std::move(line));
    if (recent_.size() > recent_limit_) recent_.pop_front();
  }
  std::uint64_t lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }

 private:
  std::mutex mutex_;
  std::size_t recent_limit_;
  std::uint64_t lines_ = 0;
  std::deque<std::string> recent_;
  std::vector<std::string> audit_;
};

}  // namespace IMGSRV_NAMESPACE::state

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_SERVER_STATE_H
