// Thread heaps (docs/heap.md): small objects (up to 32 KiB) come from size-class spans inside each lifetime
// class. A span serves one size class of one lifetime class for one thread: the owner pops blocks from a free
// list and pushes its own frees on the same list without atomics; other threads push their frees on the span's
// one atomic list, which the owner takes in bulk (mimalloc's sharded free lists). Spans are whole blocks the
// page heap hands out with its lifetime-class placement (huge pages, deadlines, promotion and demotion,
// recycling between classes), so memory stays organised by lifetime above the span.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base.h"
#include "config.h"
#include "page_heap/page_heap.h"
#include "thread_heap/size_class.h"
#include "thread_heap/small_span.h"
#include "predictor/predictor.h"

namespace llamalloc {

// Empty spans a thread keeps per lifetime class and span size before giving them back (a lock round trip saved
// when a span empties and the next one is needed soon after). One: each cached span may be all that keeps its
// huge page in use, so every slot more can keep a huge page resident after a program's peak.
inline constexpr unsigned kSpanCacheSlots = 1;

// The idle sweep's handshake (docs/heap.md, "Idle threads"). The owner marks `busy` while it works on its thread heap
// and then checks `sweep`; a sweeper sets `sweep`, runs membarrier (every running thread executes a full barrier,
// so either the sweeper sees `busy` or the owner sees `sweep`), and takes the thread heap only if it is not busy: an
// asymmetric Dekker, as in user-space RCU, that costs the fast path two plain stores and a load. ThreadSanitizer
// does not model membarrier: its builds use sequentially consistent accesses, which need no barrier.
#if defined(__SANITIZE_THREAD__)
#define LLAMALLOC_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LLAMALLOC_TSAN 1
#endif
#endif
#ifdef LLAMALLOC_TSAN
inline constexpr std::memory_order kHandshakeStore = std::memory_order_seq_cst;
inline constexpr std::memory_order kHandshakeLoad = std::memory_order_seq_cst;
#else
inline constexpr std::memory_order kHandshakeStore = std::memory_order_relaxed;
inline constexpr std::memory_order kHandshakeLoad = std::memory_order_acquire;
#endif

// In a process without a sweeper thread, one in this many of the owner's frees that empty the span its fast
// path allocates from takes the slow path (ThreadHeapOps::free_block).
inline constexpr unsigned kEmptyFreesPerSlowPath = 8;
// With a predictor that sees every allocation (a model, or learning), a span the fast path allocates from that
// the owner's frees emptied this many times marks its (lifetime class, size class) as one whose objects die
// young: the slow path then gives the span back and, while that class has no other span of the size, lets it
// allocate from the span a longer class of the thread allocates from (ThreadHeapOps::after_owner_free).
inline constexpr unsigned kHeadEmptiesToBorrow = 64;

// A thread heap that takes this many small objects of one long-lived class from the shared thread heap within this
// long (10,000 a second or more) takes that class from its own spans from then on (ThreadHeap::own_class).
inline constexpr uint32_t kSharedBurst = 1024;
inline constexpr uint64_t kSharedBurstNs = 100'000'000;

struct alignas(64) ThreadHeap {
  // The span each (lifetime class, size class) allocates from: the head of its queue, or the static empty
  // span (no free block) so that the fast path needs no null check. A class whose queue is empty (tails null) may
  // borrow instead the span a longer class of the thread allocates from (after_owner_free), until that span
  // leaves its queue (unlink drops the borrowing). Row kMaxClasses stays empty: when the
  // predictor must see every allocation, fast_class is kMaxClasses and the fast path always misses.
  SmallSpan* spans[kMaxClasses + 1][kNumSizeClasses];
  uint8_t fast_class = kMaxClasses;
  // A sweeper wants the heap: the owner waits until it is done (ThreadHeapOps::wait_for_sweep).
  std::atomic<uint8_t> sweep{0};
  ThreadHeap* next_free = nullptr;
  // With a context-sensitive predictor: this thread's prediction cache, probed by the fast path (null: none).
  PredictionCacheView prediction_cache;
  // The owner is working on its spans (set and cleared only by the owner). In 16 bytes of its own: the fast path
  // stores it just before it loads fast_class and sweep, and AMD cores stall a load from the same few bytes as a
  // store in flight (store-to-load forwarding fails on a partial overlap).
  alignas(16) std::atomic<uint8_t> busy{0};
  uint8_t busy_padding_[15] = {};
  // This thread's remote-free batch (ThreadHeapOps::remote_free): blocks it freed into batch_span, a span of
  // another thread, linked like that span's lists (batch_head first, batch_tail last), not yet pushed onto its
  // list of remote frees. batch_span is null when empty; the sweeper reads it (a heap holding a batch is swept,
  // which pushes it, at every pass).
  std::atomic<SmallSpan*> batch_span{nullptr};
  void* batch_head = nullptr;
  void* batch_tail = nullptr;
  uint32_t batch_count = 0;
  SmallSpan* cache[kMaxClasses][kSpanKinds][kSpanCacheSlots] = {};
  // The last span of each queue (null: the queue is empty). A span that a free brings back from full goes there,
  // so that it collects more frees before it is allocated from again (mimalloc appends such pages too): put
  // right behind the head, it comes back with one or two free blocks and is full again two allocations later,
  // so a program that frees at random would send most of its allocations to the slow path.
  SmallSpan* tails[kMaxClasses][kNumSizeClasses] = {};
  uint8_t cache_count[kMaxClasses][kSpanKinds] = {};
  // Spans held for each (lifetime class, size class), queued, full or cached (up to 255): counted when taken from
  // the page heap, and down when given back to it (give_back). Spans are smaller while a thread holds few of a
  // class (grown_span_bytes).
  uint8_t spans_taken[kMaxClasses][kNumSizeClasses] = {};
  // Without a sweeper thread: frees that emptied the span the fast path allocates from (free_block), of which
  // one in kEmptyFreesPerSlowPath takes the owner's slow path. (Not next to fast_class, which malloc loads: a
  // free's store to it would stall malloc's load of the same word.)
  uint8_t empty_frees = 0;
  // Times the span the fast path allocates from, for each (lifetime class, size class), was emptied by the owner's
  // free since the slow path last looked (kHeadEmptiesToBorrow; counted only with a predictor).
  uint8_t head_empties[kMaxClasses][kNumSizeClasses] = {};
  // Spans taken off their queue when full that have since had a block freed by another thread (pushed by
  // that thread; taken in bulk by the owner's slow path).
  alignas(64) std::atomic<SmallSpan*> notify{nullptr};
  // Its thread exited (ThreadHeapOps::abandon): every span it still has is off the queues and marked full,
  // so that any free into it comes through `notify`, which any thread may drain (reclaim_abandoned).
  std::atomic<uint8_t> abandoned{0};
  // Slow paths the owner has run (the sweeper's sign of activity; written by the owner only).
  std::atomic<uint32_t> slow_ops{0};
  // The sweeper's bookkeeping, under the heap pool's lock: the list of heaps of live threads, slow_ops at the
  // last pass, and passes in a row without a slow path.
  ThreadHeap* live_next = nullptr;
  ThreadHeap* live_prev = nullptr;
  uint32_t seen_ops = 0;
  uint32_t idle_ticks = 0;
  // Queues (lifetime class, size class) whose spans the last release_all emptied, and those spans' blocks of the
  // page heap: the owner's next allocation of each takes the slow path to take a span again, and its blocks.
  // Those slow paths and blocks are the sweep's cost, not the program's activity (program_slow_paths).
  uint32_t swept_queues = 0;
  uint32_t swept_blocks = 0;
  // The same for the prediction cache: its hit count at the last pass, and passes in a row with neither a hit
  // nor a slow path (at prediction_cache_idle_passes() the sweeper drops the cache's pages).
  uint64_t seen_cache_hits = 0;
  uint32_t cache_idle_ticks = 0;
  // The shared thread heap of long-lived classes is for objects a thread makes few of. A thread that makes them
  // fast (kSharedBurst of one class within kSharedBurstNs) would serialise on its lock (a program whose hot
  // objects are predicted long-lived would run at the lock's pace) and fills spans of its own anyway: from then on
  // that class comes from the thread's own spans (own_class[lc] = 1). shared_allocs and shared_since count
  // the allocations of the current window, under the shared thread heap's lock.
  uint32_t shared_allocs[kMaxClasses] = {};
  uint64_t shared_since[kMaxClasses] = {};
  uint8_t own_class[kMaxClasses] = {};
  // While the heap waits in the pool (its thread exited): the spans that still hold objects and have free blocks,
  // parked (off the queues, marked full). The thread that adopts the heap takes them back onto its queues, so that
  // it fills their holes before it takes new memory (a program that starts a thread per task would otherwise take
  // fresh spans for every thread while the last one's sit parked); the sweeper purges the free pages of those
  // still parked after a whole pass (ThreadHeapOps::purge_pooled). Under the pool's lock once in the pool.
  SmallSpan* pool_parked = nullptr;
  // Sweeper passes since the heap entered the pool (ThreadHeapOps::purge_pooled).
  uint32_t pool_passes = 0;

  constexpr ThreadHeap();
  bool check(PageHeap& page_heap) const;
};

// Heaps whose threads exited, to be adopted by new threads (the process keeps one; the simulator none).
struct HeapPool {
  Lock lock;
  ThreadHeap* head = nullptr;  // lock; linked by next_free
};

// The span with no blocks: every empty slot of every thread heap points at it.
extern constinit SmallSpan g_empty_span;

constexpr ThreadHeap::ThreadHeap() : spans{} {
  for (auto& row : spans)
    for (SmallSpan*& s : row) s = &g_empty_span;
}

// The thread heap a thread allocates from. Starts (and after thread exit returns) at the static empty one, whose
// spans are all empty: the first allocation misses into the slow path, which gives the thread its own thread heap.
extern __thread ThreadHeap* tl_heap __attribute__((tls_model("initial-exec")));
// Live bytes (block sizes) allocated minus freed by this thread, not yet added to the page heap's gauge.
extern __thread int64_t tl_live_delta __attribute__((tls_model("initial-exec")));
extern ThreadHeap g_empty_heap;

// A block about to be handed out whose link does not decode to a block of its span or the list's end: the
// program wrote into it after freeing it (or freed it twice by a way free() missed). Aborts with one line, where
// following the link would hand out memory that is not a free block.
[[noreturn]] LLAMALLOC_SLOW void corrupt_free_block(const SmallSpan* s, const void* block);

LLAMALLOC_FAST void* span_pop(SmallSpan* s) {
  void* b = s->free;
  if (LLAMALLOC_UNLIKELY(b == nullptr)) return nullptr;
  uintptr_t next = *static_cast<uintptr_t*>(b) ^ s->own_key;
  if (LLAMALLOC_UNLIKELY(next - s->own_start >= s->own_span_bytes && next != 0)) corrupt_free_block(s, b);
  s->free = reinterpret_cast<void*>(next);
  // The next pop's load of its link: a program that frees at random leaves cold blocks on the list, and that
  // load's cache miss would otherwise be most of its malloc's time.
  __builtin_prefetch(reinterpret_cast<void*>(next));
  // The link is wiped, so that a live object the program never wrote does not look free to free().
  *static_cast<uintptr_t*>(b) = 0;
  s->used++;
  return b;
}

// The owner's free (or the shared thread heap's, under its lock): p goes on top of the list the next allocation pops,
// so that a block freed is the next one handed out while it is still in cache (tcmalloc's and jemalloc's thread
// caches are LIFO too). A separate list of the owner's frees, taken when `free` runs dry (mimalloc's local_free),
// would cycle through every block of the span first: with 1 KiB blocks, lines 1 KiB apart, which share a few of
// L1's sets and evict each other.
LLAMALLOC_FAST void span_push(SmallSpan* s, void* p) {
  *static_cast<uintptr_t*>(p) = reinterpret_cast<uintptr_t>(s->free) ^ s->own_key;
  s->free = p;
}

// Whether a request of size class sc (classify(); kLargeRequest for a large object) and `alignment` misses the
// allocation fast path of `heap` (heap_malloc) when that path allocates from lifetime class lc (ThreadHeap::
// fast_class, or a prediction cache hit's class) and takes the slow path: the fast path serves only small requests
// of the default alignment, from the span at the head of the (lc, sc) queue, while that span has a free block.
// Pure: it reads the thread heap and changes nothing (the simulator counts slow paths with it).
LLAMALLOC_FAST bool misses_fast_path(const ThreadHeap& heap, unsigned lc, unsigned sc, size_t alignment) {
  return sc == kLargeRequest || alignment > kMinAlignBytes || heap.spans[lc][sc]->free == nullptr;
}

// The owner's half of the handshake. enter: before it touches its spans; then sweep_requested() must be checked
// (true: wait_for_sweep). exit: when it is done with them.
LLAMALLOC_FAST void owner_enter(ThreadHeap* h) {
  h->busy.store(1, kHandshakeStore);
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the compiler's half; membarrier is the CPU's
}
LLAMALLOC_FAST bool sweep_requested(const ThreadHeap* h) { return h->sweep.load(kHandshakeLoad) != 0; }
LLAMALLOC_FAST void owner_exit(ThreadHeap* h) { h->busy.store(0, std::memory_order_release); }
LLAMALLOC_FAST void owner_count_slow(ThreadHeap* h) {
  h->slow_ops.store(h->slow_ops.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Adds this thread's live-byte delta to the page heap's gauges.
inline void flush_live_delta(PageHeap& page_heap) {
  add_live_bytes(page_heap.gauges(), tl_live_delta);
  tl_live_delta = 0;
}

// Which sparse spans a span purge gives pages of (ThreadHeapOps::purge_sparse_spans).
enum class PurgeWhen : uint8_t {
  // Those that have had no block taken or freed since the previous call (the sweeper's passes: the owner may be
  // using the others).
  kIdle,
  // Those, and every other one but the head of each queue, which the owner allocates from (the slow path's passes
  // of a process without a sweeper thread, made by the owner: no pass may come after the last one before the
  // program goes quiet, so it cannot wait for a second look).
  kIdleOrNotHead,
  // Every one (llamalloc_collect).
  kAll,
};
struct PurgeResult {
  size_t purged = 0;   // spans that gave pages back
  size_t waiting = 0;  // sparse spans not idle yet (kIdle): the heap is worth another look at the next pass
};

// The process-wide state of the thread heap operations, in one struct so that all of it is in one place: the
// library's pool and hooks, set as it starts (the simulator leaves them null), and two flags (a sweeper thread
// runs; a free asked for the pool's notify lists to be drained).
struct ThreadHeapHooks {
  // Whether a sweeper thread makes the page passes (the library's, while it runs): then no free that empties
  // the fast path's span takes the slow path (free_block).
  std::atomic<bool> sweeper_running{false};
  // A free into an abandoned heap's span asked for the pool's notify lists to be drained (reclaim_abandoned).
  std::atomic<bool> reclaim_pending{false};
  // The pool a slow path reclaims from (the library's; null in the simulator).
  HeapPool* pool = nullptr;
  // Called at the end of the owner's free slow path, outside the thread heap (the library's inline page passes
  // when it has no sweeper thread; null in the simulator).
  void (*slow_free)() = nullptr;
  // Called with each object freed into the sampled heap, under the shared heap's lock, before it is free (the
  // library's: the predictor's freed(); null in the simulator).
  void (*sampled_free)(void*) = nullptr;
  // Gives the calling thread a heap of its own (the library's attach_thread_heap; null in the simulator, whose
  // threads all have one): called by the first remote free of a thread that never allocated, such as a consumer
  // thread that only frees what producers made, so that its frees go in batches too. Null when none can be had.
  ThreadHeap* (*attach_heap)() = nullptr;
};

// Operations of one thread heap on one page heap (the library's, or a simulated one). Their code is in one file
// per concept: spans.cc (taking and giving back spans; the allocation and free entry points), span_queues.cc,
// owner_free.cc, remote_free.cc, span_purge.cc, heap_pool.cc (the heaps of exited threads) and shared_heap.cc
// (the shared thread heap of long-lived classes and the sampled heap); thread_heap_internal.h has what they share.
namespace ThreadHeapOps {
inline constinit ThreadHeapHooks hooks;
// The one allocation entry point below the fast path (library slow path, simulator, tests): a request of
// `size` and `alignment` (a power of two) in lifetime class lc, from `heap`. nullptr + ENOMEM when exhausted.
void* allocate(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, size_t size, size_t alignment);
// A small object of size class sc (the fast path missed).
void* alloc_small(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, unsigned sc);
// Frees p, an object of the size-class span s, by the thread whose heap is `heap`. Reports bad and double
// frees. Returns the block size (live accounting).
LLAMALLOC_FAST size_t free_small(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p);
// The same without the byte count (the library's inline free, which counts before).
LLAMALLOC_FAST void free_block(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p);
// A block whose first word looks like a free-list link: reported if it is on a list, else freed as usual.
LLAMALLOC_NOINLINE void free_suspicious(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p);
// free_block's checked path (a free by another thread, or into a span with remote frees waiting): a block whose
// first word decodes to a link of its span is looked for on the span's lists (free_suspicious).
LLAMALLOC_NOINLINE void free_checked(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p);
// Before a span that its count says is empty is cached or given back: every block must be free (a double free
// by the owner, which free_block does not look for, leaves the count short while a block is in use), else the
// program is stopped with one line. Only when the owner's unchecked free has pushed a block
// (SmallSpan::owner_freed): a span emptied by other threads' frees, which read the block, is not looked at.
void check_released_list(const SmallSpan* s);
// The one free entry point below the fast path: small (size-class span) or large; the bytes released.
size_t deallocate(PageHeap& page_heap, ThreadHeap* heap, void* p);
// Takes in every remote free, gives every empty span back and drops the cache (the end of a simulated thread,
// the main thread at process exit). Spans that still hold objects stay queued in the heap.
void release_all(PageHeap& page_heap, ThreadHeap& heap);
// The slow paths the owner ran from `seen` to `ops` (its slow_ops at two passes) less those that only took again a
// span the last release_all took from it (ThreadHeap::swept_queues, which this consumes): a program that
// allocates a little on every pass (an idle server's monitoring requests) re-takes, after each sweep, one span per
// queue its requests use, and counted as activity those kept it from ever looking quiet (Subrelease, "quiet").
// retaken_blocks: adds the page heap blocks of those spans (ThreadHeap::swept_blocks, consumed too), which the
// page heap's count of blocks taken since its last pass may forgive (Subrelease::pass, retaken_blocks).
uint32_t program_slow_paths(ThreadHeap& heap, uint32_t ops, uint32_t seen, uint64_t* retaken_blocks);
// Thread exit: as release_all, and the spans that still hold objects leave the queues marked full, so that
// the frees other threads make into them later reach the heap's notify list, which reclaim_abandoned()
// drains while the heap waits in the pool (their memory goes back as soon as they empty, adopted or not).
void abandon(PageHeap& page_heap, ThreadHeap& heap);
// The owner saw sweep_requested(): steps aside until the sweeper has withdrawn its request, then enters again.
// Returns with the heap entered and no sweep requested.
LLAMALLOC_NOINLINE void wait_for_sweep(ThreadHeap& heap);
// Drains the notify lists of the pool's heaps (when a free into an abandoned heap's span asked for it, or
// `force`). Takes the pool's lock, then the page heap lock.
void reclaim_abandoned(PageHeap& page_heap, HeapPool& pool, bool force = false);
// A pass over the pool's heaps (the sweeper's, llamalloc_collect's with `now`): their notify lists drained,
// then the free pages of the sparse parked spans of every heap that has waited in the pool for a whole pass
// (`now`: every heap) purged. Takes the pool's lock, then the page heap lock.
void purge_pooled(PageHeap& page_heap, HeapPool& pool, bool now);
// The thread that adopts `heap` from the pool (under the pool's lock): its parked spans go back onto its
// queues (those a remote free has notified meanwhile come back through the notify list).
void adopt_parked(ThreadHeap& heap);
// The hooks' setters (ThreadHeapHooks says what each is).
inline void set_pool(HeapPool* pool) { hooks.pool = pool; }
inline void set_slow_free_hook(void (*hook)()) { hooks.slow_free = hook; }
inline void set_sweeper_running(bool running) { hooks.sweeper_running.store(running, std::memory_order_relaxed); }
inline void set_sampled_free_hook(void (*hook)(void*)) { hooks.sampled_free = hook; }
inline void set_attach_heap_hook(ThreadHeap* (*hook)()) { hooks.attach_heap = hook; }
// Whether small objects of class lc for `heap` come from the shared thread heap (allocate): a long-lived class
// (HeapConfig::shared_class_min), while the page heap has a shared thread heap other than `heap`, and unless
// this thread makes them fast (ThreadHeap::own_class). Pure.
LLAMALLOC_FAST bool uses_shared_heap(const PageHeap& page_heap, const ThreadHeap& heap, unsigned lc) {
  const ThreadHeap* shared = page_heap.shared_heap();
  return lc >= page_heap.shared_class_min() && shared != nullptr && shared != &heap && !heap.own_class[lc];
}
// The small-object span of p, or null.
LLAMALLOC_FAST SmallSpan* span_of(const PageHeap& page_heap, const void* p) {
  std::atomic<SmallSpan*>* slot = page_heap.size_span_slot(reinterpret_cast<uintptr_t>(p));
  return slot != nullptr ? slot->load(std::memory_order_relaxed) : nullptr;
}
// Block index of p in s, or ~0u when p is not the start of a block handed out (an interior or stray pointer).
LLAMALLOC_FAST uint32_t block_index(const SmallSpan* s, const void* p) {
  uintptr_t offset = reinterpret_cast<uintptr_t>(p) - s->start;
  uint32_t i = uint32_t((uint64_t(uint32_t(offset)) * s->reciprocal) >> 32);
  if (LLAMALLOC_UNLIKELY(offset >= s->span_bytes || uint64_t(i) * s->block_size != offset || i >= s->extended.load(std::memory_order_relaxed)))
    return ~0u;
  return i;
}

// Span purge (docs/heap-memory.md, "Span purge"), by the owner or a sweeper holding the heap: the 4 KiB pages of
// the heap's queued spans whose blocks are all free go back to the OS, in spans with at most the subrelease
// percentage (HeapConfig::subrelease_percent) of their blocks in use, chosen by `when`. Remote frees must have
// been collected (release_all). Subrelease gives back whole free blocks; this gives back the pages of spans
// that a few long-lived objects keep, which is where a cache's memory stays after most of it is dropped.
PurgeResult purge_sparse_spans(PageHeap& page_heap, ThreadHeap& heap, PurgeWhen when);
inline constexpr uint32_t kSweptExamined = 0x80000000u;

// Internals, exposed for tests.
// Takes the owner's and other threads' frees into `free`, then parked blocks, then untouched blocks; whether
// a block is free.
bool refill_free(PageHeap& page_heap, SmallSpan* s);
// Span purge's steps: gives back s's pages whose blocks are all free (parking those blocks); puts every
// parked block back on `free`; whether p is a parked block of s.
bool purge_span(PageHeap& page_heap, SmallSpan* s);
// purge_span, when at most the subrelease percentage of s's blocks are in use.
bool purge_if_sparse(PageHeap& page_heap, SmallSpan* s);
void unpark(PageHeap& page_heap, SmallSpan* s);
bool is_parked(const SmallSpan* s, const void* p);
void collect_remote(SmallSpan* s);
void drain_notify(PageHeap& page_heap, ThreadHeap& heap);
// The owner's free brought used to zero, or freed into a span that was off its queue. Ends the owner's
// turn (owner_exit).
LLAMALLOC_NOINLINE void owner_free_slow(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s);
// A free into another thread's span by the thread whose heap is `heap`: into heap's remote-free batch (pushed
// when a free into another span comes, when it holds remote_batch_limit(s) blocks, at the heap's slow paths and
// sweeps, and when its thread exits), or straight onto the span's list for a thread without a heap of its own.
// `suspicious`: p's first word looks like a link of s, and p is reported if it is on one of s's lists or in a
// batch (free_suspicious). A thread without a heap gets one first (hooks.attach_heap). Also flushes this
// thread's live-byte count once it is far enough below zero: a thread that only frees other threads' objects
// runs no other slow path that would. A span of the shared thread heap is freed into as its owner, under the
// shared thread heap's lock (shared_free).
LLAMALLOC_NOINLINE void remote_free(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p,
                                    bool suspicious = false);
// Pushes heap's remote-free batch onto its span's list of remote frees (nothing when it is empty). By the
// heap's owner, entered, or by a sweeper holding the heap.
void flush_remote_batch(ThreadHeap& heap);
// The most blocks a remote-free batch for s holds: 64, or a quarter of the span's blocks if fewer, so that a
// batch never keeps much of a span from its owner.
inline uint32_t remote_batch_limit(const SmallSpan* s) {
  uint32_t quarter = s->capacity / 4;
  return quarter == 0 ? 1 : quarter < 64 ? quarter : 64;
}
// A free into a span of the shared thread heap of long-lived classes (PageHeap::shared_heap), by any thread:
// under the shared thread heap's lock, as the owner frees (its free list; the span requeued or given back at once),
// so that what is freed there is taken in without a sweeper (single-threaded programs have none).
void shared_free(PageHeap& page_heap, SmallSpan* s, void* p);
// A sampled allocation (online learning): from the sampled heap (PageHeap::sampled_heap) under the shared heap's
// lock when small, as any allocation when large (free_slow tells the predictor of every large free).
void* allocate_sampled(PageHeap& page_heap, ThreadHeap& heap, unsigned lc, size_t size, size_t alignment);
// The owner's free left s empty or freed into it while it was off its queue: requeue it, or give it back.
void after_owner_free(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s);
// The owner's free when a sweep was requested: waits for it, then frees as usual.
LLAMALLOC_NOINLINE void owner_free_after_sweep(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s, void* p);
// Whether a block that is being freed is already on one of the span's lists (a double free).
LLAMALLOC_NOINLINE bool on_free_list(const SmallSpan* s, const void* p);
[[noreturn]] LLAMALLOC_SLOW void bad_free(const void* p, const char* what);
[[noreturn]] LLAMALLOC_SLOW void bad_small_free(const SmallSpan* s, const void* p);
// Aborts with "<what> <p>: ..." unless p is a live object of s (realloc).
void check_live(const SmallSpan* s, const void* p, const char* what);
void release_span(PageHeap& page_heap, ThreadHeap& heap, SmallSpan* s);
inline size_t usable_size(const SmallSpan* s) { return s->block_size; }
}  // namespace ThreadHeapOps

// Every call below is in tail position, so that the inlined fast path needs no callee-saved registers (no
// prologue of pushes before the common case).
//
// The owner's free does not read the block: a free of an object the program has not touched for a while would
// otherwise wait for a cache miss that mimalloc's and tcmalloc's frees do not take (a store does not wait). A
// double free by the owner is caught later, before any block is handed out twice: the second push makes the
// span's list loop back through the block, whose link was wiped when it was handed out (or overwritten by the
// program since), so the malloc that reaches it again finds a link outside its span and aborts
// (corrupt_free_block); and a span that its count says is empty has its blocks scanned before it is cached or
// given back (check_released_list), where a block still in use is reported. A span with frees by other threads
// waiting (SmallSpan::remote_pending), and every free by another thread, take the checked path (free_checked):
// a block on the list of remote frees must not be pushed again.
LLAMALLOC_FAST void ThreadHeapOps::free_block(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p) {
  if (LLAMALLOC_UNLIKELY(block_index(s, p) == ~0u)) bad_small_free(s, p);
  if (LLAMALLOC_LIKELY(s->owner == heap && s->remote_pending.load(std::memory_order_relaxed) == 0)) {
    owner_enter(heap);
    if (LLAMALLOC_UNLIKELY(sweep_requested(heap))) return owner_free_after_sweep(page_heap, *heap, s, p);
    span_push(s, p);
    s->owner_freed = 1;
    if (LLAMALLOC_UNLIKELY(--s->used == 0 || !s->queued)) {
      // The span the fast path allocates from emptied (a malloc/free pair, a request's buffers freed as it
      // ends): it stays where it is, so the slow path has nothing to do for it (a malloc/free pair would
      // otherwise take it on every free). An idle thread's empty spans go back in the sweeper's passes. Without a
      // sweeper thread, the slow path is where the page passes run (a single-threaded server's memory falls
      // after a peak while it serves a few requests): one such free in kEmptyFreesPerSlowPath still takes it.
      if (s->queued && heap->spans[s->lifetime_class][s->size_class] == s &&
          (heap->fast_class != kMaxClasses ||
           ++heap->head_empties[s->lifetime_class][s->size_class] < kHeadEmptiesToBorrow) &&
          (hooks.sweeper_running.load(std::memory_order_relaxed) ||
           (++heap->empty_frees & (kEmptyFreesPerSlowPath - 1)) != 0))
        return owner_exit(heap);
      return owner_free_slow(page_heap, *heap, s);
    }
    return owner_exit(heap);
  }
  return free_checked(page_heap, heap, s, p);
}

LLAMALLOC_FAST size_t ThreadHeapOps::free_small(PageHeap& page_heap, ThreadHeap* heap, SmallSpan* s, void* p) {
  size_t bytes = s->block_size;  // read first: after a remote push the owner may give the span back
  free_block(page_heap, heap, s, p);
  return bytes;
}

}  // namespace llamalloc
