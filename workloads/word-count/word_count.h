// word-count's internal header: the revision switches and the small utilities that every part uses.
//
// word-count is one translation unit: word_count.cc includes its parts, one header per concept (corpus.h,
// stages.h, runtime.h, pipeline.h), and nothing else includes them. Their functions are defined in the
// headers, not inline, as in one source file, because the compiler then sees the whole program and inlines
// across the parts: an allocation's call stack, the profiler's context of it and the model's input, does not
// depend on the file that its functions are in. It also keeps word-count-rebuilt's added function ahead of all
// the others (word_count.cc).
#ifndef LLAMALLOC_WORKLOADS_WORD_COUNT_WORD_COUNT_H
#define LLAMALLOC_WORKLOADS_WORD_COUNT_WORD_COUNT_H

#include <thread>
#include <vector>

#include "common/random.h"

#ifndef WORDCOUNT_REVISION
#define WORDCOUNT_REVISION 1
#endif

// Revision 2's names (word_count.cc says what else it changes).
#if WORDCOUNT_REVISION >= 2
#define WC_NAMESPACE wc_r2
#define WC_RUNTIME dataflow
#else
#define WC_NAMESPACE wordcount
#define WC_RUNTIME runtime
#endif

namespace WC_NAMESPACE::util {

using workloads::fnv1a64;
using workloads::splitmix64;

// Runs body(worker) on `threads` fresh threads and joins them: each stage gets its own threads, as the
// stages of a dataflow runtime do, so thread-thread heap state comes and goes with them.
template <typename Body>
void run_on_threads(int threads, Body&& body) {
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int worker = 0; worker < threads; ++worker) pool.emplace_back([&body, worker] { body(worker); });
  for (std::thread& t : pool) t.join();
}

}  // namespace WC_NAMESPACE::util

#endif  // LLAMALLOC_WORKLOADS_WORD_COUNT_WORD_COUNT_H
