// image-server's internal header: the revision switches and the small utilities that every part uses.
//
// image-server is one translation unit: image_server.cc includes its parts, one header per concept (image.h,
// http.h, server_state.h, middleware.h, service.h, server.h, load_generator.h, cli.h), and nothing else
// includes them. Their functions are defined in the headers, not inline, as in one source file, because the
// compiler then sees the whole program and inlines across the parts: an allocation's call stack, the profiler's
// context of it and the model's input, does not depend on the file that its functions are in.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_SERVER_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_SERVER_H

#include <cinttypes>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef IMAGE_SERVER_REVISION
#define IMAGE_SERVER_REVISION 1
#endif

// Revision 2's names (image_server.cc says what else it changes).
#if IMAGE_SERVER_REVISION >= 2
#define IMGSRV_NAMESPACE imaging
#define IMGSRV_MIDDLEWARE interceptors
#else
#define IMGSRV_NAMESPACE imgsrv
#define IMGSRV_MIDDLEWARE middleware
#endif

namespace IMGSRV_NAMESPACE::util {

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

}  // namespace IMGSRV_NAMESPACE::util

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_SERVER_H
