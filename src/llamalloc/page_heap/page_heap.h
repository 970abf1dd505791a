// The page heap: 2 MiB huge pages of lifetime classes in shared regions, their blocks, deadlines, promotion and
// demotion, block and span recycling, the page cache, subrelease, large and huge objects (the LLAMA paper,
// sections 6.1-6.5 and 8). It owns the one page heap lock. It takes a Platform and a Clock, never touches the
// memory it hands out (only its metadata), and is therefore the same code in the process, in tests on fake
// pages, and in the trace simulator. Its methods are defined one concept per file in page_heap/: regions.cc (address
// space), pages.cc (page lifecycle and lists), large_objects.cc, huge_objects.cc, deadlines.cc, page_cache.cc,
// subrelease.cc, introspection.cc and invariants.cc. Three concepts are components with their own state, each a
// class in its own header that the page heap holds one of and calls (deadlines.h, page_cache.h, subrelease.h);
// deadlines.cc, page_cache.cc and subrelease.cc hold the page heap's side of each.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"
#include "page_heap/deadlines.h"
#include "page_heap/page_cache.h"
#include "page_heap/page_meta.h"
#include "page_heap/subrelease.h"
#include "pal/pal.h"
#include "stats.h"

namespace llamalloc {

struct HeapConfig {
  unsigned num_classes = kMaxClasses;  // the last one is "never freed"
  unsigned deadline_k = 4;             // deadline = now + K x class duration
  // When the open page of a class is full, the class's own active pages (their free blocks) are used before a
  // fresh huge page; false: never, as the LLAMA paper (section 6.3) has it.
  bool same_class_recycling = true;
  // Small page heaps: while fewer than this many huge pages are in use, a class whose open page is full (or that
  // has none) takes blocks from the open page of a longer class before it opens a fresh huge page. The objects
  // are expected to die before those of the page's class, as in the LLAMA paper's recycling (section 6.3), so
  // the page's lifetime is unchanged; a program with a few MiB live then keeps 1-3 huge pages instead of one per
  // class in use. At most half of a page is lent, so that its own class keeps room. 0: never.
  unsigned small_heap_pages = 8;
  // Small objects of this lifetime class and longer come from one thread heap shared by every thread (under its
  // own lock; set_shared_heap), not from each thread heap's spans: a long-lived class gets few objects per thread
  // and size class, and a span per thread and size class, each holding a few of them, spreads them over many
  // mostly empty spans. kMaxClasses: none shared (the default: docs/heap.md says why).
  unsigned shared_class_min = kMaxClasses;
  // Subrelease (subrelease_free_blocks): the free blocks of a huge page in which at most this percentage of the
  // blocks are in use, and from which no block was taken for a whole sweep period, are given back to the OS,
  // beyond what the page heap used at its highest over the last kDemandPasses passes. The page stays in use (its
  // objects stay where they are) on 4 KiB pages. 0: never (every byte stays on a 2 MiB page).
  unsigned subrelease_percent = 50;
  // The same on a quiet pass (Subrelease::pass: few slow paths, few blocks taken, no more in use): a program gone
  // quiet after a peak gives back the free blocks of denser pages, and span purge those of denser spans, until its
  // next pass that is not quiet. At or below subrelease_percent: as subrelease_percent.
  unsigned subrelease_quiet_percent = 0;
  // Page cache: the pages of a freed huge object (over 2 MiB) stay backed for reuse by the next huge object or
  // page the page heap opens, instead of going back to the OS at once, at most this many, and each subrelease
  // pass trims them to recent demand (PageCache::trim), as the HugeCache of the TCMalloc paper does. A program
  // that allocates and frees big buffers in waves then reuses their memory instead of having the kernel zero
  // fresh pages. Emptied pages of blocks are not kept: they would raise peak RSS for little reuse, as a page of
  // blocks is opened again soon only when its class is busy. The footprint does not count cached pages (they
  // hold no live byte); RSS does, until a pass gives them back. 0: off (as in the LLAMA paper, section 8: a free
  // page goes back at once).
  unsigned page_cache_pages = 0;
  // The page cache also holds at most the pages in use / kPageCacheUseShare right after each free, the bound a
  // pass applies after a peak. For a process whose passes may stop at any time (the library without its sweeper
  // thread: passes come only with slow paths, and none may follow the last free before the program goes quiet),
  // so that whatever the cache holds when it goes quiet is what a pass would have left.
  bool page_cache_bounded_by_use = false;
  // Blocks for objects of this lifetime class and longer (small-object spans and large objects) come from the
  // huge pages of the longest class ("never freed"), not from pages of their own class: each class in use keeps
  // an open page, and a class that holds little would pay a whole page or two for it. Their holes are recycled
  // by shorter classes, as any long-lived page's are. kMaxClasses: off (every class on its own pages, as the
  // LLAMA paper has it).
  unsigned long_class_min = kMaxClasses;
  // A thread heap whose queue of a size class has no free block, for a lifetime class, takes a partially free
  // span of that size class from a longer class of the same thread heap before it takes new memory: the span
  // serves the shorter class until it has been full or is empty, then goes back to its own class, and its holes
  // are filled by objects expected to die first (the LLAMA paper's recycling of a longer-lived block's free lines,
  // section 6.6, at the grain of a size class). false: never.
  bool span_recycling = true;
  // Free blocks of active pages (recycling: a span or large object placed on a page that is already in use)
  // come from the fullest page of a class that has room, as the huge page filler of the TCMalloc paper allocates
  // from its fullest huge pages: the emptier pages are left to drain and go back whole. false: the page that got
  // a free block last, first.
  bool dense_first = true;
  // The class every allocation gets without a model (LLAMALLOC_DEFAULT_CLASS), and whether a longer class whose
  // pages stay much emptier than this class's goes onto this class's pages (review_model_classes).
  unsigned default_class = 1;
  bool class_fallback = true;
  // LLAMALLOC_HUGE_PAGES=2: the heap's pages are backed by 4 KiB pages as they are touched, and a page becomes one
  // huge page when it is dense (collapse_dense_pages).
  bool collapse_dense = false;
};

// A snapshot of one huge page for tests and the simulator.
struct PageInfo {
  PageState state = PageState::kUnused;
  PageKind kind = PageKind::kBlocks;
  unsigned lifetime_class = 0;
  uint64_t deadline_ns = 0;
  Bitmap256 live, residual;
  uintptr_t address = 0;
};

struct ThreadHeap;

class PageHeap {
 public:
  // constexpr: the process-wide instance is constant-initialised, usable before any constructor runs.
  constexpr PageHeap(Platform& platform, Clock& clock, HeapConfig config)
      : platform_(platform), clock_(clock), config_(config) {
    configure(config);
  }
  // Sets the class count and K; only before the first allocation.
  constexpr void configure(HeapConfig config) {
    if (config.num_classes < 2) config.num_classes = 2;
    if (config.num_classes > kMaxClasses) config.num_classes = kMaxClasses;
    if (config.deadline_k == 0) config.deadline_k = 1;
    if (config.default_class >= config.num_classes) config.default_class = config.num_classes - 1;
    config_ = config;
    for (unsigned lc = 0; lc < kMaxClasses; ++lc)
      page_class_[lc] = uint8_t(lc >= config.long_class_min && lc < config.num_classes - 1 ? config.num_classes - 1
                                : lc < config.num_classes ? lc : config.num_classes - 1);
    deadlines_.configure(config.num_classes, config.deadline_k);
    page_cache_.configure(config.page_cache_pages, config.page_cache_bounded_by_use);
    subrelease_.configure(config.subrelease_percent, config.subrelease_quiet_percent, config.collapse_dense);
  }
  PageHeap(const PageHeap&) = delete;
  PageHeap& operator=(const PageHeap&) = delete;

  unsigned num_classes() const { return config_.num_classes; }
  unsigned never_freed_class() const { return config_.num_classes - 1; }
  // The class duration that deadlines are computed from: 10 ms x 10^c; "never freed" has none (UINT64_MAX).
  uint64_t class_duration_ns(unsigned lifetime_class) const;

  static constexpr unsigned kRecycleBuckets = 8;

  // --- large (blocks) and huge (whole huge pages) objects: large_objects.cc, huge_objects.cc ---------------
  // bytes > kSmallMaxBytes or alignment too large for a span, and the spans of small objects. On the pages of
  // page_class(lifetime_class). nullptr when exhausted.
  void* alloc_large(unsigned lifetime_class, size_t bytes, size_t alignment);
  // Aborts with one line if `p` is not a live large or huge object of this page heap. Returns the bytes that
  // were asked for when it was allocated.
  size_t free_large(void* p);
  // Usable bytes of the large or huge object starting at p; 0 if p is not one.
  size_t large_usable_size(const void* p);
  // The parked huge object (huge_objects.cc, "The parked huge object") goes back to the page heap: at once
  // (`now`), or when no allocation reused it since the previous call (each pass). Returns whether one went.
  bool flush_parked_huge(bool now);
  // The bytes that were asked for (live accounting).
  size_t large_requested_size(const void* p);

  // --- lookups without the lock -------------------------------------------------------------------------
  LLAMALLOC_FAST Region* region_of(uintptr_t address) const {
    size_t slot = address >> kRegionShift;
    if (LLAMALLOC_UNLIKELY(slot >= kRegionSlots)) return nullptr;
    return region_table_[slot].load(std::memory_order_acquire);
  }
  // The metadata of the huge page of `address`, or null if not ours: one load of the region's metadata by its
  // address slot (regions are kRegionBytes aligned), none through its Region. The bound (the region's pages with
  // usable metadata) keeps an address of another mapping in the unreserved part of a slot from being taken for
  // one of the page heap's; it shares the entry's cache line, and an unused slot's bound is 0.
  LLAMALLOC_FAST HugePageMeta* page_meta_of(uintptr_t address) const {
    size_t slot = address >> kRegionShift;
    if (LLAMALLOC_UNLIKELY(slot >= kRegionSlots)) return nullptr;
    const Slot& s = slots_[slot];
    uintptr_t offset = address & (kRegionBytes - 1);
    if (LLAMALLOC_UNLIKELY(offset >= s.bound.load(std::memory_order_acquire))) return nullptr;
    return reinterpret_cast<HugePageMeta*>(s.metadata.load(std::memory_order_relaxed) +
                                           (offset >> kHugePageShift) * kPageMetaStride);
  }
  static size_t span_index_of(uintptr_t address) { return (address >> kBlockSpanShift) & (kSpansPerHugePage - 1); }
  // The metadata room of the 16 KiB span of `address` (the thread heap's SmallSpan lives there), or null.
  LLAMALLOC_FAST SpanMeta* span_of(uintptr_t address) const {
    HugePageMeta* page = page_meta_of(address);
    return page != nullptr ? &page->spans[span_index_of(address)] : nullptr;
  }
  // The entry of HugePageMeta::size_spans for the 16 KiB span of `address`, or null if not ours: free() finds a
  // span in two dependent loads.
  LLAMALLOC_FAST std::atomic<SmallSpan*>* size_span_slot(uintptr_t address) const {
    HugePageMeta* page = page_meta_of(address);
    return page != nullptr ? &page->size_spans[span_index_of(address)] : nullptr;
  }
  LLAMALLOC_FAST HugePageMeta* page_of(uintptr_t address) const { return page_meta_of(address); }
  bool owns(const void* p) const { return page_meta_of(reinterpret_cast<uintptr_t>(p)) != nullptr; }
  // Whether the huge object p (more than a huge page; its owner asks) is on pages from the page cache, which
  // still hold old data: calloc() zeroes those, and relies on the kernel's zeroed pages otherwise.
  bool huge_object_recycled(const void* p) const {
    HugePageMeta* head = page_meta_of(reinterpret_cast<uintptr_t>(p));
    return head == nullptr || head->kind != PageKind::kHugeHead || head->recycled != 0;
  }

  // --- the sweeper's passes: deadlines.cc, pages.cc, subrelease.cc, page_cache.cc -------------------------
  // Processes the deadlines that have expired by now (every entry point does this first).
  void tick();
  // Gives back the open pages with no block in use: at once (`now`: llamalloc_collect), else those that were
  // already empty at the previous call and have had no block taken since (the sweeper, each pass). An open
  // page is otherwise kept for its class however long it stays empty. Returns the pages given back.
  size_t release_empty_open_pages(bool now);
  // Subrelease (HeapConfig::subrelease_percent, docs/heap.md "Subrelease"): one pass of the sweeper, which gives
  // back the free blocks of sparse huge pages that had no block taken since the previous pass, sparsest first,
  // as far as the page heap's blocks exceed the most it used over the last `demand_passes` passes (at most
  // kDemandPasses, so that a load that comes back finds its memory still there; the slow paths' passes of a
  // process without a sweeper thread use 1: no pass may follow the last one before a quiet phase). `now`
  // (llamalloc_collect): every sparse page at once, regardless of idleness and demand. Returns the blocks given
  // back.
  // threads_quiet: the thread heaps ran at most Subrelease::kQuietSlowPaths slow paths since the last pass (the
  // sweeper's passes; false for the slow paths' own passes, which come with activity). retaken_blocks: blocks the
  // thread heaps took again since the last pass for spans that the sweep before it took from them (not the
  // program's activity; Subrelease::pass).
  size_t subrelease_free_blocks(bool now, unsigned demand_passes = kDemandPasses, bool threads_quiet = false,
                                uint64_t retaken_blocks = 0);
  static constexpr unsigned kDemandPasses = Subrelease::kDemandPasses;
  // A thread's exit (alloc/thread_heap_pool.cc), after its heap gave its spans back: when the blocks in use fell
  // (Subrelease::fell_from_high: a batch's temporaries freed, its workers ending), the free blocks of the sparse
  // pages beyond the blocks in use now go back, on the exiting thread (Subrelease::after_fall); otherwise
  // nothing. Returns the blocks given back.
  size_t subrelease_after_fall();
  // Whether the last subrelease pass saw the blocks in use drop (Subrelease::kDropBlocks); read by the sweeper
  // after its pass.
  bool demand_dropped() {
    LockGuard g(lock_);
    return subrelease_.dropped();
  }
  // Huge pages only where they are dense (HeapConfig::collapse_dense; dense_pages.cc): one pass collapses into huge
  // pages at most `budget` pages whose blocks are nearly all in use and whose 4 KiB pages nearly all resident.
  // Called by the sweeper after subrelease, and by the slow paths' passes of a process without one. Returns the
  // pages collapsed.
  size_t collapse_dense_pages(unsigned budget);
  // Under the lock: a page of blocks became active (full); records whether the default class fills pages densely.
  void note_page_filled(HugePageMeta* p);
  // Under the lock: a page just opened for class lc; asks for it to be huge if it is the default class and that
  // fills pages densely.
  void advise_if_dense(HugePageMeta* p, unsigned lc);
  // Under the lock: a page is given back (its metadata about to be dropped).
  void forget_advice(HugePageMeta* p) {
    if (p->huge_advised) --advised_pages_;
  }
  static constexpr unsigned kCollapsePerPass = 16;
  static constexpr uint32_t kProbeEvery = 8;  // of a dense class's pages, one in this many stays on 4 KiB pages
  // Span purge (docs/heap-memory.md, "Span purge"): a thread heap gives back the 4 KiB pages [start, start +
  // bytes) of one of its size-class spans, every object on them free, while the span stays in use; the huge page
  // is kept from khugepaged until they are all backed again (span_purge_forgotten). Under the page heap lock.
  void purge_span_pages(uintptr_t start, size_t bytes);
  // The span's purged pages inside the huge page at `start` are backed again, or the span goes back whole.
  void span_purge_forgotten(uintptr_t start, size_t pages);
  static constexpr unsigned kPageCachePasses = PageCache::kPasses;
  // The page cache keeps at most the pages in use divided by this after a pass (page_cache.h says why).
  static constexpr unsigned kPageCacheUseShare = PageCache::kUseShare;
  // Changes HeapConfig::page_cache_pages and page_cache_bounded_by_use (under the lock), giving back the oldest
  // cached pages beyond the new limits (all of them for 0).
  void set_page_cache_pages(unsigned pages, bool bounded_by_use = false);
  // A page from which at most this many blocks were taken since the previous pass counts as idle (its other free
  // blocks may go back; subrelease.h says why).
  static constexpr size_t kIdleTakenBlocks = Subrelease::kIdleTakenBlocks;

  // --- introspection and checks: introspection.cc, invariants.cc -----------------------------------------
  // Checks every structure; on the first broken invariant prints it and aborts.
  void check_invariants();
  PageInfo page_info(uintptr_t address);
  // Huge pages that are open or active (the footprint in pages), per class and in all.
  size_t pages_in_use(unsigned lifetime_class);

  // The highest footprint so far (gauges' peak_footprint_bytes), read without the lock.
  uint64_t peak_footprint() const { return peak_footprint_.load(std::memory_order_relaxed); }
  Counters& counters() { return counters_; }
  Gauges& gauges() { return gauges_; }
  Lock& lock() { return lock_; }

  // The thread heap that small objects of classes >= shared_class_min() come from (null: each thread's own), and
  // the lock that every operation on it holds. Lock order: the shared thread heap's, the heap pool's, the page
  // heap's. The library sets it when the process makes its second thread heap: a single-threaded program gains
  // nothing from sharing and would pay a lock and a slow path per long-lived object.
  void set_shared_heap(ThreadHeap* heap) { shared_heap_.store(heap, std::memory_order_release); }
  ThreadHeap* shared_heap() const { return shared_heap_.load(std::memory_order_relaxed); }
  unsigned shared_class_min() const { return config_.shared_class_min; }
  // The thread heap of sampled objects (online learning; null: no sampling): every free of one of its objects
  // is a remote free, which the shared heap's lock covers and which tells the predictor (ThreadHeapOps::
  // shared_free), while the fast paths stay as they are. Its spans are on the pages of their objects' classes.
  void set_sampled_heap(ThreadHeap* heap) { sampled_heap_.store(heap, std::memory_order_release); }
  ThreadHeap* sampled_heap() const { return sampled_heap_.load(std::memory_order_relaxed); }
  bool span_recycling() const { return config_.span_recycling; }
  unsigned subrelease_percent() const { return config_.subrelease_percent; }
  // The share of a span's blocks in use up to which span purge gives back its free pages now: the quiet
  // percentage after a quiet pass (Subrelease::span_purge_percent), else the subrelease percentage.
  unsigned span_purge_percent() const { return subrelease_.span_purge_percent(); }
  // The class whose huge pages an object of class lc takes its blocks from: the longest for lc >=
  // HeapConfig::long_class_min, the default class for a class that fell back (review_model_classes), else lc.
  // Read without the lock (written under it, one byte at a time).
  unsigned page_class(unsigned lc) const { return __atomic_load_n(&page_class_[lc], __ATOMIC_RELAXED); }
  // The model's placement check, each subrelease pass (under the lock), from the blocks in use and the pages of
  // blocks of each class: a class above the default class (only a model puts objects there) whose pages are less
  // than half as full as the default class's for kFallbackPasses passes in a row, on at least kFallbackMinPages
  // pages, takes its blocks from the default class's pages from then on, as it would without a model. A model
  // that predicts such a class keeps pages for objects that do not live as long as it said, or too few of them
  // to fill a page: the placement without a model keeps those objects among the others' and no emptier.
  static constexpr unsigned kFallbackPasses = 8;
  static constexpr size_t kFallbackMinPages = 2;
  void review_model_classes(const size_t* live_blocks, const size_t* pages);
  Lock& shared_lock() { return shared_lock_; }
  // The page heap's clock (the process's monotonic clock; the trace's in the simulator).
  uint64_t now_ns() { return clock_.now_ns(); }

 private:
  // subrelease_free_blocks, or with only_after_fall subrelease_after_fall (subrelease.cc).
  size_t subrelease_pass(bool now, unsigned demand_passes, bool threads_quiet, uint64_t retaken_blocks,
                         bool only_after_fall);
  // --- address space (regions.cc) -----------------------------------------------------------------------
  // `pages` contiguous free pages, aligned to align_pages, made usable (backed, their metadata committed): from
  // the regions' free pages, lowest address first, then by growing a region's reservation, then from a new
  // region. false when the address space, RLIMIT_DATA or the commit limit refuses.
  // back_bytes: how much of the run, from its start, is made usable (all of it by default).
  bool take_pages(size_t pages, size_t align_pages, Region** r, size_t* index, size_t back_bytes = 0);
  // Gives [index, index + pages) of r back to the OS (Platform::release; under an address-space limit
  // Platform::unreserve, of the first mapped_bytes if not 0) and to the free pages for reuse.
  void give_back_pages(Region* r, size_t index, size_t pages, size_t mapped_bytes = 0);
  // Reserves again the pages of [at, at + pages) whose address space was given back: 0, EEXIST when another
  // mapping took some of them (those are lost: marked used for good), ENOMEM when the limit refuses.
  int reserve_again(Region* r, size_t at, size_t pages);
  // take_pages' and claim_pages' common end: [at, at + pages) of r reserved again, its metadata committed, its
  // first back_bytes (all of it for 0) backed, in use. 0, EEXIST (reserve_again), or ENOMEM.
  int claim(Region* r, size_t at, size_t pages, size_t back_bytes);
  Region* new_region(size_t pages);
  bool grow_region(Region* r, size_t pages);
  bool commit_metadata(Region* r, size_t end);

  // --- page lifecycle and lists (pages.cc; the list operations inline in page_lists.h) -------------------
  // fresh (optional): set to whether the page came from the address space (nothing of it resident), not the
  // page cache.
  HugePageMeta* open_new_page(unsigned lc, bool* fresh = nullptr);
  void activate(HugePageMeta* page);
  void release_page(HugePageMeta* page);
  void after_blocks_freed(HugePageMeta* page);
  void account_page(HugePageMeta* p, int64_t pages);
  void active_push(HugePageMeta* p);
  void active_remove(HugePageMeta* p);
  // Puts p on the recyclable list of its class and fullness, or moves it there from another.
  void recyclable_push(HugePageMeta* p);
  unsigned recycle_bucket(const HugePageMeta* p) const {
    return config_.dense_first ? unsigned(p->live.count() * kRecycleBuckets / (kBlocksPerHugePage + 1)) : 0;
  }
  void recyclable_remove(HugePageMeta* p);
  uintptr_t page_address(const HugePageMeta* p) const { return p->region->page_address(p->index); }

  // --- blocks of a page (large_objects.cc) ---------------------------------------------------------------
  bool take_blocks(HugePageMeta* page, size_t count, size_t align_blocks, size_t* first);
  void mark_allocated(HugePageMeta* page, size_t first, size_t count, bool residual);
  // Free blocks on an active page of class c (first fit); the page or null.
  HugePageMeta* recycle_blocks(unsigned c, size_t count, size_t align_blocks, size_t* first);
  // Small page heaps (HeapConfig::small_heap_pages): blocks of the open page of the nearest longer class than lc.
  HugePageMeta* borrow_longer_open_page(unsigned lc, size_t count, size_t align_blocks, size_t* first);

  // --- huge objects (huge_objects.cc) --------------------------------------------------------------------
  void* alloc_huge_locked(unsigned lc, size_t bytes, size_t alignment);
  void free_huge_locked(HugePageMeta* head);

  // --- deadlines, promotion and demotion (deadlines.cc; the lists and their rules: deadlines.h) ------------
  // The page heap's side of a page's change of class (Deadlines calls it): its recyclable list and the pages by
  // class follow the page, and the page moves on the deadline lists.
  void change_class(HugePageMeta* page, unsigned new_class);
  void demote(HugePageMeta* page);
  // Every entry point calls it first: nothing to do until the earliest deadline.
  void expire_deadlines(uint64_t now) {
    if (LLAMALLOC_LIKELY(!deadlines_.due(now))) return;
    expire_due_deadlines(now);
  }
  void expire_due_deadlines(uint64_t now);
  // The page is given the deadline of a page activated now (same-class recycling placed residual objects).
  void renew_deadline(HugePageMeta* page);

  // --- the page cache (page_cache.cc; the cache and its rules: page_cache.h) ------------------------------
  // The page cache's pages go back to the regions (give_back_pages).
  struct CacheSink final : PageSink {
    constexpr explicit CacheSink(PageHeap* owner) : heap(owner) {}
    void give_back(Region* r, size_t index, size_t pages) override;
    PageHeap* heap;
  };
  // The pages in use (open and active, huge objects included): what the page cache's limits are shares of.
  size_t huge_pages_in_use() const { return gauges_.footprint_bytes / kHugePageBytes; }
  // `pages` contiguous cached pages (aligned to align_pages) for a new page or huge object.
  bool take_cached(size_t pages, size_t align_pages, Region** r, size_t* index) {
    return page_cache_.take(pages, align_pages, r, index);
  }
  // A huge object of `pages` that no cached run holds: the cached run with the most pages that, with free pages
  // beside it in its region (given back or never used), makes up the object. The run leaves the cache and only
  // those free pages are backed. false when no run has enough free pages beside it.
  bool take_cached_around(size_t pages, Region** r, size_t* index);
  // Makes [at, at + pages) of r, free pages, usable (reserved again, metadata committed, backed) and in use.
  bool claim_pages(Region* r, size_t at, size_t pages);

  // --- subrelease (subrelease.cc; the passes and their rules: subrelease.h) ------------------------------
  // Blocks of p that are backed again (taken), or dropped with it: off the subreleased gauge.
  void unrelease(HugePageMeta* p, size_t first, size_t count) { subrelease_.unrelease(p, first, count); }

  // --- invariants (invariants.cc) ------------------------------------------------------------------------
  void debug_check() {
    if (LLAMALLOC_DEBUG_CHECKS) check_invariants_locked();
  }
  void check_invariants_locked();

  Platform& platform_;
  Clock& clock_;
  HeapConfig config_;
  Lock lock_;
  std::atomic<ThreadHeap*> shared_heap_{nullptr};
  std::atomic<ThreadHeap*> sampled_heap_{nullptr};
  Lock shared_lock_;
  Counters counters_;
  Gauges gauges_;
  // The active pages of each class in deadline order, and their expiry (deadlines.h).
  Deadlines deadlines_{counters_};
  HugePageMeta* open_[kMaxClasses] = {};
  // Active pages with free blocks, by class and by fullness (kRecycleBuckets lists of 32 live blocks each; with
  // dense_first off, all in list 0), newest first: recycle_blocks takes the fullest page that fits.
  HugePageMeta* recyclable_head_[kMaxClasses][kRecycleBuckets] = {};
  size_t region_count_ = 0;
  Region regions_[kMaxRegions] = {};
  std::atomic<Region*> region_table_[kRegionSlots] = {};
  // By the same slot: the region's metadata and the bytes of its address range that page_meta_of may look up.
  struct alignas(16) Slot {
    std::atomic<char*> metadata{nullptr};
    std::atomic<uint64_t> bound{0};
  };
  Slot slots_[kRegionSlots] = {};
  bool reported_reduced_reservation_ = false;
  bool limited_ = false;  // the address space is limited (RLIMIT_AS): regions grow in steps
  // Pages whose address space was given back (under RLIMIT_AS) and then taken by another mapping: marked used for
  // good, never mapped over.
  size_t lost_pages_ = 0;
  // page_class() by class, and the passes in a row each class has been found much emptier than the default's.
  uint8_t page_class_[kMaxClasses] = {};
  uint8_t emptier_passes_[kMaxClasses] = {};
  uint32_t collapse_passes_ = 0;  // collapse_dense_pages calls
  size_t huge_scan_region_ = 0, huge_scan_page_ = 0;  // where its scan for huge objects' pages goes on
  // HeapConfig::collapse_dense: whether the default class's last page to fill was dense (its 4 KiB pages nearly
  // all resident when it became active): its next pages are then asked to be huge from their first touch, but for
  // one in kProbeEvery (note_page_filled, advise_if_dense in dense_pages.cc). Pages so advised and in use, at most
  // kMaxAdvisedPages (each may split the heap's mapping in the kernel, as Subrelease::kMaxNoHugePages says).
  bool default_dense_ = false;
  uint32_t default_pages_opened_ = 0;  // the default class's pages opened while it was dense
  uint32_t advised_pages_ = 0;
  static constexpr uint32_t kMaxAdvisedPages = 16384;
  // The parked huge object (huge_objects.cc): its address (0: none), whether objects may be parked (the page
  // cache was turned on by set_page_cache_pages, as the process's heap is at start), reuses so far, and their count at the last flush_parked_huge pass.
  std::atomic<uint64_t> peak_footprint_{0};
  std::atomic<uintptr_t> parked_huge_{0};
  std::atomic<bool> parking_{false};
  std::atomic<uint64_t> parked_reuses_{0};
  std::atomic<uint64_t> parked_reuses_seen_{0};
  bool park_huge(uintptr_t address, size_t* requested);
  // Under the lock: the parked object goes to the page cache (before fresh pages are taken). Whether there was one.
  bool unpark_locked();
  void* reuse_parked_huge(unsigned lc, size_t bytes);
  // The page cache (HeapConfig::page_cache_pages; page_cache.h), giving its pages back through cache_sink_.
  CacheSink cache_sink_{this};
  PageCache page_cache_{cache_sink_, gauges_, counters_};
  // Subrelease and span purge (subrelease.h).
  Subrelease subrelease_{platform_, gauges_, counters_};
  // Blocks of pages of blocks in use (spans, large objects, huge objects' tails), and the most at once since the
  // last subrelease pass (Subrelease::Demand::high): a thread's exit compares them (subrelease_after_fall).
  size_t blocks_in_use_ = 0;
  size_t blocks_high_ = 0;
  void blocks_taken(size_t count) {
    blocks_in_use_ += count;
    if (blocks_in_use_ > blocks_high_) blocks_high_ = blocks_in_use_;
  }
  void blocks_freed(size_t count) { blocks_in_use_ -= count; }
};

// The page heap's statistics (page_heap/introspection.cc; stats.h formats them and reads no page heap).
// The statistics of `heap`, its gauges read together under its lock (in a signal handler, which may have
// interrupted a thread that holds it: the lock is tried for about 10 ms, then the gauges are read without it),
// with `unflushed_live` (live bytes not yet flushed into the gauges: a signal handler's own thread's delta) added
// to the live bytes.
HeapStats read_heap_stats(PageHeap& heap, bool in_signal = false, int64_t unflushed_live = 0);
inline GaugeSnapshot read_gauges(PageHeap& heap, bool in_signal = false, int64_t unflushed_live = 0) {
  return read_heap_stats(heap, in_signal, unflushed_live).gauges;
}
// format_stats_json for `heap` read now (read_heap_stats says what in_signal and unflushed_live do).
size_t format_stats_json(PageHeap& heap, char* buf, size_t capacity, bool in_signal = false,
                         int64_t unflushed_live = 0);
// format_stats_summary for `heap` read now, with this process's RSS.
size_t format_stats_summary(PageHeap& heap, char* buf, size_t capacity, bool in_signal = false,
                            int64_t unflushed_live = 0);
// Writes the summary line, then the JSON and a newline, to stderr (llamalloc_stats_print). No allocation.
void print_stats(PageHeap& heap);
// Writes the JSON to `path` through a temporary file and rename(2). false (and errno) on failure. "%p" in the
// path becomes the process id (every process that inherits LLAMALLOC_STATS writes the file at its exit).
bool write_stats_file(PageHeap& heap, const char* path);

}  // namespace llamalloc
