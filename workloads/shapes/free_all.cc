// free-all and free-all-pool: an import job that loads a catalog of records (a name, tags, a vector of samples
// and, for one record in 64, an attachment of 64 KiB to 1 MiB), checks it, then frees all of it and keeps a
// one-line summary. Nothing but the summary is live in the quiet phase, so what the process still holds there
// is what its allocator did not give back.
//
// free-all loads on one thread (the main thread loads and frees). free-all-pool loads on a pool of worker
// threads (--threads) that then sit idle, blocked on their job queue, through the free and the quiet phase,
// while another thread, which allocated none of it, frees everything: the pattern of the public reports of
// memory not returned after free when a thread pool that allocated it goes idle.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shapes.h"

namespace shapes {

namespace free_all {

constexpr std::uint64_t kAttachmentEvery = 64;

struct Record {
  std::uint64_t id = 0;
  std::string name;
  std::vector<std::string> tags;
  std::vector<double> samples;
  std::unique_ptr<char[]> attachment;
  std::size_t attachment_bytes = 0;
};

std::int64_t record_bytes(const Record& record) {
  std::int64_t bytes = static_cast<std::int64_t>(sizeof(Record) + record.name.size() + record.attachment_bytes +
                                                 record.samples.capacity() * sizeof(double) +
                                                 record.tags.capacity() * sizeof(std::string));
  for (const std::string& tag : record.tags) bytes += static_cast<std::int64_t>(tag.size());
  return bytes;
}

double sample_value(std::uint64_t id, std::size_t i) { return static_cast<double>(mix64(id * 4096 + i) >> 40); }

// What the import reads for one record; every byte is a function of its id, so the check can recompute it.
std::unique_ptr<Record> load_record(std::uint64_t id) {
  auto record = std::make_unique<Record>();
  record->id = id;
  char prefix[48];
  const int n = std::snprintf(prefix, sizeof prefix, "catalog/%08llx/", static_cast<unsigned long long>(id));
  record->name.assign(prefix, static_cast<std::size_t>(n));
  record->name.append(log_uniform(mix64(id ^ 0x4E41), 8, 80), static_cast<char>('a' + id % 26));
  const std::size_t tags = mix64(id ^ 0x7A65) % 7;
  for (std::size_t t = 0; t < tags; ++t) {
    record->tags.push_back("tag:" + std::to_string(mix64(id + t) % 100000) + std::string(8 + (id + t) % 32, '-'));
  }
  const std::size_t samples = log_uniform(mix64(id ^ 0x5A3D), 8, 2048);
  for (std::size_t i = 0; i < samples; ++i) record->samples.push_back(sample_value(id, i));
  if (id % kAttachmentEvery == kAttachmentEvery / 2) {
    record->attachment_bytes = log_uniform(mix64(id ^ 0xA77A), std::size_t{64} << 10, std::size_t{1} << 20);
    record->attachment = std::make_unique<char[]>(record->attachment_bytes);
    fill_pattern(record->attachment.get(), record->attachment_bytes, id);
  }
  return record;
}

// The record's content hash; false when it is not what load_record made.
bool check_record(const Record& record, std::uint64_t& hash) {
  bool intact = record.samples.size() == log_uniform(mix64(record.id ^ 0x5A3D), 8, 2048);
  for (std::size_t i = 0; intact && i < record.samples.size(); ++i) {
    intact = record.samples[i] == sample_value(record.id, i);
  }
  if (record.attachment_bytes != 0) {
    intact = intact && pattern_matches(record.attachment.get(), record.attachment_bytes, record.id);
  }
  hash = hash_string(record.name) ^ mix64(record.samples.size() + record.attachment_bytes);
  for (const std::string& tag : record.tags) hash += hash_string(tag);
  return intact;
}

// The imported catalog, by name.
class Catalog {
 public:
  explicit Catalog(LiveBytes& live) : live_(live) {}
  ~Catalog() { free_everything(); }

  void add(std::unique_ptr<Record> record) {
    const std::int64_t bytes = record_bytes(*record);
    std::lock_guard<std::mutex> lock(mutex_);
    live_.add(bytes);
    std::string key = record->name;
    records_.emplace(std::move(key), std::move(record));
  }

  // Checks every record; the order-independent checksum of the catalog.
  std::uint64_t check(std::uint64_t& corrupt, std::uint64_t& attachments) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t checksum = 0;
    for (const auto& [name, record] : records_) {
      std::uint64_t hash = 0;
      if (!check_record(*record, hash)) ++corrupt;
      if (record->attachment_bytes != 0) ++attachments;
      checksum += hash;
    }
    return checksum;
  }

  // Every record, and the table itself (its buckets too: a cleared map keeps them).
  void free_everything() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [name, record] : records_) live_.sub(record_bytes(*record));
    std::unordered_map<std::string, std::unique_ptr<Record>>().swap(records_);
  }

  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_.size();
  }

 private:
  LiveBytes& live_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<Record>> records_;
};

// A pool of import workers: each takes a range of ids off the job queue, loads those records and adds them to
// the catalog. Between jobs a worker waits on the queue, as an idle pool does.
class ImportPool {
 public:
  ImportPool(Catalog& catalog, int workers) : catalog_(catalog), workers_(static_cast<std::size_t>(workers)) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
  }
  ~ImportPool() { stop_workers(mutex_, stopping_, wake_, threads_); }

  void submit(std::uint64_t first, std::uint64_t end) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back({first, end});
    ++pending_;
    wake_.notify_one();
  }

  // Until every job is done and every worker waits on the queue.
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return pending_ == 0 && waiting_ == workers_; });
  }

  std::size_t idle_workers() {
    std::lock_guard<std::mutex> lock(mutex_);
    return waiting_;
  }

 private:
  struct Job {
    std::uint64_t first, end;
  };

  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++waiting_;
      idle_.notify_all();
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      --waiting_;
      if (jobs_.empty()) return;
      const Job job = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      for (std::uint64_t id = job.first; id < job.end; ++id) catalog_.add(load_record(id));
      lock.lock();
      --pending_;
    }
  }

  Catalog& catalog_;
  const std::size_t workers_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<Job> jobs_;
  std::size_t pending_ = 0, waiting_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

std::string summary_line(std::uint64_t records, std::uint64_t attachments, std::uint64_t checksum) {
  return "imported " + std::to_string(records) + " records, " + std::to_string(attachments) +
         " attachments, checksum " + std::to_string(checksum % 1000000007);
}

Report run_variant(const Options& options, bool pool) {
  Report report;
  LiveBytes live;
  const std::uint64_t records = options.scaled(5000);
  const std::uint64_t job_ids = 250;
  Catalog catalog(live);
  std::unique_ptr<ImportPool> workers;
  const PhaseStart start;
  if (pool) {
    workers = std::make_unique<ImportPool>(catalog, options.threads);
    for (std::uint64_t first = 0; first < records; first += job_ids) {
      workers->submit(first, std::min(records, first + job_ids));
    }
    workers->wait_idle();
  } else {
    for (std::uint64_t id = 0; id < records; ++id) catalog.add(load_record(id));
  }
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  std::uint64_t corrupt = 0, attachments = 0;
  const std::uint64_t checksum = catalog.check(corrupt, attachments);
  if (catalog.size() != records) report.fail("the catalog lost a record");
  if (corrupt != 0) report.fail(std::to_string(corrupt) + " records read back with the wrong content");
  // Everything goes; the summary is all that stays. In the pool variant the workers are idle on their queue and
  // the free is another thread's, one that allocated none of the records.
  if (pool) {
    std::thread reaper([&] { catalog.free_everything(); });
    reaper.join();
  } else {
    catalog.free_everything();
  }
  const std::string summary = summary_line(records, attachments, checksum);
  live.add(static_cast<std::int64_t>(summary.capacity()));
  end_phase(report, start);
  report.operations = records;
  report.live_bytes = live.now();
  report.checksum = checksum;
  if (catalog.size() != 0) report.fail("records are left after the free");
  std::string quiet_extra = "\"records\": " + std::to_string(catalog.size());
  if (pool) quiet_extra += ", \"idle_workers\": " + std::to_string(workers->idle_workers());
  report.steady_state = run_quiet_phase(options, [&] { return live.now(); }, quiet_extra);
  if (pool && workers->idle_workers() != static_cast<std::size_t>(options.threads)) {
    report.fail("a pool worker was not idle on its queue through the quiet phase");
  }
  workers.reset();
  report.add("records", records);
  report.add("attachments", attachments);
  report.add("summary_bytes", summary.size());
  if (pool) report.add("workers", static_cast<std::uint64_t>(options.threads));
  return report;
}

Report run(const Options& options) { return run_variant(options, false); }
Report run_pool(const Options& options) { return run_variant(options, true); }

}  // namespace free_all

}  // namespace shapes
