// word-count: the data-processing pipeline of the LLAMA paper, section 9, in one process with many threads.
//
// A generated corpus is counted in rounds. Each round runs four stages, each on a fresh set of threads:
//   generate  the round's shards of text (temporary),
//   tokenize  each shard into words (temporary, the round's peak), while the round's summary, a long-lived
//             stage output, is allocated (the LLAMA paper: "long-lived outputs of a stage are allocated while the heap
//             contains a large amount of temporary data from an active stage"),
//   combine   the words of each shard into a local count table, then split it by partition (the shuffle),
//   reduce    each partition into its global table: the long-lived result, grown while the shuffle buffers are
//             at their peak.
// At the end it prints one JSON line: totals, an order-independent checksum of all counts and the top words.
// The corpus can be written out (--dump-corpus) so that a test recounts it independently.
//
// WORDCOUNT_REVISION=2 builds the second revision: renamed namespaces and functions, a refactored tokenizer,
// a renamed task planner and an extra wrapper frame around every stage, the way a later release differs
// (the LLAMA paper, Table 2). It is built at the same optimisation level as revision 1, so that lifetimes, the
// model's labels, stay comparable between the two (docs/model.md).
//
// WORDCOUNT_REBUILT adds one unrelated function ahead of all others (run once, before main, by a static
// initialiser): the same program rebuilt with code added elsewhere, so that every later function has moved and
// its own code has not (the word-count-rebuilt workload; docs/model.md, "Call sites").
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "../common/steady_state.h"

#ifndef WORDCOUNT_REVISION
#define WORDCOUNT_REVISION 1
#endif

#if WORDCOUNT_REVISION >= 2
#define WC_NAMESPACE wc_r2
#else
#define WC_NAMESPACE wordcount
#endif

#ifdef WORDCOUNT_REBUILT
namespace rebuilt {
[[gnu::noinline]] int environment_marker() {
  const char* value = std::getenv("WORDCOUNT_REBUILT_MARKER");
  return value != nullptr ? std::atoi(value) : 0;
}
[[maybe_unused]] const int marker = environment_marker();
}  // namespace rebuilt
#endif

namespace WC_NAMESPACE {

// ---------------------------------------------------------------------------------------------------------
namespace util {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// Runs body(worker) on `threads` fresh threads and joins them: each stage gets its own threads, as the
// stages of a dataflow runtime do, so thread-thread heap state comes and goes with them.
template <typename Body>
void run_on_threads(int threads, Body&& body) {
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int worker = 0; worker < threads; ++worker) pool.emplace_back([&body, worker] { body(worker); });
  for (std::thread& t : pool) t.join();
}

}  // namespace util

// ---------------------------------------------------------------------------------------------------------
namespace corpus {

struct Config {
  std::uint64_t seed = 42;
  std::size_t vocabulary_words = 200000;
  std::size_t words_per_shard = 80000;
};

// Words come from a fixed vocabulary chosen with a Zipf-like skew, with some capitalised and some followed by
// punctuation, so that tokenizing is real work and a few words dominate (as in natural text).
class Generator {
 public:
  explicit Generator(const Config& config) : config_(config) {
    vocabulary_.reserve(config_.vocabulary_words);
    for (std::size_t i = 0; i < config_.vocabulary_words; ++i) vocabulary_.push_back(make_word(i));
  }

  std::string shard(std::uint64_t shard_id) const {
    std::string text;
    text.reserve(config_.words_per_shard * 8);
    std::uint64_t state = util::splitmix64(config_.seed ^ (shard_id * 0x100000001b3ull));
    for (std::size_t i = 0; i < config_.words_per_shard; ++i) {
      state = util::splitmix64(state);
      // u^3 skews towards small indices: a handful of very frequent words and a long tail.
      double u = static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
      auto index = static_cast<std::size_t>(u * u * u * static_cast<double>(vocabulary_.size()));
      const std::string& word = vocabulary_[std::min(index, vocabulary_.size() - 1)];
      const unsigned decoration = static_cast<unsigned>(state & 0xff);
      if (decoration < 20) {
        text.push_back(static_cast<char>(word[0] - 'a' + 'A'));
        text.append(word, 1);
      } else {
        text.append(word);
      }
      if (decoration % 17 == 3) text.push_back(',');
      if (decoration % 29 == 5) text.push_back('.');
      text.push_back(i % 12 == 11 ? '\n' : ' ');
    }
    return text;
  }

 private:
  std::string make_word(std::size_t index) const {
    std::uint64_t h = util::splitmix64(config_.seed * 31 + index);
    std::size_t length = 2 + h % 9;
    std::string word;
    for (std::size_t i = 0; i < length; ++i) {
      h = util::splitmix64(h);
      word.push_back(static_cast<char>('a' + h % 26));
    }
    return word;
  }

  Config config_;
  std::vector<std::string> vocabulary_;
};

}  // namespace corpus

// ---------------------------------------------------------------------------------------------------------
namespace stages {

using Tokens = std::vector<std::string>;
using CountTable = std::unordered_map<std::string, std::uint64_t>;
using PartitionBuffer = std::vector<std::pair<std::string, std::uint64_t>>;

inline bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline char to_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

#if WORDCOUNT_REVISION >= 2
// Revision 2 splits on views first and lowercases while copying.
std::vector<std::string_view> split_letter_runs(std::string_view text) {
  std::vector<std::string_view> runs;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && !is_letter(text[i])) ++i;
    std::size_t start = i;
    while (i < text.size() && is_letter(text[i])) ++i;
    if (i > start) runs.push_back(text.substr(start, i - start));
  }
  return runs;
}

Tokens extract_words(std::string_view text) {
  Tokens tokens;
  for (std::string_view run : split_letter_runs(text)) {
    std::string word(run.size(), '\0');
    std::transform(run.begin(), run.end(), word.begin(), to_lower);
    tokens.push_back(std::move(word));
  }
  return tokens;
}
#else
Tokens tokenize(std::string_view text) {
  Tokens tokens;
  std::string current;
  for (char c : text) {
    if (is_letter(c)) {
      current.push_back(to_lower(c));
    } else if (!current.empty()) {
      tokens.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) tokens.push_back(current);
  return tokens;
}
#endif

CountTable combine(const Tokens& tokens) {
  CountTable table;
  for (const std::string& token : tokens) ++table[token];
  return table;
}

std::size_t partition_of(std::string_view word, std::size_t partitions) {
  return util::fnv1a64(word) % partitions;
}

}  // namespace stages

// ---------------------------------------------------------------------------------------------------------
// The job runtime around the stages, as a dataflow framework has one: a task plan per stage, a job log, stage
// statistics, round checkpoints and process-wide counters. It does not touch the words; it is here because a
// real pipeline allocates much of its memory in such code, through the same helpers as the stages (strings,
// vectors, maps), and it is the runtime's role, not the helper, that decides how long an allocation lives
// (the LLAMA paper, section 2.2): task names die at once, a stage's task plan lives the stage, job-log lines the
// next 256 lines, round checkpoints two rounds, stage statistics the job, counters for good (never freed).
#if WORDCOUNT_REVISION >= 2
#define WC_RUNTIME dataflow
#else
#define WC_RUNTIME runtime
#endif
namespace WC_RUNTIME {

struct TaskSpec {
  std::string name;
  std::string stage;
  std::size_t shard = 0;
  std::vector<std::string> inputs;
};
using TaskPlan = std::vector<std::unique_ptr<TaskSpec>>;

inline std::string task_name(const char* stage, int round, std::size_t shard) {
  return std::string(stage) + "/round-" + std::to_string(round) + "/shard-" + std::to_string(shard);
}

class JobLog {
 public:
  void line(std::string text) {
    std::lock_guard<std::mutex> lock(mutex_);
    recent_.push_back(std::move(text));
    if (recent_.size() > 256) recent_.pop_front();
  }

 private:
  std::mutex mutex_;
  std::deque<std::string> recent_;
};

class StageStats {
 public:
  void finish(const char* stage, int round, std::uint64_t tasks, double seconds) {
    auto record = std::make_unique<Record>();
    record->stage = stage;
    record->tasks = tasks;
    record->seconds = seconds;
    std::lock_guard<std::mutex> lock(mutex_);
    records_[std::string(stage) + ":" + std::to_string(round)] = std::move(record);
  }

 private:
  struct Record {
    std::string stage;
    std::uint64_t tasks = 0;
    double seconds = 0;
  };
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<Record>> records_;
};

// The manifest of each finished round; the last two are kept (what a restart would resume from).
class Checkpoints {
 public:
  void commit(int round, const TaskPlan& plan) {
    auto manifest = std::make_unique<Manifest>();
    manifest->round = round;
    for (const auto& task : plan) manifest->tasks.push_back(task->name);
    manifests_.push_back(std::move(manifest));
    if (manifests_.size() > 2) manifests_.pop_front();
  }

 private:
  struct Manifest {
    int round = 0;
    std::vector<std::string> tasks;
  };
  std::deque<std::unique_ptr<Manifest>> manifests_;
};

// Process-wide counters, created on first use and never freed (leaked on purpose, as such registries are).
class Counters {
 public:
  static Counters& instance() {
    static Counters* counters = new Counters;
    return *counters;
  }
  void add(const std::string& name, std::uint64_t value) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& counter = counters_[name];
    if (!counter) counter = std::make_unique<std::uint64_t>(0);
    *counter += value;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<std::uint64_t>> counters_;
};

#if WORDCOUNT_REVISION >= 2
class TaskPlanner {
 public:
  TaskPlan make_tasks(const char* stage, int round, std::size_t shards) {
#else
class Scheduler {
 public:
  TaskPlan plan(const char* stage, int round, std::size_t shards) {
#endif
    TaskPlan tasks;
    for (std::size_t s = 0; s < shards; ++s) {
      auto task = std::make_unique<TaskSpec>();
      task->name = task_name(stage, round, s);
      task->stage = stage;
      task->shard = s;
      task->inputs.push_back("shard-" + std::to_string(s));
      tasks.push_back(std::move(task));
    }
    return tasks;
  }
};

// One stage of a round: its task plan lives while `body` runs; each finished task writes a log line.
struct Job {
  JobLog log;
  StageStats stats;
  Checkpoints checkpoints;
#if WORDCOUNT_REVISION >= 2
  TaskPlanner planner;
#else
  Scheduler scheduler;
#endif
};

template <typename Body>
#if WORDCOUNT_REVISION >= 2
// Revision 2 runs every stage through this wrapper, an extra frame in every stage's stacks.
[[gnu::noinline]]
#endif
TaskPlan run_stage(Job& job, const char* stage, int round, std::size_t shards, Body&& body) {
  auto started = std::chrono::steady_clock::now();
#if WORDCOUNT_REVISION >= 2
  TaskPlan tasks = job.planner.make_tasks(stage, round, shards);
#else
  TaskPlan tasks = job.scheduler.plan(stage, round, shards);
#endif
  body(tasks);
  Counters::instance().add(std::string(stage) + ".tasks", tasks.size());
  job.stats.finish(stage, round, tasks.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return tasks;
}

inline void task_done(Job& job, const TaskSpec& task, std::uint64_t items) {
  job.log.line(task.name + " done: " + std::to_string(items) + " items");
}

}  // namespace WC_RUNTIME

// ---------------------------------------------------------------------------------------------------------
namespace pipeline {

// What a round leaves behind for the final report: allocated during the tokenize stage, kept to the end.
struct RoundSummary {
  int round = 0;
  std::uint64_t words = 0;
  std::vector<std::string> longest_words;  // per shard, the longest token seen
  std::map<std::size_t, std::uint64_t> length_histogram;
};

template <typename Table>
class PartitionedTable {
 public:
  explicit PartitionedTable(std::size_t partitions) : partitions_(partitions) {}
  std::size_t partitions() const { return partitions_.size(); }
  Table& partition(std::size_t i) { return partitions_[i]; }
  const Table& partition(std::size_t i) const { return partitions_[i]; }

 private:
  std::vector<Table> partitions_;
};

struct Config {
  corpus::Config corpus;
  int rounds = 12;
  std::size_t shards_per_round = 128;
  int threads = 64;
  std::size_t partitions = 32;
  std::size_t top = 20;
  std::string dump_corpus_path;
  // The quiet phase after the last round (docs/workloads.md): default 10 s, small scale 2 s, 0 disables it.
  double quiet_seconds = 10;
  bool quiet_seconds_given = false;
};

class Pipeline {
 public:
  explicit Pipeline(const Config& config)
      : config_(config), generator_(config.corpus), totals_(config.partitions) {}

  void run() {
    std::unique_ptr<std::ofstream> dump;
    if (!config_.dump_corpus_path.empty()) {
      dump = std::make_unique<std::ofstream>(config_.dump_corpus_path, std::ios::binary | std::ios::trunc);
      if (!*dump) {
        std::fprintf(stderr, "word-count: cannot write %s\n", config_.dump_corpus_path.c_str());
        std::exit(2);
      }
    }
    for (int round = 0; round < config_.rounds; ++round) run_round(round, dump.get());
  }

  // The long-lived state that stays live through the quiet phase: the global tables and the round summaries.
  std::uint64_t distinct_words() const {
    std::uint64_t distinct = 0;
    for (std::size_t p = 0; p < totals_.partitions(); ++p) distinct += totals_.partition(p).size();
    return distinct;
  }
  std::size_t round_summaries() const { return summaries_.size(); }

  void report(double seconds, const std::string& steady_state_json = "null") const {
    std::uint64_t words = 0, distinct = 0, checksum = 0;
    std::vector<std::pair<std::string, std::uint64_t>> all;
    for (std::size_t p = 0; p < totals_.partitions(); ++p) {
      for (const auto& [word, count] : totals_.partition(p)) {
        words += count;
        ++distinct;
        checksum += util::fnv1a64(word) * count;
        all.emplace_back(word, count);
      }
    }
    std::size_t top = std::min(config_.top, all.size());
    std::partial_sort(all.begin(), all.begin() + top, all.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    std::uint64_t summary_words = 0;
    for (const auto& summary : summaries_) summary_words += summary->words;
    std::printf("{\"workload\": \"word-count\", \"revision\": %d, \"ok\": %s, \"seconds\": %.3f, "
                "\"words\": %" PRIu64 ", \"distinct_words\": %" PRIu64 ", \"checksum\": \"%016" PRIx64 "\", "
                "\"words_per_second\": %.0f, \"rounds\": %d, \"threads\": %d, \"top\": [",
                WORDCOUNT_REVISION, summary_words == words ? "true" : "false", seconds, words, distinct,
                checksum, seconds > 0 ? static_cast<double>(words) / seconds : 0.0, config_.rounds,
                config_.threads);
    for (std::size_t i = 0; i < top; ++i) {
      std::printf("%s[\"%s\", %" PRIu64 "]", i ? ", " : "", all[i].first.c_str(), all[i].second);
    }
    std::printf("], \"steady_state\": %s}\n", steady_state_json.c_str());
    std::fflush(stdout);
  }

  bool consistent() const {
    std::uint64_t words = 0, summary_words = 0;
    for (std::size_t p = 0; p < totals_.partitions(); ++p)
      for (const auto& entry : totals_.partition(p)) words += entry.second;
    for (const auto& summary : summaries_) summary_words += summary->words;
    return words == summary_words;
  }

 private:
  void run_round(int round, std::ofstream* dump) {
    const std::size_t shards = config_.shards_per_round;
    const std::uint64_t first_shard = static_cast<std::uint64_t>(round) * shards;
    const int threads = config_.threads;

    // Stage 1: generate the round's text.
    std::vector<std::string> texts(shards);
    WC_RUNTIME::run_stage(job_, "generate", round, shards, [&](const WC_RUNTIME::TaskPlan& tasks) {
      util::run_on_threads(threads, [&](int worker) {
        for (std::size_t s = worker; s < shards; s += threads) {
          texts[s] = generator_.shard(first_shard + s);
          WC_RUNTIME::task_done(job_, *tasks[s], texts[s].size());
        }
      });
    });
    if (dump != nullptr) {
      for (const std::string& text : texts) dump->write(text.data(), static_cast<std::streamsize>(text.size()));
    }

    // Stage 2: tokenize. The round summary is filled while every shard's tokens are alive: the peak.
    std::vector<stages::Tokens> tokens(shards);
    auto summary = std::make_unique<RoundSummary>();
    summary->round = round;
    summary->longest_words.resize(shards);
    std::mutex summary_mutex;
    WC_RUNTIME::run_stage(job_, "tokenize", round, shards, [&](const WC_RUNTIME::TaskPlan& tasks) {
      util::run_on_threads(threads, [&](int worker) {
        for (std::size_t s = worker; s < shards; s += threads) {
#if WORDCOUNT_REVISION >= 2
          tokens[s] = stages::extract_words(texts[s]);
#else
          tokens[s] = stages::tokenize(texts[s]);
#endif
          WC_RUNTIME::task_done(job_, *tasks[s], tokens[s].size());
        }
        std::map<std::size_t, std::uint64_t> histogram;
        for (std::size_t s = worker; s < shards; s += threads) {
          const std::string* longest = nullptr;
          for (const std::string& token : tokens[s]) {
            ++histogram[token.size()];
            if (longest == nullptr || token.size() > longest->size()) longest = &token;
          }
          if (longest != nullptr) summary->longest_words[s] = *longest;
        }
        std::lock_guard<std::mutex> lock(summary_mutex);
        for (const auto& [length, count] : histogram) {
          summary->length_histogram[length] += count;
          summary->words += count;
        }
      });
    });
    texts.clear();
    texts.shrink_to_fit();

    // Stage 3: combine each shard and split the local table into partitions (the shuffle).
    const std::size_t partitions = totals_.partitions();
    std::vector<std::vector<stages::PartitionBuffer>> shuffled(shards, std::vector<stages::PartitionBuffer>(partitions));
    WC_RUNTIME::run_stage(job_, "combine", round, shards, [&](const WC_RUNTIME::TaskPlan& tasks) {
      util::run_on_threads(threads, [&](int worker) {
        for (std::size_t s = worker; s < shards; s += threads) {
          stages::CountTable local = stages::combine(tokens[s]);
          stages::Tokens().swap(tokens[s]);
          for (auto& [word, count] : local) {
            shuffled[s][stages::partition_of(word, partitions)].emplace_back(word, count);
          }
          WC_RUNTIME::task_done(job_, *tasks[s], local.size());
        }
      });
    });
    tokens.clear();

    // Stage 4: reduce each partition into the long-lived totals while the shuffle buffers are alive.
    WC_RUNTIME::TaskPlan reduced =
        WC_RUNTIME::run_stage(job_, "reduce", round, partitions, [&](const WC_RUNTIME::TaskPlan& tasks) {
          util::run_on_threads(threads, [&](int worker) {
            for (std::size_t p = worker; p < partitions; p += threads) {
              auto& table = totals_.partition(p);
              for (std::size_t s = 0; s < shards; ++s) {
                for (const auto& [word, count] : shuffled[s][p]) table[word] += count;
              }
              WC_RUNTIME::task_done(job_, *tasks[p], table.size());
            }
          });
        });
    job_.checkpoints.commit(round, reduced);
    summaries_.push_back(std::move(summary));
  }

  Config config_;
  corpus::Generator generator_;
  PartitionedTable<std::unordered_map<std::string, std::uint64_t>> totals_;
  std::vector<std::unique_ptr<RoundSummary>> summaries_;
  WC_RUNTIME::Job job_;
};

}  // namespace pipeline

// ---------------------------------------------------------------------------------------------------------
namespace cli {

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "word-count: %s\n", message.c_str());
  std::fprintf(stderr, "usage: word-count [--scale small|default] [--rounds N] [--shards N] [--words-per-shard N]\n"
                       "                  [--threads N] [--partitions N] [--top N] [--seed N] [--dump-corpus FILE]\n"
                       "                  [--quiet-seconds S]\n");
  std::exit(2);
}

std::uint64_t number(const std::string& flag, const char* text) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || value == 0) usage_error(flag + ": expected a positive number, got " + text);
  return value;
}

pipeline::Config parse(int argc, char** argv) {
  pipeline::Config config;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--scale") {
      std::string scale = value();
      if (scale == "small") {
        config.rounds = 2;
        config.shards_per_round = 16;
        config.corpus.words_per_shard = 10000;
        config.corpus.vocabulary_words = 50000;
        config.threads = 8;
        config.partitions = 8;
        if (!config.quiet_seconds_given) config.quiet_seconds = 2;
      } else if (scale != "default") {
        usage_error("--scale: expected small or default, got " + scale);
      }
    } else if (arg == "--rounds") {
      config.rounds = static_cast<int>(number(arg, value()));
    } else if (arg == "--shards") {
      config.shards_per_round = number(arg, value());
    } else if (arg == "--words-per-shard") {
      config.corpus.words_per_shard = number(arg, value());
    } else if (arg == "--threads") {
      config.threads = static_cast<int>(number(arg, value()));
    } else if (arg == "--partitions") {
      config.partitions = number(arg, value());
    } else if (arg == "--top") {
      config.top = number(arg, value());
    } else if (arg == "--seed") {
      config.corpus.seed = number(arg, value());
    } else if (arg == "--quiet-seconds") {
      const char* text = value();
      if (!steady_state::parse_seconds(text, config.quiet_seconds)) {
        usage_error("--quiet-seconds: expected a number of seconds >= 0, got " + std::string(text));
      }
      config.quiet_seconds_given = true;
    } else if (arg == "--dump-corpus") {
      config.dump_corpus_path = value();
    } else if (arg == "-h" || arg == "--help") {
      std::printf("word-count: staged word-count pipeline (see docs/workloads.md)\n");
      std::exit(0);
    } else {
      usage_error("unknown option " + arg);
    }
  }
  return config;
}

}  // namespace cli
}  // namespace WC_NAMESPACE

int main(int argc, char** argv) {
  namespace wc = WC_NAMESPACE;
  wc::pipeline::Config config = wc::cli::parse(argc, argv);
  auto start = std::chrono::steady_clock::now();
  wc::pipeline::Pipeline pipeline(config);
  pipeline.run();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The quiet phase: the job is done and idle; its global tables and round summaries stay live (as a service
  // that keeps its results to answer from), and nothing else runs.
  steady_state::QuietPhase quiet(config.quiet_seconds);
  quiet.run();
  const std::string steady = quiet.json("\"distinct_words\": " + std::to_string(pipeline.distinct_words()) +
                                        ", \"round_summaries\": " + std::to_string(pipeline.round_summaries()));
  pipeline.report(seconds, steady);
  if (!pipeline.consistent()) {
    std::fprintf(stderr, "word-count: the reduced totals disagree with the tokenized word count\n");
    return 1;
  }
  return 0;
}
