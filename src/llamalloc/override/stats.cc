// The process-wide heap's statistics for the stats hooks (stats.cc: LLAMALLOC_STATS_SIGNAL, the snapshot before
// exit): in libllamalloc.so and libllamalloc.a. stats.cc refers to stats_snapshot weakly, so llamalloc_core (the
// simulator, the policy tests), which has no process-wide heap, installs no hooks.
#include "alloc/alloc.h"
#include "stats.h"

namespace llamalloc {

size_t stats_snapshot(char* buf, size_t capacity, bool in_signal) {
  // In a signal handler the interrupted code may be updating this thread's live-byte delta: read it, and leave it.
  if (!in_signal) flush_live_bytes();
  if (Predictor* p = predictor()) p->report(g_page_heap.counters());  // lock-free sums of the per-thread counters
  return format_stats_json(g_page_heap, buf, capacity, in_signal, in_signal ? tl_live_delta : 0);
}

size_t stats_summary_snapshot(char* buf, size_t capacity, bool in_signal) {
  if (!in_signal) flush_live_bytes();
  return format_stats_summary(g_page_heap, buf, capacity, in_signal, in_signal ? tl_live_delta : 0);
}

}  // namespace llamalloc
