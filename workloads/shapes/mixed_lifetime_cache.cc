// mixed-lifetime-cache: one node of a distributed object cache, fed from one call site. Every entry is made by
// the same insert function, the same way (a key string, a value of 64 B to 4 KiB from one size distribution).
// The node owns the keys whose hash falls in its slice, one in twenty: it keeps those for good. The other 95%
// are near-cache copies of other nodes' keys, which expire after half to all of the insert period. So an
// entry's lifetime is decided by its key's hash, not by its call stack or its size. Time is logical, one unit
// per insert, so what expires when does not depend on speed. The peak is the end of the inserts; then time
// moves on, a sweeper thread driven by a timing wheel removes every copy, and the owned 5% stay.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h, the run in expiring_cache.h.
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "expiring_cache.h"
#include "shapes.h"

namespace shapes {

namespace mixed_lifetime {

using expiring::kNever;

constexpr std::size_t kShards = 16;
constexpr std::size_t kEntryOverhead = 64;  // map node and bucket, counted with the payload
constexpr std::uint64_t kSlice = 20;        // the node owns one key in kSlice
constexpr std::uint64_t kSlotUnits = 256;  // logical time units per slot of the timing wheel

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

using Wheel = std::map<std::uint64_t, std::vector<std::string>>;  // slot -> keys that expire in it

class NodeCache : public expiring::ShardedCache<Entry, Wheel, kShards> {
 public:
  using ShardedCache::ShardedCache;

  // A copy lives half to all of the insert period, whoever inserts it.
  static std::uint64_t time_to_live(std::uint64_t id, std::uint64_t total) {
    return total / 2 + mix64(id ^ 0x771) % (total / 2);
  }
  static bool kept(std::uint64_t id) { return owns(object_key(id)); }

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
    if (expires != kNever) shard.deadlines[expires / kSlotUnits].push_back(key);
    live_.add(static_cast<std::int64_t>(charge));
    shard.entries.emplace(std::move(key), Entry{std::move(value), expires});
  }

  bool lookup(std::uint64_t id, bool& intact) {
    const std::string key = object_key(id);
    return read_entry(shard_of(key), key, value_bytes(id), id, intact);
  }

  // The sweeper: every slot of the wheel that lies wholly before `now` is emptied, its entries removed.
  std::uint64_t expire(std::uint64_t now) {
    return sum_locked([&](Shard& shard) {
      std::uint64_t removed = 0;
      while (!shard.deadlines.empty() && (shard.deadlines.begin()->first + 1) * kSlotUnits <= now) {
        for (const std::string& key : shard.deadlines.begin()->second) {
          auto found = shard.entries.find(key);
          if (found == shard.entries.end() || found->second.expires_at > now) continue;
          live_.sub(static_cast<std::int64_t>(found->first.size() + found->second.value.size() + kEntryOverhead));
          shard.entries.erase(found);
          ++removed;
        }
        shard.deadlines.erase(shard.deadlines.begin());
      }
      return removed;
    });
  }

  // The wheel's slots still to sweep.
  std::uint64_t pending() { return sum_locked([](Shard& shard) { return shard.deadlines.size(); }); }

  expiring::Survey survey() {
    return survey_entries(
        [](const std::string& key, const Entry& entry) { return entry.expires_at == kNever && owns(key); });
  }

 private:
  Shard& shard_of(const std::string& key) { return shards_[mix64(hash_string(key)) % kShards]; }
};

// The run (expiring_cache.h): inserts at small scale, reads per insert, the read window, the seeds of the
// writers' and the quiet phase's reads, and the words of the report.
constexpr expiring::Plan kPlan{40000, 8, 4096, 613, 5, 17, "the sweeper left copies past their deadline",
                               "after the sweep", "owned", "an owned entry"};

Report run(const Options& options) { return expiring::run<NodeCache>(options, kPlan); }

}  // namespace mixed_lifetime

}  // namespace shapes
