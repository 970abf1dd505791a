// lru-cache: a sharded LRU cache of rendered pages (std::unordered_map + std::list), four request threads.
// The peak fills the cache to its capacity; then the capacity is cut to a tenth (a memory-pressure
// reconfiguration), the least recently used entries go, and light traffic runs on at the new capacity.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

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
  const PhaseStart start;
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
  end_phase(report, start);
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

}  // namespace shapes
