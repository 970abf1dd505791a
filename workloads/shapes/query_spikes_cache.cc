// query-spikes-cache: a query service with a result cache that grows steadily while periodic query spikes
// allocate many temporaries. Each round, the loader (the main thread) adds a batch of item entries to the cache
// while a spike of queries runs on a pool of worker threads (--threads): a query probes the cache, works in a
// scratch buffer (16 KiB to 256 KiB small, 128 KiB to 2 MiB default), builds an intermediate result (a vector
// of rows and label strings) that stays until the spike's merge, and caches its answer string. The merge checks
// and drops every intermediate result. The peak is the last spike's intermediate results on top of the grown
// cache (more than 1 GiB at default scale); the cache survives, the temporaries die, and the cache stays live
// through the quiet phase. Cache entries and temporaries are allocated at the same time, on the same threads:
// the pattern of the public reports of caches moved into an arena of their own.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

namespace query_spikes {

constexpr std::size_t kShards = 16;
constexpr std::size_t kEntryOverhead = 64;  // map node and bucket, counted with the payload
constexpr int kRounds = 8;
constexpr std::uint64_t kProbesPerQuery = 8;

struct Scale {
  std::uint64_t items_per_round;    // cache entries the loader adds per round
  std::uint64_t queries_per_spike;  // queries of one spike
  std::size_t rows_lo, rows_hi;     // rows of a query's intermediate result (log-uniform)
  std::size_t scratch_lo, scratch_hi;
};

Scale scale_of(const Options& options) {
  if (options.small) return {700, 256, 256, 8192, std::size_t{16} << 10, std::size_t{256} << 10};
  return {22400, 640, 2048, 65536, std::size_t{128} << 10, std::size_t{2} << 20};
}

struct CachedValue {
  std::string body;
  std::uint64_t check;  // hash of body when it was cached
};

std::string item_key(std::uint64_t item) {
  char text[48];
  const int n = std::snprintf(text, sizeof text, "item:%08" PRIx64 ":profile", item);
  return std::string(text, static_cast<std::size_t>(n));
}

std::string answer_key(std::uint64_t query) {
  char text[48];
  const int n = std::snprintf(text, sizeof text, "answer:q%08" PRIx64, query);
  return std::string(text, static_cast<std::size_t>(n));
}

class ResultCache {
 public:
  explicit ResultCache(LiveBytes& live) : live_(live) {}

  // The loader's insert: an item's profile, rendered into a string the cache owns.
  void add_item(std::uint64_t item) {
    std::string body(log_uniform(mix64(item ^ 0x17E4), 256, 8192), '\0');
    fill_pattern(body.data(), body.size(), item);
    insert(item_key(item), std::move(body));
  }

  // A query's answer, copied into the cache.
  void remember_answer(std::uint64_t query, const std::string& answer) { insert(answer_key(query), answer); }

  // Copies the value into `out` (the response); false on a miss; `intact` says whether it is what was cached.
  bool lookup(const std::string& key, std::string& out, bool& intact) {
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto found = shard.entries.find(key);
    if (found == shard.entries.end()) return false;
    out = found->second.body;
    intact = hash_string(out) == found->second.check;
    return true;
  }

  // Entries, bytes (as counted), the entries whose value is not what was cached, and the checksum of it all.
  void survey(std::uint64_t& entries, std::uint64_t& bytes, std::uint64_t& corrupt, std::uint64_t& checksum) {
    entries = bytes = corrupt = checksum = 0;
    for (Shard& shard : shards_) {
      std::lock_guard<std::mutex> lock(shard.mutex);
      for (const auto& [key, value] : shard.entries) {
        ++entries;
        bytes += key.size() + value.body.size() + kEntryOverhead;
        if (hash_string(value.body) != value.check) ++corrupt;
        checksum += hash_string(key) ^ value.check;
      }
    }
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, CachedValue> entries;
  };
  Shard& shard_of(const std::string& key) { return shards_[hash_string(key) % kShards]; }

  void insert(std::string key, std::string body) {
    const std::uint64_t check = hash_string(body);
    const std::size_t charge = key.size() + body.size() + kEntryOverhead;
    Shard& shard = shard_of(key);
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (!shard.entries.emplace(std::move(key), CachedValue{std::move(body), check}).second) return;
    live_.add(static_cast<std::int64_t>(charge));
  }

  LiveBytes& live_;
  Shard shards_[kShards];
};

struct Row {
  std::uint64_t id;
  std::uint64_t key_hash;
  double score;
  std::uint32_t shard;
  std::uint32_t flags;
};

// A query's intermediate result: kept until the spike's merge.
struct Partial {
  std::uint64_t query = 0;
  std::string plan;
  std::vector<Row> rows;
  std::vector<std::string> labels;
  std::uint64_t digest = 0;  // what the query computed, recomputed by the merge
  std::int64_t bytes = 0;
};

std::int64_t partial_bytes(const Partial& partial) {
  std::int64_t bytes = static_cast<std::int64_t>(sizeof(Partial) + partial.plan.size() +
                                                 partial.rows.capacity() * sizeof(Row) +
                                                 partial.labels.capacity() * sizeof(std::string));
  for (const std::string& label : partial.labels) bytes += static_cast<std::int64_t>(label.size());
  return bytes;
}

std::uint64_t digest_of(const Partial& partial) {
  std::uint64_t digest = hash_string(partial.plan);
  for (const Row& row : partial.rows) digest = mix64(digest ^ row.id ^ row.key_hash) + row.flags;
  for (const std::string& label : partial.labels) digest += hash_string(label);
  return digest;
}

struct QueryCounters {
  std::atomic<std::uint64_t> probes{0}, hits{0}, corrupt{0};
};

// One query of a spike: probe the cache, scan a scratch buffer, build the intermediate result, cache the answer.
std::unique_ptr<Partial> run_query(std::uint64_t query, std::uint64_t items_so_far, const Scale& scale,
                                   ResultCache& cache, LiveBytes& live, QueryCounters& counters) {
  auto partial = std::make_unique<Partial>();
  partial->query = query;
  partial->plan = "SELECT id, score FROM items WHERE segment = " + std::to_string(mix64(query) % 997) +
                  " AND region = 'r" + std::to_string(query % 13) + "' ORDER BY score DESC";
  // The scratch buffer: a hash-join table, say, filled and scanned, freed when the query ends.
  const std::size_t scratch_bytes = log_uniform(mix64(query ^ 0x5C7A), scale.scratch_lo, scale.scratch_hi);
  std::vector<std::uint64_t> scratch(scratch_bytes / sizeof(std::uint64_t));
  live.add(static_cast<std::int64_t>(scratch.size() * sizeof(std::uint64_t)));
  fill_pattern(reinterpret_cast<char*>(scratch.data()), scratch.size() * sizeof(std::uint64_t), query);
  const std::uint64_t scan = hash_bytes(reinterpret_cast<const char*>(scratch.data()),
                                        scratch.size() * sizeof(std::uint64_t));
  // Probes of the items cached so far; a response is a copy of the value.
  for (std::uint64_t p = 0; p < kProbesPerQuery && items_so_far > 0; ++p) {
    std::string response;
    bool intact = true;
    counters.probes.fetch_add(1, std::memory_order_relaxed);
    if (cache.lookup(item_key(mix64(query * 31 + p) % items_so_far), response, intact)) {
      counters.hits.fetch_add(1, std::memory_order_relaxed);
      if (!intact) counters.corrupt.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const std::size_t rows = log_uniform(mix64(query ^ 0x20E5), scale.rows_lo, scale.rows_hi);
  for (std::size_t i = 0; i < rows; ++i) {
    const std::uint64_t id = mix64(query * 65536 + i);
    partial->rows.push_back(Row{id, mix64(id ^ scan), static_cast<double>(id >> 40),
                                static_cast<std::uint32_t>(id % kShards), static_cast<std::uint32_t>(i % 7)});
    if (i % 8 == 0) {
      std::string label = "row/" + std::to_string(query) + "/" + std::to_string(i) + "/";
      label.append(log_uniform(id, 16, 160), static_cast<char>('a' + id % 26));
      partial->labels.push_back(std::move(label));
    }
  }
  partial->digest = digest_of(*partial);
  partial->bytes = partial_bytes(*partial);
  live.add(partial->bytes);
  // The answer: the plan, the row count and the first rows, formatted, then cached.
  std::string answer = partial->plan + " -> " + std::to_string(rows) + " rows:";
  for (std::size_t i = 0; i < partial->rows.size() && i < 64; ++i) answer += " " + std::to_string(partial->rows[i].id);
  cache.remember_answer(query, answer);
  live.sub(static_cast<std::int64_t>(scratch.size() * sizeof(std::uint64_t)));
  return partial;
}

// The query workers: they wait for a spike, share its queries out, and go back to waiting.
class QueryPool {
 public:
  QueryPool(int workers, const Scale& scale, ResultCache& cache, LiveBytes& live, QueryCounters& counters)
      : scale_(scale), cache_(cache), live_(live), counters_(counters) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
  }
  ~QueryPool() { stop_workers(mutex_, stopping_, wake_, threads_); }

  // Starts a spike of `count` queries numbered from `first`; their results go to `results`.
  void start(std::uint64_t first, std::uint64_t count, std::uint64_t items_so_far,
             std::vector<std::unique_ptr<Partial>>& results) {
    std::lock_guard<std::mutex> lock(mutex_);
    results.resize(count);
    results_ = &results;
    first_ = first;
    count_ = count;
    items_so_far_ = items_so_far;
    next_.store(0);
    remaining_ = count;
    ++spike_;
    wake_.notify_all();
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return remaining_ == 0; });
  }

 private:
  void work() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || spike_ != seen; });
      if (stopping_) return;
      seen = spike_;
      const std::uint64_t first = first_, count = count_, items = items_so_far_;
      std::vector<std::unique_ptr<Partial>>& results = *results_;
      lock.unlock();
      std::uint64_t finished = 0;
      for (std::uint64_t i = next_.fetch_add(1); i < count; i = next_.fetch_add(1)) {
        results[i] = run_query(first + i, items, scale_, cache_, live_, counters_);
        ++finished;
      }
      lock.lock();
      remaining_ -= finished;
      if (remaining_ == 0) done_.notify_all();
    }
  }

  const Scale scale_;
  ResultCache& cache_;
  LiveBytes& live_;
  QueryCounters& counters_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::unique_ptr<Partial>>* results_ = nullptr;
  std::uint64_t first_ = 0, count_ = 0, items_so_far_ = 0, remaining_ = 0, spike_ = 0;
  std::atomic<std::uint64_t> next_{0};
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The spike's merge: every intermediate result checked, folded into the spike's total and dropped. `bytes` is
// what the intermediate results held.
std::uint64_t merge_spike(std::vector<std::unique_ptr<Partial>>& results, LiveBytes& live, std::uint64_t& bad,
                          std::uint64_t& bytes) {
  std::uint64_t total = 0;
  bytes = 0;
  for (std::unique_ptr<Partial>& partial : results) {
    if (partial == nullptr || digest_of(*partial) != partial->digest) {
      ++bad;
      continue;
    }
    total += mix64(partial->query) ^ partial->digest;
    bytes += static_cast<std::uint64_t>(partial->bytes);
    live.sub(partial->bytes);
    partial.reset();
  }
  std::vector<std::unique_ptr<Partial>>().swap(results);
  return total;
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const Scale scale = scale_of(options);
  ResultCache cache(live);
  QueryCounters counters;
  std::uint64_t checksum = 0, bad = 0, spike_peak = 0;
  const PhaseStart start;
  {
    QueryPool pool(options.threads, scale, cache, live, counters);
    for (int round = 0; round < kRounds; ++round) {
      const std::uint64_t items = static_cast<std::uint64_t>(round) * scale.items_per_round;
      std::vector<std::unique_ptr<Partial>> results;
      pool.start(static_cast<std::uint64_t>(round) * scale.queries_per_spike, scale.queries_per_spike, items,
                 results);
      // The cache grows while the spike runs.
      for (std::uint64_t item = items; item < items + scale.items_per_round; ++item) cache.add_item(item);
      pool.wait();
      if (round == kRounds - 1) {
        report.peak_rss_bytes = rss_now();
        report.peak_live_bytes = live.peak();
      }
      std::uint64_t spike_bytes = 0;
      checksum += merge_spike(results, live, bad, spike_bytes);
      spike_peak = std::max(spike_peak, spike_bytes);
    }
  }
  std::uint64_t entries = 0, cache_bytes = 0, corrupt = 0, cache_checksum = 0;
  cache.survey(entries, cache_bytes, corrupt, cache_checksum);
  end_phase(report, start);
  const std::uint64_t queries = kRounds * scale.queries_per_spike;
  const std::uint64_t items = kRounds * scale.items_per_round;
  report.operations = items + queries;
  report.live_bytes = live.now();
  report.checksum = checksum ^ cache_checksum;
  if (bad != 0) report.fail(std::to_string(bad) + " intermediate results were missing or changed before the merge");
  if (entries != items + queries) {
    report.fail("the cache holds " + std::to_string(entries) + " entries; expected " + std::to_string(items) +
                " items and " + std::to_string(queries) + " answers");
  }
  if (corrupt != 0) report.fail(std::to_string(corrupt) + " cache entries changed after they were cached");
  if (report.live_bytes != static_cast<std::int64_t>(cache_bytes)) {
    report.fail("after the last spike " + std::to_string(report.live_bytes) + " bytes are live; the cache holds " +
                std::to_string(cache_bytes));
  }
  XorShift idle(options.seed * 13);
  report.steady_state = run_quiet_phase(options, [&] {
    for (int i = 0; i < 16; ++i) {
      std::string response;
      bool intact = true;
      if (!cache.lookup(item_key(idle.below(items)), response, intact) || !intact) {
        counters.corrupt.fetch_add(1);
      }
    }
    return live.now();
  }, "\"entries\": " + std::to_string(entries));
  if (counters.corrupt.load() != 0) report.fail("a cache lookup missed a cached item or read a changed value");
  report.add("spikes", kRounds);
  report.add("queries", queries);
  report.add("cache_entries", entries);
  report.add("cache_bytes", cache_bytes);
  report.add("spike_peak_bytes", spike_peak);
  report.add("probes", counters.probes.load());
  report.add("hits", counters.hits.load());
  return report;
}

}  // namespace query_spikes

}  // namespace shapes
