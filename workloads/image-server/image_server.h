// image-server's internal header: the revision switches and the small utilities that every part uses.
//
// image-server is one translation unit: image_server.cc includes its parts, one header per concept (image.h,
// http.h, server_state.h, middleware.h, service.h, server.h, load_generator.h), and nothing else includes them.
// Their functions are defined in the headers, not inline, as in one source file, because the compiler then sees
// the whole program and inlines across the parts: an allocation's call stack, the profiler's context of it and
// the model's input, does not depend on the file that its functions are in.
#ifndef LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_SERVER_H
#define LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_SERVER_H

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
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

#include "common/random.h"

// util::BlockingQueue, in the program's namespace (blocking_queue.h says why).
#define WORKLOAD_QUEUE_NAMESPACE IMGSRV_NAMESPACE::util
#include "common/blocking_queue.h"

namespace IMGSRV_NAMESPACE::util {

using workloads::fnv1a64;
using workloads::splitmix64;

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

}  // namespace IMGSRV_NAMESPACE::util

#endif  // LLAMALLOC_WORKLOADS_IMAGE_SERVER_IMAGE_SERVER_H
