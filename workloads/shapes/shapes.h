// The common vocabulary of the shapes (main.cc, one .cc per shape): options, the report, random numbers, byte
// patterns, the live-bytes count, the quiet phase, and the entry point of each shape. Nothing here allocates on
// behalf of a shape: the shapes allocate their data themselves, in their own namespaces and functions, because
// the profiler learns lifetimes from the call stacks of the allocation sites.
#ifndef LLAMALLOC_WORKLOADS_SHAPES_SHAPES_H
#define LLAMALLOC_WORKLOADS_SHAPES_SHAPES_H

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/program_clock.h"
#include "common/random.h"
#include "common/steady_state.h"

namespace shapes {

struct Options {
  std::string shape;
  bool small = false;
  // The quiet phase after the load: default 10 s, 2 s at small scale, 0 disables it.
  double quiet_seconds = 10;
  bool quiet_seconds_given = false;
  int threads = 4;
  bool threads_given = false;
  std::uint64_t seed = 1;

  // A count at this scale: small is the tests' scale, default about eight times larger.
  std::size_t scaled(std::size_t small_count) const { return small ? small_count : small_count * 8; }
};

struct Report {
  bool ok = true;
  std::string failure;
  double seconds = 0;
  double program_seconds = -1;  // the load on the profiler's program clock; -1 without the profiler
  std::uint64_t operations = 0;
  std::optional<std::uint64_t> checksum;
  std::int64_t peak_live_bytes = 0;
  std::int64_t live_bytes = 0;
  std::uint64_t peak_rss_bytes = 0;
  std::string extra;  // more "key": value pairs
  std::string steady_state = "null";

  void fail(const std::string& why) {
    if (ok) failure = why;
    ok = false;
  }
  void add(const char* key, std::uint64_t value) {
    extra += ", \"" + std::string(key) + "\": " + std::to_string(value);
  }
};

class XorShift {
 public:
  explicit XorShift(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::uint64_t next() { return workloads::xorshift64(state_); }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  std::uint64_t state_;
};

inline std::uint64_t mix64(std::uint64_t x) { return workloads::splitmix64(x); }

// A size between lo and hi, log-uniform (many small, a few large), from a 64-bit draw.
inline std::size_t log_uniform(std::uint64_t draw, std::size_t lo, std::size_t hi) {
  const double u = static_cast<double>(draw >> 11) * (1.0 / 9007199254740992.0);
  const double size = static_cast<double>(lo) * std::exp(u * std::log(static_cast<double>(hi) / lo));
  return std::min(hi, std::max(lo, static_cast<std::size_t>(size)));
}

// The bytes a piece of data holds: a pure function of its seed, so that any reader can check them.
inline void fill_pattern(char* out, std::size_t n, std::uint64_t seed) {
  std::uint64_t state = mix64(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    state = mix64(state);
    std::memcpy(out + i, &state, 8);
  }
  state = mix64(state);
  for (; i < n; ++i, state >>= 8) out[i] = static_cast<char>(state & 0xff);
}

inline bool pattern_matches(const char* data, std::size_t n, std::uint64_t seed) {
  std::uint64_t state = mix64(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    state = mix64(state);
    if (std::memcmp(data + i, &state, 8) != 0) return false;
  }
  state = mix64(state);
  for (; i < n; ++i, state >>= 8) {
    if (data[i] != static_cast<char>(state & 0xff)) return false;
  }
  return true;
}

// A 64-bit hash of bytes, eight at a time.
inline std::uint64_t hash_bytes(const char* data, std::size_t n, std::uint64_t seed = 0) {
  std::uint64_t h = mix64(seed ^ n);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, data + i, 8);
    h = (h ^ mix64(word)) * 0x100000001B3ull;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, data + i, n - i);
  return mix64(h ^ tail);
}

inline std::uint64_t hash_string(std::string_view s) { return hash_bytes(s.data(), s.size()); }

// The shape's own count of the payload bytes it holds (keys, values, buffers, nodes), and its highest value.
class LiveBytes {
 public:
  void add(std::int64_t n) {
    const std::int64_t now = now_.fetch_add(n, std::memory_order_relaxed) + n;
    std::int64_t peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }
  void sub(std::int64_t n) { now_.fetch_sub(n, std::memory_order_relaxed); }
  std::int64_t now() const { return now_.load(std::memory_order_relaxed); }
  std::int64_t peak() const { return peak_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> now_{0};
  std::atomic<std::int64_t> peak_{0};
};

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The start of a shape's load, on the wall clock and on the profiler's program clock (common/program_clock.h).
struct PhaseStart {
  Clock::time_point wall = Clock::now();
  std::int64_t program_ns = workloads::program_clock_ns();
};

// The end of the load: its seconds, and under the profiler its program seconds, into the report.
inline void end_phase(Report& report, const PhaseStart& start) {
  report.seconds = seconds_since(start.wall);
  report.program_seconds = workloads::program_seconds_since(start.program_ns);
}

inline std::uint64_t rss_now() { return steady_state::read_resident().rss_bytes; }

// The quiet phase of a shape: `tick` is the idle program's work and returns its live bytes.
template <typename Tick>
std::string run_quiet_phase(const Options& options, Tick&& tick, const std::string& extra = "") {
  steady_state::QuietPhase quiet(options.quiet_seconds);
  quiet.run([&] { return static_cast<double>(tick()); });
  return quiet.json(extra);
}

template <typename Work>
void run_threads(int count, Work&& work) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count));
  for (int t = 0; t < count; ++t) threads.emplace_back([&work, t] { work(t); });
  for (std::thread& thread : threads) thread.join();
}

// Stops a pool's worker threads: sets `stopping` under the pool's mutex, wakes every worker and joins them.
inline void stop_workers(std::mutex& mutex, bool& stopping, std::condition_variable& wake,
                         std::vector<std::thread>& threads) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  for (std::thread& thread : threads) thread.join();
}

// A background thread that calls `work()` every 2 ms until it is destroyed, and counts what the calls return (an
// expiry thread, a sweeper). Allocates nothing itself: what `work` frees and allocates is on the shape's stacks.
template <class Work>
class Ticker {
 public:
  explicit Ticker(Work work) : work_(work), thread_([this] { loop(); }) {}
  Ticker(const Ticker&) = delete;
  Ticker& operator=(const Ticker&) = delete;
  ~Ticker() {
    stop_.store(true);
    thread_.join();
  }
  std::uint64_t total() const { return total_.load(); }

 private:
  void loop() {
    while (!stop_.load()) {
      total_.fetch_add(work_());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  Work work_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> total_{0};
  std::thread thread_;
};

// The entry point of each shape (its file): the load peak, the drop and the quiet phase, and the report.
namespace lru { Report run(const Options& options); }  // lru_cache.cc
namespace ttl { Report run(const Options& options); }  // ttl_cache.cc
namespace hash_trimmed { Report run(const Options& options); }  // hash_trimmed_cache.cc
namespace batch { Report run(const Options& options); }  // batch_arena.cc
namespace stream { Report run(const Options& options); }  // stream_pipeline.cc
namespace prodcons { Report run(const Options& options); }  // producer_consumer.cc
namespace sessions { Report run(const Options& options); }  // session_store.cc
namespace compiler { Report run(const Options& options); }  // ast_builder.cc
namespace broker { Report run(const Options& options); }  // message_broker.cc
namespace query_spikes { Report run(const Options& options); }  // query_spikes_cache.cc
namespace mixed_lifetime { Report run(const Options& options); }  // mixed_lifetime_cache.cc
namespace free_all {
Report run(const Options& options);       // free_all.cc: free-all
Report run_pool(const Options& options);  // free-all-pool
}  // namespace free_all

}  // namespace shapes

#endif  // LLAMALLOC_WORKLOADS_SHAPES_SHAPES_H
