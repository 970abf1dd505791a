// image-server's middleware: what a production server runs around its handlers, namely request context and
// tracing, a canonical form of the query, rate limiting, an authentication cache, an access log, a cache of
// result metadata, metrics and an audit trail. None of it changes a response (every request is admitted, so the
// checksums are those of the handler alone); it is here because a real server allocates mostly in such code:
// many stages calling the same helpers (util::split, join_fields, std::string, std::vector, std::map), where
// what the stage keeps, not the helper, decides how long an allocation lives (the LLAMA paper, section 2.2 and
// Figure 5). Lifetimes, in requests at the default scale's ~40 requests/s: the stages' temporaries die at once;
// the request context and its spans live the request; sampled traces 12 requests, access-log lines 120, result
// metadata 1200, rate-limit buckets and audit entries the whole run, metric counters for good (never freed).
//
// Part of image-server's one translation unit (image_server.h says why): image_server.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_MIDDLEWARE_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_MIDDLEWARE_H

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "http.h"
#include "image_server.h"

namespace IMGSRV_NAMESPACE::IMGSRV_MIDDLEWARE {

using Fields = std::vector<std::pair<std::string, std::string>>;

inline std::string join_fields(const Fields& fields, char separator) {
  std::string out;
  for (const auto& [key, value] : fields) {
    if (!out.empty()) out += separator;
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

// A bounded FIFO shared by threads: an entry lives for `capacity` later insertions.
template <typename T>
class Ring {
 public:
  explicit Ring(std::size_t capacity) : capacity_(capacity) {}
  void push(T value) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(std::move(value));
    if (items_.size() > capacity_) items_.pop_front();
  }

 private:
  std::mutex mutex_;
  std::size_t capacity_;
  std::deque<T> items_;
};

struct Span {
  std::string name;
  std::uint64_t start_ns = 0;
  std::vector<std::string> annotations;
};

struct RequestContext {
  // Names the context after request number `id` and its query's session and group.
  void identify(const http::Request& http_request, std::uint64_t id) {
    request = id;
    request_id = "req-" + std::to_string(id);
    session = http_request.param("session", "anonymous");
    group = http_request.param("group", "unknown");
  }

  std::uint64_t request = 0;
  std::string request_id;
  std::string session;
  std::string group;
  std::string canonical_query;
  Fields labels;
  std::vector<std::unique_ptr<Span>> spans;
};

#if IMAGE_SERVER_REVISION >= 2
// Revision 2 canonicalises through an ordered map and keeps only the parameters that select the result.
std::string normalize_query(const http::Request& request) {
  std::map<std::string, std::string> selected;
  for (const auto& [key, value] : request.query) {
    if (key != "session" && key != "group") selected.emplace(key, value);
  }
  Fields fields(selected.begin(), selected.end());
  return join_fields(fields, '&');
}
#else
std::string canonical_query(const http::Request& request) {
  Fields fields(request.query.begin(), request.query.end());
  std::sort(fields.begin(), fields.end());
  Fields selected;
  for (auto& field : fields) {
    if (field.first != "session" && field.first != "group") selected.push_back(std::move(field));
  }
  return join_fields(selected, '&');
}
#endif

class Tracer {
 public:
  Span& start(RequestContext& context, const char* name) {
    auto span = std::make_unique<Span>();
    span->name = name;
    span->start_ns = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    span->annotations.push_back(std::string("request=") + context.request_id);
    context.spans.push_back(std::move(span));
    return *context.spans.back();
  }
  // Every 8th request's trace is kept among the last 12 sampled ones.
  void finish(const RequestContext& context) {
    if (context.request % 8 != 0) return;
    auto trace = std::make_unique<std::vector<std::string>>();
    for (const auto& span : context.spans) trace->push_back(span->name + "@" + std::to_string(span->start_ns));
    sampled_.push(std::move(trace));
  }

 private:
  Ring<std::unique_ptr<std::vector<std::string>>> sampled_{12};
};

class RateLimiter {
 public:
  // One bucket per session for the server's life. Every request is admitted: the run's checksums must not
  // depend on timing, so the limiter only accounts.
  bool admit(const RequestContext& context) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& bucket = buckets_[context.session];
    if (!bucket) {
      bucket = std::make_unique<Bucket>();
      bucket->session = context.session;
    }
    bucket->recent_requests.push_back(context.request);
    if (bucket->recent_requests.size() > 16) bucket->recent_requests.erase(bucket->recent_requests.begin());
    bucket->tokens = std::min(100.0, bucket->tokens + 0.5) - 1.0;
    return true;
  }

 private:
  struct Bucket {
    std::string session;
    double tokens = 100.0;
    std::vector<std::uint64_t> recent_requests;
  };
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Bucket>> buckets_;
};

// The last 48 distinct (session, group) tokens: how long one lives depends on how often its session returns.
class AuthCache {
 public:
  bool check(const RequestContext& context) {
    std::string token = "bearer:" + context.session + ":" + context.group;
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(token);
    if (found != index_.end()) {
      recent_.splice(recent_.begin(), recent_, found->second);
      return true;
    }
    recent_.push_front(token);
    index_.emplace(std::move(token), recent_.begin());
    if (recent_.size() > 48) {
      index_.erase(recent_.back());
      recent_.pop_back();
    }
    return true;
  }

 private:
  std::mutex mutex_;
  std::list<std::string> recent_;
  std::unordered_map<std::string, std::list<std::string>::iterator> index_;
};

// The access log: a line per request, kept for the next 120 requests. Revision 2 calls it the request journal.
#if IMAGE_SERVER_REVISION >= 2
class RequestJournal {
 public:
  void append(const RequestContext& context, std::uint64_t bytes) {
#else
class AccessLog {
 public:
  void record(const RequestContext& context, std::uint64_t bytes) {
#endif
    std::string line = context.request_id + " " + context.session + " " + context.canonical_query + " " +
                       std::to_string(bytes);
    recent_.push(std::move(line));
  }

 private:
  Ring<std::string> recent_{120};
};

class ResultCache {
 public:
  void remember(const RequestContext& context, const std::string& checksum, std::uint64_t bytes) {
    auto entry = std::make_unique<Entry>();
    entry->key = context.canonical_query;
    entry->checksum = checksum;
    entry->bytes = bytes;
    entries_.push(std::move(entry));
  }

 private:
  struct Entry {
    std::string key;
    std::string checksum;
    std::uint64_t bytes = 0;
  };
  Ring<std::unique_ptr<Entry>> entries_{1200};
};

// Process-wide counters keyed by name and labels, created on first use and never freed (the registry itself
// is leaked on purpose, as process-wide registries are, so that it outlives every thread).
class MetricsRegistry {
 public:
  static MetricsRegistry& instance() {
    static MetricsRegistry* registry = new MetricsRegistry;
    return *registry;
  }
  void count(const RequestContext& context, const std::string& name) {
    std::string key = name + "{" + join_fields(context.labels, ',') + "}";
    std::lock_guard<std::mutex> lock(mutex_);
    auto& counter = counters_[key];
    if (!counter) counter = std::make_unique<Counter>();
    ++counter->value;
  }

 private:
  struct Counter {
    std::uint64_t value = 0;
  };
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Counter>> counters_;
};

// Every 16th request, kept to the end of the run.
class AuditTrail {
 public:
  void note(const RequestContext& context) {
    if (context.request % 16 != 0) return;
    std::string entry = context.request_id + " " + context.session + " " + context.canonical_query;
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back(std::move(entry));
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> entries_;
};

// The chain of stages around a request's handler: `begin` before it, `end` after it. Revision 2 calls it the
// interceptor chain (`before`, `after`), runs the stages in another order and each through one wrapper (an extra
// frame in every stage's stacks).
#if IMAGE_SERVER_REVISION >= 2
template <typename Stage>
[[gnu::noinline]] void run_interceptor(const char* name, RequestContext& context, Tracer& tracer, Stage&& stage) {
  tracer.start(context, name);
  stage();
}

class InterceptorChain {
 public:
  std::unique_ptr<RequestContext> before(const http::Request& request, std::uint64_t id) {
    auto context = std::make_unique<RequestContext>();
    context->identify(request, id);
    run_interceptor("auth", *context, tracer_, [&] { auth_.check(*context); });
    run_interceptor("normalize", *context, tracer_, [&] { context->canonical_query = normalize_query(request); });
    run_interceptor("ratelimit", *context, tracer_, [&] { limiter_.admit(*context); });
    auto ops = request.query.find("ops");
    std::string first_op = ops == request.query.end() ? "none" : util::split(ops->second, ',').front();
    context->labels = {{"group", context->group}, {"op", first_op}};
    return context;
  }
  void after(RequestContext& context, const std::string& checksum, std::uint64_t bytes) {
    run_interceptor("metrics", context, tracer_, [&] { MetricsRegistry::instance().count(context, "responses"); });
    run_interceptor("cache", context, tracer_, [&] { results_.remember(context, checksum, bytes); });
    run_interceptor("journal", context, tracer_, [&] { journal_.append(context, bytes); });
    run_interceptor("audit", context, tracer_, [&] { audit_.note(context); });
    tracer_.finish(context);
  }
#else
class Chain {
 public:
  std::unique_ptr<RequestContext> begin(const http::Request& request, std::uint64_t id) {
    auto context = std::make_unique<RequestContext>();
    context->identify(request, id);
    auto ops = request.query.find("ops");
    std::string first_op = ops == request.query.end() ? "none" : util::split(ops->second, ',').front();
    context->labels = {{"group", context->group}, {"op", first_op}};
    tracer_.start(*context, "canonical");
    context->canonical_query = canonical_query(request);
    tracer_.start(*context, "ratelimit");
    limiter_.admit(*context);
    tracer_.start(*context, "auth");
    auth_.check(*context);
    return context;
  }
  void end(RequestContext& context, const std::string& checksum, std::uint64_t bytes) {
    tracer_.start(context, "access");
    access_.record(context, bytes);
    tracer_.start(context, "cache");
    results_.remember(context, checksum, bytes);
    tracer_.start(context, "metrics");
    MetricsRegistry::instance().count(context, "responses");
    tracer_.start(context, "audit");
    audit_.note(context);
    tracer_.finish(context);
  }
#endif

 private:
  Tracer tracer_;
  RateLimiter limiter_;
  AuthCache auth_;
#if IMAGE_SERVER_REVISION >= 2
  RequestJournal journal_;
#else
  AccessLog access_;
#endif
  ResultCache results_;
  AuditTrail audit_;
};

}  // namespace IMGSRV_NAMESPACE::IMGSRV_MIDDLEWARE

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_MIDDLEWARE_H
