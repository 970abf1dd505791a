// session-store: a login burst creates sessions (a user name, an attribute map, a send buffer, the recent
// requests), requests update them from any thread, then most users log out (on another thread than the one
// that logged them in) and a few long sessions stay.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

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
  const PhaseStart start;
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
  end_phase(report, start);
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

}  // namespace shapes
