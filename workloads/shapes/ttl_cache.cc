// ttl-cache: entries with mixed time-to-live, short (page fragments) and long (configuration), and an expiry
// thread driven by a timer heap. Time is logical, one unit per insert, so what expires when does not depend on
// speed. At the end of the inserts most short entries are still live (the peak); then time moves on and the
// expiry thread removes every short entry, leaving only the long ones.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

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
  Ticker expiry([&store, &clock] { return store.expire_until(clock.load()); });
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
  report.add("expired", expiry.total());
  return report;
}

}  // namespace ttl

}  // namespace shapes
