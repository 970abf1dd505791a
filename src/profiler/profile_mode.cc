// The sampling profile (PROF_MODE=profile, `llamalloc record`): an allocation the byte countdown stops at
// (sampling.h) is sampled -- its stack interned, its site found or added, the object put in the live table --
// and its free adds its lifetime to the site's record. The profile is written at exit, on a fatal signal, on
// PROF_SIGNAL, every PROF_INTERVAL_S and at the end of the steady-state window; a dump is written to a
// temporary file and renamed, so a reader never sees half a profile. Rules: each site's record changes only
// under the site's lock, held around a few stores and never while unwinding; one dump at a time (g_dump_lock).
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <atomic>

#include "profiler_internal.h"
#include "program_clock.h"
#include "sampling.h"

namespace llamalloc::prof {

static_assert(SIGUSR2 == 12, "PROF_SIGNAL's default (options.h) is SIGUSR2");
static_assert(kLifetimeClasses == int(kMaxClasses), "a profile's class counts are the lifetime classes");

std::atomic<bool> g_dump_requested{false};
LiveTable g_live;
__thread Sampler t_sampler __attribute__((tls_model("initial-exec")));

namespace {

SiteTable g_sites;

std::atomic<uint64_t> g_next_dump_ns{UINT64_MAX};    // the next periodic dump (CLOCK_MONOTONIC)
std::atomic<uint64_t> g_steady_dump_ns{UINT64_MAX};  // the steady-state dump, until written
std::atomic<uint64_t> g_sample_until_ns{UINT64_MAX}; // no allocation is sampled from then on (steady-state start)
uint32_t g_dump_seq;                                 // kept dumps written by this process (guarded by g_dump_lock)
SpinLock g_dump_lock;
char* g_dump_buffer;

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
  // Lifetimes are on the program clock (program_clock.h); the dump timers below stay on CLOCK_MONOTONIC.
  if (!g_live.insert({reinterpret_cast<uint64_t>(ptr), hook_program_ns(), size_bytes, site_index, nullptr})) {
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

void on_dump_signal(int) { g_dump_requested.store(true, std::memory_order_relaxed); }

}  // namespace

bool init_profile_buffer() {
  g_dump_buffer = static_cast<char*>(map_zeroed(kWriterBytes));
  return g_dump_buffer != nullptr;
}

bool init_profile_tables() { return g_sites.init() && g_live.init(); }

void arm_profile_timers() {
  const Options& o = g_options;
  g_next_dump_ns.store(o.interval_ns != 0 ? g_start_mono_ns + o.interval_ns : UINT64_MAX);
  g_steady_dump_ns.store(o.steady_end_ns != UINT64_MAX ? g_start_mono_ns + o.steady_end_ns : UINT64_MAX);
  g_sample_until_ns.store(o.steady_start_ns != UINT64_MAX ? g_start_mono_ns + o.steady_start_ns : UINT64_MAX);
  g_dump_seq = 0;
}

void install_dump_signal() {
  if (g_options.signal_number <= 0) return;
  struct sigaction sa {};
  sa.sa_handler = on_dump_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(g_options.signal_number, &sa, nullptr);
}

void reset_profile_lock_after_fork() { g_dump_lock.reset_after_fork(); }

void profile_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes) {
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

void end_profile() {
  g_dump_lock.lock();
  g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
  dump_profile(DumpKind::kFinal);
  g_dump_lock.unlock();
}

void end_profile_in_signal() {
  if (!g_dump_lock.try_lock()) return;  // a dump is under way on the interrupted thread
  g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
  dump_profile(DumpKind::kFinal, /*in_signal=*/true);
}

}  // namespace llamalloc::prof
