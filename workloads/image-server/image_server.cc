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
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../common/steady_state.h"

#ifndef IMAGE_SERVER_REVISION
#define IMAGE_SERVER_REVISION 1
#endif

#if IMAGE_SERVER_REVISION >= 2
#define IMGSRV_NAMESPACE imaging
#else
#define IMGSRV_NAMESPACE imgsrv
#endif

namespace IMGSRV_NAMESPACE {

// ---------------------------------------------------------------------------------------------------------
namespace util {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

inline std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return text;
}

inline std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(separator, start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start) parts.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

template <typename T>
class BlockingQueue {
 public:
  void push(T value) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      items_.push_back(std::move(value));
    }
    ready_.notify_one();
  }
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T value = std::move(items_.front());
    items_.pop_front();
    return value;
  }
  void close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace util

// ---------------------------------------------------------------------------------------------------------
namespace image {

struct Image {
  int width = 0;
  int height = 0;
  int channels = 3;
  std::vector<std::uint8_t> pixels;

  Image() = default;
  Image(int w, int h, int c) : width(w), height(h), channels(c), pixels(static_cast<std::size_t>(w) * h * c) {}
  std::uint8_t* at(int x, int y) { return &pixels[(static_cast<std::size_t>(y) * width + x) * channels]; }
  const std::uint8_t* at(int x, int y) const {
    return &pixels[(static_cast<std::size_t>(y) * width + x) * channels];
  }
};

inline std::uint8_t clamp_byte(int value) { return static_cast<std::uint8_t>(std::clamp(value, 0, 255)); }

// A deterministic test card: gradients, rings and noise, so that every filter changes the bytes.
Image synthesize(int width, int height, std::uint64_t seed) {
  Image img(width, height, 3);
  const int cx = static_cast<int>(seed % static_cast<std::uint64_t>(width));
  const int cy = static_cast<int>((seed >> 16) % static_cast<std::uint64_t>(height));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      std::uint64_t noise = util::splitmix64(seed ^ (static_cast<std::uint64_t>(y) << 32 | static_cast<unsigned>(x)));
      int dx = x - cx, dy = y - cy;
      int ring = ((dx * dx + dy * dy) >> 6) & 0xff;
      std::uint8_t* p = img.at(x, y);
      p[0] = static_cast<std::uint8_t>((x * 255 / std::max(1, width - 1) + (noise & 15)) & 0xff);
      p[1] = static_cast<std::uint8_t>((y * 255 / std::max(1, height - 1) + ((noise >> 8) & 15)) & 0xff);
      p[2] = static_cast<std::uint8_t>(ring ^ ((noise >> 16) & 31));
    }
  }
  return img;
}

class Filter {
 public:
  virtual ~Filter() = default;
  virtual Image apply(const Image& input) const = 0;
  virtual std::string describe() const = 0;
};

// A small square kernel with integer weights, applied with clamping at the borders.
template <int Size>
struct Kernel {
  static_assert(Size % 2 == 1, "kernels have a centre");
  int weights[Size][Size];
  int divisor;
};

template <int Size>
Image convolve(const Image& input, const Kernel<Size>& kernel) {
  constexpr int half = Size / 2;
  Image output(input.width, input.height, input.channels);
  for (int y = 0; y < input.height; ++y) {
    for (int x = 0; x < input.width; ++x) {
      for (int c = 0; c < input.channels; ++c) {
        int sum = 0;
        for (int ky = 0; ky < Size; ++ky) {
          int sy = std::clamp(y + ky - half, 0, input.height - 1);
          for (int kx = 0; kx < Size; ++kx) {
            int sx = std::clamp(x + kx - half, 0, input.width - 1);
            sum += kernel.weights[ky][kx] * input.at(sx, sy)[c];
          }
        }
        output.at(x, y)[c] = clamp_byte(sum / kernel.divisor);
      }
    }
  }
  return output;
}

// Separable box blur: a horizontal pass into a temporary image, then a vertical pass.
class BoxBlur final : public Filter {
 public:
  explicit BoxBlur(int radius) : radius_(std::clamp(radius, 1, 8)) {}
  Image apply(const Image& input) const override {
    Image horizontal(input.width, input.height, input.channels);
    pass(input, horizontal, 1, 0);
    Image output(input.width, input.height, input.channels);
    pass(horizontal, output, 0, 1);
    return output;
  }
  std::string describe() const override { return "blur:" + std::to_string(radius_); }

 private:
  void pass(const Image& in, Image& out, int step_x, int step_y) const {
    const int count = 2 * radius_ + 1;
    for (int y = 0; y < in.height; ++y) {
      for (int x = 0; x < in.width; ++x) {
        for (int c = 0; c < in.channels; ++c) {
          int sum = 0;
          for (int k = -radius_; k <= radius_; ++k) {
            int sx = std::clamp(x + k * step_x, 0, in.width - 1);
            int sy = std::clamp(y + k * step_y, 0, in.height - 1);
            sum += in.at(sx, sy)[c];
          }
          out.at(x, y)[c] = static_cast<std::uint8_t>(sum / count);
        }
      }
    }
  }
  int radius_;
};

class Sharpen final : public Filter {
 public:
  Image apply(const Image& input) const override {
    static constexpr Kernel<3> kSharpen{{{0, -1, 0}, {-1, 5, -1}, {0, -1, 0}}, 1};
    return convolve(input, kSharpen);
  }
  std::string describe() const override { return "sharpen"; }
};

class EdgeDetect final : public Filter {
 public:
  Image apply(const Image& input) const override {
    static constexpr Kernel<3> kEdges{{{-1, -1, -1}, {-1, 8, -1}, {-1, -1, -1}}, 1};
    return convolve(input, kEdges);
  }
  std::string describe() const override { return "edges"; }
};

class Grayscale final : public Filter {
 public:
  Image apply(const Image& input) const override {
    Image output(input.width, input.height, input.channels);
    for (int y = 0; y < input.height; ++y) {
      for (int x = 0; x < input.width; ++x) {
        const std::uint8_t* p = input.at(x, y);
        auto luma = static_cast<std::uint8_t>((77 * p[0] + 150 * p[1] + 29 * p[2]) >> 8);
        std::uint8_t* q = output.at(x, y);
        for (int c = 0; c < output.channels; ++c) q[c] = luma;
      }
    }
    return output;
  }
  std::string describe() const override { return "gray"; }
};

// Nearest-neighbour resize to `percent` of the size (at least 1x1).
class Resize final : public Filter {
 public:
  explicit Resize(int percent) : percent_(std::clamp(percent, 10, 200)) {}
  Image apply(const Image& input) const override {
    int w = std::max(1, input.width * percent_ / 100);
    int h = std::max(1, input.height * percent_ / 100);
    Image output(w, h, input.channels);
    for (int y = 0; y < h; ++y) {
      const int sy = y * input.height / h;
      for (int x = 0; x < w; ++x) {
        const int sx = x * input.width / w;
        std::memcpy(output.at(x, y), input.at(sx, sy), static_cast<std::size_t>(input.channels));
      }
    }
    return output;
  }
  std::string describe() const override { return "resize:" + std::to_string(percent_); }

 private:
  int percent_;
};

class Rotate90 final : public Filter {
 public:
  Image apply(const Image& input) const override {
    Image output(input.height, input.width, input.channels);
    for (int y = 0; y < input.height; ++y) {
      for (int x = 0; x < input.width; ++x) {
        std::memcpy(output.at(input.height - 1 - y, x), input.at(x, y), static_cast<std::size_t>(input.channels));
      }
    }
    return output;
  }
  std::string describe() const override { return "rotate"; }
};

using FilterPtr = std::unique_ptr<Filter>;

// Turns "blur:2" into a filter; unknown names give nullptr (the caller answers 400).
#if IMAGE_SERVER_REVISION >= 2
FilterPtr make_filter(std::string_view spec) {
  auto colon = spec.find(':');
  std::string_view name = spec.substr(0, colon);
  int argument = colon == std::string_view::npos ? 0 : std::atoi(std::string(spec.substr(colon + 1)).c_str());
  static const std::map<std::string_view, std::function<FilterPtr(int)>> kMakers = {
      {"blur", [](int a) -> FilterPtr { return std::make_unique<BoxBlur>(a ? a : 1); }},
      {"sharpen", [](int) -> FilterPtr { return std::make_unique<Sharpen>(); }},
      {"edges", [](int) -> FilterPtr { return std::make_unique<EdgeDetect>(); }},
      {"gray", [](int) -> FilterPtr { return std::make_unique<Grayscale>(); }},
      {"resize", [](int a) -> FilterPtr { return std::make_unique<Resize>(a ? a : 50); }},
      {"rotate", [](int) -> FilterPtr { return std::make_unique<Rotate90>(); }},
  };
  auto it = kMakers.find(name);
  return it == kMakers.end() ? nullptr : it->second(argument);
}
#else
class FilterFactory {
 public:
  static FilterPtr create(const std::string& spec) {
    std::string name = spec, argument;
    if (auto colon = spec.find(':'); colon != std::string::npos) {
      name = spec.substr(0, colon);
      argument = spec.substr(colon + 1);
    }
    int value = argument.empty() ? 0 : std::atoi(argument.c_str());
    if (name == "blur") return std::make_unique<BoxBlur>(value ? value : 1);
    if (name == "sharpen") return std::make_unique<Sharpen>();
    if (name == "edges") return std::make_unique<EdgeDetect>();
    if (name == "gray") return std::make_unique<Grayscale>();
    if (name == "resize") return std::make_unique<Resize>(value ? value : 50);
    if (name == "rotate") return std::make_unique<Rotate90>();
    return nullptr;
  }
};
#endif

class Pipeline {
 public:
  bool add(std::string_view spec) {
#if IMAGE_SERVER_REVISION >= 2
    FilterPtr filter = make_filter(spec);
#else
    FilterPtr filter = FilterFactory::create(std::string(spec));
#endif
    if (!filter) return false;
    filters_.push_back(std::move(filter));
    return true;
  }
  Image run(Image img) const {
    for (const FilterPtr& filter : filters_) img = filter->apply(img);
    return img;
  }
  std::string describe() const {
    std::string text;
    for (const FilterPtr& filter : filters_) text += (text.empty() ? "" : ",") + filter->describe();
    return text;
  }

 private:
  std::vector<FilterPtr> filters_;
};

}  // namespace image

// ---------------------------------------------------------------------------------------------------------
namespace codec {

std::string encode_ppm(const image::Image& img) {
  std::string header = "P6\n" + std::to_string(img.width) + " " + std::to_string(img.height) + "\n255\n";
  std::string out;
  out.reserve(header.size() + static_cast<std::size_t>(img.width) * img.height * 3);
  out += header;
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) out.append(reinterpret_cast<const char*>(img.at(x, y)), 3);
  }
  return out;
}

}  // namespace codec

// ---------------------------------------------------------------------------------------------------------
namespace http {

struct Request {
  std::string method;
  std::string target;
  std::string path;
  std::string version;
  std::map<std::string, std::string> headers;
  std::unordered_map<std::string, std::string> query;
};

struct Response {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::string serialize() const {
    std::string reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Bad Request";
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\n";
    for (const auto& [name, value] : headers) head += name + ": " + value + "\r\n";
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    return head;
  }
};

inline std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

std::unordered_map<std::string, std::string> parse_query(std::string_view query) {
  std::unordered_map<std::string, std::string> params;
  for (const std::string& pair : util::split(query, '&')) {
    auto eq = pair.find('=');
    if (eq == std::string::npos) params[pair] = "";
    else params[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return params;
}

#if IMAGE_SERVER_REVISION >= 2
bool parse_request_line(std::string_view line, Request& request) {
  auto first = line.find(' ');
  auto second = line.rfind(' ');
  if (first == std::string_view::npos || second == first) return false;
  request.method = std::string(line.substr(0, first));
  request.target = std::string(line.substr(first + 1, second - first - 1));
  request.version = std::string(line.substr(second + 1));
  return true;
}

bool parse_head(std::string_view head, Request& request) {
  auto lines = util::split(head, '\n');
  if (lines.empty()) return false;
  for (std::string& line : lines) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
  }
  if (!parse_request_line(lines[0], request)) return false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    auto colon = lines[i].find(':');
    if (colon == std::string::npos) return false;
    std::size_t value_start = lines[i].find_first_not_of(' ', colon + 1);
    request.headers[lower(lines[i].substr(0, colon))] =
        value_start == std::string::npos ? "" : lines[i].substr(value_start);
  }
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = parse_query(std::string_view(request.target).substr(question + 1));
  return true;
}
#else
// Parses the head of a request (request line and headers, without the blank line).
bool parse_head(const std::string& head, Request& request) {
  std::istringstream stream(head);
  std::string line;
  if (!std::getline(stream, line)) return false;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::istringstream request_line(line);
  if (!(request_line >> request.method >> request.target >> request.version)) return false;
  while (std::getline(stream, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos) return false;
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    request.headers[lower(line.substr(0, colon))] = value;
  }
  auto question = request.target.find('?');
  request.path = request.target.substr(0, question);
  if (question != std::string::npos) request.query = parse_query(request.target.substr(question + 1));
  return true;
}
#endif

// One TCP connection with its read buffer; knows how to frame HTTP/1.1 messages with Content-Length.
class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {
    int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Reads up to the blank line; returns the head without it, or nothing at EOF or error.
  std::optional<std::string> read_head() {
    for (;;) {
      auto end = buffer_.find("\r\n\r\n");
      if (end != std::string::npos) {
        std::string head = buffer_.substr(0, end);
        buffer_.erase(0, end + 4);
        return head;
      }
      if (buffer_.size() > (1u << 20) || !fill()) return std::nullopt;
    }
  }

  std::optional<std::string> read_body(std::size_t length) {
    while (buffer_.size() < length) {
      if (!fill()) return std::nullopt;
    }
    std::string body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return body;
  }

  bool write_all(std::string_view data) {
    while (!data.empty()) {
      ssize_t sent = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (sent <= 0) {
        if (sent < 0 && errno == EINTR) continue;
        return false;
      }
      data.remove_prefix(static_cast<std::size_t>(sent));
    }
    return true;
  }

 private:
  bool fill() {
    char chunk[64 * 1024];
    for (;;) {
      ssize_t got = ::recv(fd_, chunk, sizeof chunk, 0);
      if (got > 0) {
        buffer_.append(chunk, static_cast<std::size_t>(got));
        return true;
      }
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
  }

  int fd_;
  std::string buffer_;
};

}  // namespace http

// ---------------------------------------------------------------------------------------------------------
// Long-lived server state. Each part is allocated while requests are in flight, i.e. at the heap's peak.
namespace state {

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

  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return sessions_.size();
  }

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
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return nodes_.size();
  }

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
  std::size_t keys() {
    std::lock_guard<std::mutex> lock(mutex_);
    return histograms_.size();
  }

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

}  // namespace state

// ---------------------------------------------------------------------------------------------------------
// The middleware a production server runs around its handlers: request context and tracing, a canonical form
// of the query, rate limiting, an authentication cache, an access log, a cache of result metadata, metrics
// and an audit trail. None of it changes a response (every request is admitted, so the checksums are those
// of the handler alone); it is here because a real server allocates mostly in such code: many stages calling
// the same helpers (util::split, join_fields, std::string, std::vector, std::map), where what the stage keeps,
// not the helper, decides how long an allocation lives (the LLAMA paper, section 2.2 and Figure 5). Lifetimes,
// in requests at the default scale's ~40 requests/s: the stages' temporaries die at once; the request context
// and its spans live the request; sampled traces 12 requests, access-log lines 120, result metadata 1200,
// rate-limit buckets and audit entries the whole run, metric counters for good (never freed).
#if IMAGE_SERVER_REVISION >= 2
#define IMGSRV_MIDDLEWARE interceptors
#else
#define IMGSRV_MIDDLEWARE middleware
#endif
namespace IMGSRV_MIDDLEWARE {

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

#if IMAGE_SERVER_REVISION >= 2
class RequestJournal {
 public:
  void append(const RequestContext& context, std::uint64_t bytes) {
    std::string line = context.request_id + " " + context.session + " " + context.canonical_query + " " +
                       std::to_string(bytes);
    recent_.push(std::move(line));
  }
#else
class AccessLog {
 public:
  void record(const RequestContext& context, std::uint64_t bytes) {
    std::string line = context.request_id + " " + context.session + " " + context.canonical_query + " " +
                       std::to_string(bytes);
    recent_.push(std::move(line));
  }
#endif

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

#if IMAGE_SERVER_REVISION >= 2
// Revision 2 runs every stage through one wrapper (an extra frame in every stage's stacks) and in another order.
template <typename Stage>
[[gnu::noinline]] void run_interceptor(const char* name, RequestContext& context, Tracer& tracer, Stage&& stage) {
  tracer.start(context, name);
  stage();
}

class InterceptorChain {
 public:
  std::unique_ptr<RequestContext> before(const http::Request& request, std::uint64_t id) {
    auto context = std::make_unique<RequestContext>();
    context->request = id;
    context->request_id = "req-" + std::to_string(id);
    auto session = request.query.find("session");
    context->session = session == request.query.end() ? "anonymous" : session->second;
    auto group = request.query.find("group");
    context->group = group == request.query.end() ? "unknown" : group->second;
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

 private:
  Tracer tracer_;
  RateLimiter limiter_;
  AuthCache auth_;
  RequestJournal journal_;
  ResultCache results_;
  AuditTrail audit_;
};
#else
class Chain {
 public:
  std::unique_ptr<RequestContext> begin(const http::Request& request, std::uint64_t id) {
    auto context = std::make_unique<RequestContext>();
    context->request = id;
    context->request_id = "req-" + std::to_string(id);
    auto session = request.query.find("session");
    context->session = session == request.query.end() ? "anonymous" : session->second;
    auto group = request.query.find("group");
    context->group = group == request.query.end() ? "unknown" : group->second;
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

 private:
  Tracer tracer_;
  RateLimiter limiter_;
  AuthCache auth_;
  AccessLog access_;
  ResultCache results_;
  AuditTrail audit_;
};
#endif

}  // namespace IMGSRV_MIDDLEWARE

// ---------------------------------------------------------------------------------------------------------
namespace service {

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
    auto session = request.query.find("session");
    record->session = session == request.query.end() ? "anonymous" : session->second;
    auto group = request.query.find("group");
    record->group = group == request.query.end() ? "unknown" : group->second;
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

}  // namespace service

// ---------------------------------------------------------------------------------------------------------
namespace net {

class Server {
 public:
  Server(service::ImageService& service, int workers, int port) : service_(service) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd_ < 0) fail("socket");
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // only 127.0.0.1, never another interface
    address.sin_port = htons(static_cast<std::uint16_t>(port));
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) fail("bind 127.0.0.1");
    if (::listen(listen_fd_, 128) != 0) fail("listen");
    socklen_t length = sizeof address;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  ~Server() { stop(); }

  int port() const { return port_; }

  void stop() {
    if (stopped_.exchange(true)) return;
    ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
    acceptor_.join();
    ::close(listen_fd_);
    connections_.close();
    for (std::thread& worker : workers_) worker.join();
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "image-server: %s: %s\n", what, std::strerror(errno));
    std::exit(1);
  }

  void accept_loop() {
    for (;;) {
      int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;
      }
      connections_.push(fd);
    }
  }

  void worker_loop() {
    while (auto fd = connections_.pop()) serve(std::make_unique<http::Connection>(*fd));
  }

  void serve(std::unique_ptr<http::Connection> connection) {
    while (auto head = connection->read_head()) {
      http::Request request;
      http::Response response;
      if (!http::parse_head(*head, request)) {
        response.status = 400;
        response.body = "malformed request\n";
      } else {
        response = service_.handle(request);
      }
      if (!connection->write_all(response.serialize()) || !connection->write_all(response.body)) return;
    }
  }

  service::ImageService& service_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread acceptor_;
  std::vector<std::thread> workers_;
  util::BlockingQueue<int> connections_;
};

}  // namespace net

// ---------------------------------------------------------------------------------------------------------
namespace loadgen {

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

}  // namespace loadgen

// ---------------------------------------------------------------------------------------------------------
namespace cli {

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

}  // namespace cli
}  // namespace IMGSRV_NAMESPACE

int main(int argc, char** argv) {
  namespace is = IMGSRV_NAMESPACE;
  is::cli::Options options = is::cli::parse(argc, argv);
  auto started = std::chrono::steady_clock::now();
  is::loadgen::Outcome outcome;
  steady_state::QuietPhase quiet(options.quiet_seconds);
  std::string quiet_stats;  // the server's /v1/stats as last seen during the quiet phase
  std::uint64_t idle_requests = 0;
  double load_seconds = 0;
  std::chrono::steady_clock::time_point teardown_started;
  {
    is::service::ImageService service(options.trace_lines);
    is::net::Server server(service, options.workers, options.port);
    is::loadgen::run(options.load, server.port(), outcome);
    load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
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
    server.stop();
  }
  // The workload's time: the load and the teardown, not the quiet phase.
  double seconds =
      load_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - teardown_started).count();
  const std::string steady =
      quiet.json("\"idle_requests\": " + std::to_string(idle_requests) +
                 ", \"server\": " + (quiet_stats.empty() ? std::string("null") : quiet_stats));
  std::uint64_t checksum = 0xcbf29ce484222325ull;
  for (std::uint64_t body_checksum : outcome.body_checksums) {
    checksum = is::util::fnv1a64(&body_checksum, sizeof body_checksum, checksum);
  }
  const std::uint64_t errors = outcome.errors.load();
  std::printf("{\"workload\": \"image-server\", \"revision\": %d, \"ok\": %s, \"seconds\": %.3f, "
              "\"requests\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"large_requests\": %" PRIu64
              ", \"response_bytes\": %" PRIu64 ", \"requests_per_second\": %.1f, \"checksum\": \"%s\", "
              "\"server\": %s, \"steady_state\": %s}\n",
              IMAGE_SERVER_REVISION, errors == 0 ? "true" : "false", seconds, options.load.requests, errors,
              outcome.large.load(), outcome.bytes.load(),
              seconds > 0 ? static_cast<double>(options.load.requests) / seconds : 0.0,
              is::util::hex64(checksum).c_str(), outcome.stats_body.empty() ? "null" : outcome.stats_body.c_str(),
              steady.c_str());
  std::fflush(stdout);
  return errors == 0 ? 0 : 1;
}
