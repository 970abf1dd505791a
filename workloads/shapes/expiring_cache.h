// The run of the expiring-cache shapes, ttl-cache and mixed-lifetime-cache (ttl_cache.cc,
// mixed_lifetime_cache.cc): a sharded cache whose entries expire by logical time, one unit per insert, so that
// what expires when does not depend on speed. Writer threads insert the entries, each insert followed by reads
// of the writer's recent entries, while an expiry thread removes what has fallen due. At the end of the inserts
// (the peak) time moves past every deadline; the expiry thread removes all but the kept entries (those that
// never expire), and the quiet phase reads kept entries back.
//
// The shape's cache makes, reads and removes the entries, in the shape's namespace and functions (shapes.h
// says why); the run here only calls it. A Cache has
//   explicit Cache(LiveBytes& live);
//   static std::uint64_t time_to_live(std::uint64_t id, std::uint64_t inserts);  // kNever, or logical time
//   static bool kept(std::uint64_t id);  // whether the entry of `id` never expires
//   void insert(std::uint64_t id, std::uint64_t now, std::uint64_t time_to_live);
//   bool lookup(std::uint64_t id, bool& intact);  // false when the entry is not there
//   std::uint64_t expire(std::uint64_t now);  // the expiry thread's sweep: the entries it removed
//   std::uint64_t pending();  // deadlines still to come
//   Survey survey();
// and keeps its entries in a ShardedCache, whose Entry has the `value` string and `expires_at`.
#ifndef LLAMALLOC_WORKLOADS_SHAPES_EXPIRING_CACHE_H
#define LLAMALLOC_WORKLOADS_SHAPES_EXPIRING_CACHE_H

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "shapes.h"

namespace shapes::expiring {

constexpr std::uint64_t kNever = ~std::uint64_t{0};

// What a cache holds after the run: its entries, the kept ones and the order-independent checksum of them all.
struct Survey {
  std::uint64_t entries = 0;
  std::uint64_t kept = 0;
  std::uint64_t checksum = 0;
};

// What a shape's run sets.
struct Plan {
  std::size_t small_inserts;  // at small scale (Options::scaled)
  int reads_per_insert;
  std::uint64_t read_window;  // a writer reads one of its last `read_window` entries
  std::uint64_t writer_seed_factor, writer_seed_offset;  // a writer's reads: XorShift(first * factor + offset)
  std::uint64_t idle_seed_factor;  // the quiet phase's reads: XorShift(options.seed * factor)
  // The report's words: what the expiry thread left when it left some entries past their deadline, what comes
  // before the count of entries left, the kept entries' adjective and "a"/"an" with it.
  const char* left_past_deadline;
  const char* after_expiry;
  const char* kept_adjective;
  const char* a_kept_entry;
};

// The storage of an expiring cache: its entries by key in `Count` shards, each under its own mutex and with the
// shape's index of their deadlines (`Deadlines`), and the shape's count of the bytes that they hold.
template <typename Entry, typename Deadlines, std::size_t Count>
class ShardedCache {
 public:
  explicit ShardedCache(LiveBytes& live) : live_(live) {}

 protected:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, Entry> entries;
    Deadlines deadlines;
  };

  // Sums f(shard) over the shards, each under its mutex.
  template <typename F>
  std::uint64_t sum_locked(F&& f) {
    std::uint64_t sum = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      sum += f(shard);
    }
    return sum;
  }

  // The entry under `key` in `shard`, checked: false when there is none; `intact` says whether its value is
  // the `bytes` long pattern of `seed`.
  bool read_entry(Shard& shard, const std::string& key, std::size_t bytes, std::uint64_t seed, bool& intact) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto found = shard.entries.find(key);
    if (found == shard.entries.end()) return false;
    const std::string& value = found->second.value;
    intact = value.size() == bytes && pattern_matches(value.data(), value.size(), seed);
    return true;
  }

  // The survey of the entries; `kept(key, entry)` says whether an entry is a kept one.
  template <typename Kept>
  Survey survey_entries(Kept&& kept) {
    Survey out;
    sum_locked([&](Shard& shard) {
      for (const auto& [key, entry] : shard.entries) {
        ++out.entries;
        if (kept(key, entry)) ++out.kept;
        out.checksum += hash_string(key) ^ hash_string(entry.value);
      }
      return 0;
    });
    return out;
  }

  LiveBytes& live_;
  Shard shards_[Count];
};

// One writer thread: inserts ids first, first + stride, ... (`count` of them) and reads back recent ones.
template <typename Cache>
void writer(Cache& cache, const Plan& plan, std::atomic<std::uint64_t>& clock, std::uint64_t first,
            std::uint64_t stride, std::uint64_t count, std::uint64_t total, std::atomic<std::uint64_t>& corrupt) {
  XorShift random(first * plan.writer_seed_factor + plan.writer_seed_offset);
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t id = first + i * stride;
    const std::uint64_t now = clock.fetch_add(1);
    cache.insert(id, now, Cache::time_to_live(id, total));
    // Reads outnumber writes: a few lookups of this writer's recent entries per insert.
    for (int r = 0; r < plan.reads_per_insert && i > 0; ++r) {
      bool intact = true;
      const std::uint64_t back = std::min<std::uint64_t>(i, plan.read_window);
      if (cache.lookup(first + (i - 1 - random.below(back)) * stride, intact) && !intact) corrupt.fetch_add(1);
    }
  }
}

template <typename Cache>
Report run(const Options& options, const Plan& plan) {
  Report report;
  LiveBytes live;
  const std::uint64_t total = options.scaled(plan.small_inserts);
  std::uint64_t kept_inserted = 0;
  for (std::uint64_t id = 0; id < total; ++id) kept_inserted += Cache::kept(id) ? 1 : 0;
  Cache cache(live);
  std::atomic<std::uint64_t> clock{0};
  std::atomic<std::uint64_t> corrupt{0};
  const PhaseStart start;
  Ticker expiry([&cache, &clock] { return cache.expire(clock.load()); });
  const std::uint64_t writers = static_cast<std::uint64_t>(options.threads);
  run_threads(options.threads, [&](int t) {
    const std::uint64_t first = static_cast<std::uint64_t>(t);
    writer(cache, plan, clock, first, writers, (total - first + writers - 1) / writers, total, corrupt);
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  // Time moves past every deadline; the expiry thread removes all but the kept entries.
  clock.fetch_add(2 * total);
  for (int wait = 0; wait < 30000 && cache.pending() != 0; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const Survey survey = cache.survey();
  end_phase(report, start);
  report.operations = total * (static_cast<std::uint64_t>(plan.reads_per_insert) + 1);
  report.live_bytes = live.now();
  report.checksum = survey.checksum;
  if (cache.pending() != 0) report.fail(plan.left_past_deadline);
  if (survey.entries != survey.kept || survey.kept != kept_inserted) {
    report.fail(std::string(plan.after_expiry) + " " + std::to_string(survey.entries) + " entries are left, " +
                std::to_string(survey.kept) + " of them " + plan.kept_adjective + "; expected the " +
                std::to_string(kept_inserted) + " " + plan.kept_adjective + " entries");
  }
  XorShift idle(options.seed * plan.idle_seed_factor);
  report.steady_state = run_quiet_phase(options, [&] {
    for (int i = 0; i < 8; ++i) {
      std::uint64_t id = idle.below(total);
      while (!Cache::kept(id)) id = (id + 1) % total;
      bool intact = true;
      if (!cache.lookup(id, intact) || !intact) corrupt.fetch_add(1);
    }
    return live.now();
  }, "\"entries\": " + std::to_string(survey.entries));
  if (corrupt.load() != 0) {
    report.fail(std::string("an entry read back with the wrong value, or ") + plan.a_kept_entry + " vanished");
  }
  report.add("inserted", total);
  report.add((std::string(plan.kept_adjective) + "_entries").c_str(), survey.kept);
  report.add("expired", expiry.total());
  return report;
}

}  // namespace shapes::expiring

#endif  // LLAMALLOC_WORKLOADS_SHAPES_EXPIRING_CACHE_H
