// shapes: a corpus of program shapes (docs/workloads.md, "The corpus of program shapes").
//
// Each shape is a small model of a kind of program that C++ services are made of (a cache, a batch job, a
// pipeline, a compiler, a broker), written the way such programs are written: standard containers, strings,
// per-request temporaries, threads. Every shape has a load peak, then drops most of its data, then keeps the
// rest live through a quiet phase (workloads/common/steady_state.h) in which it samples its own memory. The
// allocations are made by the functions that own the data (each shape in its own namespace, with its own
// call stacks), because the profiler and the model learn lifetimes from the stacks of the allocation sites.
//
// usage: shapes --shape NAME [--scale small|default] [--quiet-seconds S] [--threads N] [--seed N]
// Prints one JSON line: "workload" (the shape), "ok" (its own checks passed), "seconds" (the load, without the
// quiet phase), "operations" and "operations_per_second", "checksum" where the result does not depend on the
// thread schedule, "peak_live_bytes" and "live_bytes" (its own count of the payload bytes of its data, at the
// peak and after the drop), "peak_rss_bytes" (read at the peak) and "steady_state".
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../common/steady_state.h"

namespace shapes {

// ------------------------------------------------------------------------------------------------------------
// Shared vocabulary: options, the report, random numbers, byte patterns, the live-bytes count. Nothing here
// allocates on behalf of a shape: the shapes allocate their data themselves.

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
  std::uint64_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return state_;
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  std::uint64_t state_;
};

inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

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

// ------------------------------------------------------------------------------------------------------------
// lru-cache: a sharded LRU cache of rendered pages (std::unordered_map + std::list), four request threads.
// The peak fills the cache to its capacity; then the capacity is cut to a tenth (a memory-pressure
// reconfiguration), the least recently used entries go, and light traffic runs on at the new capacity.
namespace lru {

constexpr std::size_t kShards = 16;
constexpr std::size_t kEntryOverhead = 96;  // list node, map node and bucket, counted with the payload

struct Entry {
  std::string key;
  std::string value;
};

std::size_t page_bytes(std::uint64_t id) { return log_uniform(mix64(id ^ 0x5A17), 64, 4096); }

// What a miss computes: the page of an id, built in a fresh string that the cache then owns.
std::string render_page(std::uint64_t id) {
  std::string page(page_bytes(id), '\0');
  fill_pattern(page.data(), page.size(), id);
  return page;
}

std::string page_key(std::uint64_t id) {
  char text[48];
  const int n = std::snprintf(text, sizeof text, "page:/catalog/item/%08" PRIx64 "?v=2", id);
  return std::string(text, static_cast<std::size_t>(n));
}

class Shard {
 public:
  explicit Shard(LiveBytes& live) : live_(live) {}

  // Copies the value into `out` (the response) on a hit, moving the entry to the front.
  bool get(const std::string& key, std::string& out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found == index_.end()) return false;
    order_.splice(order_.begin(), order_, found->second);
    out = found->second->value;
    return true;
  }

  void put(std::string key, std::string value) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (index_.count(key) != 0) return;  // another thread rendered it first
    const std::size_t charge = key.size() + value.size() + kEntryOverhead;
    order_.push_front(Entry{key, std::move(value)});
    index_.emplace(std::move(key), order_.begin());
    used_ += charge;
    live_.add(static_cast<std::int64_t>(charge));
    evict_to(capacity_);
  }

  void set_capacity(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = bytes;
    evict_to(capacity_);
  }

  std::size_t used() {
    std::lock_guard<std::mutex> lock(mutex_);
    return used_;
  }

  bool consistent() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::size_t used = 0;
    for (const Entry& entry : order_) used += entry.key.size() + entry.value.size() + kEntryOverhead;
    return index_.size() == order_.size() && used == used_ && used_ <= capacity_;
  }

  std::size_t entries() {
    std::lock_guard<std::mutex> lock(mutex_);
    return order_.size();
  }

 private:
  void evict_to(std::size_t limit) {
    while (used_ > limit && !order_.empty()) {
      Entry& victim = order_.back();
      const std::size_t charge = victim.key.size() + victim.value.size() + kEntryOverhead;
      index_.erase(victim.key);
      order_.pop_back();
      used_ -= charge;
      live_.sub(static_cast<std::int64_t>(charge));
    }
  }

  LiveBytes& live_;
  std::mutex mutex_;
  std::list<Entry> order_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  std::size_t used_ = 0;
  std::size_t capacity_ = 0;
};

class Cache {
 public:
  Cache(LiveBytes& live, std::size_t capacity) {
    for (std::size_t i = 0; i < kShards; ++i) shards_.push_back(std::make_unique<Shard>(live));
    set_capacity(capacity);
  }
  Shard& shard(const std::string& key) { return *shards_[hash_string(key) % kShards]; }
  void set_capacity(std::size_t bytes) {
    for (auto& shard : shards_) shard->set_capacity(bytes / kShards);
  }
  bool consistent() {
    return std::all_of(shards_.begin(), shards_.end(), [](auto& shard) { return shard->consistent(); });
  }
  std::size_t entries() {
    std::size_t n = 0;
    for (auto& shard : shards_) n += shard->entries();
    return n;
  }

 private:
  std::vector<std::unique_ptr<Shard>> shards_;
};

struct Counters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, corrupt{0};
};

// One request: look the page up, render and insert it on a miss, check what a hit returned.
void serve_request(Cache& cache, std::uint64_t id, Counters& counters) {
  std::string key = page_key(id);
  std::string response;
  Shard& shard = cache.shard(key);
  if (shard.get(key, response)) {
    counters.hits.fetch_add(1, std::memory_order_relaxed);
    if (response.size() != page_bytes(id) || !pattern_matches(response.data(), response.size(), id)) {
      counters.corrupt.fetch_add(1, std::memory_order_relaxed);
    }
    return;
  }
  counters.misses.fetch_add(1, std::memory_order_relaxed);
  shard.put(std::move(key), render_page(id));
}

// 80% of the requests go to a hot fifth of the ids.
std::uint64_t pick_id(XorShift& random, std::uint64_t ids) {
  return random.below(10) < 8 ? random.below(ids / 5) : random.below(ids);
}

void request_worker(Cache& cache, Counters& counters, std::uint64_t seed, std::uint64_t requests,
                    std::uint64_t ids) {
  XorShift random(seed);
  for (std::uint64_t i = 0; i < requests; ++i) serve_request(cache, pick_id(random, ids), counters);
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::size_t capacity = options.small ? (std::size_t{32} << 20) : (std::size_t{256} << 20);
  const std::uint64_t ids = capacity / 1000 * 3 / 2;  // about 1.5 times what fits
  const std::uint64_t requests = options.scaled(1200000);
  Cache cache(live, capacity);
  Counters counters;
  const auto start = Clock::now();
  run_threads(options.threads, [&](int t) {
    request_worker(cache, counters, options.seed * 131 + t, requests / options.threads, ids);
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  // Memory pressure: the capacity is cut to a tenth, and the traffic goes on, lighter, at the new size.
  cache.set_capacity(capacity / 10);
  run_threads(options.threads, [&](int t) {
    request_worker(cache, counters, options.seed * 257 + t, requests / 10 / options.threads, ids);
  });
  report.seconds = seconds_since(start);
  report.operations = requests + requests / 10;
  report.live_bytes = live.now();
  if (!cache.consistent()) report.fail("a shard's list, index and byte count disagree, or exceed the capacity");
  if (counters.corrupt.load() != 0) report.fail("a cache hit returned the wrong page");
  XorShift idle(options.seed * 7);
  report.steady_state = run_quiet_phase(options, [&] {
    for (int i = 0; i < 16; ++i) serve_request(cache, pick_id(idle, ids), counters);
    return live.now();
  }, "\"entries\": " + std::to_string(cache.entries()));
  if (counters.corrupt.load() != 0) report.fail("a cache hit returned the wrong page");
  report.add("hits", counters.hits.load());
  report.add("misses", counters.misses.load());
  report.add("entries", cache.entries());
  report.add("capacity_bytes", capacity);
  return report;
}

}  // namespace lru

// ------------------------------------------------------------------------------------------------------------
// ttl-cache: entries with mixed time-to-live, short (page fragments) and long (configuration), and an expiry
// thread driven by a timer heap. Time is logical, one unit per insert, so what expires when does not depend on
// speed. At the end of the inserts most short entries are still live (the peak); then time moves on and the
// expiry thread removes every short entry, leaving only the long ones.
namespace ttl {

constexpr std::size_t kShards = 8;
constexpr std::uint64_t kNever = ~std::uint64_t{0};
constexpr int kReadsPerInsert = 48;

struct Item {
  std::string value;
  std::uint64_t expires_at;
};

struct Timer {
  std::uint64_t at;
  std::string key;
  bool operator>(const Timer& other) const { return at > other.at; }
};

bool is_long(std::uint64_t id) { return mix64(id ^ 0x7711) % 10 == 0; }
std::size_t value_bytes(std::uint64_t id) {
  return is_long(id) ? log_uniform(mix64(id), 32, 512) : log_uniform(mix64(id), 256, 4096);
}

std::string entry_key(std::uint64_t id) {
  char text[48];
  const int n = std::snprintf(text, sizeof text, "%s:%" PRIu64 ":fragment", is_long(id) ? "config" : "render", id);
  return std::string(text, static_cast<std::size_t>(n));
}

class Store {
 public:
  explicit Store(LiveBytes& live) : live_(live) {}

  void insert(std::uint64_t id, std::uint64_t now, std::uint64_t ttl) {
    std::string key = entry_key(id);
    std::string value(value_bytes(id), '\0');
    fill_pattern(value.data(), value.size(), id);
    const std::uint64_t expires = ttl == kNever ? kNever : now + ttl;
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (expires != kNever) shard.timers.push(Timer{expires, key});
    live_.add(static_cast<std::int64_t>(key.size() + value.size()));
    shard.items.emplace(std::move(key), Item{std::move(value), expires});
  }

  // A read of the entry of `id`, checked; false when it is not there.
  bool lookup(std::uint64_t id, bool& intact) {
    const std::string key = entry_key(id);
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto found = shard.items.find(key);
    if (found == shard.items.end()) return false;
    const std::string& value = found->second.value;
    intact = value.size() == value_bytes(id) && pattern_matches(value.data(), value.size(), id);
    return true;
  }

  // The expiry thread's sweep: every entry whose timer fell due by `now` goes.
  std::uint64_t expire_until(std::uint64_t now) {
    std::uint64_t removed = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      while (!shard.timers.empty() && shard.timers.top().at <= now) {
        auto found = shard.items.find(shard.timers.top().key);
        if (found != shard.items.end() && found->second.expires_at <= now) {
          live_.sub(static_cast<std::int64_t>(found->first.size() + found->second.value.size()));
          shard.items.erase(found);
          ++removed;
        }
        shard.timers.pop();
      }
    }
    return removed;
  }

  std::uint64_t pending_timers() {
    std::uint64_t timers = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      timers += shard.timers.size();
    }
    return timers;
  }

  // Entries, long entries, pending timers and the order-independent checksum of what is stored.
  void survey(std::uint64_t& entries, std::uint64_t& long_entries, std::uint64_t& timers, std::uint64_t& checksum) {
    entries = long_entries = timers = checksum = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      timers += shard.timers.size();
      for (const auto& [key, item] : shard.items) {
        ++entries;
        if (item.expires_at == kNever) ++long_entries;
        checksum += hash_string(key) ^ hash_string(item.value);
      }
    }
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, Item> items;
    std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers;
  };
  Shard& shard_of(const std::string& key) { return shards_[hash_string(key) % kShards]; }

  LiveBytes& live_;
  Shard shards_[kShards];
};

class ExpiryThread {
 public:
  ExpiryThread(Store& store, std::atomic<std::uint64_t>& clock)
      : store_(store), clock_(clock), thread_([this] { loop(); }) {}
  ~ExpiryThread() {
    stop_.store(true);
    thread_.join();
  }
  std::uint64_t removed() const { return removed_.load(); }

 private:
  void loop() {
    while (!stop_.load()) {
      removed_.fetch_add(store_.expire_until(clock_.load()));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  Store& store_;
  std::atomic<std::uint64_t>& clock_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> removed_{0};
  std::thread thread_;
};

void writer(Store& store, std::atomic<std::uint64_t>& clock, std::uint64_t first, std::uint64_t stride,
            std::uint64_t count, std::uint64_t total, std::atomic<std::uint64_t>& corrupt) {
  XorShift random(first * 977 + 3);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t id = first + i * stride;
    const std::uint64_t now = clock.fetch_add(1);
    // Short entries live a quarter to all of the insert period, so most are live when the inserts end.
    const std::uint64_t ttl = is_long(id) ? kNever : total / 4 + mix64(id) % (total * 3 / 4);
    store.insert(id, now, ttl);
    // Reads outnumber writes: a few lookups of this writer's recent entries per insert.
    for (int r = 0; r < kReadsPerInsert && i > 0; ++r) {
      bool intact = true;
      const std::uint64_t back = std::min<std::uint64_t>(i, 2048);
      if (store.lookup(first + (i - 1 - random.below(back)) * stride, intact) && !intact) corrupt.fetch_add(1);
    }
  }
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t total = options.scaled(24000);
  Store store(live);
  std::atomic<std::uint64_t> clock{0};
  std::atomic<std::uint64_t> corrupt{0};
  std::uint64_t long_inserted = 0;
  for (std::uint64_t id = 0; id < total; ++id) long_inserted += is_long(id) ? 1 : 0;
  const auto start = Clock::now();
  ExpiryThread expiry(store, clock);
  const std::uint64_t writers = static_cast<std::uint64_t>(options.threads);
  run_threads(options.threads, [&](int t) {
    const std::uint64_t first = static_cast<std::uint64_t>(t);
    writer(store, clock, first, writers, (total - first + writers - 1) / writers, total, corrupt);
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  // Time moves past every short entry's deadline; the expiry thread removes them.
  clock.fetch_add(2 * total);
  std::uint64_t entries = 0, long_entries = 0, timers = 0, checksum = 0;
  for (int wait = 0; wait < 30000 && store.pending_timers() != 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  store.survey(entries, long_entries, timers, checksum);
  report.seconds = seconds_since(start);
  report.operations = total * (kReadsPerInsert + 1);
  report.live_bytes = live.now();
  report.checksum = checksum;
  if (timers != 0) report.fail("the expiry thread left short entries past their deadline");
  if (entries != long_entries || long_entries != long_inserted) {
    report.fail("after expiry " + std::to_string(entries) + " entries are left, " + std::to_string(long_entries) +
                " of them long; expected the " + std::to_string(long_inserted) + " long entries");
  }
  XorShift idle(options.seed * 11);
  report.steady_state = run_quiet_phase(options, [&] {
    for (int i = 0; i < 8; ++i) {
      std::uint64_t id = idle.below(total);
      while (!is_long(id)) id = (id + 1) % total;
      bool intact = true;
      if (!store.lookup(id, intact) || !intact) corrupt.fetch_add(1);
    }
    return live.now();
  }, "\"entries\": " + std::to_string(entries));
  if (corrupt.load() != 0) report.fail("an entry read back with the wrong value, or a long entry vanished");
  report.add("inserted", total);
  report.add("long_entries", long_entries);
  report.add("expired", expiry.removed());
  return report;
}

}  // namespace ttl

// ------------------------------------------------------------------------------------------------------------
// hash-trimmed-cache: a small cache server, the way a new user writes one. Four worker threads each take
// requests off the wire: a request buffer of 64 B to 16 KiB (headers and, for a SET, the value), parsed into a
// Request with std::string key and value and a vector of header strings, answered with a response string and
// logged. The cache is sharded std::unordered_map<std::string, std::string>, values 32 B to 4 KiB. The peak
// fills it; then an operator drops seven eighths of it by key hash, so the survivors come from exactly the
// allocation sites of the dropped entries; then the server idles.
namespace hash_trimmed {

constexpr std::size_t kShards = 16;
constexpr std::uint64_t kKeepOneIn = 8;

std::size_t value_bytes(std::uint64_t id) { return log_uniform(mix64(id ^ 0xCAFE), 32, 4096); }

struct Request {
  bool is_set = false;
  std::string key;
  std::string value;
  std::vector<std::string> headers;
};

class StringCache {
 public:
  explicit StringCache(LiveBytes& live) : live_(live) {}

  // The cache's own copy of the value: the entry is allocated here, whatever request brought it.
  void store(const std::string& key, const std::string& value) {
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto [slot, inserted] = shard.map.try_emplace(key);
    if (!inserted) live_.sub(static_cast<std::int64_t>(slot->first.size() + slot->second.size()));
    slot->second.assign(value);
    live_.add(static_cast<std::int64_t>(slot->first.size() + slot->second.size()));
  }

  bool fetch(const std::string& key, std::string& out) {
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto found = shard.map.find(key);
    if (found == shard.map.end()) return false;
    out.append(found->second);
    return true;
  }

  // The operator's trim: every entry whose key hash is not 0 mod kKeepOneIn goes. Worker `part` of `parts`
  // trims its share of the shards.
  std::uint64_t trim_by_hash(int part, int parts) {
    std::uint64_t dropped = 0;
    for (std::size_t s = static_cast<std::size_t>(part); s < kShards; s += static_cast<std::size_t>(parts)) {
      std::lock_guard<std::mutex> lock(shards_[s].mutex);
      auto& map = shards_[s].map;
      for (auto it = map.begin(); it != map.end();) {
        if (mix64(hash_string(it->first)) % kKeepOneIn != 0) {
          live_.sub(static_cast<std::int64_t>(it->first.size() + it->second.size()));
          it = map.erase(it);
          ++dropped;
        } else {
          ++it;
        }
      }
    }
    return dropped;
  }

  template <typename Visit>
  void for_each(Visit&& visit) {
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      for (const auto& [key, value] : shard.map) visit(key, value);
    }
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::string> map;
  };
  Shard& shard_of(const std::string& key) { return shards_[hash_string(key) % kShards]; }

  LiveBytes& live_;
  Shard shards_[kShards];
};

std::string cache_key(std::uint64_t id) { return "user:" + std::to_string(id % 9973) + ":item:" + std::to_string(id); }

// The client side: the bytes of one request, in a buffer of 64 B to 16 KiB that lives for the request.
std::vector<char> encode_request(std::uint64_t id, bool is_set, std::uint64_t draw) {
  const std::string key = cache_key(id);
  const std::size_t value_size = is_set ? value_bytes(id) : 0;
  char head[96];
  const int head_bytes = std::snprintf(head, sizeof head, "%s %s %zu\r\n", is_set ? "SET" : "GET", key.c_str(),
                                       value_size);
  const std::size_t wanted = log_uniform(draw, 64, 16384);
  const std::size_t fixed = static_cast<std::size_t>(head_bytes) + value_size + 4;
  std::vector<char> wire(std::max(wanted, fixed + 16));
  char* at = wire.data();
  std::memcpy(at, head, static_cast<std::size_t>(head_bytes));
  at += head_bytes;
  // Headers fill the rest: "x-trace-N: ...\r\n" lines, the last one padded to the end.
  std::size_t left = wire.size() - fixed;
  for (int h = 0; left > 0; ++h) {
    char line[64];
    int n = std::snprintf(line, sizeof line, "x-trace-%d: %016" PRIx64 "\r\n", h, mix64(draw + h));
    if (static_cast<std::size_t>(n) + 16 > left) {
      std::memset(at, 'p', left - 2);
      std::memcpy(at + left - 2, "\r\n", 2);
      at += left;
      break;
    }
    std::memcpy(at, line, static_cast<std::size_t>(n));
    at += n;
    left -= static_cast<std::size_t>(n);
  }
  std::memcpy(at, "\r\n", 2);
  at += 2;
  fill_pattern(at, value_size, id);
  at += value_size;
  std::memcpy(at, "\r\n", 2);
  return wire;
}

// The server side: the request line, the header lines, the body.
bool parse_request(const std::vector<char>& wire, Request& request) {
  std::string_view text(wire.data(), wire.size());
  std::size_t line_end = text.find("\r\n");
  if (line_end == std::string_view::npos) return false;
  std::string_view line = text.substr(0, line_end);
  const std::size_t first_space = line.find(' ');
  const std::size_t second_space = line.find(' ', first_space + 1);
  if (first_space == std::string_view::npos || second_space == std::string_view::npos) return false;
  request.is_set = line.substr(0, first_space) == "SET";
  request.key.assign(line.substr(first_space + 1, second_space - first_space - 1));
  const std::size_t value_size = std::strtoull(std::string(line.substr(second_space + 1)).c_str(), nullptr, 10);
  std::size_t at = line_end + 2;
  for (;;) {
    const std::size_t end = text.find("\r\n", at);
    if (end == std::string_view::npos) return false;
    if (end == at) break;
    request.headers.emplace_back(text.substr(at, end - at));
    at = end + 2;
  }
  at += 2;
  if (at + value_size + 2 > text.size()) return false;
  request.value.assign(text.substr(at, value_size));
  return true;
}

struct ServerStats {
  std::atomic<std::uint64_t> sets{0}, gets{0}, hits{0}, bad_requests{0}, corrupt{0}, log_hash{0};
};

// One request end to end: parse, execute, answer, log. Returns the response.
std::string handle_request(StringCache& cache, const std::vector<char>& wire, ServerStats& stats) {
  Request request;
  if (!parse_request(wire, request)) {
    stats.bad_requests.fetch_add(1);
    return "CLIENT_ERROR bad request\r\n";
  }
  std::string response;
  if (request.is_set) {
    cache.store(request.key, request.value);
    stats.sets.fetch_add(1, std::memory_order_relaxed);
    response = "STORED\r\n";
  } else {
    stats.gets.fetch_add(1, std::memory_order_relaxed);
    response.reserve(64);
    response += "VALUE ";
    response += request.key;
    response += "\r\n";
    if (cache.fetch(request.key, response)) {
      stats.hits.fetch_add(1, std::memory_order_relaxed);
      response += "\r\n";
    }
    response += "END\r\n";
  }
  std::string log_line = (request.is_set ? "set " : "get ") + request.key + " headers=" +
                         std::to_string(request.headers.size()) + " bytes=" + std::to_string(wire.size());
  stats.log_hash.fetch_add(hash_string(log_line), std::memory_order_relaxed);
  return response;
}

// The client checks a GET's answer against the value a SET of the same key stores.
bool response_intact(const std::string& response, std::uint64_t id) {
  const std::string head = "VALUE " + cache_key(id) + "\r\n";
  if (response.compare(0, head.size(), head) != 0) return false;
  if (response.size() == head.size() + 5) return true;  // a miss: "END\r\n"
  const std::size_t size = value_bytes(id);
  return response.size() == head.size() + size + 7 && pattern_matches(response.data() + head.size(), size, id);
}

void connection_worker(StringCache& cache, ServerStats& stats, std::vector<std::uint8_t>& ever_set, std::uint64_t seed,
                       std::uint64_t requests, std::uint64_t ids) {
  XorShift random(seed);
  for (std::uint64_t i = 0; i < requests; ++i) {
    const std::uint64_t id = random.below(10) < 7 ? random.below(ids) : random.below(ids / 8);
    const bool is_set = random.below(10) < 6;
    std::vector<char> wire = encode_request(id, is_set, random.next());
    const std::string response = handle_request(cache, wire, stats);
    if (is_set) {
      ever_set[id] = 1;  // this worker's own record of the keys it SET
    } else if (!response_intact(response, id)) {
      stats.corrupt.fetch_add(1);
    }
  }
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t ids = options.scaled(48000);
  const std::uint64_t requests = options.scaled(240000);
  StringCache cache(live);
  ServerStats stats;
  std::vector<std::vector<std::uint8_t>> ever_set(static_cast<std::size_t>(options.threads),
                                                  std::vector<std::uint8_t>(ids, 0));
  const auto start = Clock::now();
  run_threads(options.threads, [&](int t) {
    connection_worker(cache, stats, ever_set[static_cast<std::size_t>(t)], options.seed * 1009 + t,
                      requests / options.threads, ids);
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  std::atomic<std::uint64_t> dropped{0};
  run_threads(options.threads, [&](int t) { dropped.fetch_add(cache.trim_by_hash(t, options.threads)); });
  report.seconds = seconds_since(start);
  report.operations = requests;
  report.live_bytes = live.now();

  // The survivors: exactly the keys ever SET whose hash is kept, each holding its value.
  std::uint64_t expected = 0, kept = 0, checksum = 0, wrong = 0;
  for (std::uint64_t id = 0; id < ids; ++id) {
    bool set = false;
    for (auto& mine : ever_set) set = set || mine[id] != 0;
    if (set && mix64(hash_string(cache_key(id))) % kKeepOneIn == 0) ++expected;
  }
  cache.for_each([&](const std::string& key, const std::string& value) {
    ++kept;
    const std::uint64_t id = std::strtoull(key.c_str() + key.rfind(':') + 1, nullptr, 10);
    if (mix64(hash_string(key)) % kKeepOneIn != 0 || value.size() != value_bytes(id) ||
        !pattern_matches(value.data(), value.size(), id)) {
      ++wrong;
    }
    checksum += hash_string(key) * 31 + hash_string(value);
  });
  report.checksum = checksum;
  if (kept != expected) {
    report.fail("after the trim " + std::to_string(kept) + " entries are left, expected " + std::to_string(expected));
  }
  if (wrong != 0) report.fail(std::to_string(wrong) + " surviving entries have the wrong hash or value");
  if (stats.corrupt.load() != 0) report.fail("a GET returned the wrong value");
  if (stats.bad_requests.load() != 0) report.fail("the server could not parse a request");

  // The idle server: a monitoring client's few GETs, through the whole request path.
  XorShift idle(options.seed * 13);
  std::uint64_t idle_requests = 0;
  report.steady_state = run_quiet_phase(options, [&] {
    for (int i = 0; i < 4; ++i, ++idle_requests) {
      const std::uint64_t id = idle.below(ids);
      if (!response_intact(handle_request(cache, encode_request(id, false, idle.next()), stats), id)) {
        stats.corrupt.fetch_add(1);
      }
    }
    return live.now();
  }, "\"entries\": " + std::to_string(kept));
  if (stats.corrupt.load() != 0) report.fail("a GET returned the wrong value");
  report.add("sets", stats.sets.load());
  report.add("gets", stats.gets.load());
  report.add("hits", stats.hits.load());
  report.add("dropped", dropped.load());
  report.add("entries", kept);
  report.add("idle_requests", idle_requests);
  return report;
}

}  // namespace hash_trimmed

// ------------------------------------------------------------------------------------------------------------
// batch-arena: batch jobs that build their working data in an arena of 64 KiB chunks, freed whole when the
// batch ends, and keep a small summary per batch for good. The peak is a backfill wave whose arenas all stay
// until the wave commits; after it, batches run one at a time per worker.
namespace batch {

constexpr std::size_t kChunkBytes = std::size_t{64} << 10;

class Arena {
 public:
  explicit Arena(LiveBytes& live) : live_(live) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (char* chunk : chunks_) std::free(chunk);
    live_.sub(static_cast<std::int64_t>(bytes_));
  }

  void* allocate(std::size_t n, std::size_t align = alignof(std::max_align_t)) {
    std::size_t pad = (align - reinterpret_cast<std::uintptr_t>(cursor_) % align) % align;
    if (n + pad > left_) {
      if (n > kChunkBytes / 4) return allocate_block(n);
      new_chunk();
      pad = 0;
    }
    char* out = cursor_ + pad;
    cursor_ = out + n;
    left_ -= n + pad;
    return out;
  }

  template <typename T>
  T* make_array(std::size_t n) {
    return static_cast<T*>(allocate(sizeof(T) * n, alignof(T)));
  }

  std::size_t bytes() const { return bytes_; }

 private:
  void new_chunk() {
    char* chunk = static_cast<char*>(std::malloc(kChunkBytes));
    if (chunk == nullptr) std::abort();
    chunks_.push_back(chunk);
    cursor_ = chunk;
    left_ = kChunkBytes;
    bytes_ += kChunkBytes;
    live_.add(kChunkBytes);
  }
  // A large object gets a block of its own, freed with the arena.
  void* allocate_block(std::size_t n) {
    char* block = static_cast<char*>(std::malloc(n));
    if (block == nullptr) std::abort();
    chunks_.push_back(block);
    bytes_ += n;
    live_.add(static_cast<std::int64_t>(n));
    return block;
  }

  LiveBytes& live_;
  std::vector<char*> chunks_;
  char* cursor_ = nullptr;
  std::size_t left_ = 0;
  std::size_t bytes_ = 0;
};

struct Record {
  std::uint64_t id;
  const char* name;
  std::uint32_t name_bytes;
  std::uint32_t category;
  std::uint64_t amount;
};

struct Group {
  std::uint32_t category;
  std::uint64_t total;
  std::uint32_t count;
  Group* next;
};

struct BatchSummary {
  std::uint64_t batch;
  std::string label;
  std::uint64_t total;
  std::vector<std::uint64_t> top_ids;
  std::map<std::uint32_t, std::uint64_t> category_totals;
};

std::uint64_t record_amount(std::uint64_t batch, std::uint64_t i) { return mix64(batch * 1000003 + i) % 100000; }
std::uint32_t record_category(std::uint64_t batch, std::uint64_t i) {
  return static_cast<std::uint32_t>(mix64(batch ^ (i * 7919)) % 64);
}

// The working set of one batch, all in its arena: the records, their names, a group-by hash table.
struct BatchWork {
  explicit BatchWork(LiveBytes& live) : arena(live) {}
  Arena arena;
  Record* records = nullptr;
  std::size_t count = 0;
  Group** buckets = nullptr;
  std::size_t bucket_count = 0;
};

std::unique_ptr<BatchWork> load_batch(LiveBytes& live, std::uint64_t batch, std::size_t records) {
  auto work = std::make_unique<BatchWork>(live);
  Arena& arena = work->arena;
  work->records = arena.make_array<Record>(records);
  work->count = records;
  for (std::size_t i = 0; i < records; ++i) {
    Record& record = work->records[i];
    record.id = batch * 1000000 + i;
    record.name_bytes = static_cast<std::uint32_t>(log_uniform(mix64(record.id), 8, 240));
    char* name = static_cast<char*>(arena.allocate(record.name_bytes, 1));
    fill_pattern(name, record.name_bytes, record.id);
    record.name = name;
    record.category = record_category(batch, i);
    record.amount = record_amount(batch, i);
  }
  return work;
}

void group_batch(BatchWork& work) {
  work.bucket_count = 16;
  work.buckets = work.arena.make_array<Group*>(work.bucket_count);
  std::fill(work.buckets, work.buckets + work.bucket_count, nullptr);
  for (std::size_t i = 0; i < work.count; ++i) {
    const Record& record = work.records[i];
    Group** slot = &work.buckets[record.category % work.bucket_count];
    while (*slot != nullptr && (*slot)->category != record.category) slot = &(*slot)->next;
    if (*slot == nullptr) {
      *slot = work.arena.make_array<Group>(1);
      **slot = Group{record.category, 0, 0, nullptr};
    }
    (*slot)->total += record.amount;
    (*slot)->count += 1;
  }
}

std::unique_ptr<BatchSummary> summarize_batch(BatchWork& work, std::uint64_t batch, bool& names_intact) {
  auto summary = std::make_unique<BatchSummary>();
  summary->batch = batch;
  summary->label = "batch-" + std::to_string(batch) + "-" + std::to_string(work.count) + "-records";
  // The top five records by amount: a sorted scratch array in the arena.
  Record** order = work.arena.make_array<Record*>(work.count);
  for (std::size_t i = 0; i < work.count; ++i) {
    order[i] = &work.records[i];
    const Record& record = work.records[i];
    names_intact = names_intact && pattern_matches(record.name, record.name_bytes, record.id);
  }
  std::partial_sort(order, order + 5, order + work.count, [](const Record* a, const Record* b) {
    return a->amount != b->amount ? a->amount > b->amount : a->id < b->id;
  });
  for (int i = 0; i < 5; ++i) summary->top_ids.push_back(order[i]->id);
  for (std::size_t b = 0; b < work.bucket_count; ++b) {
    for (const Group* group = work.buckets[b]; group != nullptr; group = group->next) {
      summary->category_totals[group->category] = group->total;
      summary->total += group->total;
    }
  }
  return summary;
}

// The batch's expected total, from the generator alone.
std::uint64_t expected_total(std::uint64_t batch, std::size_t records) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < records; ++i) total += record_amount(batch, i);
  return total;
}

class Ledger {
 public:
  explicit Ledger(LiveBytes& live) : live_(live) {}
  void keep(std::unique_ptr<BatchSummary> summary) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.add(bytes_of(*summary));
    summaries_.push_back(std::move(summary));
  }
  std::uint64_t checksum() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t sum = 0;
    for (const auto& s : summaries_) sum += mix64(s->batch) ^ (s->total + mix64(s->top_ids[0]) + hash_string(s->label));
    return sum;
  }
  std::uint64_t report_total() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t sum = 0;
    for (const auto& s : summaries_) sum += s->total;
    return sum;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return summaries_.size();
  }

 private:
  static std::int64_t bytes_of(const BatchSummary& s) {
    return static_cast<std::int64_t>(sizeof(BatchSummary) + s.label.size() + 8 * s.top_ids.size() +
                                     48 * s.category_totals.size());
  }
  LiveBytes& live_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<BatchSummary>> summaries_;
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t wave = options.small ? 40 : 160;  // the default wave: about 200 MiB of arenas
  const std::uint64_t later = options.scaled(2400);
  const std::size_t wave_records = 12000;
  const std::size_t later_records = 3000;
  Ledger ledger(live);
  std::atomic<std::uint64_t> next_wave{0}, next_later{0}, wrong{0};
  std::atomic<std::uint64_t> expected_sum{0};
  auto process = [&](std::uint64_t batch, std::size_t records) {
    std::unique_ptr<BatchWork> work = load_batch(live, batch, records);
    group_batch(*work);
    bool names_intact = true;
    std::unique_ptr<BatchSummary> summary = summarize_batch(*work, batch, names_intact);
    const std::uint64_t expected = expected_total(batch, records);
    if (summary->total != expected || !names_intact) wrong.fetch_add(1);
    expected_sum.fetch_add(expected);
    ledger.keep(std::move(summary));
    return work;
  };
  const auto start = Clock::now();
  // The backfill wave: every batch's arena stays until the wave commits.
  std::mutex staged_mutex;
  std::vector<std::unique_ptr<BatchWork>> staged;
  run_threads(options.threads, [&](int) {
    for (std::uint64_t batch; (batch = next_wave.fetch_add(1)) < wave;) {
      std::unique_ptr<BatchWork> work = process(batch, wave_records);
      std::lock_guard<std::mutex> lock(staged_mutex);
      staged.push_back(std::move(work));
    }
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  staged.clear();  // the wave commits
  // Then the regular batches, each arena freed at its batch's end.
  run_threads(options.threads, [&](int) {
    for (std::uint64_t batch; (batch = wave + next_later.fetch_add(1)) < wave + later;) process(batch, later_records);
  });
  report.seconds = seconds_since(start);
  report.operations = wave * wave_records + later * later_records;
  report.live_bytes = live.now();
  report.checksum = ledger.checksum();
  if (wrong.load() != 0) report.fail(std::to_string(wrong.load()) + " batch(es) summed to the wrong total");
  if (ledger.size() != wave + later) report.fail("a batch summary is missing");
  if (ledger.report_total() != expected_sum.load()) report.fail("the ledger's total disagrees with the batches'");
  // The idle job runner answers a report query over the summaries now and then.
  std::uint64_t reports = 0;
  report.steady_state = run_quiet_phase(options, [&] {
    if (ledger.report_total() != expected_sum.load()) wrong.fetch_add(1);
    ++reports;
    return live.now();
  }, "\"summaries\": " + std::to_string(ledger.size()));
  if (wrong.load() != 0) report.fail("a summary changed during the quiet phase");
  report.add("batches", wave + later);
  report.add("wave_batches", wave);
  return report;
}

}  // namespace batch

// ------------------------------------------------------------------------------------------------------------
// stream-pipeline: three stages on three threads, connected by bounded queues. Stage 1 ingests messages (a
// struct and a malloc'd body), stage 2 enriches them (realloc: an envelope around the body, or a fold that
// shrinks it), stage 3 delivers and frees them. A downstream outage holds stage 3 while a burst arrives: the
// backlog in the queue to stage 3 is the peak. Then stage 3 drains it and light traffic flows.
namespace stream {

struct Message {
  std::uint64_t id;
  char* body;
  std::size_t size;
  std::uint64_t body_hash;
};

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(std::size_t capacity) : capacity_(capacity) {}
  void push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_; });
    items_.push_back(std::move(item));
    not_empty_.notify_one();
  }
  // Blocks until an item comes or the queue is closed and empty (then false).
  bool pop(T& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return false;
    out = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

class Pipeline {
 public:
  Pipeline(LiveBytes& live, std::size_t backlog_capacity)
      : live_(live), to_enrich_(1024), to_deliver_(backlog_capacity) {
    enrich_thread_ = std::thread([this] { enrich_loop(); });
    deliver_thread_ = std::thread([this] { deliver_loop(); });
  }
  ~Pipeline() { finish(); }

  // Stage 1 (the caller's thread): a message and its body.
  void ingest(std::uint64_t id) {
    auto* message = new Message{id, nullptr, log_uniform(mix64(id ^ 0xB0D1), 128, 8192), 0};
    message->body = static_cast<char*>(std::malloc(message->size));
    if (message->body == nullptr) std::abort();
    fill_pattern(message->body, message->size, id);
    message->body_hash = hash_bytes(message->body, message->size);
    live_.add(static_cast<std::int64_t>(sizeof(Message) + message->size));
    ingested_.fetch_add(1);
    to_enrich_.push(message);
  }

  void hold_delivery(bool hold) {
    std::lock_guard<std::mutex> lock(gate_mutex_);
    held_ = hold;
    gate_.notify_all();
  }
  std::size_t backlog() { return to_deliver_.size(); }
  std::uint64_t delivered() const { return delivered_.load(); }
  std::uint64_t ingested() const { return ingested_.load(); }
  std::uint64_t checksum() const { return checksum_.load(); }
  std::uint64_t corrupt() const { return corrupt_.load(); }

  void finish() {
    if (finished_) return;
    finished_ = true;
    hold_delivery(false);
    to_enrich_.close();
    enrich_thread_.join();
    to_deliver_.close();
    deliver_thread_.join();
  }

  std::size_t topics() {
    std::lock_guard<std::mutex> lock(topics_mutex_);
    return topic_counts_.size();
  }

 private:
  // Stage 2: check the body, then wrap it in an envelope (grows) or fold it (shrinks), in place by realloc.
  void enrich(Message* message) {
    if (hash_bytes(message->body, message->size) != message->body_hash) corrupt_.fetch_add(1);
    const std::size_t old_size = message->size;
    if (mix64(message->id) % 3 != 0) {
      const std::size_t header = 64 + message->id % 64;
      const std::size_t new_size = old_size + header + 32;
      message->body = static_cast<char*>(std::realloc(message->body, new_size));
      if (message->body == nullptr) std::abort();
      std::memmove(message->body + header, message->body, old_size);
      std::memset(message->body, 'H', header);
      std::memset(message->body + header + old_size, 'T', 32);
      message->size = new_size;
    } else {
      const std::size_t half = old_size / 2;
      for (std::size_t i = 0; i < half; ++i) message->body[i] ^= message->body[half + i];
      message->body = static_cast<char*>(std::realloc(message->body, half));
      if (message->body == nullptr) std::abort();
      message->size = half;
    }
    live_.add(static_cast<std::int64_t>(message->size) - static_cast<std::int64_t>(old_size));
    message->body_hash = hash_bytes(message->body, message->size);
  }

  void enrich_loop() {
    Message* message = nullptr;
    while (to_enrich_.pop(message)) {
      enrich(message);
      to_deliver_.push(message);
    }
  }

  // Stage 3: check, account per topic (a small long-lived table), free.
  void deliver(Message* message) {
    const std::uint64_t hash = hash_bytes(message->body, message->size);
    if (hash != message->body_hash) corrupt_.fetch_add(1);
    checksum_.fetch_add(hash);
    {
      std::lock_guard<std::mutex> lock(topics_mutex_);
      auto [slot, inserted] = topic_counts_.try_emplace("topic-" + std::to_string(message->id % 97), 0);
      if (inserted) live_.add(64);
      slot->second += 1;
    }
    live_.sub(static_cast<std::int64_t>(sizeof(Message) + message->size));
    std::free(message->body);
    delete message;
    delivered_.fetch_add(1);
  }

  void deliver_loop() {
    Message* message = nullptr;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(gate_mutex_);
        gate_.wait(lock, [&] { return !held_; });
      }
      if (!to_deliver_.pop(message)) return;
      deliver(message);
    }
  }

  LiveBytes& live_;
  BoundedQueue<Message*> to_enrich_, to_deliver_;
  std::mutex gate_mutex_;
  std::condition_variable gate_;
  bool held_ = false;
  std::mutex topics_mutex_;
  std::map<std::string, std::uint64_t> topic_counts_;
  std::atomic<std::uint64_t> ingested_{0}, delivered_{0}, checksum_{0}, corrupt_{0};
  bool finished_ = false;
  std::thread enrich_thread_, deliver_thread_;
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t burst = options.scaled(16000);
  const std::uint64_t trickle = options.scaled(80000);
  Pipeline pipeline(live, burst + 1024);
  const auto start = Clock::now();
  pipeline.hold_delivery(true);  // the outage
  std::uint64_t id = 0;
  for (; id < burst; ++id) pipeline.ingest(id);
  // (A message the delivery stage took before the outage began is delivered, not queued.)
  while (pipeline.backlog() + pipeline.delivered() < burst) std::this_thread::sleep_for(std::chrono::microseconds(200));
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  pipeline.hold_delivery(false);
  while (pipeline.delivered() < burst) std::this_thread::sleep_for(std::chrono::microseconds(200));
  // Light traffic: the source paces itself, so no backlog builds.
  for (; id < burst + trickle; ++id) {
    pipeline.ingest(id);
    if (id % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  while (pipeline.delivered() < burst + trickle) std::this_thread::sleep_for(std::chrono::microseconds(200));
  report.seconds = seconds_since(start);
  report.operations = burst + trickle;
  report.live_bytes = live.now();
  report.checksum = pipeline.checksum();
  // The idle pipeline: a heartbeat message now and then.
  std::uint64_t heartbeat = burst + trickle;
  report.steady_state = run_quiet_phase(options, [&] {
    pipeline.ingest(heartbeat++);
    return live.now();
  }, "\"topics\": " + std::to_string(pipeline.topics()));
  pipeline.finish();
  if (pipeline.corrupt() != 0) report.fail("a message body changed between stages");
  if (pipeline.delivered() != pipeline.ingested()) {
    report.fail(std::to_string(pipeline.ingested()) + " messages ingested, " + std::to_string(pipeline.delivered()) +
                " delivered");
  }
  report.add("burst_messages", burst);
  report.add("messages", pipeline.delivered());
  return report;
}

}  // namespace stream

// ------------------------------------------------------------------------------------------------------------
// producer-consumer: producers make jobs (a struct with a name, a payload vector and tags), consumers run and
// free them on other threads. The consumers start late, so a backlog builds (the peak); they catch up, then
// traffic stays low. Consumers keep the result of every 16th job in a result log (long-lived).
namespace prodcons {

struct Job {
  std::uint64_t id;
  std::string name;
  std::vector<std::uint32_t> payload;
  std::vector<std::string> tags;
  std::uint64_t expected;
};

std::int64_t job_bytes(const Job& job) {
  std::int64_t bytes = static_cast<std::int64_t>(sizeof(Job) + job.name.size() + 4 * job.payload.size());
  for (const std::string& tag : job.tags) bytes += static_cast<std::int64_t>(tag.size());
  return bytes;
}

std::uint64_t payload_hash(const std::vector<std::uint32_t>& payload) {
  return hash_bytes(reinterpret_cast<const char*>(payload.data()), payload.size() * 4);
}

class JobQueue {
 public:
  void push(std::unique_ptr<Job> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ready_.notify_one();
  }
  std::unique_ptr<Job> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [&] { return (!jobs_.empty() && !held_) || closed_; });
    if (jobs_.empty()) return nullptr;
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    return job;
  }
  void hold(bool held) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = held;
    ready_.notify_all();
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    held_ = false;
    ready_.notify_all();
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return jobs_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::unique_ptr<Job>> jobs_;
  bool held_ = false;
  bool closed_ = false;
};

class Producer {
 public:
  Producer(JobQueue& queue, LiveBytes& live) : queue_(queue), live_(live) {}
  void produce(std::uint64_t id) {
    auto job = std::make_unique<Job>();
    job->id = id;
    job->name = "job/" + std::to_string(id % 1000) + "/render-thumbnail-" + std::to_string(id);
    job->payload.resize(log_uniform(mix64(id), 16, 2048));
    fill_pattern(reinterpret_cast<char*>(job->payload.data()), job->payload.size() * 4, id);
    const std::size_t tags = 1 + id % 4;
    for (std::size_t t = 0; t < tags; ++t) job->tags.push_back("tag-" + std::to_string(mix64(id + t) % 100000));
    job->expected = payload_hash(job->payload);
    produced_sum += job->expected;
    live_.add(job_bytes(*job));
    queue_.push(std::move(job));
  }
  std::uint64_t produced_sum = 0;

 private:
  JobQueue& queue_;
  LiveBytes& live_;
};

class ResultLog {
 public:
  explicit ResultLog(LiveBytes& live) : live_(live) {}
  void record(const Job& job, std::uint64_t hash) {
    std::string line = job.name + " -> " + std::to_string(hash % 1000000007);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.add(static_cast<std::int64_t>(line.size() + 48));
    results_.emplace(job.id, std::move(line));
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_.size();
  }
  std::uint64_t checksum() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t sum = 0;
    for (const auto& [id, line] : results_) sum += mix64(id) ^ hash_string(line);
    return sum;
  }

 private:
  LiveBytes& live_;
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::string> results_;
};

struct ConsumerTotals {
  std::atomic<std::uint64_t> consumed{0}, sum{0}, corrupt{0};
};

void consume(std::unique_ptr<Job> job, ResultLog& results, LiveBytes& live, ConsumerTotals& totals) {
  const std::uint64_t hash = payload_hash(job->payload);
  if (hash != job->expected) totals.corrupt.fetch_add(1);
  if (job->id % 16 == 0) results.record(*job, hash);
  totals.sum.fetch_add(hash);
  live.sub(job_bytes(*job));
  job.reset();
  totals.consumed.fetch_add(1);
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const int producers = std::max(1, options.threads / 2);
  const int consumers = std::max(1, options.threads - producers);
  const std::uint64_t backlog = options.scaled(24000);
  const std::uint64_t steady = options.scaled(40000);
  JobQueue queue;
  ResultLog results(live);
  ConsumerTotals totals;
  std::vector<std::unique_ptr<Producer>> makers;
  for (int p = 0; p < producers; ++p) makers.push_back(std::make_unique<Producer>(queue, live));
  queue.hold(true);  // the consumers are not up yet
  std::vector<std::thread> consumer_threads;
  for (int c = 0; c < consumers; ++c) {
    consumer_threads.emplace_back([&] {
      while (auto job = queue.pop()) consume(std::move(job), results, live, totals);
    });
  }
  const auto start = Clock::now();
  run_threads(producers, [&](int p) {
    for (std::uint64_t id = static_cast<std::uint64_t>(p); id < backlog; id += static_cast<std::uint64_t>(producers)) {
      makers[static_cast<std::size_t>(p)]->produce(id);
    }
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  queue.hold(false);
  while (totals.consumed.load() < backlog) std::this_thread::sleep_for(std::chrono::microseconds(200));
  run_threads(producers, [&](int p) {
    for (std::uint64_t id = backlog + static_cast<std::uint64_t>(p); id < backlog + steady;
         id += static_cast<std::uint64_t>(producers)) {
      makers[static_cast<std::size_t>(p)]->produce(id);
      if (id % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  while (totals.consumed.load() < backlog + steady) std::this_thread::sleep_for(std::chrono::microseconds(200));
  report.seconds = seconds_since(start);
  report.operations = backlog + steady;
  report.live_bytes = live.now();
  std::uint64_t produced_sum = 0;
  for (auto& maker : makers) produced_sum += maker->produced_sum;
  report.checksum = totals.sum.load() ^ results.checksum();
  if (totals.sum.load() != produced_sum) report.fail("the consumers' sum differs from the producers'");
  const std::size_t logged = results.size();
  if (logged != (backlog + steady + 15) / 16) report.fail("the result log lost a result");
  // Idle: a keep-alive job from the first producer now and then.
  std::uint64_t next_id = backlog + steady;
  report.steady_state = run_quiet_phase(options, [&] {
    makers[0]->produce(next_id++);
    return live.now();
  }, "\"results\": " + std::to_string(logged));
  queue.close();
  for (std::thread& thread : consumer_threads) thread.join();
  if (totals.corrupt.load() != 0) report.fail("a job's payload changed between producer and consumer");
  if (totals.consumed.load() != next_id) report.fail("a job was not consumed");
  report.add("jobs", next_id);
  report.add("results", logged);
  report.add("producers", static_cast<std::uint64_t>(producers));
  report.add("consumers", static_cast<std::uint64_t>(consumers));
  return report;
}

}  // namespace prodcons

// ------------------------------------------------------------------------------------------------------------
// session-store: a login burst creates sessions (a user name, an attribute map, a send buffer, the recent
// requests), requests update them from any thread, then most users log out (on another thread than the one
// that logged them in) and a few long sessions stay.
namespace sessions {

constexpr std::size_t kShards = 16;
constexpr std::uint64_t kLongEvery = 25;

struct Session {
  std::uint64_t id;
  std::string user;
  std::unordered_map<std::string, std::string> attributes;
  std::vector<char> send_buffer;
  std::deque<std::string> recent;
  std::uint64_t visits = 0;
  std::int64_t bytes = 0;
};

const char* const kAttributeNames[] = {"locale", "theme", "cart", "currency", "last_page", "ab_bucket",
                                       "timezone", "referrer", "wishlist", "consent"};

std::string attribute_value(std::uint64_t sid, std::size_t attribute) {
  const std::size_t size = log_uniform(mix64(sid * 16 + attribute), 8, 400);
  std::string value(size, '\0');
  fill_pattern(value.data(), size, sid * 16 + attribute);
  return value;
}

class Store {
 public:
  explicit Store(LiveBytes& live) : live_(live) {}

  void login(std::uint64_t sid) {
    auto session = std::make_unique<Session>();
    session->id = sid;
    session->user = "user-" + std::to_string(sid) + "@accounts.example.org";
    session->send_buffer.resize(log_uniform(mix64(sid ^ 0xB0FF), 512, 8192));
    const std::size_t initial = 2 + sid % 4;
    for (std::size_t a = 0; a < initial; ++a) session->attributes.emplace(kAttributeNames[a], attribute_value(sid, a));
    session->bytes = measure(*session);
    live_.add(session->bytes);
    Shard& shard = shard_of(sid);
    std::lock_guard<std::mutex> lock(shard.mutex);
    shard.sessions.emplace(sid, std::move(session));
  }

  // One request of a logged-in user: an attribute set, the request remembered, the buffer maybe regrown.
  bool request(std::uint64_t sid, std::uint64_t draw) {
    Shard& shard = shard_of(sid);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto found = shard.sessions.find(sid);
    if (found == shard.sessions.end()) return false;
    Session& session = *found->second;
    const std::size_t attribute = draw % std::size(kAttributeNames);
    session.attributes[kAttributeNames[attribute]] = attribute_value(sid, attribute);
    session.recent.push_back("GET /account/" + std::to_string(draw % 10000) + "/orders?page=" +
                             std::to_string(draw % 7));
    if (session.recent.size() > 8) session.recent.pop_front();
    if (draw % 23 == 0) session.send_buffer.resize(log_uniform(draw, 512, 8192));
    session.visits += 1;
    const std::int64_t bytes = measure(session);
    live_.add(bytes - session.bytes);
    session.bytes = bytes;
    return true;
  }

  void logout(std::uint64_t sid) {
    std::unique_ptr<Session> gone;
    {
      Shard& shard = shard_of(sid);
      std::lock_guard<std::mutex> lock(shard.mutex);
      auto found = shard.sessions.find(sid);
      if (found == shard.sessions.end()) return;
      gone = std::move(found->second);
      shard.sessions.erase(found);
    }
    live_.sub(gone->bytes);
  }

  // Sessions left, and the checksum of what they hold that does not depend on the order of the requests.
  std::uint64_t survey(std::uint64_t& checksum, std::uint64_t& wrong) {
    std::uint64_t count = 0;
    checksum = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      for (const auto& [sid, session] : shard.sessions) {
        ++count;
        std::uint64_t h = hash_string(session->user) + session->visits * 1000003;
        for (const auto& [name, value] : session->attributes) {
          const std::size_t a = static_cast<std::size_t>(
              std::find_if(std::begin(kAttributeNames), std::end(kAttributeNames),
                           [&](const char* n) { return name == n; }) - std::begin(kAttributeNames));
          if (a == std::size(kAttributeNames) || value != attribute_value(sid, a)) ++wrong;
          h += hash_string(name) ^ hash_string(value);
        }
        if (sid % kLongEvery != 0 || session->user != "user-" + std::to_string(sid) + "@accounts.example.org") ++wrong;
        checksum += mix64(h);
      }
    }
    return count;
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::uint64_t, std::unique_ptr<Session>> sessions;
  };
  Shard& shard_of(std::uint64_t sid) { return shards_[mix64(sid) % kShards]; }

  static std::int64_t measure(const Session& session) {
    std::size_t bytes = sizeof(Session) + session.user.size() + session.send_buffer.capacity();
    if (!session.recent.empty()) bytes += 576;  // the deque's first block and its map
    for (const auto& [name, value] : session.attributes) bytes += name.size() + value.size() + 64;
    for (const std::string& line : session.recent) bytes += line.size();
    return static_cast<std::int64_t>(bytes);
  }

  LiveBytes& live_;
  Shard shards_[kShards];
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t users = options.scaled(4000);
  const std::uint64_t requests = options.scaled(960000);
  const std::uint64_t threads = static_cast<std::uint64_t>(options.threads);
  Store store(live);
  std::atomic<std::uint64_t> missing{0};
  const auto start = Clock::now();
  run_threads(options.threads, [&](int t) {
    for (std::uint64_t sid = static_cast<std::uint64_t>(t); sid < users; sid += threads) store.login(sid);
  });
  run_threads(options.threads, [&](int t) {
    XorShift random(options.seed * 4099 + static_cast<std::uint64_t>(t));
    for (std::uint64_t i = 0; i < requests / threads; ++i) {
      if (!store.request(random.below(users), random.next())) missing.fetch_add(1);
    }
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  // Logouts: each user is logged out by another thread than the one that logged it in.
  run_threads(options.threads, [&](int t) {
    const std::uint64_t mine = (static_cast<std::uint64_t>(t) + 1) % threads;
    for (std::uint64_t sid = mine; sid < users; sid += threads) {
      if (sid % kLongEvery != 0) store.logout(sid);
    }
  });
  report.seconds = seconds_since(start);
  report.operations = users * 2 + requests;
  report.live_bytes = live.now();
  std::uint64_t checksum = 0, wrong = 0;
  const std::uint64_t left = store.survey(checksum, wrong);
  report.checksum = checksum;
  if (missing.load() != 0) report.fail("a request found no session for a logged-in user");
  if (left != (users + kLongEvery - 1) / kLongEvery) {
    report.fail(std::to_string(left) + " sessions left after the logouts, expected the long ones only");
  }
  if (wrong != 0) report.fail(std::to_string(wrong) + " wrong attributes or sessions left");
  XorShift idle(options.seed * 17);
  report.steady_state = run_quiet_phase(options, [&] {
    const std::uint64_t sid = idle.below((users + kLongEvery - 1) / kLongEvery) * kLongEvery;
    if (!store.request(sid, idle.next())) missing.fetch_add(1);
    return live.now();
  }, "\"sessions\": " + std::to_string(left));
  if (missing.load() != 0) report.fail("a long session vanished during the quiet phase");
  report.add("users", users);
  report.add("sessions_left", left);
  return report;
}

}  // namespace sessions

// ------------------------------------------------------------------------------------------------------------
// ast-builder: a compiler front end. Generated modules of `let NAME = EXPR;` statements are lexed into tokens,
// parsed into trees of small nodes and evaluated; identifiers are interned in a symbol table that lives to the
// end. The peak is a whole-program link that keeps every module's tree alive at once; after it, modules are
// compiled one at a time and each tree is dropped.
namespace compiler {

enum class Kind : std::uint8_t { kNumber, kName, kAdd, kSub, kMul, kXor, kCall };

struct Node {
  Kind kind;
  std::uint64_t value = 0;
  const std::string* symbol = nullptr;
  std::vector<std::unique_ptr<Node>> children;
};

struct Statement {
  const std::string* name;
  std::unique_ptr<Node> expression;
};

struct Module {
  std::string source;
  std::vector<Statement> statements;
  std::vector<std::uint64_t> expected;
  std::int64_t bytes = 0;
};

class SymbolTable {
 public:
  explicit SymbolTable(LiveBytes& live) : live_(live) {}
  const std::string* intern(std::string_view text) {
    auto found = symbols_.find(std::string(text));
    if (found != symbols_.end()) return &*found;
    live_.add(static_cast<std::int64_t>(text.size() + 48));
    return &*symbols_.emplace(text).first;
  }
  std::size_t size() const { return symbols_.size(); }
  bool contains(const std::string& text) const { return symbols_.count(text) != 0; }

 private:
  LiveBytes& live_;
  std::unordered_set<std::string> symbols_;
};

// The source generator writes an expression and computes its value at the same time.
class SourceWriter {
 public:
  SourceWriter(std::uint64_t module, std::string& out) : module_(module), random_(module * 7 + 1), out_(out) {}

  std::uint64_t expression(int depth, const std::vector<std::uint64_t>& values) {
    const std::uint64_t pick = random_.below(depth >= 4 ? 2 : 7);
    if (pick == 0 || (pick == 1 && values.empty())) {
      const std::uint64_t n = random_.below(100000);
      out_ += std::to_string(n);
      return n;
    }
    if (pick == 1) {
      const std::size_t i = random_.below(values.size());
      out_ += variable_name(module_, i);
      return values[i];
    }
    if (pick == 6) {
      out_ += "mix(";
      const std::uint64_t a = expression(depth + 1, values);
      out_ += ", ";
      const std::uint64_t b = expression(depth + 1, values);
      out_ += ")";
      return a * 31 + (b ^ 0x5bd1e995);
    }
    static const char kOps[] = {'+', '-', '*', '^'};
    const char op = kOps[pick - 2];
    out_ += "(";
    const std::uint64_t a = expression(depth + 1, values);
    out_ += ' ';
    out_ += op;
    out_ += ' ';
    const std::uint64_t b = expression(depth + 1, values);
    out_ += ")";
    switch (op) {
      case '+': return a + b;
      case '-': return a - b;
      case '*': return a * b;
      default: return a ^ b;
    }
  }

  static std::string variable_name(std::uint64_t module, std::size_t i) {
    return "module_" + std::to_string(module) + "_value_" + std::to_string(i);
  }

 private:
  std::uint64_t module_;
  XorShift random_;
  std::string& out_;
};

Module generate_module(std::uint64_t module, std::size_t statements) {
  Module out;
  out.source.reserve(statements * 64);
  SourceWriter writer(module, out.source);
  for (std::size_t i = 0; i < statements; ++i) {
    out.source += "let " + SourceWriter::variable_name(module, i) + " = ";
    out.expected.push_back(writer.expression(0, out.expected));
    out.source += ";\n";
  }
  return out;
}

struct Token {
  Kind kind;  // kNumber, kName, or an operator; punctuation as kCall with the character in value
  std::string text;
  std::uint64_t value = 0;
};

std::vector<Token> lex(const std::string& source) {
  std::vector<Token> tokens;
  std::size_t i = 0;
  while (i < source.size()) {
    const char c = source[i];
    if (c == ' ' || c == '\n') {
      ++i;
    } else if (c >= '0' && c <= '9') {
      std::uint64_t n = 0;
      while (i < source.size() && source[i] >= '0' && source[i] <= '9') n = n * 10 + (source[i++] - '0');
      tokens.push_back(Token{Kind::kNumber, {}, n});
    } else if ((c >= 'a' && c <= 'z') || c == '_') {
      const std::size_t begin = i;
      while (i < source.size() && (std::isalnum(static_cast<unsigned char>(source[i])) || source[i] == '_')) ++i;
      tokens.push_back(Token{Kind::kName, source.substr(begin, i - begin), 0});
    } else {
      tokens.push_back(Token{Kind::kCall, {}, static_cast<std::uint64_t>(c)});
      ++i;
    }
  }
  return tokens;
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, SymbolTable& symbols, LiveBytes& live, std::int64_t& bytes)
      : tokens_(tokens), symbols_(symbols), live_(live), bytes_(bytes) {}

  bool parse_module(std::vector<Statement>& out) {
    while (at_ < tokens_.size()) {
      if (!is_name("let")) return false;
      ++at_;
      if (at_ >= tokens_.size() || tokens_[at_].kind != Kind::kName) return false;
      const std::string* name = symbols_.intern(tokens_[at_++].text);
      if (!is_punct('=')) return false;
      ++at_;
      std::unique_ptr<Node> expression = parse_expression();
      if (expression == nullptr || !is_punct(';')) return false;
      ++at_;
      out.push_back(Statement{name, std::move(expression)});
    }
    return true;
  }

 private:
  bool is_name(const char* text) const {
    return at_ < tokens_.size() && tokens_[at_].kind == Kind::kName && tokens_[at_].text == text;
  }
  bool is_punct(char c) const {
    return at_ < tokens_.size() && tokens_[at_].kind == Kind::kCall &&
           tokens_[at_].value == static_cast<std::uint64_t>(c);
  }

  std::unique_ptr<Node> make_node(Kind kind) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    const std::int64_t bytes = sizeof(Node);
    bytes_ += bytes;
    live_.add(bytes);
    return node;
  }

  std::unique_ptr<Node> parse_expression() {
    if (at_ >= tokens_.size()) return nullptr;
    const Token& token = tokens_[at_];
    if (token.kind == Kind::kNumber) {
      ++at_;
      auto node = make_node(Kind::kNumber);
      node->value = token.value;
      return node;
    }
    if (token.kind == Kind::kName && token.text == "mix") {
      ++at_;
      if (!is_punct('(')) return nullptr;
      ++at_;
      auto node = make_node(Kind::kCall);
      node->symbol = symbols_.intern("mix");
      node->children.push_back(parse_expression());
      if (!is_punct(',')) return nullptr;
      ++at_;
      node->children.push_back(parse_expression());
      if (!is_punct(')') || node->children[0] == nullptr || node->children[1] == nullptr) return nullptr;
      ++at_;
      add_children_bytes(*node);
      return node;
    }
    if (token.kind == Kind::kName) {
      ++at_;
      auto node = make_node(Kind::kName);
      node->symbol = symbols_.intern(token.text);
      return node;
    }
    if (!is_punct('(')) return nullptr;
    ++at_;
    std::unique_ptr<Node> left = parse_expression();
    if (left == nullptr || at_ >= tokens_.size() || tokens_[at_].kind != Kind::kCall) return nullptr;
    Kind kind;
    switch (static_cast<char>(tokens_[at_].value)) {
      case '+': kind = Kind::kAdd; break;
      case '-': kind = Kind::kSub; break;
      case '*': kind = Kind::kMul; break;
      case '^': kind = Kind::kXor; break;
      default: return nullptr;
    }
    ++at_;
    std::unique_ptr<Node> right = parse_expression();
    if (right == nullptr || !is_punct(')')) return nullptr;
    ++at_;
    auto node = make_node(kind);
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    add_children_bytes(*node);
    return node;
  }

  void add_children_bytes(const Node& node) {
    const std::int64_t bytes = static_cast<std::int64_t>(node.children.capacity() * sizeof(void*));
    bytes_ += bytes;
    live_.add(bytes);
  }

  const std::vector<Token>& tokens_;
  SymbolTable& symbols_;
  LiveBytes& live_;
  std::int64_t& bytes_;
  std::size_t at_ = 0;
};

class Evaluator {
 public:
  std::uint64_t evaluate(const Node& node) {
    switch (node.kind) {
      case Kind::kNumber: return node.value;
      case Kind::kName: {
        auto found = values_.find(node.symbol);
        return found == values_.end() ? 0 : found->second;
      }
      case Kind::kAdd: return evaluate(*node.children[0]) + evaluate(*node.children[1]);
      case Kind::kSub: return evaluate(*node.children[0]) - evaluate(*node.children[1]);
      case Kind::kMul: return evaluate(*node.children[0]) * evaluate(*node.children[1]);
      case Kind::kXor: return evaluate(*node.children[0]) ^ evaluate(*node.children[1]);
      case Kind::kCall: return evaluate(*node.children[0]) * 31 + (evaluate(*node.children[1]) ^ 0x5bd1e995);
    }
    return 0;
  }
  void bind(const std::string* name, std::uint64_t value) { values_[name] = value; }

 private:
  std::unordered_map<const std::string*, std::uint64_t> values_;
};

class Compiler {
 public:
  explicit Compiler(LiveBytes& live) : live_(live), symbols_(live) {}

  std::unique_ptr<Module> front_end(std::uint64_t module, std::size_t statements) {
    auto out = std::make_unique<Module>(generate_module(module, statements));
    out->bytes = static_cast<std::int64_t>(out->source.capacity() + 8 * out->expected.capacity());
    live_.add(out->bytes);
    const std::vector<Token> tokens = lex(out->source);
    Parser parser(tokens, symbols_, live_, out->bytes);
    if (!parser.parse_module(out->statements)) ++parse_errors_;
    return out;
  }

  // Evaluates every statement and compares with the generator's values; returns their sum.
  std::uint64_t check(const Module& module) {
    Evaluator evaluator;
    std::uint64_t sum = 0;
    if (module.statements.size() != module.expected.size()) {
      ++wrong_values_;
      return 0;
    }
    for (std::size_t i = 0; i < module.statements.size(); ++i) {
      const std::uint64_t value = evaluator.evaluate(*module.statements[i].expression);
      evaluator.bind(module.statements[i].name, value);
      if (value != module.expected[i]) ++wrong_values_;
      sum += value;
    }
    return sum;
  }

  void release(std::unique_ptr<Module> module) {
    live_.sub(module->bytes);
    module.reset();
  }

  SymbolTable& symbols() { return symbols_; }
  std::uint64_t errors() const { return parse_errors_ + wrong_values_; }

 private:
  LiveBytes& live_;
  SymbolTable symbols_;
  std::uint64_t parse_errors_ = 0;
  std::uint64_t wrong_values_ = 0;
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t linked = options.scaled(48);
  const std::uint64_t separate = options.scaled(160);
  const std::size_t statements = 900;
  Compiler compiler(live);
  std::uint64_t checksum = 0;
  const auto start = Clock::now();
  // The whole-program link: every module's tree alive at once.
  std::vector<std::unique_ptr<Module>> program;
  for (std::uint64_t m = 0; m < linked; ++m) program.push_back(compiler.front_end(m, statements));
  for (const auto& module : program) checksum += compiler.check(*module);
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  for (auto& module : program) compiler.release(std::move(module));
  program.clear();
  // Then separate compilation: one tree at a time.
  for (std::uint64_t m = linked; m < linked + separate; ++m) {
    std::unique_ptr<Module> module = compiler.front_end(m, statements);
    checksum += compiler.check(*module);
    compiler.release(std::move(module));
  }
  report.seconds = seconds_since(start);
  report.operations = (linked + separate) * statements;
  report.live_bytes = live.now();
  report.checksum = checksum;
  if (compiler.errors() != 0) report.fail(std::to_string(compiler.errors()) + " parse errors or wrong values");
  const std::size_t symbols = compiler.symbols().size();
  if (symbols != (linked + separate) * statements + 1) report.fail("the symbol table lost or duplicated a name");
  // The idle compiler server answers symbol lookups.
  XorShift idle(options.seed * 19);
  std::uint64_t unknown = 0;
  report.steady_state = run_quiet_phase(options, [&] {
    const std::uint64_t module = idle.below(linked + separate);
    if (!compiler.symbols().contains(SourceWriter::variable_name(module, idle.below(statements)))) ++unknown;
    return live.now();
  }, "\"symbols\": " + std::to_string(symbols));
  if (unknown != 0) report.fail("a symbol vanished during the quiet phase");
  report.add("modules", linked + separate);
  report.add("linked_modules", linked);
  report.add("symbols", symbols);
  return report;
}

}  // namespace compiler

// ------------------------------------------------------------------------------------------------------------
// message-broker: topics with several subscribers each; a published message is shared by every subscriber's
// queue and by the topic's retention ring (the last messages, kept for late joiners). Slow subscribers stop
// consuming during a burst, so their queues hold the whole burst (the peak); then they catch up and only the
// retained messages stay.
namespace broker {

constexpr std::size_t kTopics = 16;
constexpr std::size_t kSubscribersPerTopic = 3;  // the last one of each topic is slow
constexpr std::size_t kRetained = 64;

struct Message {
  Message(LiveBytes& live, std::uint64_t id, std::size_t size) : live(live), id(id), payload(size, '\0') {
    fill_pattern(payload.data(), size, id);
    hash = hash_string(payload);
    key = "orders.eu-west." + std::to_string(id % 5000);
    live.add(bytes());
  }
  ~Message() { live.sub(bytes()); }
  std::int64_t bytes() const { return static_cast<std::int64_t>(sizeof(Message) + payload.size() + key.size()); }

  LiveBytes& live;
  std::uint64_t id;
  std::string payload;
  std::string key;
  std::uint64_t hash;
};

using MessagePtr = std::shared_ptr<const Message>;

struct Subscriber {
  std::deque<MessagePtr> queue;
  bool slow = false;
  std::uint64_t delivered = 0;
  std::uint64_t checksum = 0;
};

struct Topic {
  std::mutex mutex;
  std::string name;
  Subscriber subscribers[kSubscribersPerTopic];
  std::deque<MessagePtr> retained;
};

class Broker {
 public:
  explicit Broker(LiveBytes& live) : live_(live) {
    for (std::size_t t = 0; t < kTopics; ++t) {
      topics_[t].name = "topic-" + std::to_string(t);
      topics_[t].subscribers[kSubscribersPerTopic - 1].slow = true;
    }
  }

  void publish(std::uint64_t id, std::size_t size) {
    auto message = std::make_shared<const Message>(live_, id, size);
    Topic& topic = topics_[id % kTopics];
    std::lock_guard<std::mutex> lock(topic.mutex);
    for (Subscriber& subscriber : topic.subscribers) subscriber.queue.push_back(message);
    topic.retained.push_back(std::move(message));
    if (topic.retained.size() > kRetained) topic.retained.pop_front();
  }

  // One delivery pass over the topics `part` of `parts`: drains the fast subscribers, and the slow ones unless
  // they are held. Returns the messages delivered.
  std::uint64_t deliver(std::size_t part, std::size_t parts, bool slow_held) {
    std::uint64_t count = 0;
    for (std::size_t t = part; t < kTopics; t += parts) {
      Topic& topic = topics_[t];
      std::lock_guard<std::mutex> lock(topic.mutex);
      for (Subscriber& subscriber : topic.subscribers) {
        if (subscriber.slow && slow_held) continue;
        while (!subscriber.queue.empty()) {
          const Message& message = *subscriber.queue.front();
          if (hash_string(message.payload) != message.hash) corrupt_.fetch_add(1);
          subscriber.checksum += message.hash;
          subscriber.delivered += 1;
          subscriber.queue.pop_front();
          ++count;
        }
      }
    }
    return count;
  }

  void totals(std::uint64_t& delivered, std::uint64_t& checksum, std::uint64_t& queued, std::uint64_t& retained) {
    delivered = checksum = queued = retained = 0;
    for (Topic& topic : topics_) {
      std::lock_guard<std::mutex> lock(topic.mutex);
      for (const Subscriber& subscriber : topic.subscribers) {
        delivered += subscriber.delivered;
        checksum += subscriber.checksum;
        queued += subscriber.queue.size();
      }
      retained += topic.retained.size();
    }
  }

  std::uint64_t corrupt() const { return corrupt_.load(); }

 private:
  LiveBytes& live_;
  Topic topics_[kTopics];
  std::atomic<std::uint64_t> corrupt_{0};
};

std::size_t message_bytes(std::uint64_t id) { return log_uniform(mix64(id ^ 0xB40C), 64, 16384); }

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t burst = options.scaled(12000);
  const std::uint64_t after = options.scaled(120000);
  const std::size_t publishers = static_cast<std::size_t>(std::max(1, options.threads / 2));
  const std::size_t deliverers = static_cast<std::size_t>(std::max(1, options.threads - options.threads / 2));
  Broker broker(live);
  std::atomic<bool> slow_held{true}, stop{false};
  std::atomic<std::uint64_t> published_hash{0};
  std::vector<std::thread> delivery;
  for (std::size_t d = 0; d < deliverers; ++d) {
    delivery.emplace_back([&, d] {
      while (!stop.load()) {
        if (broker.deliver(d, deliverers, slow_held.load()) == 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
      broker.deliver(d, deliverers, false);
    });
  }
  auto publish_range = [&](std::uint64_t first, std::uint64_t last) {
    run_threads(static_cast<int>(publishers), [&](int p) {
      for (std::uint64_t id = first + static_cast<std::uint64_t>(p); id < last; id += publishers) {
        const std::size_t size = message_bytes(id);
        broker.publish(id, size);
        std::string probe(size, '\0');
        fill_pattern(probe.data(), size, id);
        published_hash.fetch_add(hash_string(probe));
      }
    });
  };
  const auto start = Clock::now();
  publish_range(0, burst);
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  slow_held.store(false);  // the slow subscribers catch up
  publish_range(burst, burst + after);
  std::uint64_t delivered = 0, checksum = 0, queued = 0, retained = 0;
  const std::uint64_t expected_deliveries = (burst + after) * kSubscribersPerTopic;
  for (int wait = 0; wait < 60000; ++wait) {
    broker.totals(delivered, checksum, queued, retained);
    if (delivered == expected_deliveries) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  report.seconds = seconds_since(start);
  report.operations = burst + after;
  report.live_bytes = live.now();
  report.checksum = checksum;
  if (delivered != expected_deliveries) {
    report.fail(std::to_string(delivered) + " deliveries, expected " + std::to_string(expected_deliveries));
  }
  if (checksum != published_hash.load() * kSubscribersPerTopic) {
    report.fail("the delivered messages' checksum is wrong");
  }
  if (retained != kTopics * kRetained) report.fail("a topic's retention ring is not full");
  // Idle: a heartbeat on one topic now and then (it rotates that topic's retention ring).
  std::uint64_t heartbeat = burst + after;
  report.steady_state = run_quiet_phase(options, [&] {
    broker.publish(heartbeat++, 64);
    return live.now();
  }, "\"retained\": " + std::to_string(retained));
  stop.store(true);
  for (std::thread& thread : delivery) thread.join();
  if (broker.corrupt() != 0) report.fail("a message's payload changed before delivery");
  report.add("messages", heartbeat);
  report.add("retained", retained);
  report.add("deliveries", delivered);
  return report;
}

}  // namespace broker

// ------------------------------------------------------------------------------------------------------------

struct Shape {
  const char* name;
  Report (*run)(const Options&);
  bool fixed_threads;  // the shape's threads are its roles; --threads does not apply
};

const Shape kShapes[] = {
    {"lru-cache", lru::run, false},
    {"ttl-cache", ttl::run, false},
    {"hash-trimmed-cache", hash_trimmed::run, false},
    {"batch-arena", batch::run, false},
    {"stream-pipeline", stream::run, true},
    {"producer-consumer", prodcons::run, false},
    {"session-store", sessions::run, false},
    {"ast-builder", compiler::run, true},
    {"message-broker", broker::run, false},
};

std::string shape_names() {
  std::string names;
  for (const Shape& shape : kShapes) names += (names.empty() ? "" : ", ") + std::string(shape.name);
  return names;
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "shapes: %s\n", message.c_str());
  std::fprintf(stderr,
               "usage: shapes --shape NAME [--scale small|default] [--quiet-seconds S] [--threads N] [--seed N]\n"
               "shapes: %s\n",
               shape_names().c_str());
  std::exit(2);
}

std::uint64_t parse_number(const char* flag, const char* text, std::uint64_t lo, std::uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || text[0] == '-' || value < lo || value > hi) {
    usage_error(std::string(flag) + ": expected a number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                ", got " + text);
  }
  return value;
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--shape") {
      options.shape = value();
    } else if (arg == "--scale") {
      const std::string_view scale = value();
      if (scale == "small") {
        options.small = true;
        if (!options.quiet_seconds_given) options.quiet_seconds = 2;
      } else if (scale == "default") {
        options.small = false;
        if (!options.quiet_seconds_given) options.quiet_seconds = 10;
      } else {
        usage_error("--scale: expected small or default, got " + std::string(scale));
      }
    } else if (arg == "--quiet-seconds") {
      const char* text = value();
      if (!steady_state::parse_seconds(text, options.quiet_seconds)) {
        usage_error("--quiet-seconds: expected a number of seconds >= 0, got " + std::string(text));
      }
      options.quiet_seconds_given = true;
    } else if (arg == "--threads") {
      options.threads = static_cast<int>(parse_number("--threads", value(), 1, 256));
      options.threads_given = true;
    } else if (arg == "--seed") {
      options.seed = parse_number("--seed", value(), 0, ~std::uint64_t{0});
    } else if (arg == "-h" || arg == "--help") {
      std::printf("shapes: a corpus of program shapes, each a load peak, a drop and a quiet phase "
                  "(docs/workloads.md)\nshapes: %s\n", shape_names().c_str());
      std::exit(0);
    } else {
      usage_error("unknown option " + std::string(arg));
    }
  }
  if (options.shape.empty()) usage_error("--shape is required");
  return options;
}

int run_shape(const Options& options) {
  const Shape* shape = nullptr;
  for (const Shape& candidate : kShapes) {
    if (options.shape == candidate.name) shape = &candidate;
  }
  if (shape == nullptr) usage_error("--shape: unknown shape " + options.shape);
  if (shape->fixed_threads && options.threads_given) {
    usage_error(std::string("--threads: ") + shape->name + " has fixed threads (its roles); --threads does not apply");
  }
  const int threads = shape->fixed_threads ? (options.shape == "ast-builder" ? 1 : 3) : options.threads;
  Report report = shape->run(options);
  char checksum[48] = "";
  if (report.checksum) std::snprintf(checksum, sizeof checksum, ", \"checksum\": \"%016" PRIx64 "\"", *report.checksum);
  std::string failure;
  if (!report.ok) {
    failure = ", \"failure\": \"";
    for (char c : report.failure) failure += (c == '"' || c == '\\') ? '\'' : c;
    failure += "\"";
  }
  std::printf("{\"workload\": \"%s\", \"ok\": %s%s, \"seconds\": %.3f, \"threads\": %d, \"operations\": %" PRIu64
              ", \"operations_per_second\": %.0f%s, \"peak_live_bytes\": %" PRId64 ", \"live_bytes\": %" PRId64
              ", \"peak_rss_bytes\": %" PRIu64 "%s, \"steady_state\": %s}\n",
              shape->name, report.ok ? "true" : "false", failure.c_str(), report.seconds, threads, report.operations,
              report.seconds > 0 ? static_cast<double>(report.operations) / report.seconds : 0.0, checksum,
              report.peak_live_bytes, report.live_bytes, report.peak_rss_bytes, report.extra.c_str(),
              report.steady_state.c_str());
  std::fflush(stdout);
  if (!report.ok) {
    std::fprintf(stderr, "shapes: %s: %s\n", shape->name, report.failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace shapes

int main(int argc, char** argv) { return shapes::run_shape(shapes::parse_options(argc, argv)); }
