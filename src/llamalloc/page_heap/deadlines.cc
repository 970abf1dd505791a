// The page heap's side of deadlines (the lists, promotion and demotion are the Deadlines component, deadlines.h):
// expiring them on entry, moving a page that changes class between the page heap's own structures by class, and
// renewing the deadline of a page that same-class recycling placed objects on. Rules: a page that changes class
// leaves its recyclable list and the pages-by-class gauge of its old class and joins those of its new class, its
// deadline set from the clock at that moment.
#include "page_heap/page_heap.h"
#include "page_heap/page_lists.h"

namespace llamalloc {

void PageHeap::change_class(HugePageMeta* p, unsigned new_class) {
  bool was_recyclable = p->in_recyclable;
  recyclable_remove(p);
  gauges_.huge_pages_by_class[p->lifetime_class] -= 1;
  gauges_.huge_pages_by_class[new_class] += 1;
  deadlines_.move(p, new_class, clock_.now_ns());
  if (was_recyclable) recyclable_push(p);
}

void PageHeap::demote(HugePageMeta* p) {
  deadlines_.demote(p, [this](HugePageMeta* q, unsigned c) { change_class(q, c); });
}

void PageHeap::expire_due_deadlines(uint64_t now) {
  deadlines_.expire(now, [this](HugePageMeta* q, unsigned c) { change_class(q, c); });
}

void PageHeap::tick() {
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  debug_check();
}

void PageHeap::renew_deadline(HugePageMeta* p) { deadlines_.renew(p, clock_.now_ns()); }

}  // namespace llamalloc
