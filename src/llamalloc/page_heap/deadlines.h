// Deadlines (the LLAMA paper, sections 6.2-6.4): the active huge pages of each lifetime class in deadline order,
// and what happens to a page when its deadline passes. A component of the page heap (PageHeap holds one), tested
// alone with a fake clock (tests/heap/deadlines_test.cc). Rules:
// - A page's deadline is the time it got its class plus K x the class's duration (10 ms x 10^class); "never
//   freed" has none (kNoDeadline), so its pages never expire.
// - A page joins its class's list at the tail, and only with a deadline no earlier than any on the list (every
//   deadline of a class is now + the same K x duration): each list is in deadline order, and expiry looks only at
//   heads. due(now) is false before the earliest deadline on any list, so that the page heap's entry points pay one
//   compare until a deadline passes.
// - When a page's deadline passes with residual blocks (objects predicted to match its class) still live, they
//   were under-predicted: the page is promoted one class, no further than the longest finite class ("never freed"
//   is not a lifetime to be promoted into). With no residual block live, its live blocks hold shorter-lived
//   objects: it is demoted one class (not below 0) and they become its residual blocks. Either way it gets a new
//   deadline at the tail of its new class's list.
// - The owner moves a page between its own structures by class (the page heap: its recyclable lists and pages by
//   class) in the `change_class(page, new_class)` it passes; that calls move() for the lists here.
// Not thread-safe: the page heap calls it under its lock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"
#include "page_heap/page_meta.h"
#include "stats.h"

namespace llamalloc {

class Deadlines {
 public:
  // Counts deadlines_expired, promotions and demotions into `counters`.
  constexpr explicit Deadlines(Counters& counters) : counters_(counters) {}
  Deadlines(const Deadlines&) = delete;
  Deadlines& operator=(const Deadlines&) = delete;

  // The class count (the last one is "never freed", at least 2) and K (at least 1). The lists are kept: only
  // deadlines set from now on use the new values.
  constexpr void configure(unsigned num_classes, unsigned deadline_k) {
    num_classes_ = num_classes;
    deadline_k_ = deadline_k;
  }
  unsigned num_classes() const { return num_classes_; }
  // 10 ms x 10^lc; kNoDeadline for "never freed".
  uint64_t class_duration_ns(unsigned lc) const {
    return lc >= num_classes_ - 1 ? kNoDeadline : lifetime_class_bound_ns(lc);
  }
  // The deadline of a page that gets class lc at `now`.
  uint64_t deadline(unsigned lc, uint64_t now) const {
    uint64_t d = class_duration_ns(lc);
    return d == kNoDeadline ? kNoDeadline : now + deadline_k_ * d;
  }

  // --- the lists ----------------------------------------------------------------------------------------
  // Appends p (active, its class and deadline set) to its class's list; its deadline is no earlier than any there.
  void push(HugePageMeta* p) {
    unsigned c = p->lifetime_class;
    if (p->deadline_ns < earliest_ns_) earliest_ns_ = p->deadline_ns;
    p->active_next = nullptr;
    p->active_prev = tail_[c];
    if (tail_[c]) tail_[c]->active_next = p;
    else head_[c] = p;
    tail_[c] = p;
  }
  void remove(HugePageMeta* p) {
    unsigned c = p->lifetime_class;
    if (p->active_prev) p->active_prev->active_next = p->active_next;
    else head_[c] = p->active_next;
    if (p->active_next) p->active_next->active_prev = p->active_prev;
    else tail_[c] = p->active_prev;
    p->active_prev = p->active_next = nullptr;
  }
  // The page of class lc with the earliest deadline (the list goes on through active_next), or null.
  HugePageMeta* first(unsigned lc) const { return head_[lc]; }
  // p goes to class new_class with the deadline of a page that gets it at `now`, at that list's tail.
  void move(HugePageMeta* p, unsigned new_class, uint64_t now) {
    remove(p);
    p->lifetime_class = uint8_t(new_class);
    p->deadline_ns = deadline(new_class, now);
    push(p);
  }
  // p's deadline starts again at `now` (the page heap placed objects of its class on it); none for "never freed".
  void renew(HugePageMeta* p, uint64_t now) {
    if (class_duration_ns(p->lifetime_class) == kNoDeadline) return;
    // now + K x class is at least every deadline of the class set before: the page goes to the list's tail.
    remove(p);
    p->deadline_ns = deadline(p->lifetime_class, now);
    push(p);
  }

  // --- expiry -------------------------------------------------------------------------------------------
  // Whether a deadline may have passed by `now` (false before the earliest one; true may find none).
  bool due(uint64_t now) const { return now >= earliest_ns_; }
  // Every page whose deadline is at or before `now`, class by class from the shortest, each list from its head:
  // marked deadline_passed, counted, then promoted or demoted. Then the earliest deadline is found again.
  template <typename ChangeClass>
  void expire(uint64_t now, ChangeClass&& change_class) {
    for (unsigned c = 0; c < num_classes_; ++c) {
      while (head_[c] != nullptr && head_[c]->deadline_ns <= now) {
        HugePageMeta* p = head_[c];
        counters_.deadlines_expired.fetch_add(1, std::memory_order_relaxed);
        p->deadline_passed = 1;
        if ((p->live & p->residual).none()) demote(p, change_class);
        else promote(p, change_class);
      }
    }
    earliest_ns_ = ~uint64_t{0};
    for (unsigned c = 0; c < num_classes_; ++c)
      if (head_[c] != nullptr && head_[c]->deadline_ns < earliest_ns_) earliest_ns_ = head_[c]->deadline_ns;
  }
  // Live residual blocks past the deadline: one class up (the LLAMA paper, Figure 6d), to the longest finite class
  // at most (there it stays, with a new deadline).
  template <typename ChangeClass>
  void promote(HugePageMeta* p, ChangeClass&& change_class) {
    unsigned c = p->lifetime_class;
    unsigned top = num_classes_ - 2;
    if (c < top) counters_.promotions.fetch_add(1, std::memory_order_relaxed);
    change_class(p, c < top ? c + 1 : c);
  }
  // No residual block live: one class down, not below 0, and the live blocks become residual (Figure 6e).
  template <typename ChangeClass>
  void demote(HugePageMeta* p, ChangeClass&& change_class) {
    unsigned c = p->lifetime_class;
    if (c > 0) counters_.demotions.fetch_add(1, std::memory_order_relaxed);
    p->residual = p->live;
    change_class(p, c > 0 ? c - 1 : 0);
  }

 private:
  Counters& counters_;
  unsigned num_classes_ = kMaxClasses;
  unsigned deadline_k_ = 4;
  // No listed page's deadline is earlier than this (it may be earlier than needed: then expire finds nothing).
  uint64_t earliest_ns_ = ~uint64_t{0};
  HugePageMeta* head_[kMaxClasses] = {};
  HugePageMeta* tail_[kMaxClasses] = {};
};

}  // namespace llamalloc
