// The pool of per-thread prediction states (src/model/thread_state_pool.h): chunks mapped as threads claim
// states, each live thread with a state of its own, warm caches reused on the same stack in any chunk, and a
// chunk that cannot be mapped leaving the thread without a state.
#include "thread_state_pool.h"

#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "module_map.h"
#include "test_threads.h"

using namespace llamalloc::model;
using llamalloc::model::test::run_on_stack;
using llamalloc::model::test::TwoStacks;

namespace {

// The calling thread's state, claimed as the predictor claims it.
ThreadState* my_state() { return this_thread_state(); }

// The index of a state of the pool (-1: none).
int index_of(const ThreadState* s) {
  for (uint32_t i = 0; i < thread_states_used(); ++i)
    if (thread_state_at(i) == s) return int(i);
  return -1;
}

// Holds `n` threads, each with its state, until release() is called.
class HeldThreads {
 public:
  explicit HeldThreads(unsigned n) : states_(n, nullptr) {
    for (unsigned t = 0; t < n; ++t)
      threads_.emplace_back([this, t] {
        states_[t] = my_state();
        claimed_.fetch_add(1);
        while (!go_.load()) std::this_thread::yield();
      });
    while (claimed_.load() < n) std::this_thread::yield();
  }
  ~HeldThreads() { release(); }
  void release() {
    go_.store(true);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  const std::vector<ThreadState*>& states() const { return states_; }

 private:
  std::vector<ThreadState*> states_;
  std::vector<std::thread> threads_;
  std::atomic<unsigned> claimed_{0};
  std::atomic<bool> go_{false};
};

// Starting maps one chunk; more are mapped only as threads hold more states than the mapped chunks have, and
// states of exited threads are claimed again before a chunk is added.
TEST(ThreadStatePool, ChunksAreMappedAsThreadsClaimStates) {
  ASSERT_TRUE(map_thread_states());
  EXPECT_GE(thread_state_chunks_mapped(), 1u);
  constexpr unsigned kThreads = 3 * kThreadStatesPerChunk + 5;
  std::set<uintptr_t> chunks_seen;
  {
    HeldThreads held(kThreads);
    std::set<ThreadState*> distinct(held.states().begin(), held.states().end());
    EXPECT_EQ(distinct.size(), size_t(kThreads)) << "every live thread has a state of its own";
    EXPECT_EQ(distinct.count(nullptr), 0u);
    for (ThreadState* s : held.states()) {
      int i = index_of(s);
      ASSERT_GE(i, 0) << "a claimed state is one of thread_state_at(i), i below the high-water mark";
      chunks_seen.insert(unsigned(i) / kThreadStatesPerChunk);
      // Every page of it can be written (its chunk is mapped whole).
      s->cache.slot(uint64_t(i) * 2 + 1).key = uint64_t(i) * 2 + 1;
    }
    EXPECT_GE(chunks_seen.size(), 4u) << "the states come from several chunks";
    EXPECT_LE(thread_state_chunks_mapped(), thread_states_used() / kThreadStatesPerChunk + 1)
        << "no chunk beyond the highest state claimed";
    EXPECT_GE(thread_state_chunks_mapped(), uint32_t(chunks_seen.size()));
  }
  uint32_t chunks_after = thread_state_chunks_mapped(), used_after = thread_states_used();
  {
    HeldThreads again(kThreads);
    EXPECT_EQ(thread_state_chunks_mapped(), chunks_after) << "the exited threads' states are claimed again";
    EXPECT_EQ(thread_states_used(), used_after) << "the high-water mark stays";
  }
}

// Threads that start and exit from several threads at once: no two live threads ever hold the same state, and
// the pool maps no more chunks than the threads live at once need.
TEST(ThreadStatePool, ManyThreadsClaimAndReleaseWithoutSharingAState) {
  ASSERT_TRUE(map_thread_states());
  static std::atomic<int> owner[kMaxThreads];
  std::atomic<int> shared{0}, without{0};
  uint32_t used_before = thread_states_used();
  constexpr int kStarters = 6, kRounds = 150;
  std::vector<std::thread> starters;
  for (int t = 0; t < kStarters; ++t)
    starters.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::thread worker([&, t] {
          ThreadState* s = my_state();
          if (s == nullptr) {
            without.fetch_add(1);
            return;
          }
          int i = index_of(s);
          int none = 0;
          if (i < 0 || !owner[i].compare_exchange_strong(none, t + 1)) {
            shared.fetch_add(1);
            return;
          }
          s->cache.slot(7).key = 7;
          std::this_thread::yield();
          owner[i].store(0);  // (before the pool's key destructor hands the state back)
        });
        worker.join();
      }
    });
  for (auto& t : starters) t.join();
  EXPECT_EQ(shared.load(), 0);
  EXPECT_EQ(without.load(), 0);
  // At most kStarters workers live at once: the states already there, or those of the first chunk, serve all
  // 900 of them.
  EXPECT_LE(thread_states_used(), std::max(used_before, uint32_t(kThreadStatesPerChunk)));
}

// An exited thread's warm state goes to the next thread on its stack, in a chunk after the first as in the first;
// a thread on another stack does not take it.
TEST(ThreadStatePool, AWarmStateInALaterChunkGoesToTheNextThreadOnItsStack) {
  ASSERT_TRUE(map_thread_states());
  HeldThreads filler(kThreadStatesPerChunk + 3);  // the first chunk full: the next states are in another
  TwoStacks stacks;
  void* stack_a = stacks.a;
  void* stack_b = stacks.b;
  constexpr size_t kStack = TwoStacks::kBytes;
  constexpr uint64_t kKey = 0x1234567890abcdefull | 1;
  ThreadState* first = nullptr;
  // As the predictor's first model run does: the stack's bounds go into the state, which makes it warm at exit.
  auto note_stack = [](ThreadState* s) {
    uintptr_t low = 0;
    bool main_thread = false;
    uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    uintptr_t top = mapping_end(here, &main_thread, &low);
    s->stack_low.store(low);
    s->stack_top.store(top);
    s->main_thread = main_thread;
  };
  run_on_stack(stack_a, kStack, [&] {
    first = my_state();
    ASSERT_NE(first, nullptr);
    note_stack(first);
    first->cache.slot(kKey).key = kKey;
  });
  ASSERT_NE(first, nullptr);
  EXPECT_GE(index_of(first), int(kThreadStatesPerChunk)) << "a state of a later chunk";
  run_on_stack(stack_b, kStack - 4096, [&] {
    ThreadState* s = my_state();
    EXPECT_NE(s, first) << "a thread on another stack does not take stack A's warm state";
  });
  run_on_stack(stack_a, kStack, [&] {
    ThreadState* s = my_state();
    EXPECT_EQ(s, first) << "the next thread on stack A takes its warm state";
    if (s != nullptr) EXPECT_EQ(s->cache.slot(kKey).key, kKey) << "with its cache";
  });
  // Four trims without a thread on stack A: the cache is dropped (reads back empty), the state free again.
  for (int pass = 0; pass < 4; ++pass) drop_cold_warm_states();
  EXPECT_EQ(first->cache.slot(kKey).key, 0u);
  // The caches of any chunk can be dropped by address; an address that is no state's cannot.
  EXPECT_TRUE(drop_thread_state_cache(first->cache.entries()));
  static llamalloc::PredictionCacheEntry not_ours[2048];
  EXPECT_FALSE(drop_thread_state_cache(not_ours));
  EXPECT_FALSE(drop_thread_state_cache(reinterpret_cast<const char*>(first->cache.entries()) + 64));
}

long vm_size_kib() {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f != nullptr && fgets(line, sizeof line, f) != nullptr)
    if (strncmp(line, "VmSize:", 7) == 0) kib = atol(line + 7);
  if (f != nullptr) fclose(f);
  return kib;
}

// Under an address-space limit that leaves no room for another chunk, a thread that needs one gets no state
// (it predicts without one, as when the pool is full) and nothing else changes; once there is room again, a
// later claim maps the chunk. In a child process, whose limit the test can lower.
TEST(ThreadStatePool, AChunkThatCannotBeMappedLeavesTheThreadWithoutAState) {
  ASSERT_TRUE(map_thread_states());
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Each claim_thread_state() call claims another state for this thread: fill the mapped chunks.
    uint32_t chunks = thread_state_chunks_mapped();
    uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    for (unsigned n = 0; n < kMaxThreads && thread_states_used() < chunks * kThreadStatesPerChunk; ++n)
      if (claim_thread_state(here) == nullptr) _exit(10);
    if (thread_state_chunks_mapped() != chunks) _exit(11);
    rlimit old{};
    getrlimit(RLIMIT_AS, &old);
    long size = vm_size_kib();
    rlimit tight = old;
    tight.rlim_cur = rlim_t(size + 64) * 1024;  // far less than a chunk
    if (setrlimit(RLIMIT_AS, &tight) != 0) _exit(12);
    uint32_t used = thread_states_used();
    for (int n = 0; n < 8; ++n)
      if (claim_thread_state(here) != nullptr) _exit(13);  // no chunk, no state
    if (thread_state_chunks_mapped() != chunks || thread_states_used() != used) _exit(14);
    if (setrlimit(RLIMIT_AS, &old) != 0) _exit(15);
    // The claims right after a failed mapping do not try again (a system call each); a later one does.
    ThreadState* s = nullptr;
    for (int n = 0; n < 4096 && s == nullptr; ++n) s = claim_thread_state(here);
    if (s == nullptr) _exit(16);
    if (thread_state_chunks_mapped() != chunks + 1) _exit(17);
    s->cache.slot(3).key = 3;  // its pages can be written
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's step that failed (see the _exit codes)";
}

}  // namespace
