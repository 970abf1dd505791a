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
//
// The program is one translation unit, in parts: word_count.h (revision switches, utilities), corpus.h,
// stages.h, runtime.h and pipeline.h; this file holds the command line and runs them.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/steady_state.h"

#ifdef WORDCOUNT_REBUILT
namespace rebuilt {
[[gnu::noinline]] int environment_marker() {
  const char* value = std::getenv("WORDCOUNT_REBUILT_MARKER");
  return value != nullptr ? std::atoi(value) : 0;
}
[[maybe_unused]] const int marker = environment_marker();
}  // namespace rebuilt
#endif

// The program's own code comes after the rebuilt function, so that the function stands ahead of all of it.
#include "common/arguments.h"
#include "word_count.h"
#include "corpus.h"
#include "stages.h"
#include "runtime.h"
#include "pipeline.h"

namespace WC_NAMESPACE::cli {

[[noreturn]] void usage_error(const std::string& message) {
  workloads::exit_with_usage(
      "word-count", message,
      "usage: word-count [--scale small|default] [--rounds N] [--shards N] [--words-per-shard N]\n"
      "                  [--threads N] [--partitions N] [--top N] [--seed N] [--dump-corpus FILE]\n"
      "                  [--quiet-seconds S]\n");
}

void help() { std::printf("word-count: staged word-count pipeline (see docs/workloads.md)\n"); }

pipeline::Config parse(int argc, char** argv) {
  pipeline::Config config;
  workloads::read_flags(argc, argv, usage_error, help, [&](std::string_view arg, workloads::Arguments& args) {
    if (arg == "--scale") {
      if (args.small_scale()) {
        config.rounds = 2;
        config.shards_per_round = 16;
        config.corpus.words_per_shard = 10000;
        config.corpus.vocabulary_words = 50000;
        config.threads = 8;
        config.partitions = 8;
        if (!config.quiet_seconds_given) config.quiet_seconds = 2;
      }
    } else if (arg == "--rounds") {
      config.rounds = static_cast<int>(args.positive_number());
    } else if (arg == "--shards") {
      config.shards_per_round = args.positive_number();
    } else if (arg == "--words-per-shard") {
      config.corpus.words_per_shard = args.positive_number();
    } else if (arg == "--threads") {
      config.threads = static_cast<int>(args.positive_number());
    } else if (arg == "--partitions") {
      config.partitions = args.positive_number();
    } else if (arg == "--top") {
      config.top = args.positive_number();
    } else if (arg == "--seed") {
      config.corpus.seed = args.positive_number();
    } else if (arg == "--quiet-seconds") {
      args.quiet_seconds(config.quiet_seconds, config.quiet_seconds_given);
    } else if (arg == "--dump-corpus") {
      config.dump_corpus_path = args.value();
    } else {
      return false;
    }
    return true;
  });
  return config;
}

}  // namespace WC_NAMESPACE::cli

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
