// The huge page lifecycle (the LLAMA paper, section 6.2): a page is taken (from the page cache, else from the
// address space) and opened for one lifetime class; it becomes active when it is full or a request of its class
// no longer fits, with a deadline of now + K x its class's duration; an active page whose blocks are all free is
// given back at once. Rules: a class has at most one open page; the open page keeps its free blocks for its own
// class (and, in a small page heap, lends some to shorter classes); the footprint and the pages by class count
// open and active pages (huge objects included), never cached ones; a page given back has its metadata dropped,
// so that it reads as kUnused.
#include "page_heap/page_heap.h"
#include "page_heap/page_lists.h"

namespace llamalloc {

// Deadlines holds the deadline rule (K x 10 ms x 10^class, none for "never freed"), and the page heap asks it, so
// that a page's first deadline (activate) and its later ones (Deadlines::move, renew) cannot follow different rules.
uint64_t PageHeap::class_duration_ns(unsigned lc) const { return deadlines_.class_duration_ns(lc); }

void PageHeap::account_page(HugePageMeta* p, int64_t pages) {
  gauges_.footprint_bytes += uint64_t(pages * int64_t(kHugePageBytes));
  gauges_.huge_pages_by_class[p->lifetime_class] += uint64_t(pages);
  if (gauges_.footprint_bytes > gauges_.peak_footprint_bytes) {
    gauges_.peak_footprint_bytes = gauges_.footprint_bytes;
    peak_footprint_.store(gauges_.footprint_bytes, std::memory_order_relaxed);
  }
}

// A cached page, else the lowest free page of the address space (take_pages).
HugePageMeta* PageHeap::open_new_page(unsigned lc, bool* fresh) {
  Region* r = nullptr;
  size_t index = 0;
  // The parked huge object's pages before fresh ones: it must not raise the peak.
  bool cached = take_cached(1, 1, &r, &index) || (unpark_locked() && take_cached(1, 1, &r, &index));
  if (!cached && !take_pages(1, 1, &r, &index)) return nullptr;
  if (fresh != nullptr) *fresh = !cached;
  HugePageMeta* p = r->page(index);
  p->region = r;
  p->index = uint32_t(index);
  p->state = PageState::kOpen;
  p->kind = PageKind::kBlocks;
  p->lifetime_class = uint8_t(lc);
  p->deadline_ns = kNoDeadline;
  open_[lc] = p;
  account_page(p, 1);
  advise_if_dense(p, lc);
  return p;
}

// Open -> active when the page has been filled, or a request of its class no longer fits (the LLAMA
// paper, section 6.2).
void PageHeap::activate(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  if (open_[c] == p) open_[c] = nullptr;
  note_page_filled(p);
  p->state = PageState::kActive;
  p->deadline_ns = deadlines_.deadline(c, clock_.now_ns());
  active_push(p);
  if (!p->live.all()) recyclable_push(p);
  if (p->live.none()) release_page(p);
}

void PageHeap::release_page(HugePageMeta* p) {
  if (p->state == PageState::kActive) {
    active_remove(p);
    recyclable_remove(p);
  }
  if (open_[p->lifetime_class] == p) open_[p->lifetime_class] = nullptr;
  unrelease(p, 0, kBlocksPerHugePage);
  account_page(p, -1);
  forget_advice(p);
  Region* r = p->region;
  size_t index = p->index;
  // Its metadata reads as zero again: state kUnused, so a stale pointer into it is reported, not trusted.
  platform_.release_metadata(p, kPageMetaStride);
  give_back_pages(r, index, 1);
}

void PageHeap::after_blocks_freed(HugePageMeta* p) {
  if (p->state != PageState::kActive) return;  // the open page keeps its blocks for its own class
  if (p->live.none()) {
    release_page(p);
    return;
  }
  recyclable_push(p);
  if (p->residual.none()) demote(p);
}

size_t PageHeap::release_empty_open_pages(bool now) {
  LockGuard g(lock_);
  size_t released = 0;
  for (unsigned c = 0; c < num_classes(); ++c) {
    HugePageMeta* p = open_[c];
    if (p == nullptr || !p->live.none()) continue;
    if (now || p->open_idle) {
      release_page(p);
      ++released;
    } else {
      p->open_idle = 1;
    }
  }
  expire_deadlines(clock_.now_ns());
  debug_check();
  return released;
}

}  // namespace llamalloc
