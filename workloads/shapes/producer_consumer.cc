// producer-consumer: producers make jobs (a struct with a name, a payload vector and tags), consumers run and
// free them on other threads. The consumers start late, so a backlog builds (the peak); they catch up, then
// traffic stays low. Consumers keep the result of every 16th job in a result log (long-lived).
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shapes.h"

// shapes::prodcons::BlockingQueue, in the shape's namespace (common/blocking_queue.h says why).
#define WORKLOAD_QUEUE_NAMESPACE shapes::prodcons
#include "common/blocking_queue.h"

namespace shapes {

namespace prodcons {

struct Job {
  std::uint64_t id;
  std::string name;
  std::vector<std::uint32_t> payload;
  std::vector<std::string> tags;
  std::uint64_t expected;
};

std::int64_t job_bytes(const Job& job) {
  std::int64_t bytes = static_cast<std::int64_t>(sizeof(Job) + job.name.size() + 4 * job.payload.size());
  for (const std::string& tag : job.tags) bytes += static_cast<std::int64_t>(tag.size());
  return bytes;
}

std::uint64_t payload_hash(const std::vector<std::uint32_t>& payload) {
  return hash_bytes(reinterpret_cast<const char*>(payload.data()), payload.size() * 4);
}

// The backlog between producers and consumers: held until the consumers are up.
using JobQueue = BlockingQueue<std::unique_ptr<Job>>;

class Producer {
 public:
  Producer(JobQueue& queue, LiveBytes& live) : queue_(queue), live_(live) {}
  void produce(std::uint64_t id) {
    auto job = std::make_unique<Job>();
    job->id = id;
    job->name = "job/" + std::to_string(id % 1000) + "/render-thumbnail-" + std::to_string(id);
    job->payload.resize(log_uniform(mix64(id), 16, 2048));
    fill_pattern(reinterpret_cast<char*>(job->payload.data()), job->payload.size() * 4, id);
    const std::size_t tags = 1 + id % 4;
    for (std::size_t t = 0; t < tags; ++t) job->tags.push_back("tag-" + std::to_string(mix64(id + t) % 100000));
    job->expected = payload_hash(job->payload);
    produced_sum += job->expected;
    live_.add(job_bytes(*job));
    queue_.push(std::move(job));
  }
  std::uint64_t produced_sum = 0;

 private:
  JobQueue& queue_;
  LiveBytes& live_;
};

class ResultLog {
 public:
  explicit ResultLog(LiveBytes& live) : live_(live) {}
  void record(const Job& job, std::uint64_t hash) {
    std::string line = job.name + " -> " + std::to_string(hash % 1000000007);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.add(static_cast<std::int64_t>(line.size() + 48));
    results_.emplace(job.id, std::move(line));
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return results_.size();
  }
  std::uint64_t checksum() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t sum = 0;
    for (const auto& [id, line] : results_) sum += mix64(id) ^ hash_string(line);
    return sum;
  }

 private:
  LiveBytes& live_;
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::string> results_;
};

struct ConsumerTotals {
  std::atomic<std::uint64_t> consumed{0}, sum{0}, corrupt{0};
};

void consume(std::unique_ptr<Job> job, ResultLog& results, LiveBytes& live, ConsumerTotals& totals) {
  const std::uint64_t hash = payload_hash(job->payload);
  if (hash != job->expected) totals.corrupt.fetch_add(1);
  if (job->id % 16 == 0) results.record(*job, hash);
  totals.sum.fetch_add(hash);
  live.sub(job_bytes(*job));
  job.reset();
  totals.consumed.fetch_add(1);
}

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const int producers = std::max(1, options.threads / 2);
  const int consumers = std::max(1, options.threads - producers);
  const std::uint64_t backlog = options.scaled(24000);
  const std::uint64_t steady = options.scaled(40000);
  JobQueue queue;
  ResultLog results(live);
  ConsumerTotals totals;
  std::vector<std::unique_ptr<Producer>> makers;
  for (int p = 0; p < producers; ++p) makers.push_back(std::make_unique<Producer>(queue, live));
  queue.hold(true);  // the consumers are not up yet
  std::vector<std::thread> consumer_threads;
  for (int c = 0; c < consumers; ++c) {
    consumer_threads.emplace_back([&] {
      while (auto job = queue.pop()) consume(std::move(*job), results, live, totals);
    });
  }
  const PhaseStart start;
  run_threads(producers, [&](int p) {
    for (std::uint64_t id = static_cast<std::uint64_t>(p); id < backlog; id += static_cast<std::uint64_t>(producers)) {
      makers[static_cast<std::size_t>(p)]->produce(id);
    }
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  queue.hold(false);
  while (totals.consumed.load() < backlog) std::this_thread::sleep_for(std::chrono::microseconds(200));
  run_threads(producers, [&](int p) {
    for (std::uint64_t id = backlog + static_cast<std::uint64_t>(p); id < backlog + steady;
         id += static_cast<std::uint64_t>(producers)) {
      makers[static_cast<std::size_t>(p)]->produce(id);
      if (id % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  while (totals.consumed.load() < backlog + steady) std::this_thread::sleep_for(std::chrono::microseconds(200));
  end_phase(report, start);
  report.operations = backlog + steady;
  report.live_bytes = live.now();
  std::uint64_t produced_sum = 0;
  for (auto& maker : makers) produced_sum += maker->produced_sum;
  report.checksum = totals.sum.load() ^ results.checksum();
  if (totals.sum.load() != produced_sum) report.fail("the consumers' sum differs from the producers'");
  const std::size_t logged = results.size();
  if (logged != (backlog + steady + 15) / 16) report.fail("the result log lost a result");
  // Idle: a keep-alive job from the first producer now and then.
  std::uint64_t next_id = backlog + steady;
  report.steady_state = run_quiet_phase(options, [&] {
    makers[0]->produce(next_id++);
    return live.now();
  }, "\"results\": " + std::to_string(logged));
  queue.close();
  for (std::thread& thread : consumer_threads) thread.join();
  if (totals.corrupt.load() != 0) report.fail("a job's payload changed between producer and consumer");
  if (totals.consumed.load() != next_id) report.fail("a job was not consumed");
  report.add("jobs", next_id);
  report.add("results", logged);
  report.add("producers", static_cast<std::uint64_t>(producers));
  report.add("consumers", static_cast<std::uint64_t>(consumers));
  return report;
}

}  // namespace prodcons

}  // namespace shapes
