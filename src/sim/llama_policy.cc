#include "sim/llama_policy.h"

#include <errno.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "alloc/heap_config.h"
#include "alloc/realloc_rule.h"
#include "page_heap/page_heap.h"
#include "thread_heap/thread_heap.h"
#include "pal/pal.h"
#include "sim/heap_options.h"

namespace llamalloc::sim {

// Address space comes from anonymous MAP_NORESERVE mappings: the heap's metadata and the free-list links that the
// thread heaps write into the first word of each free block are real memory (they read them back), the rest of
// an object is never touched, so only the pages holding links cost memory. back/release are bookkeeping: they are
// what the OS would have been asked to back and to take back. The heap never unmaps what it holds (the library's
// lives as long as the process); the platform unmaps it when the replay's policy goes, so that replays one after
// another in one process (llama-oracle-best's search) do not keep every finished heap's metadata.
class SimPlatform final : public Platform {
 public:
  SimPlatform() = default;
  SimPlatform(const SimPlatform&) = delete;
  SimPlatform& operator=(const SimPlatform&) = delete;
  ~SimPlatform() {
    for (const auto& [start, end] : mapped_) ::munmap(reinterpret_cast<void*>(start), end - start);
  }

  void* reserve(size_t bytes, size_t min_bytes, size_t alignment, size_t* got) override {
    (void)min_bytes;
    size_t span = bytes + alignment;
    void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    uintptr_t start = reinterpret_cast<uintptr_t>(p);
    uintptr_t aligned = (start + alignment - 1) & ~(uintptr_t(alignment) - 1);
    if (aligned > start) ::munmap(p, aligned - start);
    uintptr_t end = start + span;
    if (end > aligned + bytes) ::munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
    *got = bytes;
    note_mapped(reinterpret_cast<void*>(aligned), bytes);
    return reinterpret_cast<void*>(aligned);
  }
  int extend(void* address, size_t bytes) override {
    void* p = ::mmap(address, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == address) {
      note_mapped(address, bytes);
      return 0;
    }
    if (p != MAP_FAILED) ::munmap(p, bytes);
    return p == MAP_FAILED && errno == ENOMEM ? ENOMEM : EEXIST;
  }
  // Counted in whole huge pages: a huge object's last page, backed only as far as the object reaches, is one
  // page of the footprint as it is one of the heap's pages in use.
  void unreserve(void* address, size_t bytes) override {
    note_unmapped(address, bytes);
    ::munmap(address, bytes);
  }
  bool back(void* address, size_t bytes) override {
    uintptr_t a = reinterpret_cast<uintptr_t>(address);
    for (uintptr_t p = a; p < a + bytes; p += kHugePageBytes)
      if (backed_pages_.find(p) == nullptr) {
        backed_pages_.put(p, 1);
        backed_bytes_ += kHugePageBytes;
      }
    return true;
  }
  void release(void* address, size_t bytes) override {
    uintptr_t a = reinterpret_cast<uintptr_t>(address);
    for (uintptr_t p = a; p < a + bytes; p += kHugePageBytes)
      if (backed_pages_.find(p) != nullptr) {
        backed_pages_.erase(p);
        backed_bytes_ -= kHugePageBytes;
      }
    ::madvise(address, bytes, MADV_DONTNEED);  // drop the links written there
  }
  // The replay measures footprint (huge pages in use), which subrelease does not change; the free-list links
  // written there are dropped as on release.
  void subrelease(void* address, size_t bytes) override { ::madvise(address, bytes, MADV_DONTNEED); }
  void* map_metadata(size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    note_mapped(p, bytes);
    return p;
  }
  void* reserve_metadata(size_t bytes) override { return map_metadata(bytes); }
  void unmap_metadata(void* address, size_t bytes) override {
    note_unmapped(address, bytes);
    ::munmap(address, bytes);
  }
  bool commit_metadata(void* address, size_t bytes) override {
    (void)address;
    (void)bytes;
    return true;
  }
  void release_metadata(void* address, size_t bytes) override { ::madvise(address, bytes, MADV_DONTNEED); }

  uint64_t backed_bytes() const { return backed_bytes_; }
  std::vector<uintptr_t> backed_pages() const {
    std::vector<uintptr_t> pages;
    backed_pages_.for_each([&](uint64_t page, int) { pages.push_back(page); });
    std::sort(pages.begin(), pages.end());
    return pages;
  }

 private:
  // What this platform has mapped and not unmapped, as [start, end) ranges by start: unmapped at the end, and
  // only these (another replay's heap may map an address this one gave back).
  void note_mapped(void* address, size_t bytes) {
    uintptr_t a = reinterpret_cast<uintptr_t>(address);
    mapped_[a] = a + bytes;
  }
  void note_unmapped(void* address, size_t bytes) {
    uintptr_t a = reinterpret_cast<uintptr_t>(address), e = a + bytes;
    auto it = mapped_.upper_bound(a);
    if (it != mapped_.begin()) --it;
    while (it != mapped_.end() && it->first < e) {
      uintptr_t start = it->first, end = it->second;
      if (end <= a) {
        ++it;
        continue;
      }
      it = mapped_.erase(it);
      if (start < a) mapped_[start] = a;
      if (end > e) mapped_[e] = end;
    }
  }

  uint64_t backed_bytes_ = 0;
  FlatMap<int> backed_pages_{4096};
  std::map<uintptr_t, uintptr_t> mapped_;
};

class TraceClock final : public Clock {
 public:
  uint64_t now_ns() override { return now_ns_; }
  void set(uint64_t now_ns) { now_ns_ = now_ns; }

 private:
  uint64_t now_ns_ = 0;
};

LlamaPolicy::LlamaPolicy(LlamaOptions options)
    : options_(std::move(options)),
      platform_(std::make_unique<SimPlatform>()),
      clock_(std::make_unique<TraceClock>()),
      heaps_(64),
      pool_(std::make_unique<HeapPool>()),
      placed_(1 << 16) {
  HeapConfig config = heap_config_of(options_.heap_options);
  config.num_classes = kMaxClasses;
  page_heap_ = std::make_unique<PageHeap>(*platform_, *clock_, config);
  // Long-lived classes from one heap for all threads, as in the library (LLAMALLOC_SHARED_CLASS): from the
  // trace's second thread on (heap_for).
  shared_heap_ = std::make_unique<ThreadHeap>();
  std::sort(options_.snapshot_times_ns.begin(), options_.snapshot_times_ns.end());
  if (options_.other_threads) start_sweeper();
}

LlamaPolicy::~LlamaPolicy() = default;

ThreadHeap& LlamaPolicy::heap_for(uint32_t thread) {
  // Each traced thread allocates from its own thread heap, as it did in the process.
  uint64_t key = uint64_t{thread} + 1;
  uint32_t index;
  if (uint32_t* i = heaps_.find(key)) {
    index = *i;
  } else {
    index = static_cast<uint32_t>(threads_.size());
    threads_.push_back(ThreadState{});
    if (const uint64_t* end = thread_ends_.find(key)) threads_.back().end_ns = *end;
    heaps_.put(key, index);
    if (threads_.size() == 2) {
      if (page_heap_->shared_class_min() < kMaxClasses) page_heap_->set_shared_heap(shared_heap_.get());
      start_sweeper();  // the library starts it with the process's second thread heap
    }
  }
  last_thread_ = index;
  threads_[index].last_event_ns = now_ns_;
  if (threads_[index].heap == nullptr) {
    // The threads that made their last allocation or free have exited before this one starts (or stay idle):
    // their heaps are in the pool when it takes one.
    exit_finished_threads();
  }
  ThreadState& t = threads_[index];
  if (t.heap == nullptr) {
    // A thread's first event, or its first since it was taken as exited: a heap of the pool, as acquire_heap
    // (alloc/thread_heap_pool.cc) gives a new thread the heap an exited one left (the last one in), its parked
    // spans back on the queues so that it fills their holes first; else a new heap.
    if (ThreadHeap* h = pool_->head) {
      pool_->head = h->next_free;
      h->next_free = nullptr;
      ThreadHeapOps::adopt_parked(*h);
      h->abandoned.store(0, std::memory_order_relaxed);
      t.heap = h;
    } else {
      owned_heaps_.push_back(std::make_unique<ThreadHeap>());
      t.heap = owned_heaps_.back().get();
    }
    t.seen_ops = t.heap->slow_ops.load(std::memory_order_relaxed);
    t.idle_ticks = 0;
  }
  return *t.heap;
}

void LlamaPolicy::release_idle_threads() {
  if (options_.thread_idle_ns == 0) return;
  // The sweeper sleeps a period between passes, a fifth of one after a pass that saw the blocks in use drop
  // (sweeper_main, Subrelease::kDropBlocks): the next pass is the first whose demand window is all after the drop.
  uint64_t period = demand_dropped_ ? kSweepPeriodNs / 5 : kSweepPeriodNs;
  if (sweeper_running_ && now_ns_ - last_sweep_ns_ >= period) {
    sweeper_pass();
    last_sweep_ns_ = now_ns_;
  }
  // Once the sweeper runs, a thread with no event for thread_idle_ns is taken as exited (a trace has no thread
  // exits); the shared heap of long-lived classes gives its empty spans back once no thread allocates from it.
  // Without the sweeper (one traced thread, a smaller heap) the thread is the program's main thread, which exits at
  // the trace's end: quiet, it keeps its spans, as the process's does until its next slow path.
  if (!sweeper_running_) return;
  if (shared_holds_spans_ && now_ns_ - shared_last_alloc_ns_ >= options_.thread_idle_ns) {
    ThreadHeapOps::release_all(*page_heap_, *shared_heap_);
    shared_holds_spans_ = false;
  }
  for (uint32_t i = 0; i < threads_.size(); ++i)
    if (threads_[i].heap != nullptr && now_ns_ - threads_[i].last_event_ns >= options_.thread_idle_ns) exit_thread(i);
}

void LlamaPolicy::exit_finished_threads() {
  // A thread with no event left in the trace has exited or stays idle to the end; in the process a thread that
  // starts after an exit takes the exited thread's heap from the pool (acquire_heap) and fills its spans' holes
  // before it takes new memory, so the replay takes it as exited by then (threads joined and new ones started:
  // message-broker's publishers kept 32 MiB of footprint after the peak in the runs, 20 in the replay without it).
  if (options_.thread_idle_ns == 0) return;
  for (uint32_t i = 0; i < threads_.size(); ++i)
    if (threads_[i].heap != nullptr && threads_[i].last_event_ns >= threads_[i].end_ns && i != last_thread_)
      exit_thread(i, true);
}

void LlamaPolicy::exit_thread(uint32_t index, bool ended) {
  ThreadState& t = threads_[index];
  // Its exit (thread_exit): the heap's empty spans back, the others parked in it, and the heap into the pool,
  // where the sweeper purges its parked spans (purge_pooled) until a new thread adopts it (heap_for).
  tl_heap = t.heap;
  ThreadHeapOps::abandon(*page_heap_, *t.heap);
  tl_heap = &g_empty_heap;
  t.heap->pool_passes = 0;
  t.heap->next_free = pool_->head;
  pool_->head = t.heap;
  t.heap = nullptr;
  ++idle_threads_released_;
  // A thread that ended after the blocks in use fell gives back the pages' free blocks beyond them (thread_exit);
  // one only taken as exited for its idleness is still there in the process, and does not.
  if (ended) page_heap_->subrelease_after_fall();
}

void LlamaPolicy::set_thread_ends(const std::vector<std::pair<uint32_t, uint64_t>>& ends) {
  for (const auto& [thread, end_ns] : ends) thread_ends_.put(uint64_t{thread} + 1, end_ns);
}

bool LlamaPolicy::sweep_due(ThreadHeap& heap, uint32_t& seen_ops, uint32_t& idle_ticks) {
  uint32_t ops = heap.slow_ops.load(std::memory_order_relaxed);
  bool changed = ops != seen_ops;
  pass_slow_paths_ += ThreadHeapOps::program_slow_paths(heap, ops, seen_ops, &pass_retaken_blocks_);
  seen_ops = ops;
  idle_ticks = changed ? 0 : idle_ticks + 1;
  bool due = idle_ticks % 8 == 0 || (idle_ticks & (idle_ticks - 1)) == 0;  // collect.cc, sweep_due
  return changed || due || heap.notify.load(std::memory_order_relaxed) != nullptr ||
         heap.batch_span.load(std::memory_order_relaxed) != nullptr;
}

void LlamaPolicy::sweep_heap(ThreadHeap& heap, uint32_t& idle_ticks) {
  tl_heap = &heap;
  ThreadHeapOps::release_all(*page_heap_, heap);
  // Frees went on into its sparse spans since the last look: again at the next pass, whatever its idle count.
  if (ThreadHeapOps::purge_sparse_spans(*page_heap_, heap, PurgeWhen::kIdle).waiting != 0) idle_ticks = 0;
  tl_heap = &g_empty_heap;
}

void LlamaPolicy::sweeper_pass() {
  // sweeper_main's pass, in its order, through the library's own functions: the idle sweep of the thread heaps
  // (sweep_idle_heaps: the remote-free batches of the heaps it sweeps pushed first, since a batch frees into other
  // heaps' spans, which the sweep then takes in; then each one's empty spans back and its idle sparse spans purged)
  // and of the shared heap, then the open pages that stayed empty since the last pass, then subrelease.
  // (collapse_dense_pages changes which pages are huge, not what the heap holds; the predictor's trim is the class
  // source's on_sweep.)
  std::vector<uint32_t> due;
  pass_slow_paths_ = 0;
  pass_retaken_blocks_ = 0;
  for (uint32_t i = 0; i < threads_.size(); ++i)
    if (threads_[i].heap != nullptr && sweep_due(*threads_[i].heap, threads_[i].seen_ops, threads_[i].idle_ticks))
      due.push_back(i);
  for (uint32_t i : due) ThreadHeapOps::flush_remote_batch(*threads_[i].heap);
  for (uint32_t i : due) sweep_heap(*threads_[i].heap, threads_[i].idle_ticks);
  if (page_heap_->shared_heap() == shared_heap_.get() &&
      sweep_due(*shared_heap_, shared_seen_ops_, shared_idle_ticks_))
    sweep_heap(*shared_heap_, shared_idle_ticks_);
  // The heaps of exited threads: what other threads' frees emptied goes back, and the sparse spans parked for a
  // thread that has not come are purged.
  ThreadHeapOps::purge_pooled(*page_heap_, *pool_, false);
  page_heap_->release_empty_open_pages(false);
  page_heap_->subrelease_free_blocks(false, PageHeap::kDemandPasses, pass_slow_paths_ <= Subrelease::kQuietSlowPaths,
                                     pass_retaken_blocks_);
  demand_dropped_ = page_heap_->demand_dropped();
}

void LlamaPolicy::after_event(uint32_t t, uint32_t slow_ops_before, bool slow) {
  // run_inline_passes (alloc/sweeper.cc): before the sweeper thread runs, every 4th slow path of a thread looks at
  // the clock, and a period after the last such pass runs one: the caller's empty spans back and its sparse spans
  // purged (all but the heads of its queues), the open pages that stayed empty, subrelease with this pass's demand
  // alone. Its first look that finds the heap's peak footprint at SWEEPER_FROM_MIB starts the sweeper instead.
  if (sweeper_running_ || options_.thread_idle_ns == 0) return;
  ThreadState& ts = threads_[t];
  if (!slow && ts.heap->slow_ops.load(std::memory_order_relaxed) == slow_ops_before) return;
  if (ts.pass_countdown-- != 0) return;
  ts.pass_countdown = 3;
  uint64_t from = options_.heap_options.sweeper_from_mib;
  if (from != 0 && page_heap_->peak_footprint() >= from << 20) {
    start_sweeper();
    return;
  }
  if (inline_pass_done_ && now_ns_ - last_inline_pass_ns_ < kSweepPeriodNs) return;
  inline_pass_done_ = true;
  last_inline_pass_ns_ = now_ns_;
  tl_heap = ts.heap;
  ThreadHeapOps::release_all(*page_heap_, *ts.heap);
  ThreadHeapOps::purge_sparse_spans(*page_heap_, *ts.heap, PurgeWhen::kIdleOrNotHead);
  page_heap_->release_empty_open_pages(false);
  page_heap_->subrelease_free_blocks(false, 1);
}

void LlamaPolicy::start_sweeper() {
  if (sweeper_running_ || options_.thread_idle_ns == 0) return;
  sweeper_running_ = true;
  last_sweep_ns_ = now_ns_;  // its first pass a period later
}

void LlamaPolicy::at_exit() {
  // The final heap map is the one the final footprint reports: the end of the trace, before the exit below.
  if (!final_snapshot_taken_) {
    take_snapshot(now_ns_);
    final_snapshot_taken_ = true;
  }
  // The library's destructor and thread-exit hooks: every thread heap gives its empty spans back.
  for (ThreadState& t : threads_) {
    if (t.heap == nullptr) continue;
    tl_heap = t.heap;
    ThreadHeapOps::release_all(*page_heap_, *t.heap);
  }
  ThreadHeapOps::release_all(*page_heap_, *shared_heap_);
  shared_holds_spans_ = false;
  tl_heap = &g_empty_heap;
}

void LlamaPolicy::advance_time(uint64_t time_ns) {
  now_ns_ = std::max(now_ns_, time_ns);
  clock_->set(now_ns_);
  // The sweeper's pass for the class source (the online learner ages its live samples there), on the trace's
  // clock: at the first event or sample of each period.
  if (options_.class_source && now_ns_ - last_source_sweep_ns_ >= kSweepPeriodNs) {
    last_source_sweep_ns_ = now_ns_;
    options_.class_source->on_sweep(now_ns_, page_heap_->gauges().footprint_bytes);
  }
  while (next_snapshot_ < options_.snapshot_times_ns.size() && options_.snapshot_times_ns[next_snapshot_] <= now_ns_) {
    page_heap_->tick();
    take_snapshot(options_.snapshot_times_ns[next_snapshot_]);
    ++next_snapshot_;
  }
}

void LlamaPolicy::allocate(const ObjectAlloc& object) {
  unsigned lc = options_.class_source ? options_.class_source->class_of(object)
                : options_.fixed_class >= 0 ? unsigned(options_.fixed_class)
                : object.lifetime_class;
  lc = clamp_class(lc, page_heap_->num_classes());
  ++allocs_by_class_[lc];
  size_t size = object.size_bytes;
  size_t alignment = std::max<size_t>(object.alignment_bytes, kMinAlignBytes);
  if (alignment & (alignment - 1)) alignment = kMinAlignBytes;  // not a power of two: malloc's default
  // The library's one allocation entry point below its fast path (src/llamalloc/thread_heap/thread_heap.h).
  ThreadHeap& heap = heap_for(object.thread);
  tl_heap = &heap;
  unsigned sc = classify(size, alignment);
  bool shared = sc != kLargeRequest && ThreadHeapOps::uses_shared_heap(*page_heap_, heap, lc);
  if (shared) {
    shared_last_alloc_ns_ = now_ns_;
    shared_holds_spans_ = true;
  }
  // The library's slow path (malloc_slow) runs when its fast path misses (misses_fast_path, thread_heap/thread_heap.h), and
  // for a long-lived class that the shared thread heap serves. The sweeper sees it (slow_ops).
  uint32_t thread = last_thread_, ops = heap.slow_ops.load(std::memory_order_relaxed);
  if (shared || misses_fast_path(heap, lc, sc, alignment)) owner_count_slow(&heap);
  void* p = ThreadHeapOps::allocate(*page_heap_, heap, lc, size, alignment);
  if (p == nullptr) throw std::runtime_error("llama-oracle: the simulated heap ran out of address space");
  placed_.put(object.address, Placed{reinterpret_cast<uint64_t>(p), object.size_bytes, object.stack_id});
  after_event(thread, ops);
}

bool LlamaPolicy::realloc_in_place(uint64_t old_size_bytes, uint64_t new_size_bytes) const {
  return realloc_stays_in_place(old_size_bytes, new_size_bytes);
}

void LlamaPolicy::free(uint64_t time_ns, uint64_t address, uint64_t, uint32_t thread) {
  Placed placed;
  if (!placed_.erase(address, &placed)) return;
  if (options_.class_source) options_.class_source->on_free(std::max(time_ns, now_ns_), address);
  tl_heap = &heap_for(thread);  // the freeing thread, as in the process
  uint32_t t = last_thread_, ops = tl_heap->slow_ops.load(std::memory_order_relaxed);
  // Not a small object: the library's free_slow, which ends as every slow path does (maybe_pass_inline), though
  // it counts no slow_ops.
  bool large = ThreadHeapOps::span_of(*page_heap_, reinterpret_cast<void*>(placed.address)) == nullptr;
  ThreadHeapOps::deallocate(*page_heap_, tl_heap, reinterpret_cast<void*>(placed.address));
  after_event(t, ops, large);
}

uint64_t LlamaPolicy::footprint_bytes() const { return page_heap_->gauges().footprint_bytes; }

uint64_t LlamaPolicy::heap_resident_bytes() const {
  const Gauges& g = page_heap_->gauges();
  uint64_t given_back = g.subreleased_bytes + g.span_purged_bytes;
  return g.footprint_bytes > given_back ? g.footprint_bytes - given_back : 0;
}

uint64_t LlamaPolicy::platform_backed_bytes() const { return platform_->backed_bytes(); }

std::vector<std::string> LlamaPolicy::extra_columns() const {
  std::vector<std::string> c;
  for (unsigned i = 0; i < kMaxClasses; ++i) c.push_back("hp_class_" + std::to_string(i));
  return c;
}

void LlamaPolicy::sample(uint64_t time_ns, std::vector<int64_t>& v) {
  advance_time(time_ns);
  release_idle_threads();
  page_heap_->tick();  // deadlines that expired while the trace was quiet
  for (unsigned i = 0; i < kMaxClasses; ++i) v[i] = static_cast<int64_t>(page_heap_->gauges().huge_pages_by_class[i]);
}

void LlamaPolicy::take_snapshot(uint64_t time_ns) {
  static const char* kStates[] = {"free", "open", "active"};
  static const char* kKinds[] = {"blocks", "huge-head", "huge-tail"};
  auto hex = [](const Bitmap256& b) {
    char buf[65];
    std::snprintf(buf, sizeof buf, "%016llx%016llx%016llx%016llx", (unsigned long long)b.words[3],
                  (unsigned long long)b.words[2], (unsigned long long)b.words[1], (unsigned long long)b.words[0]);
    return std::string(buf);
  };
  // The live objects on each page (a huge object on its first), and their contexts: which ones keep a page.
  struct PageObjects {
    uint64_t objects = 0, bytes = 0;
    std::unordered_map<uint32_t, std::pair<uint64_t, uint64_t>> by_stack;  // stack id -> objects, bytes
  };
  std::unordered_map<uintptr_t, PageObjects> on_page;
  placed_.for_each([&](uint64_t, const Placed& o) {
    PageObjects& po = on_page[o.address & ~uint64_t(kHugePageBytes - 1)];
    ++po.objects;
    po.bytes += o.size_bytes;
    auto& st = po.by_stack[o.stack_id];
    ++st.first;
    st.second += o.size_bytes;
  });
  std::string j = "{\"time_ns\": " + std::to_string(time_ns) + ", \"pages\": [";
  bool first = true;
  for (uintptr_t address : platform_->backed_pages()) {
    PageInfo info = page_heap_->page_info(address);
    if (info.state == PageState::kUnused) continue;
    j += first ? "" : ", ";
    first = false;
    j += "{\"address\": " + std::to_string(address) + ", \"state\": \"" + kStates[int(info.state)] +
         "\", \"kind\": \"" + kKinds[int(info.kind)] + "\", \"class\": " + std::to_string(info.lifetime_class) +
         ", \"deadline_ns\": " +
         (info.deadline_ns == UINT64_MAX ? std::string("null") : std::to_string(info.deadline_ns)) +
         ", \"live\": \"" + hex(info.live) + "\", \"residual\": \"" + hex(info.residual) + "\"";
    static const PageObjects kNone;
    auto found = on_page.find(address);
    const PageObjects& po = found != on_page.end() ? found->second : kNone;
    std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> stacks(po.by_stack.begin(), po.by_stack.end());
    auto more_bytes = [](const auto& a, const auto& b) {
      return a.second.second != b.second.second ? a.second.second > b.second.second : a.first < b.first;
    };
    size_t shown = std::min<size_t>(stacks.size(), kSnapshotStacks);
    std::partial_sort(stacks.begin(), stacks.begin() + shown, stacks.end(), more_bytes);
    j += ", \"objects\": " + std::to_string(po.objects) + ", \"object_bytes\": " + std::to_string(po.bytes) +
         ", \"stacks\": [";
    for (size_t i = 0; i < shown; ++i)
      j += (i ? ", [" : "[") + std::to_string(stacks[i].first) + ", " + std::to_string(stacks[i].second.first) +
           ", " + std::to_string(stacks[i].second.second) + "]";
    j += "]}";
  }
  j += "]}";
  snapshots_.push_back(std::move(j));
}

std::vector<std::pair<std::string, double>> LlamaPolicy::summary_extras() const {
  Counters& c = page_heap_->counters();
  std::vector<std::pair<std::string, double>> e = {
      {"deadline_k", double(options_.heap_options.deadline_k)},
      {"block_spans_handed_out", double(c.block_spans_handed_out.load())},
      {"blocks_recycled", double(c.blocks_recycled.load())},
      {"deadlines_expired", double(c.deadlines_expired.load())},
      {"promotions", double(c.promotions.load())},
      {"demotions", double(c.demotions.load())},
      {"huge_pages_released", double(c.huge_pages_released.load())},
      {"blocks_subreleased", double(c.blocks_subreleased.load())},
      {"span_pages_purged", double(c.span_pages_purged.load())},
      {"sweeper_started", sweeper_running_ ? 1.0 : 0.0},
      {"heap_peak_footprint_bytes", double(page_heap_->gauges().peak_footprint_bytes)},
      {"platform_backed_bytes", double(platform_->backed_bytes())},
      {"threads", double(threads_.size())},
      {"thread_idle_ns", double(options_.thread_idle_ns)},
      {"idle_threads_released", double(idle_threads_released_)},
  };
  for (unsigned i = 0; i < kMaxClasses; ++i) e.push_back({"allocs_class_" + std::to_string(i), double(allocs_by_class_[i])});
  if (options_.class_source) {
    for (auto& kv : options_.class_source->summary_extras()) e.push_back(std::move(kv));
  }
  return e;
}

std::vector<std::pair<std::string, std::string>> LlamaPolicy::summary_json() const {
  // The final heap map is always included; requested ones come first, in time order.
  auto* self = const_cast<LlamaPolicy*>(this);
  if (!final_snapshot_taken_) {
    self->take_snapshot(now_ns_);
    self->final_snapshot_taken_ = true;
  }
  std::string list = "[";
  for (size_t i = 0; i < snapshots_.size(); ++i) list += (i ? ",\n        " : "\n        ") + snapshots_[i];
  list += "\n      ]";
  std::vector<std::pair<std::string, std::string>> json = {{"snapshots", list}};
  // The library options the heap was configured from (alloc/heap_config.h): what the replay stands for.
  Options o = options_.heap_options;
  std::string heap_options = "{";
  for (const char* name : kPlacementOptionNames) {
    heap_options += std::string(heap_options.size() > 1 ? ", " : "") + "\"" + name + "\": " +
                    std::to_string(integer_option(o, name));
  }
  json.push_back({"heap_options", heap_options + "}"});
  if (options_.class_source) {
    for (auto& kv : options_.class_source->summary_json()) json.push_back(std::move(kv));
  }
  return json;
}

}  // namespace llamalloc::sim
