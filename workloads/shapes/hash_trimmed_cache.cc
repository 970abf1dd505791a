// hash-trimmed-cache: a small cache server, the way a new user writes one. Four worker threads each take
// requests off the wire: a request buffer of 64 B to 16 KiB (headers and, for a SET, the value), parsed into a
// Request with std::string key and value and a vector of header strings, answered with a response string and
// logged. The cache is sharded std::unordered_map<std::string, std::string>, values 32 B to 4 KiB. The peak
// fills it; then an operator drops seven eighths of it by key hash, so the survivors come from exactly the
// allocation sites of the dropped entries; then the server idles.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

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
  const PhaseStart start;
  run_threads(options.threads, [&](int t) {
    connection_worker(cache, stats, ever_set[static_cast<std::size_t>(t)], options.seed * 1009 + t,
                      requests / options.threads, ids);
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  std::atomic<std::uint64_t> dropped{0};
  run_threads(options.threads, [&](int t) { dropped.fetch_add(cache.trim_by_hash(t, options.threads)); });
  end_phase(report, start);
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

}  // namespace shapes
