// message-broker: topics with several subscribers each; a published message is shared by every subscriber's
// queue and by the topic's retention ring (the last messages, kept for late joiners). Slow subscribers stop
// consuming during a burst, so their queues hold the whole burst (the peak); then they catch up and only the
// retained messages stay.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "shapes.h"

namespace shapes {

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
  const PhaseStart start;
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
  end_phase(report, start);
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

}  // namespace shapes
