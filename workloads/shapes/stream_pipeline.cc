// stream-pipeline: three stages on three threads, connected by bounded queues. Stage 1 ingests messages (a
// struct and a malloc'd body), stage 2 enriches them (realloc: an envelope around the body, or a fold that
// shrinks it), stage 3 delivers and frees them. A downstream outage holds stage 3 while a burst arrives: the
// backlog in the queue to stage 3 is the peak. Then stage 3 drains it and light traffic flows.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "shapes.h"

// shapes::stream::BlockingQueue, in the shape's namespace (common/blocking_queue.h says why).
#define WORKLOAD_QUEUE_NAMESPACE shapes::stream
#include "common/blocking_queue.h"

namespace shapes {

namespace stream {

struct Message {
  std::uint64_t id;
  char* body;
  std::size_t size;
  std::uint64_t body_hash;
};

class Pipeline {
 public:
  Pipeline(LiveBytes& live, std::size_t backlog_capacity)
      : live_(live), to_enrich_(1024), to_deliver_(backlog_capacity) {
    enrich_thread_ = std::thread([this] { enrich_loop(); });
    deliver_thread_ = std::thread([this] { deliver_loop(); });
  }
  ~Pipeline() { finish(); }

  // Stage 1 (the caller's thread): a message and its body.
  void ingest(std::uint64_t id) {
    auto* message = new Message{id, nullptr, log_uniform(mix64(id ^ 0xB0D1), 128, 8192), 0};
    message->body = static_cast<char*>(std::malloc(message->size));
    if (message->body == nullptr) std::abort();
    fill_pattern(message->body, message->size, id);
    message->body_hash = hash_bytes(message->body, message->size);
    live_.add(static_cast<std::int64_t>(sizeof(Message) + message->size));
    ingested_.fetch_add(1);
    to_enrich_.push(message);
  }

  void hold_delivery(bool hold) {
    std::lock_guard<std::mutex> lock(gate_mutex_);
    held_ = hold;
    gate_.notify_all();
  }
  std::size_t backlog() { return to_deliver_.size(); }
  std::uint64_t delivered() const { return delivered_.load(); }
  std::uint64_t ingested() const { return ingested_.load(); }
  std::uint64_t checksum() const { return checksum_.load(); }
  std::uint64_t corrupt() const { return corrupt_.load(); }

  void finish() {
    if (finished_) return;
    finished_ = true;
    hold_delivery(false);
    to_enrich_.close();
    enrich_thread_.join();
    to_deliver_.close();
    deliver_thread_.join();
  }

  std::size_t topics() {
    std::lock_guard<std::mutex> lock(topics_mutex_);
    return topic_counts_.size();
  }

 private:
  // Stage 2: check the body, then wrap it in an envelope (grows) or fold it (shrinks), in place by realloc.
  void enrich(Message* message) {
    if (hash_bytes(message->body, message->size) != message->body_hash) corrupt_.fetch_add(1);
    const std::size_t old_size = message->size;
    if (mix64(message->id) % 3 != 0) {
      const std::size_t header = 64 + message->id % 64;
      const std::size_t new_size = old_size + header + 32;
      message->body = static_cast<char*>(std::realloc(message->body, new_size));
      if (message->body == nullptr) std::abort();
      std::memmove(message->body + header, message->body, old_size);
      std::memset(message->body, 'H', header);
      std::memset(message->body + header + old_size, 'T', 32);
      message->size = new_size;
    } else {
      const std::size_t half = old_size / 2;
      for (std::size_t i = 0; i < half; ++i) message->body[i] ^= message->body[half + i];
      message->body = static_cast<char*>(std::realloc(message->body, half));
      if (message->body == nullptr) std::abort();
      message->size = half;
    }
    live_.add(static_cast<std::int64_t>(message->size) - static_cast<std::int64_t>(old_size));
    message->body_hash = hash_bytes(message->body, message->size);
  }

  void enrich_loop() {
    Message* message = nullptr;
    while (to_enrich_.pop(message)) {
      enrich(message);
      to_deliver_.push(message);
    }
  }

  // Stage 3: check, account per topic (a small long-lived table), free.
  void deliver(Message* message) {
    const std::uint64_t hash = hash_bytes(message->body, message->size);
    if (hash != message->body_hash) corrupt_.fetch_add(1);
    checksum_.fetch_add(hash);
    {
      std::lock_guard<std::mutex> lock(topics_mutex_);
      auto [slot, inserted] = topic_counts_.try_emplace("topic-" + std::to_string(message->id % 97), 0);
      if (inserted) live_.add(64);
      slot->second += 1;
    }
    live_.sub(static_cast<std::int64_t>(sizeof(Message) + message->size));
    std::free(message->body);
    delete message;
    delivered_.fetch_add(1);
  }

  void deliver_loop() {
    Message* message = nullptr;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(gate_mutex_);
        gate_.wait(lock, [&] { return !held_; });
      }
      if (!to_deliver_.pop(message)) return;
      deliver(message);
    }
  }

  LiveBytes& live_;
  BlockingQueue<Message*> to_enrich_, to_deliver_;
  std::mutex gate_mutex_;
  std::condition_variable gate_;
  bool held_ = false;
  std::mutex topics_mutex_;
  std::map<std::string, std::uint64_t> topic_counts_;
  std::atomic<std::uint64_t> ingested_{0}, delivered_{0}, checksum_{0}, corrupt_{0};
  bool finished_ = false;
  std::thread enrich_thread_, deliver_thread_;
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t burst = options.scaled(16000);
  const std::uint64_t trickle = options.scaled(80000);
  Pipeline pipeline(live, burst + 1024);
  const PhaseStart start;
  pipeline.hold_delivery(true);  // the outage
  std::uint64_t id = 0;
  for (; id < burst; ++id) pipeline.ingest(id);
  // (A message the delivery stage took before the outage began is delivered, not queued.)
  while (pipeline.backlog() + pipeline.delivered() < burst) std::this_thread::sleep_for(std::chrono::microseconds(200));
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  pipeline.hold_delivery(false);
  while (pipeline.delivered() < burst) std::this_thread::sleep_for(std::chrono::microseconds(200));
  // Light traffic: the source paces itself, so no backlog builds.
  for (; id < burst + trickle; ++id) {
    pipeline.ingest(id);
    if (id % 16 == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  while (pipeline.delivered() < burst + trickle) std::this_thread::sleep_for(std::chrono::microseconds(200));
  end_phase(report, start);
  report.operations = burst + trickle;
  report.live_bytes = live.now();
  report.checksum = pipeline.checksum();
  // The idle pipeline: a heartbeat message now and then.
  std::uint64_t heartbeat = burst + trickle;
  report.steady_state = run_quiet_phase(options, [&] {
    pipeline.ingest(heartbeat++);
    return live.now();
  }, "\"topics\": " + std::to_string(pipeline.topics()));
  pipeline.finish();
  if (pipeline.corrupt() != 0) report.fail("a message body changed between stages");
  if (pipeline.delivered() != pipeline.ingested()) {
    report.fail(std::to_string(pipeline.ingested()) + " messages ingested, " + std::to_string(pipeline.delivered()) +
                " delivered");
  }
  report.add("burst_messages", burst);
  report.add("messages", pipeline.delivered());
  return report;
}

}  // namespace stream

}  // namespace shapes
