// Statistics: every counter is declared once, here (as mimalloc's MI_STAT_FIELDS), and the statistics JSON
// (docs/heap.md, "Statistics file") is written from them at exit (LLAMALLOC_STATS=path) without calling malloc.
// The page heap fills a HeapStats (read_heap_stats, in page_heap/introspection.cc); this file's formatting reads
// only that struct, never the page heap itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "config.h"

namespace llamalloc {

// Event counters (name, meaning). Prediction counters are filled by the learned predictor; the default
// predictor never runs a model, so they stay zero.
#define LLAMALLOC_COUNTERS(X)                                                                   \
  X(block_spans_handed_out, "size-class spans taken by thread heaps from the page heap")         \
  X(blocks_recycled, "free blocks of active longer-lived huge pages reused for a shorter class") \
  X(deadlines_expired, "huge page deadlines that expired")                                      \
  X(promotions, "huge pages moved to the next longer lifetime class")                           \
  X(demotions, "huge pages moved to the next shorter lifetime class")                           \
  X(huge_pages_released, "huge pages returned to the OS")                                       \
  X(huge_pages_reused, "free huge pages taken again from the page cache instead of fresh memory") \
  X(huge_slack_pages, "huge objects that end on a page of blocks whose other blocks serve other objects") \
  X(blocks_subreleased, "free blocks of sparse, idle huge pages returned to the OS (subrelease)")  \
  X(span_pages_purged, "4 KiB pages of sparse, idle size-class spans returned to the OS (span purge)") \
  X(class_fallbacks, "lifetime classes moved onto the default class's pages, their pages much emptier (CLASS_FALLBACK)") \
  X(huge_pages_collapsed, "dense pages of 4 KiB pages collapsed into huge pages (HUGE_PAGES=2)")  \
  X(huge_page_collapses_failed, "collapses of dense pages the kernel could not do then (HUGE_PAGES=2)") \
  X(idle_heap_sweeps, "heaps swept by the sweeper or llamalloc_collect (empty spans given back)") \
  X(prediction_cache_hits, "predictions answered from the prediction cache")                    \
  X(prediction_cache_misses, "predictions that missed the cache")                               \
  X(model_runs, "runs of the lifetime model")                                                   \
  X(prediction_ns, "time spent in model runs (stack walk, tokens, model), ns")                  \
  X(repredictions_changed, "periodic re-predictions that changed a cached class")                \
  X(prediction_keys_shared, "prediction cache keys found shared by call paths (keyed by callers since)") \
  X(prediction_unseen_contexts, "prediction cache misses whose code path the model was not trained on (placed long-lived at first)") \
  X(prediction_memo_answers, "cache misses and ends of unseen-path trials answered from the thread's memo of the model's answers by context") \
  X(prediction_token_memo_answers, "model runs (counted in model_runs) whose tokens the process's memo of the LSTM's answers held: no LSTM") \
  X(prediction_caches_dropped, "prediction caches of idle threads given back by the sweeper")                 \
  X(online_contexts, "calling contexts online learning has seen (LEARN)")                                     \
  X(online_decided, "contexts whose class online learning has decided")                                       \
  X(online_samples, "objects sampled for online learning")                                                    \
  X(online_sampled_frees, "sampled objects freed (their lifetimes learned)")                                   \
  X(online_overrides, "times a model's cached class was replaced by the learned one")                         \
  X(online_dropped_samples, "samples refused: the sample table or the context's live samples were full")

struct Counters {
#define LLAMALLOC_DECLARE_COUNTER(name, help) std::atomic<uint64_t> name{0};
  LLAMALLOC_COUNTERS(LLAMALLOC_DECLARE_COUNTER)
#undef LLAMALLOC_DECLARE_COUNTER
};

// Gauges of one page heap: the footprint and the rest are kept by the page heap under its lock; live bytes are
// summed from the thread heaps' per-thread deltas, flushed on a slow path once they exceed kLiveFlushBytes (and
// at thread exit), so peak_live_bytes may miss a peak by about that much per thread.
struct Gauges {
  std::atomic<int64_t> live_bytes{0};
  std::atomic<int64_t> peak_live_bytes{0};
  uint64_t footprint_bytes = 0;       // page heap lock
  uint64_t peak_footprint_bytes = 0;  // page heap lock
  uint64_t huge_pages_by_class[kMaxClasses] = {};
  uint64_t subreleased_bytes = 0;  // page heap lock: free blocks of pages in use given back to the OS (subrelease)
  uint64_t span_purged_bytes = 0;  // page heap lock: 4 KiB pages inside spans in use given back to the OS (span purge)
  uint64_t page_cache_bytes = 0;   // page heap lock: free huge pages kept backed for reuse (the page cache)
  uint64_t reserved_bytes = 0;     // page heap lock: address space reserved for huge pages (backed or not)
  uint64_t metadata_bytes = 0;     // page heap lock: page metadata made usable (read-write; backed as touched)
};

inline constexpr int64_t kLiveFlushBytes = 256 * 1024;

inline void add_live_bytes(Gauges& g, int64_t delta) {
  int64_t now = g.live_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = g.peak_live_bytes.load(std::memory_order_relaxed);
  while (now > peak && !g.peak_live_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// The gauges of a page heap read together, with the live bytes not yet flushed added (clamped at zero).
struct GaugeSnapshot {
  uint64_t live_bytes, peak_live_bytes, footprint_bytes, peak_footprint_bytes, subreleased_bytes, page_cache_bytes;
  uint64_t span_purged_bytes, reserved_bytes, metadata_bytes;
  uint64_t huge_pages_by_class[kMaxClasses];
  uint8_t page_class_by_class[kMaxClasses];
};

// What the statistics show of one page heap at one moment: the page heap fills it (read_heap_stats), the
// formatting below reads it.
struct HeapStats {
  unsigned num_classes = 0;
  bool in_signal = false;  // read by a signal handler: no StatsSection
  GaugeSnapshot gauges{};
  const Counters* counters = nullptr;  // the page heap's counters (atomics, read as they are formatted)
};

// A bounded text builder on a caller's buffer, for the statistics JSON: no allocation. `used` runs past
// `capacity` when the text does not fit (nothing is written past it). Inline: the predictor's part of the
// statistics (src/model) writes with it too.
struct Out {
  char* buf;
  size_t capacity;
  size_t used = 0;
  void put(const char* s);
  void num(uint64_t v);
  void field(const char* name, uint64_t v, bool comma = true);  // "  \"name\": v,\n"
  void string(const char* s);                                    // a JSON string, quotes and backslashes escaped
};

inline void Out::put(const char* s) {
  size_t n = strlen(s);
  if (used + n < capacity) memcpy(buf + used, s, n);
  used += n;
}

inline void Out::num(uint64_t v) {
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

inline void Out::field(const char* name, uint64_t v, bool comma) {
  put("  \"");
  put(name);
  put("\": ");
  num(v);
  if (comma) put(",");
  put("\n");
}

inline void Out::string(const char* s) {
  put("\"");
  for (; *s; ++s) {
    char c[2] = {*s, 0};
    if (*s == '"' || *s == '\\') put("\\");
    if (static_cast<unsigned char>(*s) < 0x20) c[0] = '?';  // (paths: no control characters to escape)
    put(c);
  }
  put("\"");
}


// More of the statistics from outside the heap (the learned predictor's "online" object): writes one JSON member,
// `"name": value`, into buf and returns its length (0: none, or it does not fit). Called as the JSON is formatted,
// never in a signal handler (it may take a lock). No allocation.
using StatsSection = size_t (*)(char* buf, size_t capacity);
void set_stats_section(StatsSection section);
// The model file the learned predictor loaded and its token tables (null or empty: none), shown in the statistics
// as "model" and "tokens". The strings must outlive the process's statistics (the options' copies, static storage).
void set_stats_model(const char* model, const char* tokens);

// Formats the statistics JSON of `stats` (and this process's RSS) into buf; returns its length, or 0 when it
// does not fit. No allocation.
size_t format_stats_json(const HeapStats& stats, char* buf, size_t capacity);
// The one-line summary of `stats` for a person (a newline at its end): "llamalloc: live 1.2 MiB (peak 20.2),
// footprint 6.0 MiB (4.9x live; peak 22.0), RSS 9.3 MiB (huge pages 4.0), pages by class 0 2 0 0 0 0 0 1,
// subreleased 0.8 MiB, page cache 0.0 MiB". Its length, or 0 when it does not fit (200 bytes suffice). No
// allocation.
size_t format_stats_summary(const HeapStats& stats, uint64_t rss, uint64_t anon_huge, char* buf, size_t capacity);
// Writes n bytes of text to fd, again after EINTR and partial writes; stops at any other error. Async-signal-safe.
void write_all(int fd, const char* text, size_t n);
// `pattern` with %p replaced by the process id; false if it does not fit.
bool expand_stats_path(const char* pattern, char* out, size_t capacity);
// The path of a snapshot beside the file at exit: `pattern` expanded, with ".TAG" before a final ".json" (or
// appended): stats.json -> stats.before-exit.json, stats.signal-2.json. false if it does not fit.
bool tagged_stats_path(const char* pattern, const char* tag, char* out, size_t capacity);
// Writes n bytes of JSON to `path` through path.tmp and rename(2). Async-signal-safe.
bool write_json_file(const char* path, const char* json, size_t n);
// The signal of a name (USR1, SIGUSR1, usr1) or a number; 0 for anything else and for the signals that cannot be
// caught or that report faults (KILL, STOP, SEGV, BUS, FPE, ILL, ABRT, TRAP, SYS).
int parse_signal(const char* text);

// The process-wide heap's statistics of the moment (this thread's live-byte delta flushed, unless in_signal; the
// predictor's counters filled in): defined by the library's entry points (override/stats.cc), so absent (null)
// in llamalloc_core, which has no process-wide heap.
size_t stats_snapshot(char* buf, size_t capacity, bool in_signal) __attribute__((weak));
// The same heap's one-line summary (format_stats_summary).
size_t stats_summary_snapshot(char* buf, size_t capacity, bool in_signal) __attribute__((weak));
// Writes stats_snapshot to the LLAMALLOC_STATS path tagged with `tag` (tagged_stats_path); a one-line warning
// when it cannot. Not for signal handlers (see install_stats_hooks).
void write_stats_snapshot(const char* tag);
// Keeps the summary line of this moment (stats_summary_snapshot) for the end: the before-exit snapshot calls it,
// and the summary at exit (LLAMALLOC_STATS_SUMMARY) then prints it beside the line of the exit. Not for signal
// handlers. kept_summary: the line kept, or null.
void keep_summary_before_exit();
const char* kept_summary_before_exit();
// Called once as the library starts (llamalloc_start), after the options are read: with LLAMALLOC_STATS_SIGNAL,
// installs a handler that writes the statistics of the moment to the LLAMALLOC_STATS path tagged signal-N (N =
// 1, 2, ...), or to stderr when LLAMALLOC_STATS is empty. The handler allocates nothing and takes no lock it
// could wait on for good. A bad signal, or one that already has a handler, gets one warning line and no hook.
void install_stats_hooks();

}  // namespace llamalloc
