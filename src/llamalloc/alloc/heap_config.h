// The heap's configuration from the options (LLAMALLOC_*). The library builds its heap with it at start, and the
// replay (`llamalloc simulate --option NAME=VALUE`) builds its own the same way, so that a replay of an
// option is the library under it.
#pragma once

#include "page_heap/page_heap.h"
#include "options.h"

namespace llamalloc {

// A class a heap of `num_classes` classes has: a predictor's class above them is the last one (never freed). The
// library's slow paths (alloc/runtime_internal.h) and the replay (sim/llama_policy.cc) both clamp with it, so that
// a replay places such an object where the library would.
inline unsigned clamp_class(unsigned lc, unsigned num_classes) { return lc < num_classes ? lc : num_classes - 1; }

// The class every allocation gets without a model (LLAMALLOC_DEFAULT_CLASS; at most the last class).
inline unsigned default_class_of(const Options& o) {
  unsigned c = unsigned(o.default_class);
  return c < unsigned(o.classes) ? c : unsigned(o.classes) - 1;
}

inline HeapConfig heap_config_of(const Options& o) {
  unsigned default_class = default_class_of(o);
  HeapConfig config;
  config.num_classes = unsigned(o.classes);
  config.deadline_k = unsigned(o.deadline_k);
  config.same_class_recycling = o.same_class_recycling != 0;
  config.small_heap_pages = unsigned(o.small_heap_pages);
  // Never the class every allocation gets without a model: that would put the whole program under one lock.
  config.shared_class_min = unsigned(o.shared_class) > default_class ? unsigned(o.shared_class) : default_class + 1;
  config.subrelease_percent = unsigned(o.subrelease);
  config.subrelease_quiet_percent = unsigned(o.subrelease_quiet);
  // Likewise above that class: without a model every allocation keeps pages of its own class.
  config.long_class_min = unsigned(o.long_class) > default_class ? unsigned(o.long_class) : default_class + 1;
  config.span_recycling = o.span_recycling != 0;
  config.dense_first = o.dense_first != 0;
  config.default_class = default_class;
  config.class_fallback = o.class_fallback != 0;
  config.collapse_dense = o.huge_pages == 2;
  return config;
}

}  // namespace llamalloc
