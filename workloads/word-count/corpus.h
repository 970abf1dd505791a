// word-count's corpus: the generator of the text shards, words from a fixed vocabulary with a Zipf-like skew.
//
// Part of word-count's one translation unit (word_count.h says why): word_count.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_WORD_COUNT_CORPUS_H
#define LLAMALLOC_WORKLOADS_WORD_COUNT_CORPUS_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "word_count.h"

namespace WC_NAMESPACE::corpus {

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

}  // namespace WC_NAMESPACE::corpus

#endif  // LLAMALLOC_WORKLOADS_WORD_COUNT_CORPUS_H
