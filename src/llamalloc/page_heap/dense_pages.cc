// Huge pages only where they are dense (HeapConfig::collapse_dense, LLAMALLOC_HUGE_PAGES=2; docs/heap-memory.md,
// "Huge pages where dense"). Rules: the heap's memory is backed by 4 KiB pages as the program touches it; a page
// becomes one huge page when at least nine tenths of its blocks are in use (a huge object's pages: always) and
// nine tenths of its 4 KiB pages are resident, so that the collapse adds at most a tenth of 2 MiB to the resident
// set and a page the program touches sparsely (a buffer sized for the worst case) stays small; a page with memory
// given back (subrelease, span purge) is left alone until all of it is backed again (the kernel split it); at most
// `budget` collapses a pass, each outside the page heap's lock (it copies up to 2 MiB); a page found too sparse
// is looked at again kRecheckPasses passes later, a failed collapse at the next pass.
#include "page_heap/page_heap.h"
#include "page_heap/region_bitmap.h"

namespace llamalloc {

namespace {
constexpr size_t kSmallPagesPerHugePage = kHugePageBytes / kSmallPageBytes;  // (4 KiB pages, for mincore)
constexpr size_t kDenseBlocks = kBlocksPerHugePage * 9 / 10;
constexpr size_t kDenseResident = kSmallPagesPerHugePage * 9 / 10;
constexpr unsigned kMaxLooks = 64;  // pages whose residency one pass reads (mincore, a few microseconds each)
constexpr uint32_t kRecheckPasses = 4;
constexpr size_t kHugeScanPages = 4096;  // pages in use a pass looks at, on the classes' lists and for huge objects
}  // namespace

size_t PageHeap::collapse_dense_pages(unsigned budget) {
  if (!config_.collapse_dense || budget == 0) return 0;
  HugePageMeta* look[kMaxLooks];
  uintptr_t address[kMaxLooks];
  unsigned n = 0;
  uint32_t pass;
  {
    LockGuard g(lock_);
    pass = ++collapse_passes_;
    size_t visited = 0;
    auto consider = [&](HugePageMeta* p, bool blocks) {
      ++visited;
      // (An advised page is huge from its first touch: nothing to collapse.)
      if (n == kMaxLooks || p->huge_backed || p->huge_advised || p->no_huge_page || p->span_purged_pages != 0 ||
          int32_t(p->dense_check_pass - pass) > 0)
        return;
      if (blocks && (p->live.count() < kDenseBlocks || !p->released.none())) return;
      look[n] = p;
      address[n++] = page_address(p);
    };
    for (unsigned c = 0; c < num_classes() && n < kMaxLooks; ++c) {
      if (open_[c] != nullptr) consider(open_[c], true);
      for (HugePageMeta* p = deadlines_.first(c); p != nullptr && n < kMaxLooks && visited < kHugeScanPages;
           p = p->active_next)
        if (p->kind == PageKind::kBlocks) consider(p, true);
    }
    // Huge objects are on no list: the regions' pages in use, at most kHugeScanPages a pass from where the previous
    // pass stopped.
    size_t scanned = 0;
    for (size_t regions = 0; regions <= region_count_ && scanned < kHugeScanPages && n < kMaxLooks; ++regions) {
      if (huge_scan_region_ >= region_count_) huge_scan_region_ = huge_scan_page_ = 0;
      if (region_count_ == 0) break;
      Region* r = &regions_[huge_scan_region_];
      size_t& j = huge_scan_page_;
      for (; j < r->committed && scanned < kHugeScanPages && n < kMaxLooks; ++j) {
        if (!test_bit(r->used, j)) continue;
        ++scanned;
        HugePageMeta* p = r->page(j);
        if (p->state == PageState::kActive && (p->kind == PageKind::kHugeHead || p->kind == PageKind::kHugeTail))
          consider(p, false);
      }
      if (j >= r->committed) {
        huge_scan_region_ = (huge_scan_region_ + 1) % region_count_;
        huge_scan_page_ = 0;
      }
    }
  }
  size_t done = 0;
  for (unsigned i = 0; i < n && done < budget; ++i) {
    void* a = reinterpret_cast<void*>(address[i]);
    // Outside the lock the page may be given back meanwhile (the collapse of a range with too few pages present
    // fails); its metadata is written only while it is in use, as a free page's metadata reads as zero.
    auto note = [&](auto&& write) {
      LockGuard g(lock_);
      if (look[i]->state != PageState::kUnused) write(look[i]);
    };
    if (platform_.resident_small_pages(a, kHugePageBytes) < kDenseResident) {
      note([&](HugePageMeta* p) { p->dense_check_pass = pass + kRecheckPasses; });
      continue;
    }
    if (platform_.collapse_huge_page(a, kHugePageBytes) == Platform::Collapse::kFailed) {
      counters_.huge_page_collapses_failed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    note([](HugePageMeta* p) { p->huge_backed = 1; });
    counters_.huge_pages_collapsed.fetch_add(1, std::memory_order_relaxed);
    ++done;
  }
  return done;
}

void PageHeap::note_page_filled(HugePageMeta* p) {
  // Only the default class's pages are ever advised (advise_if_dense), so only its pages are looked at. A page
  // advised huge is resident whole from its first touch: it says nothing of how densely its class touches memory.
  // A page on 4 KiB pages does, by its resident 4 KiB pages when it fills; three quarters, not nine tenths, as the
  // page's last spans and objects were handed out just now and are still being written. A collapsed page was
  // dense.
  if (!config_.collapse_dense || p->kind != PageKind::kBlocks || p->huge_advised ||
      p->lifetime_class != config_.default_class)
    return;
  default_dense_ =
      p->huge_backed || platform_.resident_small_pages(reinterpret_cast<void*>(page_address(p)), kHugePageBytes) >=
                            kSmallPagesPerHugePage * 3 / 4;
}

void PageHeap::advise_if_dense(HugePageMeta* p, unsigned lc) {
  // Only the default class is advised: a class a model or the learner split from it holds a part of the program's
  // memory, often a few survivors, and its open page advised huge would be 2 MiB resident at the peak however
  // little it holds (ast-builder with its model: peak 1.07x the run without; 1.00x when only the default class is
  // advised). Such a class's pages become huge by collapse once dense. A default class that filled its last page
  // densely will likely fill this one too: huge from its first touch, with no 4 KiB faults and no collapse to wait
  // for. Its first page, every page while it fills pages sparsely (large buffers touched in a few places), and one
  // page in kProbeEvery while it fills them densely stay on 4 KiB pages: the last are its samples of how densely
  // it touches memory now, so that the advice stops when its use turns sparse.
  if (lc != config_.default_class || !config_.collapse_dense || !default_dense_ || advised_pages_ >= kMaxAdvisedPages)
    return;
  if (++default_pages_opened_ % kProbeEvery == 0) return;
  platform_.advise_huge_page(reinterpret_cast<void*>(page_address(p)), kHugePageBytes);
  p->huge_advised = 1;
  ++advised_pages_;
}

}  // namespace llamalloc
