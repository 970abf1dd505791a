// batch-arena: batch jobs that build their working data in an arena of 64 KiB chunks, freed whole when the
// batch ends, and keep a small summary per batch for good. The peak is a backfill wave whose arenas all stay
// until the wave commits; after it, batches run one at a time per worker.
//
// One shape of the corpus (main.cc); the common vocabulary is in shapes.h.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shapes.h"

namespace shapes {

namespace batch {

constexpr std::size_t kChunkBytes = std::size_t{64} << 10;

class Arena {
 public:
  explicit Arena(LiveBytes& live) : live_(live) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (char* chunk : chunks_) std::free(chunk);
    live_.sub(static_cast<std::int64_t>(bytes_));
  }

  void* allocate(std::size_t n, std::size_t align = alignof(std::max_align_t)) {
    std::size_t pad = (align - reinterpret_cast<std::uintptr_t>(cursor_) % align) % align;
    if (n + pad > left_) {
      if (n > kChunkBytes / 4) return allocate_block(n);
      new_chunk();
      pad = 0;
    }
    char* out = cursor_ + pad;
    cursor_ = out + n;
    left_ -= n + pad;
    return out;
  }

  template <typename T>
  T* make_array(std::size_t n) {
    return static_cast<T*>(allocate(sizeof(T) * n, alignof(T)));
  }

  std::size_t bytes() const { return bytes_; }

 private:
  void new_chunk() {
    char* chunk = static_cast<char*>(std::malloc(kChunkBytes));
    if (chunk == nullptr) std::abort();
    chunks_.push_back(chunk);
    cursor_ = chunk;
    left_ = kChunkBytes;
    bytes_ += kChunkBytes;
    live_.add(kChunkBytes);
  }
  // A large object gets a block of its own, freed with the arena.
  void* allocate_block(std::size_t n) {
    char* block = static_cast<char*>(std::malloc(n));
    if (block == nullptr) std::abort();
    chunks_.push_back(block);
    bytes_ += n;
    live_.add(static_cast<std::int64_t>(n));
    return block;
  }

  LiveBytes& live_;
  std::vector<char*> chunks_;
  char* cursor_ = nullptr;
  std::size_t left_ = 0;
  std::size_t bytes_ = 0;
};

struct Record {
  std::uint64_t id;
  const char* name;
  std::uint32_t name_bytes;
  std::uint32_t category;
  std::uint64_t amount;
};

struct Group {
  std::uint32_t category;
  std::uint64_t total;
  std::uint32_t count;
  Group* next;
};

struct BatchSummary {
  std::uint64_t batch;
  std::string label;
  std::uint64_t total;
  std::vector<std::uint64_t> top_ids;
  std::map<std::uint32_t, std::uint64_t> category_totals;
};

std::uint64_t record_amount(std::uint64_t batch, std::uint64_t i) { return mix64(batch * 1000003 + i) % 100000; }
std::uint32_t record_category(std::uint64_t batch, std::uint64_t i) {
  return static_cast<std::uint32_t>(mix64(batch ^ (i * 7919)) % 64);
}

// The working set of one batch, all in its arena: the records, their names, a group-by hash table.
struct BatchWork {
  explicit BatchWork(LiveBytes& live) : arena(live) {}
  Arena arena;
  Record* records = nullptr;
  std::size_t count = 0;
  Group** buckets = nullptr;
  std::size_t bucket_count = 0;
};

std::unique_ptr<BatchWork> load_batch(LiveBytes& live, std::uint64_t batch, std::size_t records) {
  auto work = std::make_unique<BatchWork>(live);
  Arena& arena = work->arena;
  work->records = arena.make_array<Record>(records);
  work->count = records;
  for (std::size_t i = 0; i < records; ++i) {
    Record& record = work->records[i];
    record.id = batch * 1000000 + i;
    record.name_bytes = static_cast<std::uint32_t>(log_uniform(mix64(record.id), 8, 240));
    char* name = static_cast<char*>(arena.allocate(record.name_bytes, 1));
    fill_pattern(name, record.name_bytes, record.id);
    record.name = name;
    record.category = record_category(batch, i);
    record.amount = record_amount(batch, i);
  }
  return work;
}

void group_batch(BatchWork& work) {
  work.bucket_count = 16;
  work.buckets = work.arena.make_array<Group*>(work.bucket_count);
  std::fill(work.buckets, work.buckets + work.bucket_count, nullptr);
  for (std::size_t i = 0; i < work.count; ++i) {
    const Record& record = work.records[i];
    Group** slot = &work.buckets[record.category % work.bucket_count];
    while (*slot != nullptr && (*slot)->category != record.category) slot = &(*slot)->next;
    if (*slot == nullptr) {
      *slot = work.arena.make_array<Group>(1);
      **slot = Group{record.category, 0, 0, nullptr};
    }
    (*slot)->total += record.amount;
    (*slot)->count += 1;
  }
}

std::unique_ptr<BatchSummary> summarize_batch(BatchWork& work, std::uint64_t batch, bool& names_intact) {
  auto summary = std::make_unique<BatchSummary>();
  summary->batch = batch;
  summary->label = "batch-" + std::to_string(batch) + "-" + std::to_string(work.count) + "-records";
  // The top five records by amount: a sorted scratch array in the arena.
  Record** order = work.arena.make_array<Record*>(work.count);
  for (std::size_t i = 0; i < work.count; ++i) {
    order[i] = &work.records[i];
    const Record& record = work.records[i];
    names_intact = names_intact && pattern_matches(record.name, record.name_bytes, record.id);
  }
  std::partial_sort(order, order + 5, order + work.count, [](const Record* a, const Record* b) {
    return a->amount != b->amount ? a->amount > b->amount : a->id < b->id;
  });
  for (int i = 0; i < 5; ++i) summary->top_ids.push_back(order[i]->id);
  for (std::size_t b = 0; b < work.bucket_count; ++b) {
    for (const Group* group = work.buckets[b]; group != nullptr; group = group->next) {
      summary->category_totals[group->category] = group->total;
      summary->total += group->total;
    }
  }
  return summary;
}

// The batch's expected total, from the generator alone.
std::uint64_t expected_total(std::uint64_t batch, std::size_t records) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < records; ++i) total += record_amount(batch, i);
  return total;
}

class Ledger {
 public:
  explicit Ledger(LiveBytes& live) : live_(live) {}
  void keep(std::unique_ptr<BatchSummary> summary) {
    std::lock_guard<std::mutex> lock(mutex_);
    live_.add(bytes_of(*summary));
    summaries_.push_back(std::move(summary));
  }
  std::uint64_t checksum() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t sum = 0;
    for (const auto& s : summaries_) sum += mix64(s->batch) ^ (s->total + mix64(s->top_ids[0]) + hash_string(s->label));
    return sum;
  }
  std::uint64_t report_total() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::uint64_t sum = 0;
    for (const auto& s : summaries_) sum += s->total;
    return sum;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return summaries_.size();
  }

 private:
  static std::int64_t bytes_of(const BatchSummary& s) {
    return static_cast<std::int64_t>(sizeof(BatchSummary) + s.label.size() + 8 * s.top_ids.size() +
                                     48 * s.category_totals.size());
  }
  LiveBytes& live_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<BatchSummary>> summaries_;
};

Report run(const Options& options) {
  Report report;
  LiveBytes live;
  const std::uint64_t wave = options.small ? 40 : 160;  // the default wave: about 200 MiB of arenas
  const std::uint64_t later = options.scaled(2400);
  const std::size_t wave_records = 12000;
  const std::size_t later_records = 3000;
  Ledger ledger(live);
  std::atomic<std::uint64_t> next_wave{0}, next_later{0}, wrong{0};
  std::atomic<std::uint64_t> expected_sum{0};
  auto process = [&](std::uint64_t batch, std::size_t records) {
    std::unique_ptr<BatchWork> work = load_batch(live, batch, records);
    group_batch(*work);
    bool names_intact = true;
    std::unique_ptr<BatchSummary> summary = summarize_batch(*work, batch, names_intact);
    const std::uint64_t expected = expected_total(batch, records);
    if (summary->total != expected || !names_intact) wrong.fetch_add(1);
    expected_sum.fetch_add(expected);
    ledger.keep(std::move(summary));
    return work;
  };
  const PhaseStart start;
  // The backfill wave: every batch's arena stays until the wave commits.
  std::mutex staged_mutex;
  std::vector<std::unique_ptr<BatchWork>> staged;
  run_threads(options.threads, [&](int) {
    for (std::uint64_t batch; (batch = next_wave.fetch_add(1)) < wave;) {
      std::unique_ptr<BatchWork> work = process(batch, wave_records);
      std::lock_guard<std::mutex> lock(staged_mutex);
      staged.push_back(std::move(work));
    }
  });
  report.peak_rss_bytes = rss_now();
  report.peak_live_bytes = live.peak();
  staged.clear();  // the wave commits
  // Then the regular batches, each arena freed at its batch's end.
  run_threads(options.threads, [&](int) {
    for (std::uint64_t batch; (batch = wave + next_later.fetch_add(1)) < wave + later;) process(batch, later_records);
  });
  end_phase(report, start);
  report.operations = wave * wave_records + later * later_records;
  report.live_bytes = live.now();
  report.checksum = ledger.checksum();
  if (wrong.load() != 0) report.fail(std::to_string(wrong.load()) + " batch(es) summed to the wrong total");
  if (ledger.size() != wave + later) report.fail("a batch summary is missing");
  if (ledger.report_total() != expected_sum.load()) report.fail("the ledger's total disagrees with the batches'");
  // The idle job runner answers a report query over the summaries now and then.
  std::uint64_t reports = 0;
  report.steady_state = run_quiet_phase(options, [&] {
    if (ledger.report_total() != expected_sum.load()) wrong.fetch_add(1);
    ++reports;
    return live.now();
  }, "\"summaries\": " + std::to_string(ledger.size()));
  if (wrong.load() != 0) report.fail("a summary changed during the quiet phase");
  report.add("batches", wave + later);
  report.add("wave_batches", wave);
  return report;
}

}  // namespace batch

}  // namespace shapes
