#include "stats.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cstring>

#include "heap/heap.h"
#include "pal/pal.h"

namespace llamalloc {

namespace {

// A bounded text builder on a caller's buffer: no allocation.
struct Out {
  char* buf;
  size_t capacity;
  size_t used = 0;
  void put(const char* s) {
    size_t n = strlen(s);
    if (used + n < capacity) memcpy(buf + used, s, n);
    used += n;
  }
  void num(uint64_t v) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = char('0' + v % 10);
      v /= 10;
    } while (v);
    char s[24];
    for (int i = 0; i < n; ++i) s[i] = digits[n - 1 - i];
    s[n] = 0;
    put(s);
  }
  void field(const char* name, uint64_t v, bool comma = true) {
    put("  \"");
    put(name);
    put("\": ");
    num(v);
    if (comma) put(",");
    put("\n");
  }
};

}  // namespace

size_t format_stats_json(GlobalAllocator& heap, char* buf, size_t capacity) {
  uint64_t rss = 0, anon_huge = 0;
  read_resident(&rss, &anon_huge);
  Gauges& g = heap.gauges();
  uint64_t footprint, peak_footprint, by_class[kMaxClasses];
  {
    LockGuard guard(heap.lock());
    footprint = g.footprint_bytes;
    peak_footprint = g.peak_footprint_bytes;
    memcpy(by_class, g.huge_pages_by_class, sizeof(by_class));
  }
  int64_t live = g.live_bytes.load(std::memory_order_relaxed);
  int64_t peak_live = g.peak_live_bytes.load(std::memory_order_relaxed);
  Out o{buf, capacity};
  o.put("{\n  \"format\": \"llamalloc-stats\",\n");
  o.field("version", 1);
  o.field("num_classes", heap.num_classes());
  o.field("live_bytes", uint64_t(live < 0 ? 0 : live));
  o.field("peak_live_bytes", uint64_t(peak_live < 0 ? 0 : peak_live));
  o.field("footprint_bytes", footprint);
  o.field("peak_footprint_bytes", peak_footprint);
  o.put("  \"huge_pages_by_class\": [");
  for (unsigned c = 0; c < heap.num_classes(); ++c) {
    if (c) o.put(", ");
    o.num(by_class[c]);
  }
  o.put("],\n");
  o.field("rss_bytes", rss);
  o.field("anon_huge_pages_bytes", anon_huge);
  o.put("  \"counters\": {\n");
  Counters& k = heap.counters();
  bool first = true;
#define LLAMALLOC_PUT_COUNTER(name, help)                  \
  if (!first) o.put(",\n");                                \
  first = false;                                           \
  o.put("    \"" #name "\": ");                            \
  o.num(k.name.load(std::memory_order_relaxed));
  LLAMALLOC_COUNTERS(LLAMALLOC_PUT_COUNTER)
#undef LLAMALLOC_PUT_COUNTER
  o.put("\n  }\n}\n");
  if (o.used >= capacity) return 0;
  buf[o.used] = 0;
  return o.used;
}

bool expand_stats_path(const char* pattern, char* out, size_t capacity) {
  Out o{out, capacity};
  for (const char* p = pattern; *p; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      o.num(uint64_t(getpid()));
      ++p;
    } else {
      char c[2] = {*p, 0};
      o.put(c);
    }
  }
  if (o.used >= capacity) return false;
  out[o.used] = 0;
  return true;
}

void print_stats(GlobalAllocator& heap) {
  char json[8192];
  size_t n = format_stats_json(heap, json, sizeof(json) - 1);
  if (n == 0) return;
  json[n] = '\n';
  size_t done = 0;
  while (done < n + 1) {
    ssize_t w = ::write(2, json + done, n + 1 - done);
    if (w <= 0) return;
    done += size_t(w);
  }
}

bool write_stats_file(GlobalAllocator& heap, const char* pattern) {
  char json[8192];
  size_t n = format_stats_json(heap, json, sizeof(json));
  if (n == 0) return false;
  char path[4096], tmp[4096 + 8];
  if (!expand_stats_path(pattern, path, sizeof(path))) return false;
  size_t len = strlen(path);
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".tmp", 5);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, json + done, n - done);
    if (w <= 0) {
      close(fd);
      unlink(tmp);
      return false;
    }
    done += size_t(w);
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return false;
  }
  return true;
}

}  // namespace llamalloc
