// The page heap's address space: regions, their reservations, and the slot table that maps an address to its
// page's metadata. Rules: a region is kRegionBytes aligned and holds at most kHugePagesPerRegion pages; without an
// address-space limit it is reserved whole at once, under RLIMIT_AS (or when the kernel refuses) it grows in steps;
// free pages are taken lowest address first; a page's metadata is made usable (committed) before the slot's bound
// is published, so that a lookup without the lock reads zeroed metadata or better; and a page given back under
// RLIMIT_AS gives back its address space too, which is reserved again before the page is used (reserve_again).
#include <errno.h>

#include <cstddef>

#include "page_heap/page_heap.h"
#include "page_heap/region_bitmap.h"

namespace llamalloc {

namespace {

// A region grows its reservation (under an address-space limit) by at least this many pages at a time, so that
// a growing page heap makes one mapping call per 64 MiB rather than one per page.
constexpr size_t kGrowPages = 32;
// Page metadata is made usable this many pages at a time (832 KiB): a metadata mprotect per 32 MiB of page heap.
constexpr size_t kCommitPages = 16;

// Writes "llamalloc: <a><n1><b><n2><c>" with the numbers in MiB, without allocating.
void note_mib(const char* a, uint64_t bytes, const char* b, uint64_t bytes2, const char* c) {
  char line[320];
  size_t len = 0;
  auto put = [&](const char* t) {
    while (*t && len + 1 < sizeof(line)) line[len++] = *t++;
  };
  auto num = [&](uint64_t v) {
    char digits[24];
    int n = 0;
    do digits[n++] = char('0' + v % 10); while ((v /= 10) != 0);
    while (n > 0 && len + 1 < sizeof(line)) line[len++] = digits[--n];
  };
  put("llamalloc: ");
  put(a);
  num(bytes >> 20);
  put(b);
  num(bytes2 >> 20);
  put(c);
  line[len] = 0;
  write_stderr(line);
}
}  // namespace

Region* PageHeap::new_region(size_t pages) {
  if (region_count_ == kMaxRegions || pages > kHugePagesPerRegion) return nullptr;
  // Without an address-space limit the region is reserved whole (one mapping, never grown). Under RLIMIT_AS its
  // metadata is reserved for what the limit leaves, and its pages in steps of kGrowPages as the page heap grows, so
  // that the program's own mappings (thread stacks, files, libraries) still fit.
  size_t left = platform_.address_space_left();
  bool limited = left != ~size_t{0};
  if (limited) limited_ = true;
  size_t capacity = kHugePagesPerRegion;
  if (limited) {
    size_t fit = left / (kHugePageBytes + kPageMetaStride);
    capacity = fit < pages ? pages : fit < kHugePagesPerRegion ? fit : kHugePagesPerRegion;
  }
  size_t want = limited ? (pages > kGrowPages ? pages : kGrowPages) : kHugePagesPerRegion;
  if (want > capacity) want = capacity;
  size_t planned = capacity;
  // Metadata: the two page bitmaps, then a HugePageMeta stride per page; fewer pages while the mapping is refused.
  char* meta = nullptr;
  size_t header = 0;
  for (;;) {
    header = round_up(2 * round_up(capacity, 64) / 8, kSmallPageBytes);
    meta = static_cast<char*>(platform_.reserve_metadata(header + capacity * kPageMetaStride));
    if (meta != nullptr || capacity == pages) break;
    capacity = capacity / 2 > pages ? capacity / 2 : pages;
    if (want > capacity) want = capacity;
  }
  if (meta == nullptr) return nullptr;
  size_t meta_bytes = header + capacity * kPageMetaStride;
  // A region that cannot be made gives back what it took, so that each failed request (a program retrying after
  // ENOMEM) does not leave address space behind.
  size_t got = 0;
  void* base = platform_.commit_metadata(meta, header)
                   ? platform_.reserve(want * kHugePageBytes, pages * kHugePageBytes, kRegionBytes, &got)
                   : nullptr;
  uintptr_t b = reinterpret_cast<uintptr_t>(base);
  if (base != nullptr &&
      ((b >> kRegionShift) >= kRegionSlots || (b & (kRegionBytes - 1)) != 0 || region_table_[b >> kRegionShift].load())) {
    platform_.unreserve(base, got);
    base = nullptr;
  }
  if (base == nullptr) {
    platform_.unmap_metadata(meta, meta_bytes);
    return nullptr;
  }
  if (!reported_reduced_reservation_ && (got < want * kHugePageBytes || capacity < planned)) {
    // One line per process, when the kernel refused what the page heap planned (a limit it does not see, or an
    // address space too crowded): the page heap runs on what it got. A known RLIMIT_AS is no surprise and says
    // nothing.
    reported_reduced_reservation_ = true;
    note_mib("the kernel refused ", (limited ? planned : kHugePagesPerRegion) * kHugePageBytes,
             " MiB of address space for the heap: it reserved ", got,
             " MiB and grows in steps (RLIMIT_AS, RLIMIT_DATA or the commit limit may refuse more)\n");
  }
  Region* r = &regions_[region_count_++];
  r->base = b;
  r->used = reinterpret_cast<uint64_t*>(meta);
  r->unreserved = r->used + round_up(capacity, 64) / 64;
  r->metadata = meta + header;
  r->capacity = uint32_t(capacity);
  r->reserved = uint32_t(got / kHugePageBytes);
  r->committed = 0;
  r->free_pages = r->reserved;
  r->search_from = 0;
  gauges_.reserved_bytes += got;
  gauges_.metadata_bytes += header;
  slots_[b >> kRegionShift].metadata.store(r->metadata, std::memory_order_relaxed);
  region_table_[b >> kRegionShift].store(r, std::memory_order_release);
  return r;
}

bool PageHeap::grow_region(Region* r, size_t pages) {
  size_t room = r->capacity - r->reserved;
  if (room == 0) return false;
  size_t need = pages < room ? pages : room;
  size_t step = need > kGrowPages ? need : kGrowPages;
  if (step > room) step = room;
  for (;;) {
    if (platform_.extend(reinterpret_cast<void*>(r->page_address(r->reserved)), step * kHugePageBytes) == 0) {
      r->reserved += uint32_t(step);
      r->free_pages += uint32_t(step);
      gauges_.reserved_bytes += step * kHugePageBytes;
      return true;
    }
    if (step == need) return false;
    step = step / 2 > need ? step / 2 : need;
  }
}

bool PageHeap::commit_metadata(Region* r, size_t end) {
  if (end <= r->committed) return true;
  size_t to = round_up(end, kCommitPages);
  if (to > r->reserved) to = r->reserved;
  if (!platform_.commit_metadata(r->metadata + r->committed * kPageMetaStride, (to - r->committed) * kPageMetaStride))
    return false;
  gauges_.metadata_bytes += (to - r->committed) * kPageMetaStride;
  r->committed = uint32_t(to);
  // Published after the metadata is usable: a lookup that sees the bound reads zeroed metadata or better.
  slots_[r->base >> kRegionShift].bound.store(uint64_t(to) * kHugePageBytes, std::memory_order_release);
  return true;
}

bool PageHeap::take_pages(size_t pages, size_t align_pages, Region** out, size_t* index, size_t back_bytes) {
  for (;;) {
    Region* r = nullptr;
    size_t at = 0;
    // Lowest address first, in every region; then the regions that may still grow, newest first; then a new one.
    for (size_t i = 0; i < region_count_ && r == nullptr; ++i) {
      Region* c = &regions_[i];
      if (c->free_pages < pages) continue;
      at = find_clear_run(c->used, c->search_from, c->reserved, pages, align_pages);
      if (at != c->reserved) r = c;
    }
    for (size_t i = region_count_; i-- > 0 && r == nullptr;) {
      Region* c = &regions_[i];
      // (By the run and its alignment's slack: free pages at the region's end may make part of it.)
      if (!grow_region(c, pages + align_pages - 1)) continue;
      at = find_clear_run(c->used, c->search_from, c->reserved, pages, align_pages);
      if (at != c->reserved) r = c;
    }
    if (r == nullptr) {
      Region* c = new_region(pages + align_pages - 1 > kHugePagesPerRegion ? pages : pages + align_pages - 1);
      if (c == nullptr) return false;
      at = find_clear_run(c->used, 0, c->reserved, pages, align_pages);
      if (at == c->reserved) return false;
      r = c;
    }
    int error = claim(r, at, pages, back_bytes);
    if (error == EEXIST) continue;  // pages of the run are another mapping's now: they are out, look again
    if (error != 0) return false;
    *out = r;
    *index = at;
    return true;
  }
}

int PageHeap::claim(Region* r, size_t at, size_t pages, size_t back_bytes) {
  int error = reserve_again(r, at, pages);
  if (error != 0) return error;
  if (!commit_metadata(r, at + pages)) return ENOMEM;
  if (!platform_.back(reinterpret_cast<void*>(r->page_address(at)), back_bytes != 0 ? back_bytes : pages * kHugePageBytes))
    return ENOMEM;
  set_bits(r->used, at, pages, true);
  r->free_pages -= uint32_t(pages);
  if (at == r->search_from) r->search_from = uint32_t(at + pages);
  return 0;
}

bool PageHeap::claim_pages(Region* r, size_t at, size_t pages) { return pages == 0 || claim(r, at, pages, 0) == 0; }

int PageHeap::reserve_again(Region* r, size_t at, size_t pages) {
  int result = 0;
  for (size_t i = next_bit(r->unreserved, at, at + pages, true); i < at + pages;) {
    size_t end = next_bit(r->unreserved, i, at + pages, false);
    int error = platform_.extend(reinterpret_cast<void*>(r->page_address(i)), (end - i) * kHugePageBytes);
    if (error == 0) {
      set_bits(r->unreserved, i, end - i, false);
      gauges_.reserved_bytes += (end - i) * kHugePageBytes;
    } else if (error == EEXIST) {
      // Page by page: the pages that another mapping took are lost to the page heap (marked used for good, never
      // mapped over); the others are reserved again.
      for (size_t j = i; j < end; ++j) {
        int page_error = platform_.extend(reinterpret_cast<void*>(r->page_address(j)), kHugePageBytes);
        if (page_error == 0) {
          set_bits(r->unreserved, j, 1, false);
          gauges_.reserved_bytes += kHugePageBytes;
        } else if (page_error == EEXIST) {
          set_bits(r->used, j, 1, true);
          --r->free_pages;
          ++lost_pages_;
          result = EEXIST;
        } else {
          return page_error;
        }
      }
    } else {
      return error;
    }
    i = next_bit(r->unreserved, end, at + pages, true);
  }
  return result;
}

void PageHeap::give_back_pages(Region* r, size_t index, size_t pages, size_t mapped_bytes) {
  counters_.huge_pages_released.fetch_add(pages, std::memory_order_relaxed);
  void* address = reinterpret_cast<void*>(r->page_address(index));
  if (limited_) {
    // Under RLIMIT_AS the address space goes back too, for the program's own mappings (thread stacks, files);
    // the page heap reserves it again when it needs the pages (reserve_again). Only what is mapped: a huge object's
    // slack was given back when it was allocated, and another mapping may be there now.
    size_t bytes = mapped_bytes != 0 ? mapped_bytes : pages * kHugePageBytes;
    platform_.unreserve(address, bytes);
    gauges_.reserved_bytes -= bytes;
    set_bits(r->unreserved, index, pages, true);
  } else {
    platform_.release(address, pages * kHugePageBytes);
  }
  set_bits(r->used, index, pages, false);
  r->free_pages += uint32_t(pages);
  if (index < r->search_from) r->search_from = uint32_t(index);
}

}  // namespace llamalloc
