// llama-oracle-best: llama-oracle (the library's heap, each object in its true lifetime class) replayed under
// several settings of the library's placement options, the one that keeps the least memory after the peak
// reported. llama-oracle alone answers "would lifetimes help under these options?"; a program whose memory the
// default options place badly keeps as much under the oracle as under any allocator, and only a search over the
// options tells that from "lifetimes do not fragment this program".
//
// The search: the base options (the library's defaults, or those --option gives) first, then every
// combination of the grid options' values, then coordinate descent from the best so far over every option of
// the space (one option's values at a time, the others kept), until a round over all of them finds nothing
// better. A candidate is better with a lower footprint after the peak (the median over sim/after_peak.h's window,
// from the live peak's end to the end of the quiet phase: what a running server keeps after its peak), then a lower final and mean footprint; on a tie the one
// tried first (the base first) stays. The lifetime pre-pass runs once: the classes depend on the trace and the realloc rule, not on the
// options. Replays run on several threads, each with its own PageHeap and its own cursor over the trace.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/engine.h"
#include "sim/policies.h"
#include "sim/trace_reader.h"

namespace llamalloc::sim {

// The values the search tries for one placement option (sim/heap_options.h's kPlacementOptionNames).
struct SearchDimension {
  std::string name;
  std::vector<uint64_t> values;  // in the order tried
  bool grid = true;              // in the full grid; otherwise tried only by coordinate descent
};

struct SearchSpace {
  std::vector<SearchDimension> dimensions;
};

// The default space: LONG_CLASS {4, 8}, SHARED_CLASS {3, 8}, SPAN_RECYCLING {1, 0}, DENSE_FIRST {1, 0} and
// DEADLINE_K {4, 2} in the grid (32 settings, the defaults among them), and SAME_CLASS_RECYCLING {1, 0} and
// SMALL_HEAP_PAGES {8, 0} by descent. DEFAULT_CLASS is not searched: the oracle gives every object its class, and
// the default class only bounds SHARED_CLASS and LONG_CLASS from below (alloc/heap_config.h).
SearchSpace default_search_space();

// Applies one `--search NAME=V1,V2,...`: NAME's values become these, in the grid (a single value fixes NAME for
// the search). NAME is a placement option, with or without LLAMALLOC_; each value is read by the library's
// parser. Throws std::invalid_argument with one line naming the spec for anything else.
void apply_search_spec(SearchSpace& space, const std::string& spec);

struct OracleSearchSettings {
  SearchSpace space = default_search_space();
  unsigned jobs = 0;  // replays at once; 0: the machine's hardware threads
  // One line per candidate replayed (its options and figures); null: none.
  std::function<void(const std::string&)> progress;
};

// Runs the search over the reader's events, each candidate a llama-oracle replay under settings (its heap
// options are the base). Returns the best candidate's run as llama-oracle-best's: its summary, timeline, extras
// and JSON (heap snapshots, heap_options), with "search" added to the JSON (docs/simulator.md) and the
// search's figures to the extras.
RunResult search_oracle_options(const TraceReader& reader, const PolicySettings& settings, EngineOptions options,
                                const OracleSearchSettings& search);

}  // namespace llamalloc::sim
