// Deadlines, promotion and demotion (the LLAMA paper, sections 6.2-6.4). An active page's deadline is the time it
// became active plus K x its class's duration. Rules: when the deadline passes and residual blocks (objects
// predicted to match the page's class) are still live, they were under-predicted: the page is promoted one class
// (no further than the longest finite class: "never freed" is not a lifetime to be promoted into); when no
// residual block is left, the live blocks hold shorter-lived objects: the page is demoted one class and they
// become its residual blocks. Either way it gets a new deadline at the tail of its new class's list.
#include "page_heap/page_heap.h"
#include "page_heap/page_lists.h"

namespace llamalloc {

void PageHeap::change_class(HugePageMeta* p, unsigned new_class) {
  unsigned old_class = p->lifetime_class;
  active_remove(p);
  bool was_recyclable = p->in_recyclable;
  recyclable_remove(p);
  gauges_.huge_pages_by_class[old_class] -= 1;
  gauges_.huge_pages_by_class[new_class] += 1;
  p->lifetime_class = uint8_t(new_class);
  uint64_t d = class_duration_ns(new_class);
  p->deadline_ns = d == kNoDeadline ? kNoDeadline : clock_.now_ns() + config_.deadline_k * d;
  active_push(p);
  if (was_recyclable) recyclable_push(p);
}

// Deadline expired with live residual blocks: they were under-predicted by (at least) one class (the LLAMA
// paper, Figure 6d). "Never freed" is not a lifetime one can be promoted into; the longest finite class is the
// end of the chain.
void PageHeap::promote(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  unsigned top = never_freed_class() - 1;
  if (c < top) counters_.promotions.fetch_add(1, std::memory_order_relaxed);
  change_class(p, c < top ? c + 1 : c);
}

// No residual block left: the live blocks hold shorter-lived objects, so the page drops one class and they
// become its residual blocks (the LLAMA paper, Figure 6e).
void PageHeap::demote(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  if (c > 0) counters_.demotions.fetch_add(1, std::memory_order_relaxed);
  p->residual = p->live;
  change_class(p, c > 0 ? c - 1 : 0);
}


void PageHeap::expire_due_deadlines(uint64_t now) {
  for (unsigned c = 0; c < num_classes(); ++c) {
    while (active_head_[c] != nullptr && active_head_[c]->deadline_ns <= now) {
      HugePageMeta* p = active_head_[c];
      counters_.deadlines_expired.fetch_add(1, std::memory_order_relaxed);
      p->deadline_passed = 1;
      if ((p->live & p->residual).none()) demote(p);
      else promote(p);
    }
  }
  earliest_deadline_ns_ = ~uint64_t{0};
  for (unsigned c = 0; c < num_classes(); ++c)
    if (active_head_[c] != nullptr && active_head_[c]->deadline_ns < earliest_deadline_ns_)
      earliest_deadline_ns_ = active_head_[c]->deadline_ns;
}

void PageHeap::tick() {
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  debug_check();
}

void PageHeap::renew_deadline(HugePageMeta* p) {
  uint64_t d = class_duration_ns(p->lifetime_class);
  if (d == kNoDeadline) return;
  // now + K x class is at least every deadline of the class set before: the page goes to the list's tail.
  active_remove(p);
  p->deadline_ns = clock_.now_ns() + config_.deadline_k * d;
  active_push(p);
}

}  // namespace llamalloc
