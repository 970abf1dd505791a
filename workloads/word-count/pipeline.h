// word-count's pipeline: the rounds and their four stages (generate, tokenize, combine, reduce) on fresh
// threads, the long-lived results (the partitioned global table and the round summaries) and the report.
//
// Part of word-count's one translation unit (word_count.h says why): word_count.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_WORD_COUNT_PIPELINE_H
#define LLAMALLOC_WORKLOADS_WORD_COUNT_PIPELINE_H

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "corpus.h"
#include "runtime.h"
#include "stages.h"
#include "word_count.h"

namespace WC_NAMESPACE::pipeline {

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

}  // namespace WC_NAMESPACE::pipeline

#endif  // LLAMALLOC_WORKLOADS_WORD_COUNT_PIPELINE_H
