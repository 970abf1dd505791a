// What the page heap shows of itself without changing anything: a page's snapshot (tests, the simulator), the
// pages in use by class, and its statistics (read_heap_stats, the struct that stats.cc formats; the statistics
// JSON and summary of a page heap read now: stats.cc formats, this file reads). Rules: every
// read is under the page heap lock, except a statistics read from a signal handler, which tries the lock for
// about 10 ms and then reads without it (a snapshot that may be torn between fields, never a hang).
#include <time.h>

#include <cstring>

#include "page_heap/page_heap.h"

namespace llamalloc {

PageInfo PageHeap::page_info(uintptr_t address) {
  LockGuard g(lock_);
  PageInfo info;
  HugePageMeta* p = page_of(address);
  if (p == nullptr) return info;
  info.state = p->state;
  info.kind = p->kind;
  info.lifetime_class = p->lifetime_class;
  info.deadline_ns = p->deadline_ns;
  info.live = p->live;
  info.residual = p->residual;
  info.address = p->state == PageState::kUnused ? 0 : page_address(p);
  return info;
}

size_t PageHeap::pages_in_use(unsigned lc) {
  LockGuard g(lock_);
  return lc < kMaxClasses ? gauges_.huge_pages_by_class[lc] : gauges_.footprint_bytes / kHugePageBytes;
}

HeapStats read_heap_stats(PageHeap& heap, bool in_signal, int64_t unflushed_live) {
  Gauges& g = heap.gauges();
  HeapStats stats;
  stats.num_classes = heap.num_classes();
  stats.counters = &heap.counters();
  GaugeSnapshot& out = stats.gauges;
  bool locked = true;
  if (in_signal) {
    // The interrupted thread may hold the lock (then it never comes free here): try for about 10 ms, then read
    // the gauges without it.
    locked = false;
    for (int i = 0; i < 100 && !(locked = heap.lock().try_lock()); ++i) {
      struct timespec pause = {0, 100 * 1000};
      nanosleep(&pause, nullptr);
    }
  } else {
    heap.lock().lock();
  }
  out.footprint_bytes = g.footprint_bytes;
  out.peak_footprint_bytes = g.peak_footprint_bytes;
  out.subreleased_bytes = g.subreleased_bytes;
  out.span_purged_bytes = g.span_purged_bytes;
  out.page_cache_bytes = g.page_cache_bytes;
  out.reserved_bytes = g.reserved_bytes;
  out.metadata_bytes = g.metadata_bytes;
  memcpy(out.huge_pages_by_class, g.huge_pages_by_class, sizeof(out.huge_pages_by_class));
  for (unsigned c = 0; c < kMaxClasses; ++c) out.page_class_by_class[c] = uint8_t(heap.page_class(c));
  if (locked) heap.lock().unlock();
  int64_t live = g.live_bytes.load(std::memory_order_relaxed) + unflushed_live;
  int64_t peak_live = g.peak_live_bytes.load(std::memory_order_relaxed);
  if (live > peak_live) peak_live = live;
  out.live_bytes = uint64_t(live < 0 ? 0 : live);
  out.peak_live_bytes = uint64_t(peak_live < 0 ? 0 : peak_live);
  return stats;
}

size_t format_stats_json(PageHeap& heap, char* buf, size_t capacity, bool in_signal, int64_t unflushed_live) {
  HeapStats stats = read_heap_stats(heap, in_signal, unflushed_live);
  stats.in_signal = in_signal;
  return format_stats_json(stats, buf, capacity);
}

size_t format_stats_summary(PageHeap& heap, char* buf, size_t capacity, bool in_signal, int64_t unflushed_live) {
  HeapStats stats = read_heap_stats(heap, in_signal, unflushed_live);
  uint64_t rss = 0, anon_huge = 0;
  read_resident(&rss, &anon_huge);
  return format_stats_summary(stats, rss, anon_huge, buf, capacity);
}

void print_stats(PageHeap& heap) {
  char summary[512];
  size_t s = format_stats_summary(heap, summary, sizeof(summary));
  char json[32768];
  size_t n = format_stats_json(heap, json, sizeof(json) - 1);
  write_all(2, summary, s);
  if (n == 0) return;
  json[n] = '\n';
  write_all(2, json, n + 1);
}

bool write_stats_file(PageHeap& heap, const char* pattern) {
  char json[32768];
  size_t n = format_stats_json(heap, json, sizeof(json));
  if (n == 0) return false;
  char path[4096];
  if (!expand_stats_path(pattern, path, sizeof(path))) return false;
  return write_json_file(path, json, n);
}

}  // namespace llamalloc
