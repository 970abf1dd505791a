// Huge objects: objects over a huge page (or aligned beyond one) take whole contiguous huge pages, a head and its
// tails, from the page cache or the address space. Rules: a huge object fits one region; it maps its bytes (to
// 4 KiB), not its last page's slack, unless that slack is donated: a long-lived object (of the "never freed"
// class) that leaves at least kMinSlackBlocks free on its last page ends on a page of blocks instead, whose other
// blocks serve other objects (the TCMalloc paper donates the slack of a large allocation to the filler in the
// same way). When it is freed, its pages go to the page cache whole, or back to the OS.
//
// The parked huge object: a freed huge object of at most PageCache::kMaxDemandPages whole pages, not donating its
// slack, is parked (one for the process, without the lock), and the next huge allocation of the same requested
// bytes and class takes it back as it is: a program that replaces one buffer again and again (an I/O buffer, a
// per-request arena) then pays neither the lock, nor the page cache's bookkeeping, nor a system call or a fresh
// page fault per buffer (glibc serves such a buffer from its heap's top in the same way). A parked object stays
// in use in the page heap's accounting, holds its pages, and is flushed to the page cache (or the OS) by the next
// one parked, by an allocation it does not fit, before the page heap takes fresh pages (so that it never adds to
// the peak), by a pass that finds it unused since the previous pass, by
// llamalloc_collect, and when the page cache is turned off (LLAMALLOC_PAGE_CACHE_PAGES=0: no object is parked).
// A free of the parked object is a double free, reported as one.
#include <errno.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "page_heap/page_heap.h"
#include "page_heap/region_bitmap.h"

namespace llamalloc {

namespace {
// What a huge object writes in its pages' HugePageMeta: `live` and `residual` (all set), and the fields from
// deadline_ns to the per-block arrays. Its free clears only those: size_spans and the other bitmaps stay zero on
// a huge object's pages (no span or large object is cut from them), and clearing 1.3 KiB per page instead of
// 160 bytes took a quarter of the time of a 4 MiB malloc/free pair.
constexpr size_t kHugeBitmapsStart = offsetof(HugePageMeta, live);
constexpr size_t kHugeBitmapsBytes = offsetof(HugePageMeta, large_start) - kHugeBitmapsStart;
constexpr size_t kHugeFieldsStart = offsetof(HugePageMeta, deadline_ns);
constexpr size_t kHugeFieldsBytes = offsetof(HugePageMeta, large_requested_bytes) - kHugeFieldsStart;
static_assert(offsetof(HugePageMeta, residual) + sizeof(Bitmap256) == offsetof(HugePageMeta, large_start),
              "live and residual are contiguous");
static_assert(offsetof(HugePageMeta, large_requested_bytes) <= kSmallPageBytes,
              "one small page of metadata per huge page of a huge object");
void clear_huge_page_meta(HugePageMeta* p) {
  char* bytes = reinterpret_cast<char*>(p);
  memset(bytes + kHugeBitmapsStart, 0, kHugeBitmapsBytes);
  memset(bytes + kHugeFieldsStart, 0, kHugeFieldsBytes);
}
}  // namespace

bool PageHeap::park_huge(uintptr_t a, size_t* requested) {
  if (!parking_.load(std::memory_order_relaxed)) return false;
  HugePageMeta* head = page_of(a);
  // Only a live head freed by its start (anything else takes the locked path, which reports it), not donating
  // its slack (its last page is shared), and of pages the demand allowance would cache. The kind is read first
  // and alone: a page of large objects keeps its kind while one of its objects is live, but other threads
  // change its state under the lock while this one holds none; a huge head's state is written only by the
  // allocation and free of its own object.
  if (head == nullptr || std::atomic_ref<PageKind>(head->kind).load(std::memory_order_relaxed) != PageKind::kHugeHead)
    return false;
  if (head->state != PageState::kActive || a != page_address(head) || head->huge_tail_blocks != 0 ||
      head->huge_pages > PageCache::kMaxDemandPages)
    return false;
  if (parked_huge_.load(std::memory_order_relaxed) == a)
    fatal_pointer("free of", reinterpret_cast<void*>(a), "double free (the object was already freed)");
  *requested = head->huge_requested_bytes;
  // Its next user gets its old bytes: calloc zeroes it.
  head->recycled = 1;
  uintptr_t old = parked_huge_.exchange(a, std::memory_order_acq_rel);
  if (old == a) fatal_pointer("free of", reinterpret_cast<void*>(a), "double free (the object was already freed)");
  if (old != 0) {
    LockGuard g(lock_);
    free_huge_locked(page_of(old));
    debug_check();
  }
  return true;
}

void* PageHeap::reuse_parked_huge(unsigned lc, size_t bytes) {
  uintptr_t a = parked_huge_.exchange(0, std::memory_order_acquire);
  if (a == 0) return nullptr;
  HugePageMeta* head = page_of(a);
  // The same bytes (the live accounting and usable size stay right without a write) and class.
  if (head->huge_requested_bytes == bytes && head->lifetime_class == lc) {
    parked_reuses_.fetch_add(1, std::memory_order_relaxed);
    counters_.huge_pages_reused.fetch_add(head->huge_pages, std::memory_order_relaxed);
    return reinterpret_cast<void*>(a);
  }
  LockGuard g(lock_);
  free_huge_locked(head);
  return nullptr;
}

bool PageHeap::unpark_locked() {
  uintptr_t a = parked_huge_.exchange(0, std::memory_order_acquire);
  if (a == 0) return false;
  free_huge_locked(page_of(a));
  return true;
}

bool PageHeap::flush_parked_huge(bool now) {
  uint64_t reuses = parked_reuses_.load(std::memory_order_relaxed);
  bool unused = parked_reuses_seen_.exchange(reuses, std::memory_order_relaxed) == reuses;
  if (!now && !unused) return false;
  uintptr_t a = parked_huge_.exchange(0, std::memory_order_acquire);
  if (a == 0) return false;
  LockGuard g(lock_);
  free_huge_locked(page_of(a));
  debug_check();
  return true;
}

void* PageHeap::alloc_huge_locked(unsigned lc, size_t bytes, size_t alignment) {
  // A huge object must fit one region, with its alignment: regions are only kRegionBytes aligned.
  if (alignment > kRegionBytes / 2 || bytes > kRegionBytes - alignment) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t pages = bytes == 0 ? 1 : (bytes + kHugePageBytes - 1) / kHugePageBytes;
  size_t align_pages = alignment > kHugePageBytes ? alignment / kHugePageBytes : 1;
  // Slack donation: a long-lived object (of the pages of "never freed") that ends well before its last page's
  // end ends on a page of blocks instead, whose other blocks serve other objects: a long-lived table would
  // otherwise keep the rest of its last page empty for as long as it lives. At least kMinSlackBlocks free, or
  // the page is the object's. Not for the shorter classes: their huge objects go back soon, and a donated page
  // outlives its object as long as any block on it is in use, so the stragglers of short-lived spans placed
  // there would keep whole pages after the object is gone.
  size_t last_bytes = bytes - (pages - 1) * kHugePageBytes;
  size_t tail_blocks = (last_bytes + kBlockBytes - 1) / kBlockBytes;
  bool donate = lc == never_freed_class() && pages >= 2 && tail_blocks + kMinSlackBlocks <= kBlocksPerHugePage;
  Region* r = nullptr;
  size_t index = 0;
  uintptr_t address = 0;
  bool tail_unbacked = false;
  // Fresh pages only once the parked object's are in the cache: it must not raise the peak.
  bool recycled = take_cached(pages, align_pages, &r, &index) ||
                  (unpark_locked() && take_cached(pages, align_pages, &r, &index));
  // Else a cached run with free pages beside it: only those are backed afresh (and as many other cached pages go
  // back, as below). A program that replaces big buffers of random sizes among live ones (mimalloc-bench's
  // malloc-large) finds the run a smaller buffer left too short half the time, and the kernel zeroed 15 GiB of
  // fresh pages where the buffers it wrote were 30 GiB.
  bool fresh_pages = !recycled;
  if (!recycled && align_pages == 1 && take_cached_around(pages, &r, &index)) recycled = true;
  if (recycled) {
    address = r->page_address(index);
  } else {
    // No cached run fits: as many cached pages as this takes go back first, so that the cache never adds to
    // what the page heap would hold without it (runs too short for the objects a program allocates would
    // otherwise sit beside the fresh pages those objects take, up to doubling the peak).
    page_cache_.release(pages);
    // A huge object that ends on its own last page maps its bytes, not that page's slack.
    size_t usable = round_up(bytes, kSmallPageBytes);
    tail_unbacked = !donate && usable < pages * kHugePageBytes;
    if (!take_pages(pages, align_pages, &r, &index, tail_unbacked ? usable : 0)) {
      errno = ENOMEM;
      return nullptr;
    }
    address = r->page_address(index);
    if (tail_unbacked && limited_) {
      // Under RLIMIT_AS the slack's address space counts too: given back while the object lives (and with the
      // object's when it is freed; give_back_pages).
      platform_.unreserve(reinterpret_cast<void*>(address + usable), pages * kHugePageBytes - usable);
      gauges_.reserved_bytes -= pages * kHugePageBytes - usable;
    }
  }
  size_t whole = donate ? pages - 1 : pages;
  for (size_t i = 0; i < whole; ++i) {
    HugePageMeta* p = r->page(index + i);
    p->region = r;
    p->index = uint32_t(index + i);
    p->state = PageState::kActive;
    p->kind = i == 0 ? PageKind::kHugeHead : PageKind::kHugeTail;
    p->lifetime_class = uint8_t(lc);
    p->deadline_ns = kNoDeadline;
    p->live.words[0] = p->live.words[1] = p->live.words[2] = p->live.words[3] = ~uint64_t{0};
    p->residual = p->live;
  }
  HugePageMeta* head = r->page(index);
  head->recycled = recycled;
  head->tail_unbacked = tail_unbacked;
  head->tail_unreserved = tail_unbacked && limited_;
  head->huge_pages = uint32_t(whole);
  head->huge_tail_blocks = uint16_t(donate ? tail_blocks : 0);
  head->huge_requested_bytes = bytes;
  account_page(head, int64_t(whole));
  // Huge pages where dense (HUGE_PAGES=2): an object of whole huge pages is a buffer a program asked for whole, and
  // is huge from its first touch, as every page is under HUGE_PAGES=1: its pages fault in one at a time instead of
  // 512, and need no collapse (malloc-large's buffers were 3.3x slower on 4 KiB pages). Not an object wholly of
  // cached pages, which are backed already, nor the slack of an object that maps only its bytes.
  if (config_.collapse_dense && fresh_pages && advised_pages_ + whole <= kMaxAdvisedPages) {
    platform_.advise_huge_page(reinterpret_cast<void*>(address), whole * kHugePageBytes - (tail_unbacked ? kHugePageBytes : 0));
    head->huge_advised = 1;
    advised_pages_ += uint32_t(whole);
  }
  if (donate) {
    // The last page: a page of blocks of the object's class (its metadata reads as zero: fresh, or released
    // with the page that was there before), active at once, its first blocks the object's.
    HugePageMeta* p = r->page(index + whole);
    p->region = r;
    p->index = uint32_t(index + whole);
    p->state = PageState::kOpen;
    p->kind = PageKind::kBlocks;
    p->lifetime_class = uint8_t(lc);
    p->deadline_ns = kNoDeadline;
    p->huge_tail_blocks = uint16_t(tail_blocks);
    account_page(p, 1);
    p->live.set_range(0, tail_blocks);
    blocks_taken(tail_blocks);
    p->residual.set_range(0, tail_blocks);
    p->taken.set_range(0, tail_blocks);
    counters_.huge_slack_pages.fetch_add(1, std::memory_order_relaxed);
    activate(p);
  }
  return reinterpret_cast<void*>(address);
}

bool PageHeap::take_cached_around(size_t pages, Region** out, size_t* index) {
  unsigned best = page_cache_.runs();
  size_t best_start = 0, best_cached = 0;
  for (unsigned i = page_cache_.runs(); i-- > 0;) {
    const PageCache::Run& run = page_cache_.run(i);
    if (run.pages <= best_cached || run.pages >= pages) continue;
    const Region* r = run.region;
    size_t need = pages - run.pages, end = run.index + run.pages;
    size_t after_end = end + need < r->reserved ? end + need : r->reserved;
    size_t after = next_bit(r->used, end, after_end, true) - end, before = 0;
    while (after + before < need && run.index > before && !test_bit(r->used, run.index - before - 1)) ++before;
    if (after + before < need) continue;
    best = i;
    best_start = run.index - before;
    best_cached = run.pages;
  }
  if (best == page_cache_.runs()) return false;
  const PageCache::Run run = page_cache_.run(best);
  // The pages before the run, then those after it; a refusal (the memory limits, or pages another mapping took)
  // gives back what was claimed and leaves the run in the cache.
  size_t before = run.index - best_start, after = pages - run.pages - before;
  if (!claim_pages(run.region, best_start, before)) return false;
  if (!claim_pages(run.region, run.index + run.pages, after)) {
    if (before != 0) give_back_pages(run.region, best_start, before);
    return false;
  }
  page_cache_.take_run(best);
  // As a miss does (alloc_huge_locked): the cache does not add to what the heap would hold without it.
  page_cache_.release(before + after);
  *out = run.region;
  *index = best_start;
  return true;
}

void PageHeap::free_huge_locked(HugePageMeta* head) {
  Region* r = head->region;
  size_t pages = head->huge_pages, index = head->index, tail_blocks = head->huge_tail_blocks;
  size_t usable = round_up(head->huge_requested_bytes, kSmallPageBytes), end = pages * kHugePageBytes;
  // (Out of the footprint first: the page cache's limit may depend on the pages in use without this object.)
  account_page(head, -int64_t(pages));
  if (head->huge_advised) advised_pages_ -= uint32_t(pages);
  // The page cache holds whole backed pages: the slack of an object's last page is backed first, or the pages go
  // back (the memory limits refuse it). Not when its slack was not even reserved (under RLIMIT_AS).
  bool whole = !head->tail_unbacked ||
               (!head->tail_unreserved && pages <= page_cache_.limit(huge_pages_in_use()) &&
                platform_.back(reinterpret_cast<void*>(r->page_address(index) + usable), end - usable));
  size_t mapped = head->tail_unreserved ? usable : 0;
  // Its pages' metadata reads as zero again (state kUnused). Only their headers were written: cleared in place,
  // not dropped page by page (a 1 GiB object has 512 pages, and a madvise each cost more than the object's own
  // mapping calls).
  for (size_t i = 0; i < pages; ++i) clear_huge_page_meta(r->page(index + i));
  if (whole) page_cache_.put(r, index, pages, huge_pages_in_use());
  else give_back_pages(r, index, pages, mapped);
  if (tail_blocks != 0) {
    // Its end on the donated page: those blocks are free like any object's (the page goes when it empties).
    HugePageMeta* p = r->page(index + pages);
    p->huge_tail_blocks = 0;
    p->live.clear_range(0, tail_blocks);
    blocks_freed(tail_blocks);
    p->residual.clear_range(0, tail_blocks);
    after_blocks_freed(p);
  }
}

}  // namespace llamalloc
