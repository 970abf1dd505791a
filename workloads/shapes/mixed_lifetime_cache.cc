// mixed-lifetime-cache: one node of a distributed object cache, fed from one call site. Every entry is made by
// the same insert function, the same way (a key string, a value of 64 B to 4 KiB from one size distribution).
// The node owns the keys whose hash falls in its slice, one in twenty: it keeps those for good. The other 95%
// are near-cache copies of other nodes' keys, which expire after half to all of the insert period. So an
// entry's lifetime is decided by its key's hash, not by its call stack or its size. Time is logical, one unit
// per insert, so what expires when does not depend on speed. The peak is the end of the inserts; then time
// moves on, a sweeper thread driven by a timing wheel removes every copy, and the owned 5% stay.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

namespace mixed_lifetime {

constexpr std::size_t kShards = 16;
constexpr std::size_t kEntryOverhead = 64;  // map node and bucket, counted with the payload
constexpr std::uint64_t kSlice = 20;        // the node owns one key in kSlice
constexpr std::uint64_t kNever = ~std::uint64_t{0};
constexpr std::uint64_t kSlotUnits = 256;  // logical time units per slot of the timing wheel
constexpr int kReadsPerInsert = 8;

std::string object_key(std::uint64_t id) {
  char text[64];
  const int n = std::snprintf(text, sizeof text, "obj:tenant-%03" PRIu64 "/%016" PRIx64, mix64(id ^ 0x7E4A) % 500,
                              mix64(id));
  return std::string(text, static_cast<std::size_t>(n));
}

// The node's slice of the key space: decided by the key alone.
bool owns(const std::string& key) { return hash_string(key) % kSlice == 0; }

std::size_t value_bytes(std::uint64_t id) { return log_uniform(mix64(id ^ 0x3A1E), 64, 4096); }

struct Entry {
  std::string value;
  std::uint64_t expires_at;
};

class NodeCache {
 public:
  explicit NodeCache(LiveBytes& live) : live_(live) {}

  // The one insert of the cache: every entry, owned or copied, is made here the same way; only its deadline
  // differs, by the key's hash.
  void insert(std::uint64_t id, std::uint64_t now, std::uint64_t copy_ttl) {
    std::string key = object_key(id);
    std::string value(value_bytes(id), '\0');
    fill_pattern(value.data(), value.size(), id);
    const std::uint64_t expires = owns(key) ? kNever : now + copy_ttl;
    const std::size_t charge = key.size() + value.size() + kEntryOverhead;
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (expires != kNever) shard.wheel[expires / kSlotUnits].push_back(key);
    live_.add(static_cast<std::int64_t>(charge));
    shard.entries.emplace(std::move(key), Entry{std::move(value), expires});
  }

  // A read of the entry of `id`, checked; false when it is not there.
  bool lookup(std::uint64_t id, bool& intact) {
    const std::string key = object_key(id);
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto found = shard.entries.find(key);
    if (found == shard.entries.end()) return false;
    const std::string& value = found->second.value;
    intact = value.size() == value_bytes(id) && pattern_matches(value.data(), value.size(), id);
    return true;
  }

  // The sweeper: every slot of the wheel that lies wholly before `now` is emptied, its entries removed.
  std::uint64_t sweep(std::uint64_t now) {
    std::uint64_t removed = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      while (!shard.wheel.empty() && (shard.wheel.begin()->first + 1) * kSlotUnits <= now) {
        for (const std::string& key : shard.wheel.begin()->second) {
          auto found = shard.entries.find(key);
          if (found == shard.entries.end() || found->second.expires_at > now) continue;
          live_.sub(static_cast<std::int64_t>(found->first.size() + found->second.value.size() + kEntryOverhead));
          shard.entries.erase(found);
          ++removed;
        }
        shard.wheel.erase(shard.wheel.begin());
      }
    }
    return removed;
  }

  std::uint64_t pending_slots() {
    std::uint64_t slots = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      slots += shard.wheel.size();
    }
    return slots;
  }

  // Entries, owned entries and the order-independent checksum of what is stored.
  void survey(std::uint64_t& entries, std::uint64_t& owned, std::uint64_t& checksum) {
    entries = owned = checksum = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      for (const auto& [key, entry] : shard.entries) {
        ++entries;
        if (entry.expires_at == kNever && owns(key)) ++owned;
        checksum += hash_string(key) ^ hash_string(entry.value);
      }
    }
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, Entry> entries;
    std::map<std::uint64_t, std::vector<std::string>> wheel;  // slot -> keys that expire in it
  };
  Shard& shard_of(const std::string& key) { return shards_[mix64(hash_string(key)) % kShards]; }

  LiveBytes& live_;
  Shard shards_[kShards];
};

void writer(NodeCache& cache, std::atomic<std::uint64_t>& clock, std::uint64_t first, std::uint64_t stride,
            std::uint64_t count, std::uint64_t total, std::atomic<std::uint64_t>& corrupt) {
  XorShift random(first * 613 + 5);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t id = first + i * stride;
    const std::uint64_t now = clock.fetch_add(1);
    // A copy lives half to all of the insert period, whoever inserts it.
    cache.insert(id, now, total / 2 + mix64(id ^ 0x771) % (total / 2));
    for (int r = 0; r < kReadsPerInsert && i > 0; ++r) {
      bool intact = true;
      const std::uint64_t back = std::min<std::uint64_t>(i, 4096);
      if (cache.lookup(first + (i - 1 - random.below(back)) * stride, intact) && !intact) corrupt.fetch_add(1);
    }
  }
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t total = options.scaled(40000);
  std::uint64_t owned_inserted = 0;
  for (std::uint64_t id = 0; id < total; ++id) owned_inserted += owns(object_key(id)) ? 1 : 0;
  NodeCache cache(live);
  std::atomic<std::uint64_t> clock{0};
  std::atomic<std::uint64_t> corrupt{0};
  const auto start = Clock::now();
  Ticker sweeper([&cache, &clock] { return cache.sweep(clock.load()); });
  const std::uint64_t writers = static_cast<std::uint64_t>(options.threads);
  run_threads(options.threads, [&](int t) {
    const std::uint64_t first = static_cast<std::uint64_t>(t);
    writer(cache, clock, first, writers, (total - first + writers - 1) / writers, total, corrupt);
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  // Time moves past every copy's deadline; the sweeper removes them.
  clock.fetch_add(2 * total);
  for (int wait = 0; wait < 30000 && cache.pending_slots() != 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::uint64_t entries = 0, owned = 0, checksum = 0;
  cache.survey(entries, owned, checksum);
  report.seconds = seconds_since(start);
  report.operations = total * (kReadsPerInsert + 1);
  report.live_bytes = live.now();
  report.checksum = checksum;
  if (cache.pending_slots() != 0) report.fail("the sweeper left copies past their deadline");
  if (entries != owned || owned != owned_inserted) {
    report.fail("after the sweep " + std::to_string(entries) + " entries are left, " + std::to_string(owned) +
                " of them owned; expected the " + std::to_string(owned_inserted) + " owned entries");
  }
  XorShift idle(options.seed * 17);
  report.steady_state = run_quiet_phase(options, [&] {
    for (int i = 0; i < 8; ++i) {
      std::uint64_t id = idle.below(total);
      while (!owns(object_key(id))) id = (id + 1) % total;
      bool intact = true;
      if (!cache.lookup(id, intact) || !intact) corrupt.fetch_add(1);
    }
    return live.now();
  }, "\"entries\": " + std::to_string(entries));
  if (corrupt.load() != 0) report.fail("an entry read back with the wrong value, or an owned entry vanished");
  report.add("inserted", total);
  report.add("owned_entries", owned);
  report.add("expired", sweeper.total());
  return report;
}

}  // namespace mixed_lifetime

}  // namespace shapes
