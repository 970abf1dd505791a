// llamalloc-model-tool: the C++ side of the golden tests and a timing driver for the inference.
//   infer MODEL                 stdin: one context per line, token ids; stdout: class and the 8 logits
//   lookup MODEL TOKENS         stdin: "PATH VADDR_HEX" per line; stdout: the frame's token ids ("-" if none)
//   time-infer MODEL N REPS     median ns of a model run over N tokens (ids cycled over the vocabulary)
//   time-predict MODEL DEPTH REPS [TOKENS]
//                               median ns of the whole miss path (stack walk, token lookups, model) at the
//                               bottom of a DEPTH-frame recursion
// Exit status 2 and one line naming the file for a bad model or token file.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "learned_predictor.h"
#include "model_file.h"
#include "token_table.h"

using namespace llamalloc::model;

static ThreadState g_state;

__attribute__((noinline)) static std::vector<double> time_predict_at_bottom(LearnedPredictor& p, int depth, int reps) {
  if (depth > 1) {
    std::vector<double> r = time_predict_at_bottom(p, depth - 1, reps);
    asm volatile("" ::: "memory");  // not a tail call: the frame stays
    return r;
  }
  std::vector<double> ns;
  ns.reserve(size_t(reps));
  llamalloc::AllocationContext ctx{reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                                   reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), 48};
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    p.run_model(ctx, &g_state);
    auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  return ns;
}

static int usage() {
  fprintf(stderr, "usage: llamalloc-model-tool infer MODEL | lookup MODEL TOKENS | time-infer MODEL N REPS | time-predict MODEL DEPTH REPS [TOKENS]\n");
  return 2;
}

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  std::string cmd = argv[1];
  char error[256];
  if (cmd == "time-predict" && (argc == 5 || argc == 6)) {
    static LearnedPredictor predictor;
    char err[512];
    // A model run on every call: re-prediction after each hit, never backed off.
    if (!predictor.init(argv[2], argc == 6 ? argv[5] : nullptr, 1, err, sizeof err, /*repredict_backoff=*/0)) {
      fprintf(stderr, "%s\n", err);
      return 2;
    }
    std::vector<double> ns = time_predict_at_bottom(predictor, atoi(argv[3]), atoi(argv[4]));
    std::sort(ns.begin(), ns.end());
    printf("depth %s hidden %u median_ns %.0f p10_ns %.0f\n", argv[3], predictor.model().hidden_dim(),
           ns[ns.size() / 2], ns[ns.size() / 10]);
    return 0;
  }
  ModelFile model;
  if (!model.open(argv[2], error, sizeof error)) {
    fprintf(stderr, "%s: %s\n", argv[2], error);
    return 2;
  }
  if (cmd == "infer") {
    std::string line;
    std::vector<uint32_t> ids;
    while (std::getline(std::cin, line)) {
      std::istringstream in(line);
      ids.clear();
      unsigned long v;
      while (in >> v) ids.push_back(uint32_t(v));
      float logits[kNumClasses];
      unsigned lc = infer(model, ids.data(), ids.size(), logits);
      printf("%u", lc);
      for (float l : logits) printf(" %.9g", l);
      printf("\n");
    }
    return 0;
  }
  if (cmd == "lookup" && argc == 4) {
    TokenTables tables;
    if (!tables.open(argv[3], model.vocab_crc(), model.vocab_size(), error, sizeof error)) {
      fprintf(stderr, "%s: %s\n", argv[3], error);
      return 2;
    }
    std::string path, hex;
    while (std::cin >> path >> hex) {
      int b = tables.find_binary(path.c_str());
      FrameTokens ft;
      if (b < 0 || !tables.lookup(uint32_t(b), strtoull(hex.c_str(), nullptr, 16), &ft)) {
        printf("-\n");
        continue;
      }
      for (uint32_t k = 0; k < ft.count; ++k) printf(k ? " %u" : "%u", ft.ids[k]);
      printf(ft.terminal ? " T\n" : "\n");
    }
    return 0;
  }
  if (cmd == "time-infer" && argc == 5) {
    size_t n = strtoull(argv[3], nullptr, 10);
    int reps = atoi(argv[4]);
    std::vector<uint32_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = uint32_t((i * 7919 + 52) % model.vocab_size());
    std::vector<double> ns;
    unsigned sink = 0;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      sink += infer(model, ids.data(), ids.size(), nullptr);
      auto t1 = std::chrono::steady_clock::now();
      ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    }
    double mean = 0;
    for (double v : ns) mean += v / double(ns.size());
    std::sort(ns.begin(), ns.end());
    printf("tokens %zu hidden %u median_ns %.0f p10_ns %.0f mean_ns %.0f (sink %u)\n",
           std::min<size_t>(n, model.max_tokens()), model.hidden_dim(), ns[ns.size() / 2], ns[ns.size() / 10], mean,
           sink);
    return 0;
  }
  return usage();
}
