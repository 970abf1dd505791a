// The global allocator (papers/000 sections 6.1-6.5 and 8): huge pages of lifetime classes in shared regions, their
// blocks, deadlines, promotion and demotion, block and span recycling, large and huge objects. It owns the one
// global lock. It takes a Platform and a Clock, never touches the memory it hands out (only its metadata),
// and is therefore the same code in the process, in tests on fake pages, and in the trace simulator.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"
#include "pal/pal.h"
#include "stats.h"

namespace llamalloc {

// Huge page states of section 6.2. A free huge page has been given back (or was never used): kUnused.
enum class PageState : uint8_t { kUnused = 0, kOpen = 1, kActive = 2 };
// A page holds blocks (small spans and large objects) or is part of one huge object.
enum class PageKind : uint8_t { kBlocks = 0, kHugeHead = 1, kHugeTail = 2 };

struct Region;

// A size-class span (Heap 2.0, docs/heap.md): a run of whole blocks, 16 KiB aligned, that serves one size class
// of one lifetime class for one thread heap, mimalloc style. The global allocator hands its blocks out as a
// large object and never looks inside; local/ owns every field. It lives in the SpanMeta of its first 16 KiB
// span, and the page's size_spans entry of every 16 KiB span it covers points at it, so free() finds it in two
// dependent loads.
struct alignas(64) SmallSpan {
  // --- read by every thread that frees into the span; written by the owner only when (re)initialised --------
  uintptr_t key;         // link encoding (a corrupted or double-freed block is told apart from a free one)
  uintptr_t start;       // address of block 0
  void* owner;           // the LocalHeap (never freed: thread heaps are pooled)
  uint32_t block_size;
  uint32_t reciprocal;   // ceil(2^32 / block_size): an offset's block index without a division
  uint32_t span_bytes;
  uint32_t capacity;     // blocks that fit the span
  // Blocks 0 .. extended-1 have been put on a list; the rest are untouched memory. Written by the owner, read
  // by freeing threads (relaxed: a plain load and store on x86).
  std::atomic<uint32_t> extended;
  uint8_t size_class;
  uint8_t lifetime_class;
  uint8_t queued;        // in the owner's queue of its (lifetime class, size class)
  uint8_t cached;        // empty, kept in the owner's span cache
  // --- the owner thread's hot fields (no atomics), on their own cache line -----------------------------------
  // Blocks to hand out: a list whose links are xor-ed with `key`. The owner's frees go on top (span_push).
  alignas(64) void* free;
  uint32_t used;         // blocks handed out and not yet back on `free` (collected remote frees count)
  // The class whose queue it goes back to when it comes back from full or is emptied: lifetime_class, unless a
  // shorter class has adopted it (HeapConfig::span_recycling).
  uint8_t home_class;
  SmallSpan* next;       // queue links (owner)
  SmallSpan* prev;
  // --- written by other threads -------------------------------------------------------------------------
  // Frees by other threads: the head of a list (links encoded like `free`) with the state in the low 2 bits:
  // kXfreeFull = the owner took the span off its queue because it was full, and the first remote free must
  // tell it (push the span on the owner's notify list and set kXfreeNotified).
  alignas(64) std::atomic<uintptr_t> xfree;
  SmallSpan* notify_next;
};

inline constexpr uintptr_t kXfreeFull = 1;
inline constexpr uintptr_t kXfreeNotified = 2;
inline constexpr uintptr_t kXfreeStateMask = 3;

// One 16 KiB block span: when it is the first 16 KiB of a size-class span, that span's metadata (local/ owns it).
struct SpanMeta {
  SmallSpan small_span;
};

struct HugePageMeta {
  // For each 16 KiB span: the size-class span (Heap 2.0) it is part of, or null. Set before the span's first
  // block is handed out and cleared before its blocks go back to the global allocator. First and dense (1 KiB,
  // 8 spans a cache line), as free() reads one for every object: in a SpanMeta each took a cache line of its own.
  std::atomic<SmallSpan*> size_spans[kSpansPerHugePage];
  Bitmap256 live;         // blocks that hold objects or are handed out as spans
  Bitmap256 residual;     // live blocks predicted to match the page's class (section 6.5)
  Bitmap256 large_start;  // first block of each large object
  Bitmap256 large_end;    // last block of each large object: free() finds the size (section 8)
  Bitmap256 released;     // free blocks given back to the OS while the page stays in use (subrelease)
  Bitmap256 taken;        // blocks taken since the last subrelease pass (subrelease_free_blocks)
  uint64_t deadline_ns;
  HugePageMeta* active_prev;  // per class, in deadline order
  HugePageMeta* active_next;
  HugePageMeta* recyclable_prev;  // per class and fullness: active pages with at least one free block
  HugePageMeta* recyclable_next;
  Region* region;
  uint32_t index;       // in its region
  uint32_t huge_pages;  // kHugeHead: the object's length in whole huge pages (its head and tails)
  // Slack donation. kHugeHead: the object's last blocks, on the page after its tails (0: it ends on its last
  // tail). kBlocks: the first blocks of the page hold the end of the huge object on the pages before it (its head
  // says how many); the page's other blocks serve like any page's (papers/002: the slack of a large allocation
  // is donated to the filler).
  uint16_t huge_tail_blocks;
  uint64_t huge_requested_bytes;
  PageState state;
  PageKind kind;
  uint8_t lifetime_class;
  uint8_t deadline_passed;  // its deadline expired once
  uint8_t in_recyclable;   // 0: on no recyclable list; else 1 + its fullness bucket (recycle_bucket)
  uint8_t open_idle;        // open, found empty by release_empty_open_pages, and no block taken since
  uint8_t no_huge_page;     // has subreleased blocks: kept from being collapsed into a huge page again
  uint8_t recycled;         // kHugeHead: its pages came from the page cache, not zeroed by the kernel
  // kHugeHead: only the object's bytes (rounded to 4 KiB) are usable memory, not its last page's slack, which
  // stays reserved and charges nothing (a 5 MiB object maps 5 MiB, as glibc's mmap would, not 6).
  uint8_t tail_unbacked;
  // kHugeHead, under an address-space limit: that slack is not even reserved (a 5 MiB object holds 5 MiB of
  // the limit, not 6); it is reserved again when the object is freed.
  uint8_t tail_unreserved;
  uint32_t large_requested_bytes[kBlocksPerHugePage];  // by first block
  SpanMeta spans[kSpansPerHugePage];

  bool check(unsigned num_classes) const;
};

inline constexpr size_t kPageMetaStride =
    (sizeof(HugePageMeta) + kSmallPageBytes - 1) / kSmallPageBytes * kSmallPageBytes;
static_assert(kPageMetaStride % kSmallPageBytes == 0, "metadata of a released page is dropped page by page");

// The heap's address space: regions of up to kRegionBytes, each at a kRegionBytes-aligned address so that the
// region of an address is one shift into a table. Without an address-space limit a region is reserved whole at
// once; under RLIMIT_AS, or when the kernel refuses, it is reserved in steps as the heap grows (docs/heap.md,
// "Address space"). Pages of every lifetime class share the regions (a page's class is in its metadata); free
// pages, never used or given back, are reused lowest address first, so that the address range, the page tables
// and the mappings the heap holds track what it uses.
struct Region {
  uintptr_t base;      // kRegionBytes aligned
  char* metadata;      // page i's HugePageMeta at metadata + i * kPageMetaStride
  uint64_t* used;      // a bit per page: open, active, part of a huge object, or in the page cache
  uint64_t* unreserved;  // a bit per page: its address space given back (under RLIMIT_AS), to reserve again
  uint32_t capacity;   // pages whose metadata address space is reserved: the most the region grows to
  uint32_t reserved;   // pages of address space reserved from base
  uint32_t committed;  // pages whose metadata is usable: every lookup is bounded by it
  uint32_t free_pages; // pages of [0, reserved) not used
  uint32_t search_from;  // no page below it is free

  HugePageMeta* page(size_t i) const { return reinterpret_cast<HugePageMeta*>(metadata + i * kPageMetaStride); }
  uintptr_t page_address(size_t i) const { return base + (i << kHugePageShift); }
};

struct HeapConfig {
  unsigned num_classes = kMaxClasses;  // the last one is "never freed"
  unsigned deadline_k = 4;             // deadline = now + K x class duration
  // When the open page of a class is full, the class's own active pages (their free blocks) are used before a
  // fresh huge page; false: never, as the LLAMA paper (section 6.3) has it.
  bool same_class_recycling = true;
  // Small heaps: while fewer than this many huge pages are in use, a class whose open page is full (or that has
  // none) takes blocks from the open page of a longer class before it opens a fresh huge page. The objects are
  // expected to die before those of the page's class, as in section 6.3's recycling, so the page's lifetime is
  // unchanged; a program with a few MiB live then keeps 1-3 huge pages instead of one per class in use. At most
  // half of a page is lent, so that its own class keeps room. 0: never.
  unsigned small_heap_pages = 8;
  // Small objects of this lifetime class and longer come from one heap shared by every thread (under its own
  // lock; set_shared_heap), not from each thread's spans: a long-lived class gets few objects per thread and
  // size class, and a span per thread and size class each holding a few of them spreads them over many spans
  // (measured on image-server with a model: 32 spans of 944 KiB for 69 KiB of class-7 objects). kMaxClasses:
  // none shared (the default: docs/heap.md says why).
  unsigned shared_class_min = kMaxClasses;
  // Subrelease (subrelease_free_blocks): the free blocks of a huge page in which at most this percentage of the
  // blocks are in use, and from which no block was taken for a whole sweep period, are given back to the OS,
  // beyond what the heap used at its highest over the last kDemandPasses passes. The page stays in use (its
  // objects stay where they are) on 4 KiB pages. 0: never (every byte stays on a 2 MiB page).
  unsigned subrelease_percent = 50;
  // Page cache: the pages of a freed huge object (over 2 MiB) stay backed for reuse by the next huge object or
  // page the heap opens, instead of going back to the OS at once, at most this many, and each subrelease pass
  // trims them to recent demand (trim_page_cache); TCMalloc's HugeCache (papers/002) does this. A program that
  // allocates and frees big buffers in waves then reuses their memory instead of having the kernel zero fresh
  // pages (word-count: 1,537 freed 4 MiB objects in 25 s). Emptied pages of blocks are not kept: measured, they
  // raised peak RSS by 17-30% for little time. The footprint does not count cached pages (they hold no live
  // byte); RSS does, until a pass gives them back. 0: off (papers/000 section 8: a free page goes back at once).
  // The library turns it on only while its sweeper thread runs, which is what makes the passes.
  unsigned page_cache_pages = 0;
  // Blocks for objects of this lifetime class and longer (small-object spans and large objects) come from the
  // huge pages of the longest class ("never freed"), not from pages of their own class: each class in use keeps
  // an open page, and a class that holds little (redis with a model: 1.1 MiB of "< 100 s" objects) paid a page
  // or two for it. Their holes are recycled by shorter classes, as any long-lived page's are. kMaxClasses: off
  // (every class on its own pages, as papers/000 has it).
  unsigned long_class_min = kMaxClasses;
  // A thread heap whose queue of a size class has no free block, for a lifetime class, takes a partially free
  // span of that size class from a longer class of the same heap before it takes new memory: the span serves
  // the shorter class until it has been full or is empty, then goes back to its own class, and its holes are
  // filled by objects expected to die first (papers/000 section 6.6's recycling of a longer-lived block's free
  // lines, at the grain of a size class). false: never.
  bool span_recycling = true;
  // Free blocks of active pages (recycling: a span or large object placed on a page that is already in use)
  // come from the fullest page of a class that has room, as TCMalloc's huge page filler allocates from its
  // fullest huge pages (papers/002): the emptier pages are left to drain and go back whole. false: the page
  // that got a free block last, first.
  bool dense_first = true;
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

struct LocalHeap;

class GlobalAllocator {
 public:
  // constexpr: the process-wide instance is constant-initialised, usable before any constructor runs.
  constexpr GlobalAllocator(Platform& platform, Clock& clock, HeapConfig config)
      : platform_(platform), clock_(clock), config_(config) {
    configure(config);
  }
  // Sets the class count and K; only before the first allocation.
  constexpr void configure(HeapConfig config) {
    if (config.num_classes < 2) config.num_classes = 2;
    if (config.num_classes > kMaxClasses) config.num_classes = kMaxClasses;
    if (config.deadline_k == 0) config.deadline_k = 1;
    config_ = config;
  }
  GlobalAllocator(const GlobalAllocator&) = delete;
  GlobalAllocator& operator=(const GlobalAllocator&) = delete;

  unsigned num_classes() const { return config_.num_classes; }
  unsigned never_freed_class() const { return config_.num_classes - 1; }
  // The class duration that deadlines are computed from: 10 ms x 10^c; "never freed" has none (UINT64_MAX).
  uint64_t class_duration_ns(unsigned lifetime_class) const;

  static constexpr unsigned kRecycleBuckets = 8;

  // --- large (blocks) and huge (whole huge pages) objects ---------------------------------------------
  // bytes > kSmallMaxBytes or alignment too large for a span, and the spans of small objects. On the pages of
  // page_class(lifetime_class). nullptr when exhausted.
  void* alloc_large(unsigned lifetime_class, size_t bytes, size_t alignment);
  // Aborts with one line if `p` is not a live large or huge object of this heap. Returns the bytes that were
  // asked for when it was allocated.
  size_t free_large(void* p);
  // Usable bytes of the large or huge object starting at p; 0 if p is not one.
  size_t large_usable_size(const void* p);
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
  // one of the heap's; it shares the entry's cache line, and an unused slot's bound is 0.
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

  // Processes the deadlines that have expired by now (every entry point does this first).
  void tick();
  // Gives back the open pages with no block in use: at once (`now`: llamalloc_collect), else those that were
  // already empty at the previous call and have had no block taken since (the sweeper, each pass). An open
  // page is otherwise kept for its class however long it stays empty. Returns the pages given back.
  size_t release_empty_open_pages(bool now);
  // Subrelease (HeapConfig::subrelease_percent, docs/heap.md "Subrelease"): one pass of the sweeper, which gives
  // back the free blocks of sparse huge pages that had no block taken since the previous pass, sparsest first,
  // as far as the heap's blocks exceed the most it used over the last kDemandPasses passes (so that a load that
  // comes back finds its memory still there). `now` (llamalloc_collect): every sparse page at once, regardless
  // of idleness and demand. Returns the blocks given back.
  size_t subrelease_free_blocks(bool now);
  static constexpr unsigned kDemandPasses = 4;
  static constexpr unsigned kPageCachePasses = 4;
  // The cache keeps at most the pages in use divided by this after a pass: a server past its peak, with a few
  // MiB in use and a few buffers a second, kept 10 cached pages (20 MiB of RSS) for what those buffers reused.
  // (image-server's steady RSS: 13.1 MiB with 4, 10.6 with 8, 9.3 without a cache; word-count's time the same.)
  static constexpr unsigned kPageCacheUseShare = 8;
  // Changes HeapConfig::page_cache_pages (under the lock), giving back the oldest cached pages beyond the new
  // limit (all of them for 0).
  void set_page_cache_pages(unsigned pages);
  // A page from which at most this many blocks were taken since the previous pass counts as idle (its other free
  // blocks may go back): a steady server's sweeps give back a span and its next request takes one again, which
  // kept a long-lived class's open page (10 of 256 blocks in use, all 2 MiB resident) from ever being idle. A
  // page being filled takes more than this per period, and keeps its huge page whole.
  static constexpr size_t kIdleTakenBlocks = 16;
  // Checks every structure; on the first broken invariant prints it and aborts.
  void check_invariants();
  PageInfo page_info(uintptr_t address);
  // Huge pages that are open or active (the footprint in pages), per class and in all.
  size_t pages_in_use(unsigned lifetime_class);

  Counters& counters() { return counters_; }
  Gauges& gauges() { return gauges_; }
  Lock& lock() { return lock_; }

  // The heap that small objects of classes >= shared_class_min() come from (null: each thread's own), and the
  // lock that every operation on it holds. Lock order: the shared heap's, the heap pool's, the global one.
  // The library sets it when the process makes its second thread heap: a single-threaded program gains nothing
  // from sharing and would pay a lock and a slow path per long-lived object.
  void set_shared_heap(LocalHeap* heap) { shared_heap_.store(heap, std::memory_order_release); }
  LocalHeap* shared_heap() const { return shared_heap_.load(std::memory_order_relaxed); }
  unsigned shared_class_min() const { return config_.shared_class_min; }
  bool span_recycling() const { return config_.span_recycling; }
  // The class whose huge pages an object of class lc takes its blocks from (HeapConfig::long_class_min).
  unsigned page_class(unsigned lc) const {
    return lc >= config_.long_class_min && lc < never_freed_class() ? never_freed_class() : lc;
  }
  Lock& shared_lock() { return shared_lock_; }
  // The heap's clock (the process's monotonic clock; the trace's in the simulator).
  uint64_t now_ns() { return clock_.now_ns(); }

 private:
  // Address space: `pages` contiguous free pages, aligned to align_pages, made usable (backed, their metadata
  // committed): from the regions' free pages, lowest address first, then by growing a region's reservation, then
  // from a new region. false when the address space, RLIMIT_DATA or the commit limit refuses.
  // back_bytes: how much of the run, from its start, is made usable (all of it by default).
  bool take_pages(size_t pages, size_t align_pages, Region** r, size_t* index, size_t back_bytes = 0);
  // Gives [index, index + pages) of r back to the OS (Platform::release; under an address-space limit
  // Platform::unreserve, of the first mapped_bytes if not 0) and to the free pages for reuse.
  void give_back_pages(Region* r, size_t index, size_t pages, size_t mapped_bytes = 0);
  // Reserves again the pages of [at, at + pages) whose address space was given back: 0, EEXIST when another
  // mapping took some of them (those are lost: marked used for good), ENOMEM when the limit refuses.
  int reserve_again(Region* r, size_t at, size_t pages);
  Region* new_region(size_t pages);
  bool grow_region(Region* r, size_t pages);
  bool commit_metadata(Region* r, size_t end);
  HugePageMeta* open_new_page(unsigned lc);
  HugePageMeta* ensure_open_page(unsigned lc);
  void activate(HugePageMeta* page);
  void release_page(HugePageMeta* page);
  // The page cache: keeps [index, index + pages) of r backed for reuse, or gives it back when the cache is off
  // or full; takes `pages` contiguous cached pages (aligned to align_pages) for a new page or huge object.
  void cache_or_release(Region* r, size_t index, size_t pages);
  bool take_cached(size_t pages, size_t align_pages, Region** r, size_t* index);
  void release_cached_run(unsigned i);
  // Gives back up to `pages` cached pages to the OS, oldest first (the first pages of a run if it is longer).
  // Returns the pages given back.
  size_t release_cached_pages(uint64_t pages);
  // One subrelease pass's step: records the pass's demand, then gives back to the OS, oldest first, the cached
  // pages beyond what the next period may want: the larger of how far the pages in use are below their
  // highest, and the most pages taken in one period, over the last kPageCachePasses passes, but at most the
  // pages in use / kPageCacheUseShare; all with `now`. Returns the pages given back.
  size_t trim_page_cache(bool now);
  void after_blocks_freed(HugePageMeta* page);
  void change_class(HugePageMeta* page, unsigned new_class);
  void promote(HugePageMeta* page);
  void demote(HugePageMeta* page);
  void expire_deadlines(uint64_t now);
  void* alloc_huge_locked(unsigned lc, size_t bytes, size_t alignment);
  void free_huge_locked(HugePageMeta* head);
  bool take_blocks(HugePageMeta* page, size_t count, size_t align_blocks, size_t* first);
  void mark_allocated(HugePageMeta* page, size_t first, size_t count, bool residual);
  // Free blocks on an active page of class c (first fit); the page or null.
  HugePageMeta* recycle_blocks(unsigned c, size_t count, size_t align_blocks, size_t* first);
  // Small heaps (HeapConfig::small_heap_pages): blocks of the open page of the nearest longer class than lc.
  HugePageMeta* borrow_longer_open_page(unsigned lc, size_t count, size_t align_blocks, size_t* first);
  // The page is given the deadline of a page activated now (same-class recycling placed residual objects).
  void renew_deadline(HugePageMeta* page);

  void active_push(HugePageMeta* p);
  void active_remove(HugePageMeta* p);
  // Puts p on the recyclable list of its class and fullness, or moves it there from another.
  void recyclable_push(HugePageMeta* p);
  unsigned recycle_bucket(const HugePageMeta* p) const {
    return config_.dense_first ? unsigned(p->live.count() * kRecycleBuckets / (kBlocksPerHugePage + 1)) : 0;
  }
  void recyclable_remove(HugePageMeta* p);
  void debug_check() {
    if (LLAMALLOC_DEBUG_CHECKS) check_invariants_locked();
  }
  void check_invariants_locked();

  uintptr_t page_address(const HugePageMeta* p) const { return p->region->page_address(p->index); }
  void account_page(HugePageMeta* p, int64_t pages);
  // Blocks of p that are backed again (taken), or dropped with it: off the subreleased gauge.
  void unrelease(HugePageMeta* p, size_t first, size_t count);
  // Subreleases the free blocks of p still backed, at most `budget`, but not those taken since the last pass
  // (unless `now`); returns how many.
  size_t subrelease_page(HugePageMeta* p, size_t budget, bool now);

  Platform& platform_;
  Clock& clock_;
  HeapConfig config_;
  Lock lock_;
  std::atomic<LocalHeap*> shared_heap_{nullptr};
  Lock shared_lock_;
  Counters counters_;
  Gauges gauges_;
  // No active page's deadline is earlier than this (it may be earlier than needed: then a scan finds nothing).
  uint64_t earliest_deadline_ns_ = ~uint64_t{0};
  HugePageMeta* open_[kMaxClasses] = {};
  HugePageMeta* active_head_[kMaxClasses] = {};
  HugePageMeta* active_tail_[kMaxClasses] = {};
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
  // Blocks in use at each of the last kDemandPasses subrelease passes (a ring), and the pass count.
  uint32_t demand_[kDemandPasses] = {};
  uint32_t demand_passes_ = 0;
  // The page cache (HeapConfig::page_cache_pages): runs of free, still backed huge pages, oldest first, and
  // the pages in use (open and active, huge objects included) at each of the last kPageCachePasses passes.
  struct CachedRun {
    Region* region;
    uint32_t index;
    uint32_t pages;
  };
  static constexpr unsigned kMaxCachedRuns = 512;
  CachedRun cached_[kMaxCachedRuns] = {};
  unsigned cached_runs_ = 0;
  uint64_t page_demand_[kPageCachePasses] = {};
  // Pages opened or taken by huge objects since the last pass, and at each of the last kPageCachePasses.
  uint64_t pages_taken_ = 0;
  uint64_t pages_taken_by_pass_[kPageCachePasses] = {};
  // Pages kept from khugepaged (HugePageMeta::no_huge_page). Each splits its VMA in up to three, and a process
  // has at most vm.max_map_count (65530 by default) of them: beyond this many, a subreleased page is left as it
  // is (khugepaged may fill it again).
  static constexpr uint32_t kMaxNoHugePages = 8192;
  uint32_t no_huge_pages_ = 0;
};

}  // namespace llamalloc
