// word-count's stages proper: tokenizing a shard, counting its words and the partition of a word (the
// shuffle's key). Revision 2 tokenizes through views of letter runs.
//
// Part of word-count's one translation unit (word_count.h says why): word_count.cc includes it.
#ifndef LLAMALLOC_WORKLOADS_WORD_COUNT_STAGES_H
#define LLAMALLOC_WORKLOADS_WORD_COUNT_STAGES_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "word_count.h"

namespace WC_NAMESPACE::stages {

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

}  // namespace WC_NAMESPACE::stages

#endif  // LLAMALLOC_WORKLOADS_WORD_COUNT_STAGES_H
