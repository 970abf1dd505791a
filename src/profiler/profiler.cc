#include "profiler.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "base.h"
#include "options.h"
#include "platform.h"
#include "record_file.h"
#include "sampling.h"
#include "stack_capture.h"
#include "trace_format.h"

namespace llamalloc::prof {

static_assert(SIGUSR2 == 12, "PROF_SIGNAL's default (options.h) is SIGUSR2");
static_assert(kLifetimeClasses == int(kMaxClasses), "a profile's class counts are the lifetime classes");

std::atomic<int> g_mode{static_cast<int>(Mode::kOff)};
std::atomic<bool> g_dump_requested{false};
LiveTable g_live;
__thread Sampler t_sampler __attribute__((tls_model("initial-exec")));

namespace {

constexpr size_t kPathBytes = 4096;
constexpr size_t kWriterBytes = 1 << 20;
constexpr uint32_t kBufferEvents = 4096;  // 160 KiB per thread
constexpr uint32_t kMaxBuffers = 4096;    // threads alive at once that trace

struct Options {
  Mode mode;
  uint64_t sample_bytes;
  uint64_t interval_ns;  // 0: only at exit and on the signal
  int signal_number;     // 0: none
  UnwindMode unwind;
  uint64_t steady_start_ns;  // --steady-state: sampling stops this long after start (UINT64_MAX: never)
  uint64_t steady_end_ns;    // ... and the steady-state profile is written this long after start (UINT64_MAX: none)
  bool debug;                // print the counts at exit
  char output_template[kPathBytes];
};

Options g_options;
char g_exe_path[kPathBytes];
uint64_t g_pid;
uint64_t g_start_time_ns;
uint64_t g_start_mono_ns;

StackTable g_stacks;
SiteTable g_sites;
std::atomic<uint64_t> g_sampled{0};
std::atomic<uint64_t> g_dropped{0};
std::atomic<uint64_t> g_events{0};

std::atomic<uint64_t> g_next_dump_ns{UINT64_MAX};    // the next periodic dump (CLOCK_MONOTONIC)
std::atomic<uint64_t> g_steady_dump_ns{UINT64_MAX};  // the steady-state dump, until written
std::atomic<uint64_t> g_sample_until_ns{UINT64_MAX}; // no allocation is sampled from then on (steady-state start)
std::atomic<uint64_t> g_teardown_ns{0};              // when the program's teardown began; 0: not yet
uint32_t g_dump_seq;                                 // kept dumps written by this process (guarded by g_dump_lock)
SpinLock g_dump_lock;

struct ThreadState {
  uint32_t tid;
  bool sampler_ready;
};
__thread ThreadState t_state __attribute__((tls_model("initial-exec")));

uint32_t thread_id() {
  if (LLPROF_UNLIKELY(t_state.tid == 0)) t_state.tid = current_thread_id();
  return t_state.tid;
}

ProcessIdentity process_identity() { return {g_pid, g_start_time_ns, g_start_mono_ns, g_exe_path}; }

// The output path for this process: the template with %p replaced by the pid. A forked child whose template
// has no %p appends ".<pid>", so that it does not overwrite its parent's file. (A program started by exec gets
// the same template and cannot tell: `llamalloc record` and `trace` always use %p.)
uint64_t g_first_pid;

void output_path(char* out, size_t capacity) {
  size_t n = 0;
  bool had_pid = false;
  for (const char* p = g_options.output_template; *p != '\0' && n + 24 < capacity; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      n += static_cast<size_t>(snprintf(out + n, capacity - n, "%llu", static_cast<unsigned long long>(g_pid)));
      had_pid = true;
      ++p;
    } else {
      out[n++] = *p;
    }
  }
  if (!had_pid && g_pid != g_first_pid && n + 24 < capacity) {
    n += static_cast<size_t>(snprintf(out + n, capacity - n, ".%llu", static_cast<unsigned long long>(g_pid)));
  }
  out[n] = '\0';
}

// ---- profile mode ------------------------------------------------------------------------------------------

char* g_dump_buffer;

// In a fatal-signal handler the interrupted thread may hold a lock for good: try for a while, then go on
// without it (a torn read of one site beats no profile at all).
bool lock_bounded(SpinLock& lock) {
  for (int i = 0; i < 1'000'000; ++i) {
    if (lock.try_lock()) return true;
    __builtin_ia32_pause();
  }
  return false;
}

// Which file a dump goes to: the final profile (at exit or on a fatal signal) is OUTPUT itself; each dump on
// the signal or the interval is kept in OUTPUT.dump<N> (N = 1, 2, ... in this process); the steady-state dump
// goes to OUTPUT.steady.
enum class DumpKind { kFinal, kKept, kSteady };

void dump_profile(DumpKind kind, bool in_signal = false) {
  char base[kPathBytes];
  char path[kPathBytes + 32];
  char tmp[kPathBytes + 48];
  output_path(base, sizeof(base));
  if (kind == DumpKind::kKept) {
    snprintf(path, sizeof(path), "%s.dump%u", base, ++g_dump_seq);
  } else if (kind == DumpKind::kSteady) {
    snprintf(path, sizeof(path), "%s.steady", base);
  } else {
    snprintf(path, sizeof(path), "%s", base);
  }
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  Writer w;
  w.open(fd, g_dump_buffer, kWriterBytes);
  write_header(w, kRawProfileMagic, kRawProfileVersion, g_options.sample_bytes, process_identity());
  uint32_t stacks = g_stacks.count();
  for (uint32_t id = 0; id < stacks; ++id) {
    uint32_t depth = 0;
    const uint64_t* pcs = g_stacks.pcs(id, &depth);
    write_stack(w, id, pcs, depth);
  }
  uint32_t sites = g_sites.count();
  for (uint32_t i = 0; i < sites; ++i) {
    Site& site = g_sites.at(i);
    SiteRecord r;
    if (in_signal) {
      bool locked = lock_bounded(site.lock);
      r = site.record;
      if (locked) site.lock.unlock();
    } else {
      SpinLockHolder hold(site.lock);
      r = site.record;
    }
    if (r.alloc_count == 0) continue;
    r.class_counts[kNeverFreedClass] = r.live_count;
    w.record(RecordType::kSite, sizeof(r));
    w.append(&r, sizeof(r));
  }
  write_mappings(w, g_exe_path);
  write_end(w, g_sampled.load(std::memory_order_relaxed), g_dropped.load(std::memory_order_relaxed));
  w.flush();
  bool ok = w.ok();
  ok = (close(fd) == 0) && ok;
  if (ok) {
    rename(tmp, path);
  } else {
    unlink(tmp);
  }
}

void maybe_dump(uint64_t now_ns) {
  bool requested = g_dump_requested.load(std::memory_order_relaxed);
  if (!requested && now_ns < g_next_dump_ns.load(std::memory_order_relaxed) &&
      now_ns < g_steady_dump_ns.load(std::memory_order_relaxed)) {
    return;
  }
  if (!g_dump_lock.try_lock()) return;
  requested = g_dump_requested.exchange(false, std::memory_order_relaxed);
  if (now_ns >= g_steady_dump_ns.load(std::memory_order_relaxed)) {
    g_steady_dump_ns.store(UINT64_MAX, std::memory_order_relaxed);
    dump_profile(DumpKind::kSteady);
  }
  if (now_ns >= g_next_dump_ns.load(std::memory_order_relaxed)) {
    requested = true;
    g_next_dump_ns.store(g_options.interval_ns != 0 ? now_ns + g_options.interval_ns : UINT64_MAX,
                         std::memory_order_relaxed);
  }
  if (requested) dump_profile(DumpKind::kKept);
  g_dump_lock.unlock();
}

void sample_allocation(void* ptr, size_t size_bytes, size_t alignment_bytes) {
  uint64_t pcs[kMaxStackDepth];
  int depth = capture_stack(pcs, kMaxStackDepth);  // no lock held
  bool is_new = false;
  uint32_t stack_id = g_stacks.intern(pcs, depth, &is_new);
  uint32_t site_index = stack_id == kNoStack
                            ? UINT32_MAX
                            : g_sites.find_or_insert(stack_id, profile_size_bucket(size_bytes),
                                                   static_cast<uint32_t>(alignment_bytes));
  if (site_index == UINT32_MAX) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  uint64_t now = monotonic_ns();
  if (!g_live.insert({reinterpret_cast<uint64_t>(ptr), now, size_bytes, site_index, nullptr})) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Site& site = g_sites.at(site_index);
  {
    SpinLockHolder hold(site.lock);
    SiteRecord& r = site.record;
    r.alloc_count += 1;
    r.alloc_bytes += size_bytes;
    r.alloc_weight += Sampler::weight(size_bytes, g_options.sample_bytes);
    r.live_count += 1;
    r.live_bytes += size_bytes;
  }
  g_sampled.fetch_add(1, std::memory_order_relaxed);
}

void record_lifetime(const LiveObject& object, uint64_t free_time_ns) {
  uint64_t lifetime_ns = free_time_ns > object.alloc_time_ns ? free_time_ns - object.alloc_time_ns : 0;
  double lifetime_ms = static_cast<double>(lifetime_ns) / 1e6;
  Site& site = g_sites.at(object.site);
  SpinLockHolder hold(site.lock);
  SiteRecord& r = site.record;
  if (r.freed_count == 0 || lifetime_ns < r.min_lifetime_ns) r.min_lifetime_ns = lifetime_ns;
  if (lifetime_ns > r.max_lifetime_ns) r.max_lifetime_ns = lifetime_ns;
  r.freed_count += 1;
  r.freed_bytes += object.size_bytes;
  r.lifetime_sum_ns += lifetime_ns;
  r.lifetime_sumsq_ms2 += lifetime_ms * lifetime_ms;
  r.class_counts[lifetime_class_of(lifetime_ns)] += 1;
  r.live_count -= 1;
  r.live_bytes -= object.size_bytes;
}

void on_dump_signal(int) { g_dump_requested.store(true, std::memory_order_relaxed); }

// ---- trace mode --------------------------------------------------------------------------------------------

struct TraceBuffer {
  SpinLock lock;
  uint32_t count;
  bool in_use;
  TraceEvent events[kBufferEvents];
};

pthread_mutex_t g_file_mutex = PTHREAD_MUTEX_INITIALIZER;
int g_trace_fd = -1;
char* g_trace_write_buffer;
Writer g_trace_writer;  // guarded by g_file_mutex
TraceBuffer* g_buffers[kMaxBuffers];
std::atomic<uint32_t> g_buffer_count{0};
SpinLock g_buffers_lock;
pthread_key_t g_buffer_key;
__thread TraceBuffer* t_buffer __attribute__((tls_model("initial-exec")));

void flush_buffer_locked(TraceBuffer* b) {
  if (b->count == 0) return;
  pthread_mutex_lock(&g_file_mutex);
  g_trace_writer.record(RecordType::kEvents, static_cast<uint32_t>(sizeof(TraceEvent) * b->count));
  g_trace_writer.append(b->events, sizeof(TraceEvent) * b->count);
  g_trace_writer.flush();
  pthread_mutex_unlock(&g_file_mutex);
  g_events.fetch_add(b->count, std::memory_order_relaxed);
  b->count = 0;
}

void release_buffer(void* arg) {
  auto* b = static_cast<TraceBuffer*>(arg);
  b->lock.lock();
  flush_buffer_locked(b);
  b->lock.unlock();
  if (t_buffer == b) t_buffer = nullptr;
  SpinLockHolder hold(g_buffers_lock);
  b->in_use = false;
}

TraceBuffer* acquire_buffer() {
  TraceBuffer* found = nullptr;
  {
    SpinLockHolder hold(g_buffers_lock);
    uint32_t n = g_buffer_count.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
      if (!g_buffers[i]->in_use) {
        found = g_buffers[i];
        break;
      }
    }
    if (found == nullptr && n < kMaxBuffers) {
      found = static_cast<TraceBuffer*>(map_zeroed(sizeof(TraceBuffer)));
      if (found != nullptr) {
        g_buffers[n] = found;
        g_buffer_count.store(n + 1, std::memory_order_release);
      }
    }
    if (found != nullptr) found->in_use = true;
  }
  if (found == nullptr) return nullptr;
  t_buffer = found;
  pthread_setspecific(g_buffer_key, found);  // flushed by release_buffer when the thread exits
  return found;
}

void emit(const TraceEvent& e) {
  TraceBuffer* b = t_buffer;
  if (LLPROF_UNLIKELY(b == nullptr)) {
    b = acquire_buffer();
    if (b == nullptr) {
      g_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  b->lock.lock();
  b->events[b->count++] = e;
  if (b->count == kBufferEvents) flush_buffer_locked(b);
  b->lock.unlock();
}

uint32_t trace_stack() {
  uint64_t pcs[kMaxStackDepth];
  int depth = capture_stack(pcs, kMaxStackDepth);
  bool is_new = false;
  uint32_t id = g_stacks.intern(pcs, depth, &is_new);
  if (is_new) {
    pthread_mutex_lock(&g_file_mutex);
    write_stack(g_trace_writer, id, pcs, static_cast<uint32_t>(depth));
    g_trace_writer.flush();
    pthread_mutex_unlock(&g_file_mutex);
  }
  if (id == kNoStack) g_dropped.fetch_add(1, std::memory_order_relaxed);
  return id;
}

bool open_trace() {
  char path[kPathBytes];
  output_path(path, sizeof(path));
  g_trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (g_trace_fd < 0) return false;
  g_trace_writer.open(g_trace_fd, g_trace_write_buffer, kWriterBytes);
  write_header(g_trace_writer, kTraceMagic, kTraceVersion, 0, process_identity());
  g_trace_writer.flush();
  return g_trace_writer.ok();
}

void close_trace(bool in_signal = false) {
  uint32_t n = g_buffer_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    if (in_signal) {
      if (lock_bounded(g_buffers[i]->lock)) {
        flush_buffer_locked(g_buffers[i]);
        g_buffers[i]->lock.unlock();
      }
      continue;
    }
    g_buffers[i]->lock.lock();
    flush_buffer_locked(g_buffers[i]);
    g_buffers[i]->lock.unlock();
  }
  if (in_signal) {
    if (pthread_mutex_trylock(&g_file_mutex) != 0) return;  // the interrupted thread is writing: give up
  } else {
    pthread_mutex_lock(&g_file_mutex);
  }
  write_mappings(g_trace_writer, g_exe_path);
  write_end(g_trace_writer, g_events.load(std::memory_order_relaxed), g_dropped.load(std::memory_order_relaxed));
  g_trace_writer.flush();
  close(g_trace_fd);
  g_trace_fd = -1;
  g_trace_writer = Writer();  // not ok: a thread still flushing its buffer writes nothing (the fd may be reused)
  pthread_mutex_unlock(&g_file_mutex);
}

// ---- fatal signals ----------------------------------------------------------------------------------------
// A program killed by a signal runs no exit handlers. For the signals whose default action ends the process,
// and that the program leaves at their default, the profiler writes its profile (or closes its trace) first,
// then restores the default and re-raises, so the program still dies of the same signal.

constexpr int kFatalSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};

void on_fatal_signal(int signal_number) {
  Mode mode = current_mode();
  if (mode == Mode::kProfile && g_dump_lock.try_lock()) {
    g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
    dump_profile(DumpKind::kFinal, /*in_signal=*/true);
  } else if (mode == Mode::kTrace) {
    g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
    close_trace(/*in_signal=*/true);
  }
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(signal_number, &sa, nullptr);
  raise(signal_number);  // delivered when this handler returns (or at once, for a fault: it happens again)
}

void install_fatal_signal_handlers() {
  for (int signal_number : kFatalSignals) {
    if (signal_number == g_options.signal_number) continue;
    struct sigaction old {};
    if (sigaction(signal_number, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(signal_number, &sa, nullptr);
  }
}

// ---- set-up ------------------------------------------------------------------------------------------------

// The LLAMALLOC_PROF_* options, from the table of options.h: a bad value warns and keeps the default, a
// misspelled LLAMALLOC_PROF_ name warns with the closest one.
void read_options() {
  static_assert(int(Mode::kOff) == 0 && int(Mode::kProfile) == 1 && int(Mode::kTrace) == 2,
                "the words of PROF_MODE, in order");
  static_assert(int(UnwindMode::kAuto) == 0 && int(UnwindMode::kFramePointers) == 1 &&
                    int(UnwindMode::kDwarf) == 2,
                "the words of PROF_UNWIND, in order");
  const ProfilerOptions p = read_profiler_options([](const char* name) -> const char* { return getenv(name); });
  check_environment_names(environ, write_stderr, /*profiler_names=*/true);
  Options& o = g_options;
  o.mode = static_cast<Mode>(p.mode);
  o.sample_bytes = p.sample_bytes != 0 ? p.sample_bytes : 1;
  o.interval_ns = p.interval_ns;
  o.signal_number = static_cast<int>(p.signal);
  o.unwind = static_cast<UnwindMode>(p.unwind);
  o.steady_end_ns = p.steady_end_ns;
  o.steady_start_ns = p.steady_start_ns > p.steady_end_ns ? p.steady_end_ns : p.steady_start_ns;
  o.debug = p.debug != 0;
  const char* out = p.output;
  if (*out == '\0') out = o.mode == Mode::kTrace ? "llamalloc-%p.trace" : "llamalloc-%p.rawprof";
  snprintf(o.output_template, sizeof(o.output_template), "%s", out);
}

// The times of the steady-state window, from this process's start.
void arm_timers() {
  const Options& o = g_options;
  g_next_dump_ns.store(o.interval_ns != 0 ? g_start_mono_ns + o.interval_ns : UINT64_MAX);
  g_steady_dump_ns.store(o.steady_end_ns != UINT64_MAX ? g_start_mono_ns + o.steady_end_ns : UINT64_MAX);
  g_sample_until_ns.store(o.steady_start_ns != UINT64_MAX ? g_start_mono_ns + o.steady_start_ns : UINT64_MAX);
  g_teardown_ns.store(0);
  g_dump_seq = 0;
}

bool set_up_tables() {
  g_sampled.store(0);
  g_dropped.store(0);
  g_events.store(0);
  return g_stacks.init() && (g_options.mode != Mode::kProfile || (g_sites.init() && g_live.init()));
}

void child_after_fork() {
  // The child is a new process with one thread: it gets tables and an output of its own.
  Mode mode = current_mode();
  if (mode == Mode::kOff) return;
  g_pid = static_cast<uint64_t>(getpid());
  t_state.tid = 0;
  g_start_time_ns = realtime_ns();
  g_start_mono_ns = monotonic_ns();
  g_dump_lock.reset_after_fork();
  g_buffers_lock.reset_after_fork();
  pthread_mutex_init(&g_file_mutex, nullptr);
  stack_capture_after_fork();
  if (!set_up_tables()) {
    g_mode.store(static_cast<int>(Mode::kOff));
    return;
  }
  arm_timers();
  if (mode == Mode::kTrace) {
    uint32_t n = g_buffer_count.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
      g_buffers[i]->lock.reset_after_fork();
      g_buffers[i]->count = 0;  // the parent writes its own events
      g_buffers[i]->in_use = g_buffers[i] == t_buffer;
    }
    if (!open_trace()) g_mode.store(static_cast<int>(Mode::kOff));
  }
}

}  // namespace

Mode current_mode() { return static_cast<Mode>(g_mode.load(std::memory_order_relaxed)); }

void init_profiler() {
  read_options();
  if (g_options.mode == Mode::kOff) return;
  g_pid = static_cast<uint64_t>(getpid());
  g_first_pid = g_pid;
  g_start_time_ns = realtime_ns();
  g_start_mono_ns = monotonic_ns();
  ssize_t n = readlink("/proc/self/exe", g_exe_path, sizeof(g_exe_path) - 1);
  g_exe_path[n > 0 ? n : 0] = '\0';
  g_dump_buffer = static_cast<char*>(map_zeroed(kWriterBytes));
  g_trace_write_buffer = static_cast<char*>(map_zeroed(kWriterBytes));
  if (g_dump_buffer == nullptr || g_trace_write_buffer == nullptr || !set_up_tables()) return;
  init_stack_capture(g_options.unwind);
  if (g_options.mode == Mode::kTrace) {
    if (pthread_key_create(&g_buffer_key, release_buffer) != 0 || !open_trace()) return;
  } else {
    arm_timers();
    if (g_options.signal_number > 0) {
      struct sigaction sa {};
      sa.sa_handler = on_dump_signal;
      sa.sa_flags = SA_RESTART;
      sigemptyset(&sa.sa_mask);
      sigaction(g_options.signal_number, &sa, nullptr);
    }
  }
  install_fatal_signal_handlers();
  pthread_atfork(nullptr, nullptr, child_after_fork);
  g_mode.store(static_cast<int>(g_options.mode), std::memory_order_release);
}

void on_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes, uint32_t flags) {
  Mode mode = current_mode();
  if (mode == Mode::kProfile) {
    ThreadState& t = t_state;
    if (LLPROF_UNLIKELY(!t.sampler_ready)) {
      t_sampler.init(g_options.sample_bytes, monotonic_ns() ^ (uint64_t{thread_id()} << 32));
      t.sampler_ready = true;
    }
    if (t_sampler.record_allocation(size_bytes)) {
      // Not sampled from the start of teardown, nor after the steady-state window's start.
      uint64_t now = monotonic_ns();
      if (g_teardown_ns.load(std::memory_order_relaxed) == 0 &&
          now < g_sample_until_ns.load(std::memory_order_relaxed)) {
        sample_allocation(ptr, size_bytes, alignment_bytes);
      }
      maybe_dump(now);
    } else if (LLPROF_UNLIKELY(g_dump_requested.load(std::memory_order_relaxed))) {
      maybe_dump(monotonic_ns());
    }
  } else if (mode == Mode::kTrace) {
    TraceEvent e;
    e.stack_id = trace_stack();
    e.time_ns = monotonic_ns();
    e.address = reinterpret_cast<uint64_t>(ptr);
    e.size_bytes = size_bytes;
    e.thread_id = thread_id();
    e.alignment_bytes = static_cast<uint32_t>(alignment_bytes);
    e.kind = kAlloc | flags;
    emit(e);
  }
}

void begin_free(void* ptr, FreeTicket* ticket) {
  ticket->sampled = false;
  Mode mode = current_mode();
  if (mode == Mode::kOff) return;
  if (mode == Mode::kProfile) {
    // From the start of teardown an object is not freed as far as the profile goes: it stays live (class 7).
    if (g_teardown_ns.load(std::memory_order_relaxed) != 0) return;
    ticket->sampled = g_live.remove(reinterpret_cast<uint64_t>(ptr), &ticket->object);
    if (ticket->sampled) ticket->time_ns = monotonic_ns();
  } else {
    ticket->time_ns = monotonic_ns();
  }
}

void commit_free(void* ptr, const FreeTicket& ticket, uint32_t flags) {
  Mode mode = current_mode();
  if (mode == Mode::kProfile) {
    if (ticket.sampled) record_lifetime(ticket.object, ticket.time_ns);
  } else if (mode == Mode::kTrace) {
    TraceEvent e{ticket.time_ns, reinterpret_cast<uint64_t>(ptr), 0, kNoStack, thread_id(), 0, kFree | flags};
    emit(e);
  }
}

void abort_free(const FreeTicket& ticket) {
  if (current_mode() == Mode::kProfile && ticket.sampled) g_live.insert(ticket.object);
}

void moved_in_place(void* ptr, const FreeTicket& ticket) {
  if (current_mode() != Mode::kProfile || !ticket.sampled) return;
  LiveObject moved = ticket.object;
  moved.address = reinterpret_cast<uint64_t>(ptr);
  g_live.insert(moved);
}

namespace {

void print_counts() {
  StackCaptureStats st = stack_capture_stats();
  char line[256];
  int n = snprintf(line, sizeof(line),
                   "llamalloc_prof[%llu]: sampled %llu, events %llu, dropped %llu, stacks %u, "
                   "frame-pointer walks %llu, dwarf walks %llu\n",
                   static_cast<unsigned long long>(g_pid),
                   static_cast<unsigned long long>(g_sampled.load()),
                   static_cast<unsigned long long>(g_events.load()),
                   static_cast<unsigned long long>(g_dropped.load()), g_stacks.count(),
                   static_cast<unsigned long long>(st.frame_pointer_walks),
                   static_cast<unsigned long long>(st.dwarf_walks));
  if (n > 0) write_all(2, line, static_cast<size_t>(n));
}

}  // namespace

void profiler_teardown() {
  Mode mode = current_mode();
  if (mode == Mode::kOff) return;
  uint64_t not_yet = 0;
  if (!g_teardown_ns.compare_exchange_strong(not_yet, monotonic_ns())) return;
  if (mode == Mode::kTrace) {
    // The trace ends here: every object alive now is live at the end of the trace.
    g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
    close_trace();
  }
}

void profiler_at_exit() {
  Mode mode = current_mode();
  bool print_statistics = g_options.mode != Mode::kOff && g_options.debug;
  if (mode == Mode::kProfile) {
    g_dump_lock.lock();
    g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
    dump_profile(DumpKind::kFinal);
    g_dump_lock.unlock();
  } else if (mode == Mode::kTrace) {
    g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
    close_trace();
  }
  if (print_statistics) print_counts();
}

}  // namespace llamalloc::prof
