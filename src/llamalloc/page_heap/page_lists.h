// The page heap's intrusive lists of huge pages, inline for the source files that change them (page heap
// internal). Rules, under the page heap lock: an active page is on the active list of its class, in deadline
// order (kept by the Deadlines component, deadlines.h); an active page with at least one free block is on exactly
// one recyclable list, that of its class and fullness bucket (recycle_bucket), newest first.
#pragma once

#include "page_heap/page_heap.h"

namespace llamalloc {

// The active lists are the Deadlines component's (deadlines.h).
inline void PageHeap::active_push(HugePageMeta* p) { deadlines_.push(p); }
inline void PageHeap::active_remove(HugePageMeta* p) { deadlines_.remove(p); }

inline void PageHeap::recyclable_remove(HugePageMeta* p) {
  if (!p->in_recyclable) return;
  HugePageMeta*& head = recyclable_head_[p->lifetime_class][p->in_recyclable - 1];
  if (p->recyclable_prev) p->recyclable_prev->recyclable_next = p->recyclable_next;
  else head = p->recyclable_next;
  if (p->recyclable_next) p->recyclable_next->recyclable_prev = p->recyclable_prev;
  p->recyclable_prev = p->recyclable_next = nullptr;
  p->in_recyclable = 0;
}

inline void PageHeap::recyclable_push(HugePageMeta* p) {
  unsigned b = recycle_bucket(p);
  if (p->in_recyclable == 1 + b) return;
  recyclable_remove(p);
  HugePageMeta*& head = recyclable_head_[p->lifetime_class][b];
  p->recyclable_prev = nullptr;
  p->recyclable_next = head;
  if (head) head->recyclable_prev = p;
  head = p;
  p->in_recyclable = uint8_t(1 + b);
}

}  // namespace llamalloc
