#include <errno.h>

#include <cstddef>
#include <cstring>

#include "heap/heap.h"

namespace llamalloc {

namespace {
constexpr uint64_t kNoDeadline = ~uint64_t{0};
// The part of a HugePageMeta that a page of a huge object uses (all but the per-block and per-span arrays).
constexpr size_t kHugeHeaderBytes = offsetof(HugePageMeta, large_requested_bytes);
static_assert(kHugeHeaderBytes <= kSmallPageBytes, "one small page of metadata per huge page of a huge object");

// A region grows its reservation (under an address-space limit) by at least this many pages at a time, so that
// a growing heap makes one mapping call per 64 MiB rather than one per page.
constexpr size_t kGrowPages = 32;
// Page metadata is made usable this many pages at a time (832 KiB): a metadata mprotect per 32 MiB of heap.
constexpr size_t kCommitPages = 16;

// The region's page bitmap (Region::used).
bool test_bit(const uint64_t* w, size_t i) { return (w[i >> 6] >> (i & 63)) & 1; }
void set_bits(uint64_t* w, size_t first, size_t count, bool value) {
  for (size_t i = first; i < first + count;) {
    size_t n = 64 - (i & 63);
    if (n > first + count - i) n = first + count - i;
    uint64_t mask = (n == 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1)) << (i & 63);
    if (value) w[i >> 6] |= mask;
    else w[i >> 6] &= ~mask;
    i += n;
  }
}
// The first index in [from, end) whose bit is `value`, or end.
size_t next_bit(const uint64_t* w, size_t from, size_t end, bool value) {
  while (from < end) {
    uint64_t word = (value ? w[from >> 6] : ~w[from >> 6]) >> (from & 63);
    if (word != 0) {
      size_t at = from + size_t(__builtin_ctzll(word));
      return at < end ? at : end;
    }
    from = (from | 63) + 1;
  }
  return end;
}
// The first run of `count` clear bits in [from, end) that starts at a multiple of `align`, or end.
size_t find_clear_run(const uint64_t* w, size_t from, size_t end, size_t count, size_t align) {
  for (size_t at = from;;) {
    at = next_bit(w, at, end, false);
    at = (at + align - 1) / align * align;
    if (at >= end || end - at < count) return end;
    size_t taken = next_bit(w, at, at + count, true);
    if (taken == at + count) return at;
    at = taken + 1;
  }
}
size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

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


uint64_t GlobalAllocator::class_duration_ns(unsigned lc) const {
  return lc >= never_freed_class() ? kNoDeadline : lifetime_class_bound_ns(lc);
}

// ---------------------------------------------------------------------------------------------------------
// Intrusive lists (global lock).

void GlobalAllocator::active_push(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  if (p->deadline_ns < earliest_deadline_ns_) earliest_deadline_ns_ = p->deadline_ns;
  p->active_next = nullptr;
  p->active_prev = active_tail_[c];
  if (active_tail_[c]) active_tail_[c]->active_next = p;
  else active_head_[c] = p;
  active_tail_[c] = p;
}

void GlobalAllocator::active_remove(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  if (p->active_prev) p->active_prev->active_next = p->active_next;
  else active_head_[c] = p->active_next;
  if (p->active_next) p->active_next->active_prev = p->active_prev;
  else active_tail_[c] = p->active_prev;
  p->active_prev = p->active_next = nullptr;
}

void GlobalAllocator::recyclable_push(HugePageMeta* p) {
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

void GlobalAllocator::recyclable_remove(HugePageMeta* p) {
  if (!p->in_recyclable) return;
  HugePageMeta*& head = recyclable_head_[p->lifetime_class][p->in_recyclable - 1];
  if (p->recyclable_prev) p->recyclable_prev->recyclable_next = p->recyclable_next;
  else head = p->recyclable_next;
  if (p->recyclable_next) p->recyclable_next->recyclable_prev = p->recyclable_prev;
  p->recyclable_prev = p->recyclable_next = nullptr;
  p->in_recyclable = 0;
}

// ---------------------------------------------------------------------------------------------------------
// Regions and huge pages.

Region* GlobalAllocator::new_region(size_t pages) {
  if (region_count_ == kMaxRegions || pages > kHugePagesPerRegion) return nullptr;
  // Without an address-space limit the region is reserved whole (one mapping, never grown). Under RLIMIT_AS its
  // metadata is reserved for what the limit leaves, and its pages in steps of kGrowPages as the heap grows, so
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
    // One line per process, when the kernel refused what the heap planned (a limit it does not see, or an address
    // space too crowded): the heap runs on what it got. A known RLIMIT_AS is no surprise and says nothing.
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

bool GlobalAllocator::grow_region(Region* r, size_t pages) {
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

bool GlobalAllocator::commit_metadata(Region* r, size_t end) {
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

bool GlobalAllocator::take_pages(size_t pages, size_t align_pages, Region** out, size_t* index, size_t back_bytes) {
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
    int error = reserve_again(r, at, pages);
    if (error == EEXIST) continue;  // pages of the run are another mapping's now: they are out, look again
    if (error != 0) return false;
    if (!commit_metadata(r, at + pages)) return false;
    if (!platform_.back(reinterpret_cast<void*>(r->page_address(at)), back_bytes != 0 ? back_bytes : pages * kHugePageBytes))
      return false;
    set_bits(r->used, at, pages, true);
    r->free_pages -= uint32_t(pages);
    if (at == r->search_from) r->search_from = uint32_t(at + pages);
    *out = r;
    *index = at;
    return true;
  }
}

int GlobalAllocator::reserve_again(Region* r, size_t at, size_t pages) {
  int result = 0;
  for (size_t i = next_bit(r->unreserved, at, at + pages, true); i < at + pages;) {
    size_t end = next_bit(r->unreserved, i, at + pages, false);
    int error = platform_.extend(reinterpret_cast<void*>(r->page_address(i)), (end - i) * kHugePageBytes);
    if (error == 0) {
      set_bits(r->unreserved, i, end - i, false);
      gauges_.reserved_bytes += (end - i) * kHugePageBytes;
    } else if (error == EEXIST) {
      // Page by page: the pages that another mapping took are lost to the heap (marked used for good, never
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

void GlobalAllocator::give_back_pages(Region* r, size_t index, size_t pages, size_t mapped_bytes) {
  counters_.huge_pages_released.fetch_add(pages, std::memory_order_relaxed);
  void* address = reinterpret_cast<void*>(r->page_address(index));
  if (limited_) {
    // Under RLIMIT_AS the address space goes back too, for the program's own mappings (thread stacks, files);
    // the heap reserves it again when it needs the pages (reserve_again). Only what is mapped: a huge object's
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

void GlobalAllocator::account_page(HugePageMeta* p, int64_t pages) {
  gauges_.footprint_bytes += uint64_t(pages * int64_t(kHugePageBytes));
  gauges_.huge_pages_by_class[p->lifetime_class] += uint64_t(pages);
  if (gauges_.footprint_bytes > gauges_.peak_footprint_bytes) gauges_.peak_footprint_bytes = gauges_.footprint_bytes;
}

// A cached page, else the lowest free page of the address space (take_pages).
HugePageMeta* GlobalAllocator::open_new_page(unsigned lc) {
  Region* r = nullptr;
  size_t index = 0;
  if (!take_cached(1, 1, &r, &index) && !take_pages(1, 1, &r, &index)) return nullptr;
  HugePageMeta* p = r->page(index);
  p->region = r;
  p->index = uint32_t(index);
  p->state = PageState::kOpen;
  p->kind = PageKind::kBlocks;
  p->lifetime_class = uint8_t(lc);
  p->deadline_ns = kNoDeadline;
  open_[lc] = p;
  account_page(p, 1);
  return p;
}

HugePageMeta* GlobalAllocator::borrow_longer_open_page(unsigned lc, size_t count, size_t align_blocks,
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

HugePageMeta* GlobalAllocator::ensure_open_page(unsigned lc) {
  return open_[lc] ? open_[lc] : open_new_page(lc);
}

// Open -> active when the page has been filled, or a request of its class no longer fits (section 6.2).
void GlobalAllocator::activate(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  if (open_[c] == p) open_[c] = nullptr;
  p->state = PageState::kActive;
  uint64_t d = class_duration_ns(c);
  p->deadline_ns = d == kNoDeadline ? kNoDeadline : clock_.now_ns() + config_.deadline_k * d;
  active_push(p);
  if (!p->live.all()) recyclable_push(p);
  if (p->live.none()) release_page(p);
}

void GlobalAllocator::release_page(HugePageMeta* p) {
  if (p->state == PageState::kActive) {
    active_remove(p);
    recyclable_remove(p);
  }
  if (open_[p->lifetime_class] == p) open_[p->lifetime_class] = nullptr;
  unrelease(p, 0, kBlocksPerHugePage);
  account_page(p, -1);
  Region* r = p->region;
  size_t index = p->index;
  // Its metadata reads as zero again: state kUnused, so a stale pointer into it is reported, not trusted.
  platform_.release_metadata(p, kPageMetaStride);
  give_back_pages(r, index, 1);
}

void GlobalAllocator::set_page_cache_pages(unsigned pages) {
  LockGuard g(lock_);
  config_.page_cache_pages = pages;
  while (cached_runs_ > 0 && gauges_.page_cache_bytes / kHugePageBytes > pages) release_cached_run(0);
}

void GlobalAllocator::cache_or_release(Region* r, size_t index, size_t pages) {
  size_t cached = gauges_.page_cache_bytes / kHugePageBytes;
  if (config_.page_cache_pages == 0 || pages > config_.page_cache_pages) {
    give_back_pages(r, index, pages);
    return;
  }
  // Room: the oldest runs go back first.
  while (cached_runs_ > 0 && cached + pages > config_.page_cache_pages) {
    cached -= cached_[0].pages;
    release_cached_run(0);
  }
  gauges_.page_cache_bytes += pages * kHugePageBytes;
  // Right after the newest run of the same region: one run (the pages of a big object freed page by page).
  if (cached_runs_ > 0) {
    CachedRun& last = cached_[cached_runs_ - 1];
    if (last.region == r && last.index + last.pages == index) {
      last.pages += uint32_t(pages);
      return;
    }
  }
  if (cached_runs_ == kMaxCachedRuns) release_cached_run(0);
  cached_[cached_runs_++] = CachedRun{r, uint32_t(index), uint32_t(pages)};
}

void GlobalAllocator::release_cached_run(unsigned i) {
  CachedRun run = cached_[i];
  memmove(&cached_[i], &cached_[i + 1], sizeof(CachedRun) * (cached_runs_ - i - 1));
  --cached_runs_;
  gauges_.page_cache_bytes -= run.pages * kHugePageBytes;
  give_back_pages(run.region, run.index, run.pages);
}

bool GlobalAllocator::take_cached(size_t pages, size_t align_pages, Region** r, size_t* index) {
  pages_taken_ += pages;
  // Newest first (its memory is the likeliest to be in cache), a run of exactly the size asked first (a huge
  // object keeps finding the runs that objects of its size left); a huge object takes the front of a longer
  // run, a page of blocks the back of one.
  for (bool exact : {true, false}) {
    for (unsigned i = cached_runs_; i-- > 0;) {
      CachedRun& run = cached_[i];
      if (exact ? run.pages != pages : run.pages < pages) continue;
      size_t at = pages == 1 ? run.index + run.pages - 1 : run.index;
      if (at % align_pages != 0) continue;
      *r = run.region;
      *index = at;
      if (at == run.index) run.index += uint32_t(pages);
      run.pages -= uint32_t(pages);
      if (run.pages == 0) {
        memmove(&cached_[i], &cached_[i + 1], sizeof(CachedRun) * (cached_runs_ - i - 1));
        --cached_runs_;
      }
      gauges_.page_cache_bytes -= pages * kHugePageBytes;
      counters_.huge_pages_reused.fetch_add(pages, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}

size_t GlobalAllocator::trim_page_cache(bool now) {
  // Called under the lock, once per subrelease pass.
  uint64_t in_use = gauges_.footprint_bytes / kHugePageBytes;
  unsigned slot = (demand_passes_ - 1) % kPageCachePasses;
  page_demand_[slot] = in_use;
  pages_taken_by_pass_[slot] = pages_taken_;
  pages_taken_ = 0;
  uint64_t peak = in_use, taken = 0;
  for (unsigned i = 0; i < kPageCachePasses; ++i) {
    peak = page_demand_[i] > peak ? page_demand_[i] : peak;
    taken = pages_taken_by_pass_[i] > taken ? pages_taken_by_pass_[i] : taken;
  }
  uint64_t keep = now ? 0 : peak - in_use > taken ? peak - in_use : taken;
  if (keep > in_use / kPageCacheUseShare) keep = in_use / kPageCacheUseShare;
  uint64_t cached = gauges_.page_cache_bytes / kHugePageBytes;
  return cached > keep ? release_cached_pages(cached - keep) : 0;
}

size_t GlobalAllocator::release_cached_pages(uint64_t pages) {
  size_t released = 0;
  while (cached_runs_ > 0 && released < pages) {
    uint64_t excess = pages - released;
    CachedRun& oldest = cached_[0];
    if (oldest.pages > excess) {
      // Part of the oldest run: its first pages.
      give_back_pages(oldest.region, oldest.index, excess);
      oldest.index += uint32_t(excess);
      oldest.pages -= uint32_t(excess);
      gauges_.page_cache_bytes -= excess * kHugePageBytes;
      return released + excess;
    }
    released += oldest.pages;
    release_cached_run(0);
  }
  return released;
}

void GlobalAllocator::change_class(HugePageMeta* p, unsigned new_class) {
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

// Deadline expired with live residual blocks: they were under-predicted by (at least) one class (Figure 6d).
// "Never freed" is not a lifetime one can be promoted into; the longest finite class is the end of the chain.
void GlobalAllocator::promote(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  unsigned top = never_freed_class() - 1;
  if (c < top) counters_.promotions.fetch_add(1, std::memory_order_relaxed);
  change_class(p, c < top ? c + 1 : c);
}

// No residual block left: the live blocks hold shorter-lived objects, so the page drops one class and they
// become its residual blocks (Figure 6e).
void GlobalAllocator::demote(HugePageMeta* p) {
  unsigned c = p->lifetime_class;
  if (c > 0) counters_.demotions.fetch_add(1, std::memory_order_relaxed);
  p->residual = p->live;
  change_class(p, c > 0 ? c - 1 : 0);
}

void GlobalAllocator::expire_deadlines(uint64_t now) {
  if (LLAMALLOC_LIKELY(now < earliest_deadline_ns_)) return;
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

void GlobalAllocator::tick() {
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  debug_check();
}

size_t GlobalAllocator::release_empty_open_pages(bool now) {
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

void GlobalAllocator::unrelease(HugePageMeta* p, size_t first, size_t count) {
  if (LLAMALLOC_LIKELY(p->released.none())) return;
  size_t n = 0;
  for (size_t b = first; b < first + count; ++b)
    if (p->released.test(b)) {
      p->released.clear(b);
      ++n;
    }
  gauges_.subreleased_bytes -= n * kBlockBytes;
  // Every block backed again: the page may become one huge page again.
  if (p->released.none() && p->no_huge_page) {
    p->no_huge_page = 0;
    --no_huge_pages_;
    platform_.allow_huge_page(reinterpret_cast<void*>(page_address(p)), kHugePageBytes, true);
  }
}

size_t GlobalAllocator::subrelease_page(HugePageMeta* p, size_t budget, bool now) {
  size_t done = 0;
  uintptr_t base = page_address(p);
  auto keep = [&](size_t b) { return p->live.test(b) || p->released.test(b) || (!now && p->taken.test(b)); };
  for (size_t b = 0; b < kBlocksPerHugePage && done < budget;) {
    if (keep(b)) {
      ++b;
      continue;
    }
    size_t end = b;
    while (end < kBlocksPerHugePage && end - b < budget - done && !keep(end)) ++end;
    platform_.subrelease(reinterpret_cast<void*>(base + b * kBlockBytes), (end - b) * kBlockBytes);
    p->released.set_range(b, end - b);
    done += end - b;
    b = end;
  }
  gauges_.subreleased_bytes += done * kBlockBytes;
  counters_.blocks_subreleased.fetch_add(done, std::memory_order_relaxed);
  if (done != 0 && !p->no_huge_page && no_huge_pages_ < kMaxNoHugePages) {
    p->no_huge_page = 1;
    ++no_huge_pages_;
    platform_.allow_huge_page(reinterpret_cast<void*>(base), kHugePageBytes, false);
  }
  return done;
}

size_t GlobalAllocator::subrelease_free_blocks(bool now) {
  LockGuard g(lock_);
  expire_deadlines(clock_.now_ns());
  // The heap's demand now (blocks in use) and what is still backed.
  size_t in_use = 0, backed = 0;
  auto each_page = [&](auto&& f) {
    for (unsigned c = 0; c < num_classes(); ++c) {
      if (open_[c] != nullptr) f(open_[c]);
      for (HugePageMeta* p = active_head_[c]; p != nullptr; p = p->active_next)
        if (p->kind == PageKind::kBlocks) f(p);
    }
  };
  each_page([&](HugePageMeta* p) {
    size_t live = p->live.count();
    in_use += live;
    backed += kBlocksPerHugePage - p->released.count();
  });
  demand_[demand_passes_++ % kDemandPasses] = uint32_t(in_use);
  size_t peak = in_use;
  for (uint32_t d : demand_) peak = d > peak ? d : peak;
  size_t budget = now ? ~size_t{0} : (backed > peak ? backed - peak : 0);
  size_t done = 0;
  if (config_.subrelease_percent != 0 && budget != 0) {
    size_t limit = kBlocksPerHugePage * config_.subrelease_percent / 100;
    // Sparsest first: pages with at most 1/16 of their blocks in use, then 1/8, 1/4, 1/2, then up to the limit.
    for (size_t bound = kBlocksPerHugePage / 16;; bound *= 2) {
      size_t b = bound < limit ? bound : limit;
      each_page([&](HugePageMeta* p) {
        if (done < budget && (now || p->taken.count() <= kIdleTakenBlocks) && p->live.count() <= b)
          done += subrelease_page(p, budget - done, now);
      });
      if (b == limit) break;
    }
  }
  // The blocks taken from now to the next pass (mark_allocated sets them).
  each_page([](HugePageMeta* p) { p->taken = Bitmap256{}; });
  trim_page_cache(now);
  debug_check();
  return done;
}

void GlobalAllocator::after_blocks_freed(HugePageMeta* p) {
  if (p->state != PageState::kActive) return;  // the open page keeps its blocks for its own class
  if (p->live.none()) {
    release_page(p);
    return;
  }
  recyclable_push(p);
  if (p->residual.none()) demote(p);
}

// ---------------------------------------------------------------------------------------------------------
// Blocks.

bool GlobalAllocator::take_blocks(HugePageMeta* p, size_t count, size_t align_blocks, size_t* first) {
  size_t at = p->live.find_clear_run(count, align_blocks);
  if (at == kBlocksPerHugePage) return false;
  *first = at;
  return true;
}

void GlobalAllocator::mark_allocated(HugePageMeta* p, size_t first, size_t count, bool residual) {
  p->live.set_range(first, count);
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

HugePageMeta* GlobalAllocator::recycle_blocks(unsigned c, size_t count, size_t align_blocks, size_t* first) {
  // The fullest pages first (HeapConfig::dense_first): a block taken there lets an emptier page drain.
  for (unsigned b = kRecycleBuckets; b-- > 0;)
    for (HugePageMeta* p = recyclable_head_[c][b]; p != nullptr; p = p->recyclable_next)
      if (take_blocks(p, count, align_blocks, first)) {
        counters_.blocks_recycled.fetch_add(count, std::memory_order_relaxed);
        return p;
      }
  return nullptr;
}

void GlobalAllocator::renew_deadline(HugePageMeta* p) {
  uint64_t d = class_duration_ns(p->lifetime_class);
  if (d == kNoDeadline) return;
  // now + K x class is at least every deadline of the class set before: the page goes to the list's tail.
  active_remove(p);
  p->deadline_ns = clock_.now_ns() + config_.deadline_k * d;
  active_push(p);
}

// ---------------------------------------------------------------------------------------------------------
// Large and huge objects.

void* GlobalAllocator::alloc_large(unsigned lc, size_t bytes, size_t alignment) {
  if (lc >= num_classes()) lc = never_freed_class();
  lc = page_class(lc);
  if (alignment < kBlockBytes) alignment = kBlockBytes;
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
      page = open_new_page(lc);
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
  debug_check();
  return reinterpret_cast<void*>(address);
}

void* GlobalAllocator::alloc_huge_locked(unsigned lc, size_t bytes, size_t alignment) {
  // A huge object must fit one region, with its alignment: regions are only kRegionBytes aligned.
  if (alignment > kRegionBytes / 2 || bytes > kRegionBytes - alignment) {
    errno = ENOMEM;
    return nullptr;
  }
  size_t pages = bytes == 0 ? 1 : (bytes + kHugePageBytes - 1) / kHugePageBytes;
  size_t align_pages = alignment > kHugePageBytes ? alignment / kHugePageBytes : 1;
  // Slack donation: a long-lived object (of the pages of "never freed") that ends well before its last page's
  // end ends on a page of blocks instead, whose other blocks serve other objects: word-count's 6.1 MiB table
  // kept 1.9 MiB of its fourth page empty for the whole run. At least kMinSlackBlocks free, or the page is the
  // object's. Not for the shorter classes: their huge objects go back at once when freed, and their donated
  // pages became places for the stragglers of short-lived spans to keep (image-server's replay without a model,
  // whose images are 2-8 MiB, kept 58 MiB after its peak instead of 26).
  size_t last_bytes = bytes - (pages - 1) * kHugePageBytes;
  size_t tail_blocks = (last_bytes + kBlockBytes - 1) / kBlockBytes;
  bool donate = lc == never_freed_class() && pages >= 2 && tail_blocks + kMinSlackBlocks <= kBlocksPerHugePage;
  Region* r = nullptr;
  size_t index = 0;
  uintptr_t address = 0;
  bool tail_unbacked = false;
  bool recycled = take_cached(pages, align_pages, &r, &index);
  if (recycled) {
    address = r->page_address(index);
  } else {
    // No cached run fits: as many cached pages as this takes go back first, so that the cache never adds to
    // what the heap would hold without it (image-server: peak RSS 440 MiB with a cache of runs too short for
    // its images, 245 without).
    release_cached_pages(pages);
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
    p->residual.set_range(0, tail_blocks);
    p->taken.set_range(0, tail_blocks);
    counters_.huge_slack_pages.fetch_add(1, std::memory_order_relaxed);
    activate(p);
  }
  return reinterpret_cast<void*>(address);
}

void GlobalAllocator::free_huge_locked(HugePageMeta* head) {
  Region* r = head->region;
  size_t pages = head->huge_pages, index = head->index, tail_blocks = head->huge_tail_blocks;
  size_t usable = round_up(head->huge_requested_bytes, kSmallPageBytes), end = pages * kHugePageBytes;
  // The page cache holds whole backed pages: the slack of an object's last page is backed first, or the pages go
  // back (the memory limits refuse it). Not when its slack was not even reserved (under RLIMIT_AS).
  bool whole = !head->tail_unbacked ||
               (!head->tail_unreserved && config_.page_cache_pages != 0 && pages <= config_.page_cache_pages &&
                platform_.back(reinterpret_cast<void*>(r->page_address(index) + usable), end - usable));
  size_t mapped = head->tail_unreserved ? usable : 0;
  account_page(head, -int64_t(pages));
  // Its pages' metadata reads as zero again (state kUnused). Only their headers were written: cleared in place,
  // not dropped page by page (a 1 GiB object has 512 pages, and a madvise each cost more than the object's own
  // mapping calls).
  for (size_t i = 0; i < pages; ++i) memset(static_cast<void*>(r->page(index + i)), 0, kHugeHeaderBytes);
  if (whole) cache_or_release(r, index, pages);
  else give_back_pages(r, index, pages, mapped);
  if (tail_blocks != 0) {
    // Its end on the donated page: those blocks are free like any object's (the page goes when it empties).
    HugePageMeta* p = r->page(index + pages);
    p->huge_tail_blocks = 0;
    p->live.clear_range(0, tail_blocks);
    p->residual.clear_range(0, tail_blocks);
    after_blocks_freed(p);
  }
}

size_t GlobalAllocator::free_large(void* ptr) {
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  size_t requested = 0;
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
    page->residual.clear_range(block, count);
    after_blocks_freed(page);
  }
  expire_deadlines(clock_.now_ns());
  debug_check();
  return requested;
}

size_t GlobalAllocator::large_usable_size(const void* ptr) {
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

size_t GlobalAllocator::large_requested_size(const void* ptr) {
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  LockGuard g(lock_);
  HugePageMeta* page = page_of(a);
  if (page == nullptr || page->state == PageState::kUnused) return 0;
  if (page->kind == PageKind::kHugeHead) return page->huge_requested_bytes;
  return page->large_requested_bytes[((a - page_address(page)) >> kBlockShift) % kBlocksPerHugePage];
}

// ---------------------------------------------------------------------------------------------------------
// Introspection and invariants.

PageInfo GlobalAllocator::page_info(uintptr_t address) {
  LockGuard g(lock_);
  PageInfo info;
  HugePageMeta* p = page_of(address);
  if (p == nullptr) return info;
  info.state = p->state;
  info.kind = p->kind;
  info.lifetime_class = p->lifetime_class;
  info.deadline_ns = p->deadline_ns;
  info.live = p->live;
  info.residual = p->residual;
  info.address = p->state == PageState::kUnused ? 0 : page_address(p);
  return info;
}

size_t GlobalAllocator::pages_in_use(unsigned lc) {
  LockGuard g(lock_);
  return lc < kMaxClasses ? gauges_.huge_pages_by_class[lc] : gauges_.footprint_bytes / kHugePageBytes;
}

bool HugePageMeta::check(unsigned num_classes) const {
  if (state == PageState::kUnused) return false;
  if (lifetime_class >= num_classes) return false;
  if (kind != PageKind::kBlocks) return live.all();
  if (!(residual & ~live).none()) return false;               // residual blocks are live
  if (!(large_start & ~live).none()) return false;
  if (!(released & live).none()) return false;                // only free blocks are subreleased
  // An open page holds its class's objects (residual) and, in a small heap, objects of shorter classes lent from
  // it (HeapConfig::small_heap_pages): live non-residual blocks are allowed in every state.
  // Every live block belongs to a large object (size-class spans are handed out as such) that starts and ends on
  // this page, or to the end of the huge object before it (slack donation).
  size_t open_object_end = 256;
  for (size_t b = 0; b < kBlocksPerHugePage; ++b) {
    if (b < huge_tail_blocks) {
      if (!live.test(b) || large_start.test(b)) return false;
      continue;
    }
    if (large_start.test(b)) {
      if (open_object_end != 256) return false;
      open_object_end = large_end.next_set(b);
      if (open_object_end == 256) return false;
    }
    bool in_object = open_object_end != 256;
    if (live.test(b) != in_object) return false;
    if (in_object && b == open_object_end) open_object_end = 256;
  }
  return open_object_end == 256;
}

void GlobalAllocator::check_invariants() {
  LockGuard g(lock_);
  check_invariants_locked();
}

void GlobalAllocator::check_invariants_locked() {
  size_t pages_by_class[kMaxClasses] = {};
  size_t total = 0, released_blocks = 0, all_used_pages = 0, unreserved_used = 0;
  for (size_t i = 0; i < region_count_; ++i) {
    Region* r = &regions_[i];
    LLAMALLOC_CHECK(region_of(r->base) == r, "invariant: region table does not map a region's base to it");
    LLAMALLOC_CHECK(slots_[r->base >> kRegionShift].metadata.load(std::memory_order_relaxed) == r->metadata &&
                        slots_[r->base >> kRegionShift].bound.load(std::memory_order_relaxed) ==
                            uint64_t(r->committed) * kHugePageBytes,
                    "invariant: slot table does not map a region's base to its metadata and bound");
    LLAMALLOC_CHECK(r->committed <= r->reserved && r->reserved <= r->capacity && r->capacity <= kHugePagesPerRegion,
                    "invariant: region's committed <= reserved <= capacity");
    size_t used_pages = 0;
    for (size_t j = 0; j < r->reserved; ++j) {
      bool used = test_bit(r->used, j);
      used_pages += used;
      LLAMALLOC_CHECK(used || j >= r->search_from, "invariant: a free page below the region's search start");
      if (j >= r->committed) {
        LLAMALLOC_CHECK(!used, "invariant: a used page without usable metadata");
        continue;
      }
      HugePageMeta* p = r->page(j);
      LLAMALLOC_CHECK(used || p->state == PageState::kUnused, "invariant: a page in use is not marked used");
      if (test_bit(r->unreserved, j)) {
        LLAMALLOC_CHECK(p->state == PageState::kUnused, "invariant: a page in use whose address space was given back");
        unreserved_used += used;
      }
      if (p->state == PageState::kUnused) continue;
      LLAMALLOC_CHECK(p->check(num_classes()), "invariant: huge page metadata inconsistent");
      LLAMALLOC_CHECK(p->region == r && p->index == j, "invariant: huge page back-pointers wrong");
      pages_by_class[p->lifetime_class]++;
      total++;
      released_blocks += p->released.count();
      if (p->kind != PageKind::kBlocks) continue;
      if (p->state == PageState::kOpen) LLAMALLOC_CHECK(open_[p->lifetime_class] == p, "invariant: stray open page");
      if (p->state == PageState::kActive) {
        LLAMALLOC_CHECK(!p->live.none(), "invariant: an active page with no live block was not released");
        LLAMALLOC_CHECK(bool(p->in_recyclable) == !p->live.all(), "invariant: recyclable list membership");
      }
    }
    LLAMALLOC_CHECK(used_pages + r->free_pages == r->reserved, "invariant: region's free pages miscounted");
    all_used_pages += used_pages;
  }
  // Every used page that is not in use is in the page cache.
  size_t cached_pages = 0;
  for (unsigned i = 0; i < cached_runs_; ++i) {
    cached_pages += cached_[i].pages;
    for (size_t j = 0; j < cached_[i].pages; ++j)
      LLAMALLOC_CHECK(test_bit(cached_[i].region->used, cached_[i].index + j) &&
                          cached_[i].region->page(cached_[i].index + j)->state == PageState::kUnused,
                      "invariant: a cached page is not a used page out of use");
  }
  LLAMALLOC_CHECK(cached_pages * kHugePageBytes == gauges_.page_cache_bytes, "invariant: page cache miscounted");
  LLAMALLOC_CHECK(all_used_pages == total + cached_pages + lost_pages_,
                  "invariant: a used page neither in use, nor cached, nor lost");
  LLAMALLOC_CHECK(unreserved_used == lost_pages_, "invariant: lost pages miscounted");
  for (unsigned c = 0; c < kMaxClasses; ++c) {
    LLAMALLOC_CHECK(pages_by_class[c] == gauges_.huge_pages_by_class[c], "invariant: pages by class miscounted");
    uint64_t last_deadline = 0;
    for (HugePageMeta* p = active_head_[c]; p; p = p->active_next) {
      LLAMALLOC_CHECK(p->state == PageState::kActive && p->lifetime_class == c, "invariant: active list entry");
      LLAMALLOC_CHECK(p->deadline_ns >= last_deadline, "invariant: active list not in deadline order");
      last_deadline = p->deadline_ns;
    }
    for (unsigned b = 0; b < kRecycleBuckets; ++b)
      for (HugePageMeta* p = recyclable_head_[c][b]; p; p = p->recyclable_next)
        LLAMALLOC_CHECK(p->in_recyclable == 1 + b && recycle_bucket(p) == b && p->lifetime_class == c &&
                            p->state == PageState::kActive,
                        "invariant: recyclable list entry");
    if (open_[c]) LLAMALLOC_CHECK(open_[c]->state == PageState::kOpen, "invariant: open page not open");
  }
  LLAMALLOC_CHECK(total * kHugePageBytes == gauges_.footprint_bytes, "invariant: footprint miscounted");
  LLAMALLOC_CHECK(released_blocks * kBlockBytes == gauges_.subreleased_bytes, "invariant: subreleased bytes miscounted");
}

}  // namespace llamalloc
