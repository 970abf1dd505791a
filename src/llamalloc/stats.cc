#include "stats.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "base.h"
#include "options.h"
#include "pal/pal.h"

namespace llamalloc {

namespace {
std::atomic<StatsSection> g_stats_section{nullptr};
std::atomic<const char*> g_stats_model{nullptr};
std::atomic<const char*> g_stats_tokens{nullptr};
// A path longer than this is left out of the statistics: the signal handler's buffer holds 8 KiB in all.
constexpr size_t kMaxStatsPathBytes = 1024;
}  // namespace

void set_stats_section(StatsSection section) { g_stats_section.store(section, std::memory_order_release); }

void set_stats_model(const char* model, const char* tokens) {
  g_stats_tokens.store(tokens, std::memory_order_relaxed);
  g_stats_model.store(model, std::memory_order_release);
}

size_t format_stats_json(const HeapStats& stats, char* buf, size_t capacity) {
  uint64_t rss = 0, anon_huge = 0;
  read_resident(&rss, &anon_huge);
  const GaugeSnapshot& g = stats.gauges;
  Out o{buf, capacity};
  o.put("{\n  \"format\": \"llamalloc-stats\",\n");
  o.field("version", 1);
  o.field("num_classes", stats.num_classes);
  o.field("live_bytes", g.live_bytes);
  o.field("peak_live_bytes", g.peak_live_bytes);
  o.field("footprint_bytes", g.footprint_bytes);
  o.field("peak_footprint_bytes", g.peak_footprint_bytes);
  o.field("subreleased_bytes", g.subreleased_bytes);
  o.field("span_purged_bytes", g.span_purged_bytes);
  o.field("page_cache_bytes", g.page_cache_bytes);
  o.field("reserved_bytes", g.reserved_bytes);
  o.field("metadata_bytes", g.metadata_bytes);
  o.put("  \"huge_pages_by_class\": [");
  for (unsigned c = 0; c < stats.num_classes; ++c) {
    if (c) o.put(", ");
    o.num(g.huge_pages_by_class[c]);
  }
  o.put("],\n");
  o.put("  \"page_class_by_class\": [");
  for (unsigned c = 0; c < stats.num_classes; ++c) {
    if (c) o.put(", ");
    o.num(g.page_class_by_class[c]);
  }
  o.put("],\n");
  o.field("rss_bytes", rss);
  o.field("anon_huge_pages_bytes", anon_huge);
  const char* model = g_stats_model.load(std::memory_order_acquire);
  if (model != nullptr && *model && strlen(model) < kMaxStatsPathBytes) {
    o.put("  \"model\": ");
    o.string(model);
    o.put(",\n");
    const char* tokens = g_stats_tokens.load(std::memory_order_relaxed);
    if (tokens != nullptr && *tokens && strlen(tokens) < kMaxStatsPathBytes) {
      o.put("  \"tokens\": ");
      o.string(tokens);
      o.put(",\n");
    }
  }
  o.put("  \"counters\": {\n");
  const Counters& k = *stats.counters;
  bool first = true;
#define LLAMALLOC_PUT_COUNTER(name, help)                  \
  if (!first) o.put(",\n");                                \
  first = false;                                           \
  o.put("    \"" #name "\": ");                            \
  o.num(k.name.load(std::memory_order_relaxed));
  LLAMALLOC_COUNTERS(LLAMALLOC_PUT_COUNTER)
#undef LLAMALLOC_PUT_COUNTER
  o.put("\n  }");
  StatsSection section = g_stats_section.load(std::memory_order_acquire);
  if (section != nullptr && !stats.in_signal && o.used + 8 < capacity) {
    o.put(",\n  ");
    size_t n = section(buf + o.used, capacity - o.used);
    if (n == 0) o.used -= 4;  // (the ",\n  " again)
    else o.used += n;
  }
  o.put("\n}\n");
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

namespace {

// Bytes as MiB with one decimal ("12.3"), rounded.
void put_mib(Out& o, uint64_t bytes) {
  uint64_t tenths = (bytes * 10 + (uint64_t{1} << 19)) >> 20;
  o.num(tenths / 10);
  char d[3] = {'.', char('0' + tenths % 10), 0};
  o.put(d);
}

}  // namespace

void write_all(int fd, const char* text, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, text + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += size_t(w);
  }
}

size_t format_stats_summary(const HeapStats& stats, uint64_t rss, uint64_t anon_huge, char* buf, size_t capacity) {
  const GaugeSnapshot& g = stats.gauges;
  Out o{buf, capacity};
  o.put("llamalloc: live ");
  put_mib(o, g.live_bytes);
  o.put(" MiB (peak ");
  put_mib(o, g.peak_live_bytes);
  o.put("), footprint ");
  put_mib(o, g.footprint_bytes);
  o.put(" MiB (");
  if (g.live_bytes > 0) {
    // The ratio with one decimal: how many bytes of huge pages each live byte keeps.
    uint64_t tenths = (g.footprint_bytes * 10 + g.live_bytes / 2) / g.live_bytes;
    o.num(tenths / 10);
    char d[3] = {'.', char('0' + tenths % 10), 0};
    o.put(d);
    o.put("x live; peak ");
  } else {
    o.put("nothing live; peak ");
  }
  put_mib(o, g.peak_footprint_bytes);
  o.put("), RSS ");
  put_mib(o, rss);
  o.put(" MiB (huge pages ");
  put_mib(o, anon_huge);
  o.put("), pages by class");
  for (unsigned c = 0; c < stats.num_classes; ++c) {
    o.put(" ");
    o.num(g.huge_pages_by_class[c]);
  }
  o.put(", subreleased ");
  put_mib(o, g.subreleased_bytes + g.span_purged_bytes);
  o.put(" MiB, page cache ");
  put_mib(o, g.page_cache_bytes);
  o.put(" MiB\n");
  if (o.used >= capacity) return 0;
  buf[o.used] = 0;
  return o.used;
}

bool tagged_stats_path(const char* pattern, const char* tag, char* out, size_t capacity) {
  if (!expand_stats_path(pattern, out, capacity)) return false;
  size_t len = strlen(out), tag_len = strlen(tag);
  bool json = len > 5 && strcmp(out + len - 5, ".json") == 0;
  size_t at = json ? len - 5 : len;
  if (len + 1 + tag_len + 1 > capacity) return false;
  memmove(out + at + 1 + tag_len, out + at, len - at + 1);  // ".json" and the NUL move right
  out[at] = '.';
  memcpy(out + at + 1, tag, tag_len);
  return true;
}

bool write_json_file(const char* path, const char* json, size_t n) {
  char tmp[4096 + 8];
  size_t len = strlen(path);
  if (len >= 4096) return false;
  memcpy(tmp, path, len);
  memcpy(tmp + len, ".tmp", 5);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, json + done, n - done);
    if (w < 0 && errno == EINTR) continue;
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

int parse_signal(const char* text) {
  if (text == nullptr) return 0;
  char name[16];
  size_t n = 0;
  for (const char* p = text; *p; ++p) {
    if (n + 1 >= sizeof(name)) return 0;
    char c = *p;
    name[n++] = (c >= 'a' && c <= 'z') ? char(c - 'a' + 'A') : c;
  }
  name[n] = 0;
  const char* bare = strncmp(name, "SIG", 3) == 0 ? name + 3 : name;
  int sig = 0;
  if (*bare >= '0' && *bare <= '9') {
    for (const char* p = bare; *p; ++p) {
      if (*p < '0' || *p > '9' || sig > 1000) return 0;
      sig = sig * 10 + (*p - '0');
    }
  } else {
    static constexpr struct {
      const char* name;
      int number;
    } kNames[] = {{"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"USR1", SIGUSR1},     {"USR2", SIGUSR2},
                  {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CHLD", SIGCHLD},     {"CONT", SIGCONT},
                  {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU}, {"URG", SIGURG},       {"XCPU", SIGXCPU},
                  {"XFSZ", SIGXFSZ}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"VTALRM", SIGVTALRM}, {"PWR", SIGPWR},
                  {"IO", SIGIO}};
    for (const auto& k : kNames)
      if (strcmp(bare, k.name) == 0) sig = k.number;
  }
  if (sig <= 0 || sig >= 65) return 0;
  switch (sig) {
    case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGABRT: case SIGTRAP:
    case SIGSYS:
      return 0;
    default:
      return sig;
  }
}

namespace {

void warn_line(const char* a, const char* b = "", const char* c = "", const char* d = "") {
  write_stderr(a);
  write_stderr(b);
  write_stderr(c);
  write_stderr(d);
  write_stderr("\n");
}

// The signal handler's state: static, so that the handler needs no stack beyond a few words and allocates nothing.
// A signal that arrives while the handler runs (on another thread) is dropped.
std::atomic<bool> g_in_handler{false};
std::atomic<uint64_t> g_signal_dumps{0};
char g_signal_json[8192];
char g_signal_path[4096];
char g_signal_summary[512];

void on_stats_signal(int) {
  int saved_errno = errno;
  if (!g_in_handler.exchange(true, std::memory_order_acquire)) {
    size_t n = stats_snapshot(g_signal_json, sizeof(g_signal_json) - 1, /*in_signal=*/true);
    const char* pattern = options().stats;
    if (n == 0) {
      // (8 KiB always suffice)
    } else if (pattern != nullptr && *pattern) {
      char tag[32];
      Out t{tag, sizeof(tag)};
      t.put("signal-");
      t.num(g_signal_dumps.fetch_add(1, std::memory_order_relaxed) + 1);
      tag[t.used] = 0;
      if (!tagged_stats_path(pattern, tag, g_signal_path, sizeof(g_signal_path)) ||
          !write_json_file(g_signal_path, g_signal_json, n)) {
        warn_line("llamalloc: warning: cannot write the statistics file for LLAMALLOC_STATS_SIGNAL: ", pattern);
      }
    } else {
      // On stderr a person reads it: the summary line first, then the JSON.
      size_t s = stats_summary_snapshot != nullptr
                     ? stats_summary_snapshot(g_signal_summary, sizeof(g_signal_summary), /*in_signal=*/true)
                     : 0;
      write_all(2, g_signal_summary, s);
      g_signal_json[n] = '\n';
      write_all(2, g_signal_json, n + 1);
    }
    g_in_handler.store(false, std::memory_order_release);
  }
  errno = saved_errno;
}

}  // namespace

void write_stats_snapshot(const char* tag) {
  const char* pattern = options().stats;
  if (stats_snapshot == nullptr || pattern == nullptr || *pattern == 0) return;
  char json[32768], path[4096];
  size_t n = stats_snapshot(json, sizeof(json), /*in_signal=*/false);
  if (n == 0 || !tagged_stats_path(pattern, tag, path, sizeof(path)) || !write_json_file(path, json, n)) {
    warn_line("llamalloc: warning: cannot write the statistics snapshot ", tag, " of LLAMALLOC_STATS=", pattern);
  }
}

namespace {
char g_kept_summary[512];
std::atomic<bool> g_summary_kept{false};
}  // namespace

void keep_summary_before_exit() {
  if (stats_summary_snapshot == nullptr || g_summary_kept.load(std::memory_order_acquire)) return;
  if (stats_summary_snapshot(g_kept_summary, sizeof(g_kept_summary) - 1, /*in_signal=*/false) != 0)
    g_summary_kept.store(true, std::memory_order_release);
}

const char* kept_summary_before_exit() {
  return g_summary_kept.load(std::memory_order_acquire) ? g_kept_summary : nullptr;
}

void install_stats_hooks() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  const char* text = options().stats_signal;
  if (text == nullptr || *text == 0 || stats_snapshot == nullptr) return;
  int sig = parse_signal(text);
  if (sig == 0) {
    warn_line("llamalloc: warning: LLAMALLOC_STATS_SIGNAL=", text,
              " is not a signal that can be caught (a name such as USR1, or a number); no statistics signal");
    return;
  }
  struct sigaction old;
  if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN) {
    warn_line("llamalloc: warning: LLAMALLOC_STATS_SIGNAL=", text,
              " already has a handler (the profiler's is LLAMALLOC_PROF_SIGNAL, USR2); no statistics signal");
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_stats_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(sig, &sa, nullptr) != 0) warn_line("llamalloc: warning: LLAMALLOC_STATS_SIGNAL=", text, ": sigaction failed");
}

}  // namespace llamalloc
