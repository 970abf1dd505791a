// ttl-cache: entries with mixed time-to-live, short (page fragments) and long (configuration), and an expiry
// thread driven by a timer heap. Time is logical, one unit per insert, so what expires when does not depend on
// speed. At the end of the inserts most short entries are still live (the peak); then time moves on and the
// expiry thread removes every short entry, leaving only the long ones.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h, the run in expiring_cache.h.
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

#include "expiring_cache.h"
#include "shapes.h"

namespace shapes {

namespace ttl {

using expiring::kNever;

constexpr std::size_t kShards = 8;

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

using Timers = std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>>;

class Store : public expiring::ShardedCache<Item, Timers, kShards> {
 public:
  using ShardedCache::ShardedCache;

  // Short entries live a quarter to all of the insert period, so most are live when the inserts end.
  static std::uint64_t time_to_live(std::uint64_t id, std::uint64_t total) {
    return is_long(id) ? kNever : total / 4 + mix64(id) % (total * 3 / 4);
  }
  static bool kept(std::uint64_t id) { return is_long(id); }

  // The expiry thread's sweep: every entry whose timer fell due by `now` goes.
  std::uint64_t expire(std::uint64_t now) {
    return sum_locked([&](Shard& shard) {
      std::uint64_t removed = 0;
      while (!shard.deadlines.empty() && shard.deadlines.top().at <= now) {
        auto found = shard.entries.find(shard.deadlines.top().key);
        if (found != shard.entries.end() && found->second.expires_at <= now) {
          live_.sub(static_cast<std::int64_t>(found->first.size() + found->second.value.size()));
          shard.entries.erase(found);
          ++removed;
        }
        shard.deadlines.pop();
      }
      return removed;
    });
  }

  std::uint64_t pending() { return sum_locked([](Shard& shard) { return shard.deadlines.size(); }); }

  void insert(std::uint64_t id, std::uint64_t now, std::uint64_t ttl) {
    std::string key = entry_key(id);
    std::string value(value_bytes(id), '\0');
    fill_pattern(value.data(), value.size(), id);
    const std::uint64_t expires = ttl == kNever ? kNever : now + ttl;
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (expires != kNever) shard.deadlines.push(Timer{expires, key});
    live_.add(static_cast<std::int64_t>(key.size() + value.size()));
    shard.entries.emplace(std::move(key), Item{std::move(value), expires});
  }

  bool lookup(std::uint64_t id, bool& intact) {
    const std::string key = entry_key(id);
    return read_entry(shard_of(key), key, value_bytes(id), id, intact);
  }

  expiring::Survey survey() {
    return survey_entries([](const std::string&, const Item& item) { return item.expires_at == kNever; });
  }

 private:
  Shard& shard_of(const std::string& key) { return shards_[hash_string(key) % kShards]; }
};

// The run (expiring_cache.h): inserts at small scale, reads per insert, the read window, the seeds of the
// writers' and the quiet phase's reads, and the words of the report.
constexpr expiring::Plan kPlan{24000, 48, 2048, 977, 3, 11,
                               "the expiry thread left short entries past their deadline", "after expiry", "long",
                               "a long entry"};

Report run(const Options& options) { return expiring::run<Store>(options, kPlan); }

}  // namespace ttl

}  // namespace shapes
