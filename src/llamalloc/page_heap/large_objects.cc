// Large objects: runs of 8 KiB blocks on a huge page of blocks (the thread heaps' size-class spans are handed out
// as large objects too). Placement follows the LLAMA paper (section 6.3): a large object first takes free blocks
// of an active page of a longer class (it is expected to die before that page's objects, so the page's lifetime
// is unchanged), then the open page of its own class (its blocks are residual: predicted to match the page),
// then its own class's active pages (HeapConfig::same_class_recycling, renewing their deadline), then, in a small
// page heap, the open page of a longer class, then a fresh page. Rules: large_start and large_end mark each
// object's first and last block, so that free() finds its size; only the start of a live object may be freed.
#include <errno.h>

#include <cstddef>

#include "page_heap/page_heap.h"
#include "page_heap/page_lists.h"
#include "page_heap/region_bitmap.h"

namespace llamalloc {

HugePageMeta* PageHeap::borrow_longer_open_page(unsigned lc, size_t count, size_t align_blocks,
                                                       size_t* first) {
  if (gauges_.footprint_bytes >= uint64_t(config_.small_heap_pages) * kHugePageBytes) return nullptr;
  for (unsigned c = lc + 1; c < num_classes(); ++c) {
    HugePageMeta* page = open_[c];
    // At most half the page is lent: the rest stays for the page's own class, so that a burst of short-lived
    // objects cannot fill it and scatter the long-lived ones over fresh pages (which would pin them all).
    if (page == nullptr || (page->live & ~page->residual).count() + count > kBlocksPerHugePage / 2) continue;
    if (take_blocks(page, count, align_blocks, first)) return page;
  }
  return nullptr;
}

bool PageHeap::take_blocks(HugePageMeta* p, size_t count, size_t align_blocks, size_t* first) {
  size_t at = p->live.find_clear_run(count, align_blocks);
  if (at == kBlocksPerHugePage) return false;
  *first = at;
  return true;
}

void PageHeap::mark_allocated(HugePageMeta* p, size_t first, size_t count, bool residual) {
  p->live.set_range(first, count);
  blocks_taken(count);
  p->open_idle = 0;
  p->taken.set_range(first, count);
  unrelease(p, first, count);
  if (residual) p->residual.set_range(first, count);
  if (p->state == PageState::kOpen) {
    if (p->live.all()) activate(p);
  } else if (p->live.all()) {
    recyclable_remove(p);
  } else {
    recyclable_push(p);  // fuller now: perhaps another list
  }
}

HugePageMeta* PageHeap::recycle_blocks(unsigned c, size_t count, size_t align_blocks, size_t* first) {
  // The fullest pages first (HeapConfig::dense_first): a block taken there lets an emptier page drain.
  for (unsigned b = kRecycleBuckets; b-- > 0;)
    for (HugePageMeta* p = recyclable_head_[c][b]; p != nullptr; p = p->recyclable_next)
      if (take_blocks(p, count, align_blocks, first)) {
        counters_.blocks_recycled.fetch_add(count, std::memory_order_relaxed);
        return p;
      }
  return nullptr;
}

void* PageHeap::alloc_large(unsigned lc, size_t bytes, size_t alignment) {
  if (lc >= num_classes()) lc = never_freed_class();
  lc = page_class(lc);
  if (alignment < kBlockBytes) alignment = kBlockBytes;
  // Every huge object's address is huge-page aligned.
  if (bytes > kHugePageBytes && alignment <= kHugePageBytes && parked_huge_.load(std::memory_order_relaxed) != 0)
    if (void* p = reuse_parked_huge(lc, bytes)) return p;
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  if (bytes > kHugePageBytes || alignment > kHugePageBytes) {
    void* p = alloc_huge_locked(lc, bytes, alignment);
    debug_check();
    return p;
  }
  size_t count = bytes == 0 ? 1 : (bytes + kBlockBytes - 1) / kBlockBytes;
  size_t align_blocks = alignment / kBlockBytes;
  HugePageMeta* page = nullptr;
  size_t first = 0;
  bool residual = false;
  bool fresh = false;
  // Section 6.3: large objects prefer the next longer class (lr + 1), then the longer ones after it.
  for (unsigned c = lc + 1; c < num_classes() && page == nullptr; ++c)
    page = recycle_blocks(c, count, align_blocks, &first);
  if (page == nullptr) {
    page = open_[lc];
    if (page != nullptr && !take_blocks(page, count, align_blocks, &first)) {
      activate(page);
      page = nullptr;
    }
    if (page == nullptr && config_.same_class_recycling) {
      page = recycle_blocks(lc, count, align_blocks, &first);
      if (page != nullptr) renew_deadline(page);
    }
    residual = true;
    if (page == nullptr) {
      page = borrow_longer_open_page(lc, count, align_blocks, &first);
      if (page != nullptr) residual = false;
    }
    if (page == nullptr) {
      page = open_new_page(lc, &fresh);
      if (page != nullptr && !take_blocks(page, count, align_blocks, &first)) page = nullptr;
    }
    if (page == nullptr) {
      errno = ENOMEM;
      debug_check();
      return nullptr;
    }
  }
  page->large_start.set(first);
  page->large_end.set(first + count - 1);
  page->large_requested_bytes[first] = uint32_t(bytes);
  uintptr_t address = page_address(page) + first * kBlockBytes;
  mark_allocated(page, first, count, residual);
  // An object of more than half a page (1 to 2 MiB) on a fresh page: no other object of its size fits beside it,
  // and a page advised huge is resident whole from its first written byte, so 200 objects of 1 MiB + 33 B would
  // take 400 MiB. Where at least kMinSlackBlocks stay free, the rest of the page stays unbacked and the page small
  // until other objects take that rest (Subrelease::leave_unbacked): the object costs the 4 KiB pages the program
  // writes, as under glibc's mmap. A nearly whole page (less than kMinSlackBlocks free: at most 1/16 of it) stays
  // huge, and a page from the page cache keeps what it has (resident already). Under HUGE_PAGES=2 a page is small
  // until it is dense unless the default class fills pages densely (advise_if_dense advised it huge at its
  // opening): that advice is taken back.
  if (fresh && count > kBlocksPerHugePage / 2 && kBlocksPerHugePage - page->live.count() >= kMinSlackBlocks &&
      (!config_.collapse_dense || page->huge_advised)) {
    subrelease_.leave_unbacked(page);
    if (page->no_huge_page) {  // (kept off huge pages: the advice to be huge is taken back)
      forget_advice(page);
      page->huge_advised = 0;
    }
  }
  debug_check();
  return reinterpret_cast<void*>(address);
}


size_t PageHeap::free_large(void* ptr) {
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  size_t requested = 0;
  if (park_huge(a, &requested)) return requested;
  LockGuard g(lock_);
  HugePageMeta* page = page_of(a);
  if (page == nullptr) fatal_pointer("free of", ptr, "pointer not allocated by llamalloc");
  if (page->state == PageState::kUnused)
    fatal_pointer("free of", ptr, "pointer into a free huge page (double free or never allocated)");
  if (page->kind == PageKind::kHugeHead) {
    if (a != page_address(page)) fatal_pointer("free of", ptr, "pointer inside a huge object, not its start");
    requested = page->huge_requested_bytes;
    free_huge_locked(page);
  } else if (page->kind == PageKind::kHugeTail) {
    fatal_pointer("free of", ptr, "pointer inside a huge object, not its start");
  } else {
    uintptr_t offset = a - page_address(page);
    size_t block = offset >> kBlockShift;
    if ((offset & (kBlockBytes - 1)) != 0) fatal_pointer("free of", ptr, "pointer not the start of an object");
    if (!page->live.test(block)) fatal_pointer("free of", ptr, "double free, or a pointer never allocated (its block is free)");
    if (!page->large_start.test(block)) fatal_pointer("free of", ptr, "pointer not the start of an object");
    size_t last = page->large_end.next_set(block);
    size_t count = last - block + 1;
    page->large_start.clear(block);
    page->large_end.clear(last);
    requested = page->large_requested_bytes[block];
    page->large_requested_bytes[block] = 0;
    page->live.clear_range(block, count);
    blocks_freed(count);
    page->residual.clear_range(block, count);
    after_blocks_freed(page);
  }
  expire_deadlines(clock_.now_ns());
  debug_check();
  return requested;
}

size_t PageHeap::large_usable_size(const void* ptr) {
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  LockGuard g(lock_);
  HugePageMeta* page = page_of(a);
  if (page == nullptr || page->state == PageState::kUnused) return 0;
  if (page->kind == PageKind::kHugeHead)
    return a != page_address(page) ? 0
           : page->huge_tail_blocks != 0 ? size_t(page->huge_pages) * kHugePageBytes + page->huge_tail_blocks * kBlockBytes
                                         : round_up(page->huge_requested_bytes, kSmallPageBytes);
  if (page->kind != PageKind::kBlocks) return 0;
  uintptr_t offset = a - page_address(page);
  size_t block = offset >> kBlockShift;
  if ((offset & (kBlockBytes - 1)) != 0 || !page->large_start.test(block) || !page->live.test(block)) return 0;
  return (page->large_end.next_set(block) - block + 1) * kBlockBytes;
}

size_t PageHeap::large_requested_size(const void* ptr) {
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  LockGuard g(lock_);
  HugePageMeta* page = page_of(a);
  if (page == nullptr || page->state == PageState::kUnused) return 0;
  if (page->kind == PageKind::kHugeHead) return page->huge_requested_bytes;
  return page->large_requested_bytes[((a - page_address(page)) >> kBlockShift) % kBlocksPerHugePage];
}

}  // namespace llamalloc
