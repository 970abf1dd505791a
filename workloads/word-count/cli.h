// word-count's command line: the options, the scales and the usage message.
//
// Part of word-count's one translation unit (word_count.h says why): word_count.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_WORD_COUNT_CLI_H
#define LLAMALLOC_WORKLOADS_WORD_COUNT_CLI_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../common/steady_state.h"
#include "pipeline.h"
#include "word_count.h"

namespace WC_NAMESPACE::cli {

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

}  // namespace WC_NAMESPACE::cli

#endif  // LLAMALLOC_WORKLOADS_WORD_COUNT_CLI_H
