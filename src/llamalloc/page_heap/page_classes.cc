// The page-class table and the class fallback (HeapConfig::class_fallback, LLAMALLOC_CLASS_FALLBACK): page_class(lc)
// is the class whose huge pages an object of lifetime class lc takes its blocks from. Rules: the table is set when
// the heap is configured (configure, page_heap.h): a class from HeapConfig::long_class_min up to the last finite
// one takes the longest class's pages, every other class its own; at each subrelease pass (under the lock), a
// class above the default class whose pages are less than half as full as the default class's for kFallbackPasses
// passes in a row, on at least kFallbackMinPages pages, takes the default class's pages from then on
// (review_model_classes), as it would without a model, and never goes back; a class whose entry is not its own
// is not reviewed. The table is written under the page heap lock, one byte at a time, and read without it.
#include "page_heap/page_heap.h"

namespace llamalloc {

void PageHeap::review_model_classes(const size_t* live_blocks, const size_t* pages) {
  unsigned d = config_.default_class;
  if (!config_.class_fallback || pages[d] == 0) return;
  for (unsigned c = d + 1; c < never_freed_class(); ++c) {
    if (page_class_[c] != c) {
      emptier_passes_[c] = 0;
      continue;
    }
    // Less than half as full: live_c / pages_c < live_d / pages_d / 2.
    bool emptier = pages[c] >= kFallbackMinPages && 2 * live_blocks[c] * pages[d] < live_blocks[d] * pages[c];
    emptier_passes_[c] = emptier ? uint8_t(emptier_passes_[c] + 1) : 0;
    if (emptier_passes_[c] >= kFallbackPasses) {
      __atomic_store_n(&page_class_[c], uint8_t(d), __ATOMIC_RELAXED);
      emptier_passes_[c] = 0;
      counters_.class_fallbacks.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace llamalloc
