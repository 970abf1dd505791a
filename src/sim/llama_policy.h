// llama-oracle: the traced objects replayed through the real llamalloc heap (src/llamalloc: the same
// PageHeap and thread-local ThreadHeapOps code as libllamalloc.so) on a simulation platform and
// the trace's clock, each object allocated in its true lifetime class (from its own free time in the
// trace; never freed = kNeverFreedClass). Footprint is the heap's own: huge pages open or active in its
// bookkeeping, i.e. the bytes the platform has backed and not yet released.
// llama-default: the same heap with every object in one class, as the library runs without a model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sim/flat_map.h"
#include "options.h"
#include "sim/policy.h"

namespace llamalloc {
class PageHeap;
struct ThreadHeap;
struct HeapPool;
}  // namespace llamalloc

namespace llamalloc::sim {

class SimPlatform;
class TraceClock;

// Where the lifetime class of each object comes from when it is neither the oracle's nor a fixed one: the
// llama-model policy's learned predictor (sim/model_policy.h), the online learner (llama-online and llama-model with
// LEARN=1, sim/online_policy.h).
class ClassSource {
 public:
  // How the last class_of got its class from a model's prediction cache (sim/online_policy.h: in the process the
  // fast path then went to the predictor).
  enum class ModelRun : uint8_t { kNone, kMiss, kRepredict };

  virtual ~ClassSource() = default;
  // The policy's name in the results.
  virtual std::string name() const { return "llama-model"; }
  // The class the heap gets for this allocation (object.lifetime_class holds the oracle's true class).
  virtual unsigned class_of(const ObjectAlloc& object) = 0;
  virtual ModelRun last_model_run() const { return ModelRun::kNone; }
  // An object of the heap was freed (its ObjectAlloc::address), at the trace's time.
  virtual void on_free(uint64_t /*time_ns*/, uint64_t /*address*/) {}
  // The library's sweeper passes, every LLAMALLOC_SWEEP_MS of trace time, with the replayed heap's footprint.
  virtual void on_sweep(uint64_t /*time_ns*/, uint64_t /*footprint_bytes*/) {}
  virtual std::vector<std::pair<std::string, double>> summary_extras() const { return {}; }
  virtual std::vector<std::pair<std::string, std::string>> summary_json() const { return {}; }
};

struct LlamaOptions {
  // The library's options (LLAMALLOC_*), at their defaults unless `simulate --option` sets them
  // (sim/heap_options.h): the heap's configuration is built from them as the library builds its own
  // (alloc/heap_config.h), so the replay places as the library would under them. The replay keeps all eight
  // classes (CLASSES is not read) and has no page cache (the free huge pages it would keep are not in the
  // footprint). The sweeper's passes run at the library's SWEEP_MS default, from SWEEPER_FROM_MIB as the library
  // starts its sweeper for a single thread (LlamaPolicy::sweeper_pass, after_event).
  Options heap_options;
  // -1: llama-oracle (each object's true class). 0..7: llama-default, every object in this class, which is
  // what libllamalloc.so does without a model (LLAMALLOC_DEFAULT_CLASS).
  int fixed_class = -1;
  // Set: llama-model or llama-online, each object in the class this source gives (fixed_class is then ignored).
  std::shared_ptr<ClassSource> class_source;
  // A thread whose last event of the trace has passed is taken as exited when another thread starts (heap_for):
  // a thread started after an exit adopts the exited thread's heap, which a trace cannot show otherwise.
  // Once the sweeper runs, a thread with no event for this long is taken as exited (a trace has no thread-exit
  // events): its heap goes to a pool as at thread exit (abandon), where the sweeper's passes purge its parked spans
  // and the next new thread adopts it (LlamaPolicy::heap_for). 0 keeps every thread's heap to the end and runs no
  // pass (a replay of the heap's placement alone).
  uint64_t thread_idle_ns = 500'000'000;
  // The traced process had threads besides those of the trace from its start (a trace shows only the threads
  // that allocate): the library starts its sweeper thread for them (sweeper.cc, process_has_other_threads), so
  // the replay runs the sweeper's passes from the start, whatever its threads and footprint.
  bool other_threads = false;
  // Heap maps (as the LLAMA paper's Figure 6) at these trace times, and at the end.
  std::vector<uint64_t> snapshot_times_ns;
};

class LlamaPolicy final : public Policy {
 public:
  explicit LlamaPolicy(LlamaOptions options);
  ~LlamaPolicy() override;

  std::string name() const override {
    return options_.class_source ? options_.class_source->name()
           : options_.fixed_class < 0 ? "llama-oracle"
                                      : "llama-default";
  }
  // llama-model and llama-online need them too: their summaries compare each prediction with the true class.
  bool needs_lifetime_classes() const override { return options_.fixed_class < 0 || options_.class_source; }
  // A thread whose last event has passed has exited or stays idle to the end: its heap goes to the pool then
  // (LlamaPolicy::exit_finished_threads).
  bool needs_thread_ends() const override { return options_.thread_idle_ns != 0; }
  void set_thread_ends(const std::vector<std::pair<uint32_t, uint64_t>>& ends) override;
  void allocate(const ObjectAlloc& object) override;
  // The library's rule (alloc/realloc_rule.h): a realloc that stays in the object's size class or shrinks it by at
  // most half keeps it where it is.
  bool realloc_in_place(uint64_t old_size_bytes, uint64_t new_size_bytes) const override;
  void free(uint64_t time_ns, uint64_t address, uint64_t size_bytes, uint32_t thread) override;
  void at_exit() override;
  void advance_time(uint64_t time_ns) override;
  uint64_t footprint_bytes() const override;
  // The footprint less the bytes the sweeper's passes gave back inside it (subreleased blocks and purged span
  // pages): what the library's statistics call footprint_bytes - subreleased_bytes - span_purged_bytes.
  uint64_t heap_resident_bytes() const override;
  std::vector<std::string> extra_columns() const override;
  void sample(uint64_t time_ns, std::vector<int64_t>& extra_values) override;
  std::vector<std::pair<std::string, double>> summary_extras() const override;
  std::vector<std::pair<std::string, std::string>> summary_json() const override;

  // Bytes the simulation platform has backed (must equal footprint_bytes(): a cross-check).
  uint64_t platform_backed_bytes() const;
  PageHeap& heap() { return *page_heap_; }
  // Appends a snapshot of every huge page in use (JSON) to the summary's "snapshots".
  void take_snapshot(uint64_t time_ns);

 private:
  ThreadHeap& heap_for(uint32_t thread);
  void release_idle_threads();
  // The threads whose last event of the trace has passed leave their heaps to the pool, as at thread exit.
  void exit_finished_threads();
  void exit_thread(uint32_t index, bool ended = false);
  // The sweeper thread's pass (alloc/sweeper.cc, sweeper_main), every SWEEP_MS of trace time once it runs.
  void sweeper_pass();
  // After an event of `t`'s thread, a slow path if it changed the heap's slow_ops or `slow` says so: the slow
  // paths' passes of a process without a sweeper thread (run_inline_passes), and the start of the sweeper.
  void after_event(uint32_t t, uint32_t slow_ops_before, bool slow = false);
  // The library's idle sweep (collect.cc, sweep_idle_heaps and sweep_shared_heap): a heap is swept when its owner
  // ran a slow path since the last pass, a free notified it, it holds a remote-free batch, or on its 1st, 2nd and
  // 4th idle pass and every 8th after (sweep_due, which counts the pass); a sweep gives its empty spans back and
  // purges its idle sparse spans (sweep_heap).
  bool sweep_due(ThreadHeap& heap, uint32_t& seen_ops, uint32_t& idle_ticks);
  void sweep_heap(ThreadHeap& heap, uint32_t& idle_ticks);
  // The sweeper thread starts (once; not while thread_idle_ns is 0): its first pass a period later.
  void start_sweeper();

  LlamaOptions options_;
  std::unique_ptr<SimPlatform> platform_;
  std::unique_ptr<TraceClock> clock_;
  std::unique_ptr<PageHeap> page_heap_;
  struct ThreadState {
    ThreadHeap* heap = nullptr;  // null: the thread is taken as exited, its heap in the pool
    uint64_t last_event_ns = 0;
    // The sweeper's bookkeeping (sweep_idle_heaps): slow paths at the last pass, passes since one changed them.
    uint32_t seen_ops = 0;
    uint32_t idle_ticks = 0;
    // Slow paths until the next inline pass may run (the library's tl_pass_countdown: every 4th).
    uint32_t pass_countdown = 0;
    // The time of the thread's last event in the trace (set_thread_ends; none known: never).
    uint64_t end_ns = UINT64_MAX;
  };
  FlatMap<uint64_t> thread_ends_{64};  // trace thread id + 1 -> its last event's time
  FlatMap<uint32_t> heaps_;                // trace thread id + 1 -> index in threads_
  uint32_t last_thread_ = 0;               // the index heap_for returned last
  std::vector<ThreadState> threads_;
  std::vector<std::unique_ptr<ThreadHeap>> owned_heaps_;  // every thread heap made, in a thread or in the pool
  std::unique_ptr<HeapPool> pool_;                        // the heaps of threads taken as exited
  std::unique_ptr<ThreadHeap> shared_heap_;
  uint64_t shared_last_alloc_ns_ = 0;
  bool shared_holds_spans_ = false;
  uint32_t shared_seen_ops_ = 0, shared_idle_ticks_ = 0;
  uint64_t pass_slow_paths_ = 0;  // slow paths the heaps ran since the last pass (sweeper_pass: a quiet pass)
  uint64_t pass_retaken_blocks_ = 0;  // blocks they took again for spans the sweep before took (the same)
  // Whether the sweeper thread runs: from the trace's second thread, or once the heap's peak footprint reaches
  // SWEEPER_FROM_MIB (sweeper.cc, start_sweeper); until then the passes come with slow paths (after_event).
  bool sweeper_running_ = false;
  uint64_t last_inline_pass_ns_ = 0;
  bool inline_pass_done_ = false;
  uint64_t idle_threads_released_ = 0;
  // The library's sweeper period (LLAMALLOC_SWEEP_MS's default) and the trace time of the sweeper's last pass.
  static constexpr uint64_t kSweepPeriodNs = Options{}.sweep_ms * 1'000'000;
  uint64_t last_sweep_ns_ = 0;
  // The sweeper's last pass saw the blocks in use drop (PageHeap::demand_dropped): the next comes a fifth of a
  // period later.
  bool demand_dropped_ = false;
  uint64_t last_source_sweep_ns_ = 0;  // the class source's (ClassSource::on_sweep)
  // Where a live object of the trace is in the simulated heap, and what it is (heap snapshots list the
  // contexts that keep each page).
  struct Placed {
    uint64_t address = 0;
    uint64_t size_bytes = 0;
    uint32_t stack_id = 0;
  };
  // Contexts listed per page in a heap snapshot, those with the most live bytes on it first.
  static constexpr size_t kSnapshotStacks = 3;
  FlatMap<Placed> placed_;                 // trace address -> the object in the simulated heap
  uint64_t now_ns_ = 0;
  size_t next_snapshot_ = 0;
  uint64_t allocs_by_class_[8] = {};
  std::vector<std::string> snapshots_;
  bool final_snapshot_taken_ = false;
};

}  // namespace llamalloc::sim
