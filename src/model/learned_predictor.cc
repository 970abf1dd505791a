#include "learned_predictor.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

#include <cstring>
#include <new>

#include "stats.h"

namespace llamalloc::model {

namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t parse_hex(const char*& p, const char* end) {
  uint64_t v = 0;
  for (; p < end; ++p) {
    char c = *p;
    unsigned d = c >= '0' && c <= '9' ? unsigned(c - '0') : c >= 'a' && c <= 'f' ? unsigned(c - 'a' + 10) : 16;
    if (d == 16) break;
    v = v * 16 + d;
  }
  return v;
}

// Calls fn(start, end, executable, offset, path) for each line of /proc/self/maps, reading it with plain
// syscalls into a stack buffer (no stdio: it would allocate).
template <typename Fn>
bool for_each_mapping(Fn&& fn) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[8192];
  size_t have = 0;
  bool stop = false;
  while (!stop) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0) break;
    have += size_t(n);
    char* line = buf;
    char* end = buf + have;
    while (!stop) {
      char* nl = static_cast<char*>(memchr(line, '\n', size_t(end - line)));
      if (nl == nullptr) break;
      *nl = '\0';
      const char* p = line;
      uintptr_t start = parse_hex(p, nl);
      ++p;
      uintptr_t stop_addr = parse_hex(p, nl);
      ++p;
      bool exec = p + 3 < nl && p[2] == 'x';
      p += 5;
      uint64_t offset = parse_hex(p, nl);
      // dev and inode, then spaces, then the path (may be empty)
      for (int field = 0; field < 2 && p < nl; ++field) {
        while (p < nl && *p == ' ') ++p;
        while (p < nl && *p != ' ') ++p;
      }
      while (p < nl && *p == ' ') ++p;
      stop = !fn(start, stop_addr, exec, offset, p);
      line = nl + 1;
    }
    have = size_t(end - line);
    if (have == sizeof buf - 1) have = 0;  // a line longer than the buffer: dropped
    memmove(buf, line, have);
  }
  close(fd);
  return true;
}

// The pool of thread states: mapped once (MAP_NORESERVE, pages cost only when a thread touches them), claimed
// with a compare-and-swap on a bitmap, handed back by a pthread key destructor. No lock, so fork is safe.
constexpr unsigned kMaxThreads = 4096;
// An exited thread's warm cache is dropped after this many trim passes (the sweeper's: about a second at the
// default LLAMALLOC_SWEEP_MS, as an idle thread's).
constexpr uint8_t kWarmPasses = 4;
ThreadState* g_states = nullptr;
std::atomic<uint64_t> g_claimed[kMaxThreads / 64];
// States whose thread exited with its cache warm (set before the claimed bit is cleared, cleared by whoever
// claims the state next).
std::atomic<uint64_t> g_warm[kMaxThreads / 64];
std::atomic<uint32_t> g_states_used{0};  // high-water mark, for totals()
pthread_key_t g_state_key;
bool g_key_ok = false;
thread_local ThreadState* tl_state = nullptr;

static_assert(offsetof(ThreadState, cache) == 0 && sizeof(ThreadState::cache) % 4096 == 0,
              "the prediction cache must be whole pages");

// The cache's pages leave the resident set and read back as zeros: empty entries (key 0). Where madvise fails,
// the entries are cleared instead.
void drop_cache_pages(ThreadState* s) {
  if (madvise(&s->cache, sizeof s->cache, MADV_DONTNEED) != 0) s->cache.clear();
}

void release_state(void* arg) {
  auto* s = static_cast<ThreadState*>(arg);
  size_t i = size_t(s - g_states);
  if (tl_state == s) tl_state = nullptr;
  // The cache stays as it is for the next thread on the same stack (its keys hold this stack's frame addresses,
  // so they mean the same call paths there): a program that starts a thread per task (word-count: 3,072 at its
  // default scale) otherwise ran the model on every context of every new thread. trim() drops it if no such
  // thread comes within about a second. A thread that never ran the model has nothing worth keeping.
  if (s->stack_top.load(std::memory_order_relaxed) != 0) {
    s->warm_passes = 0;
    g_warm[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_relaxed);
  } else {
    drop_cache_pages(s);
  }
  g_claimed[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_release);
}

// Takes state i if it is unclaimed; true when taken.
bool try_claim(unsigned i) {
  uint64_t bit = uint64_t{1} << (i % 64);
  uint64_t bits = g_claimed[i / 64].load(std::memory_order_relaxed);
  while ((bits & bit) == 0) {
    if (g_claimed[i / 64].compare_exchange_weak(bits, bits | bit, std::memory_order_acquire)) {
      uint32_t used = g_states_used.load(std::memory_order_relaxed);
      while (used < i + 1 && !g_states_used.compare_exchange_weak(used, i + 1)) {
      }
      return true;
    }
  }
  return false;
}

// State i, just claimed, for a new thread whose stack holds `here`: kept as it is when it is warm from a thread
// that ran on the very mapping this thread's stack is (read again from /proc/self/maps, as the thread's first
// model run would: stale bounds would let the frame walks read past the stack); otherwise from an empty cache
// (a warm one dropped) and no stack bounds yet.
ThreadState* start_state(unsigned i, uintptr_t here) {
  ThreadState& s = g_states[i];
  s.busy = false;
  bool warm = (g_warm[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_relaxed) >> (i % 64) & 1) != 0;
  if (warm) {
    uintptr_t low = 0;
    bool main_thread = false;
    uintptr_t top = mapping_end(here, &main_thread, &low);
    if (top != 0 && top == s.stack_top.load(std::memory_order_relaxed) &&
        low == s.stack_low.load(std::memory_order_relaxed) && main_thread == s.main_thread)
      return &s;
    drop_cache_pages(&s);
  }
  s.stack_low.store(0, std::memory_order_relaxed);
  s.stack_top.store(0, std::memory_order_relaxed);
  s.main_thread = false;
  return &s;
}

// A claimed state for a new thread whose stack holds `here`. First a warm state of an exited thread that ran on
// the same stack mapping (glibc reuses the stacks of joined threads, and a new mapping usually lands where the
// old one was): its cache and stack bounds are kept. Otherwise the first free state, from an empty cache: never
// used, or dropped (an exited thread's warm cache from another stack is dropped here; clearing a never-used one
// would make all 32 KiB resident). The counters are kept (they are totals of the process).
ThreadState* claim_state(uintptr_t here) {
  if (g_states == nullptr) return nullptr;
  for (unsigned w = 0; w < kMaxThreads / 64; ++w) {
    uint64_t warm = g_warm[w].load(std::memory_order_relaxed) & ~g_claimed[w].load(std::memory_order_relaxed);
    while (warm != 0) {
      unsigned i = w * 64 + unsigned(__builtin_ctzll(warm));
      warm &= warm - 1;
      ThreadState& s = g_states[i];
      if (here < s.stack_low.load(std::memory_order_relaxed) || here >= s.stack_top.load(std::memory_order_relaxed))
        continue;
      if (!try_claim(i)) continue;
      // Ours now; still the warm state we matched unless it was claimed, used and released between the two.
      return start_state(i, here);
    }
  }
  // A cold state first, so that the warm ones stay for their stacks' next threads; a warm one only if all are.
  for (bool take_warm : {false, true}) {
    for (unsigned w = 0; w < kMaxThreads / 64; ++w) {
      uint64_t skip = g_claimed[w].load(std::memory_order_relaxed) |
                      (take_warm ? 0 : g_warm[w].load(std::memory_order_relaxed));
      while (~skip != 0) {
        unsigned i = w * 64 + unsigned(__builtin_ctzll(~skip));
        skip |= uint64_t{1} << (i % 64);
        if (!try_claim(i)) continue;
        return start_state(i, here);
      }
    }
  }
  return nullptr;
}

// Drops the caches of exited threads that no new thread took within kWarmPasses calls (the sweeper's passes).
// Each is claimed while it is dropped, so a thread being created cannot take it half-dropped.
void drop_cold_warm_states() {
  if (g_states == nullptr) return;
  uint32_t used = g_states_used.load(std::memory_order_acquire);
  for (unsigned w = 0; w * 64 < used; ++w) {
    uint64_t warm = g_warm[w].load(std::memory_order_relaxed) & ~g_claimed[w].load(std::memory_order_relaxed);
    while (warm != 0) {
      unsigned i = w * 64 + unsigned(__builtin_ctzll(warm));
      warm &= warm - 1;
      if (!try_claim(i)) continue;
      ThreadState& s = g_states[i];
      if ((g_warm[w].load(std::memory_order_relaxed) >> (i % 64) & 1) != 0 && ++s.warm_passes >= kWarmPasses) {
        g_warm[w].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_relaxed);
        drop_cache_pages(&s);
        s.stack_low.store(0, std::memory_order_relaxed);
        s.stack_top.store(0, std::memory_order_relaxed);
      }
      g_claimed[w].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_release);
    }
  }
}

}  // namespace

uintptr_t mapping_end(uintptr_t address, bool* is_main_stack, uintptr_t* start_out) {
  uintptr_t found = 0;
  for_each_mapping([&](uintptr_t start, uintptr_t end, bool, uint64_t, const char* path) {
    if (address >= start && address < end) {
      found = end;
      if (start_out != nullptr) *start_out = start;
      if (is_main_stack != nullptr) *is_main_stack = strcmp(path, "[stack]") == 0;
      return false;
    }
    return true;
  });
  return found;
}

void ModuleMap::refresh(const TokenTables& tables) {
  Table* cur = current_.load(std::memory_order_acquire);
  Table* next = cur == &tables_[0] ? &tables_[1] : &tables_[0];
  next->count = 0;
  // One stat per binary of the token tables: a table whose binary changed since prepare is not used.
  bool fresh[256];
  for (uint32_t b = 0; b < tables.binary_count() && b < 256; ++b) {
    struct stat st;
    const TokenTables::Binary& bin = tables.binary(b);
    fresh[b] = stat(bin.path, &st) == 0 && uint64_t(st.st_size) == bin.file_bytes &&
               int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == bin.mtime_ns;
  }
  for_each_mapping([&](uintptr_t start, uintptr_t end, bool exec, uint64_t offset, const char* path) {
    if (!exec) return true;
    if (next->count == kMaxModules) return false;
    Module m{start, end, 0, -1};
    int b = *path == '/' ? tables.find_binary(path) : -1;
    if (b >= 0 && b < 256 && fresh[b]) {
      const TokenTables::Binary& bin = tables.binary(uint32_t(b));
      for (uint32_t s = 0; s < bin.segment_count; ++s) {
        const TokenTables::Segment& seg = bin.segments[s];
        if (offset >= seg.file_offset && offset < seg.file_offset + (seg.file_bytes ? seg.file_bytes : 1)) {
          m.vaddr_bias = start - (offset - seg.file_offset + seg.vaddr);
          m.binary = b;
          break;
        }
      }
    }
    next->modules[next->count++] = m;
    return true;
  });
  current_.store(next, std::memory_order_release);
}

bool ModuleMap::maybe_refresh(const TokenTables& tables, uint64_t now) {
  if (frozen_) return false;
  uint64_t last = last_refresh_ns_.load(std::memory_order_relaxed);
  if (now - last < kMinRefreshNs) return false;
  int pid = getpid();
  int holder = refreshing_pid_.load(std::memory_order_relaxed);
  // A holder that is not this process is the parent of a fork child: its refresh will never finish here.
  if (holder == pid || !refreshing_pid_.compare_exchange_strong(holder, pid)) return false;
  last_refresh_ns_.store(now, std::memory_order_relaxed);
  refresh(tables);
  refreshing_pid_.store(0, std::memory_order_release);
  return true;
}

void ModuleMap::load(const Module* modules, uint32_t count) {
  Table* cur = current_.load(std::memory_order_acquire);
  Table* next = cur == &tables_[0] ? &tables_[1] : &tables_[0];
  next->count = count < kMaxModules ? count : kMaxModules;
  for (uint32_t i = 0; i < next->count; ++i) next->modules[i] = modules[i];
  frozen_ = true;
  current_.store(next, std::memory_order_release);
}

bool ModuleMap::find(uintptr_t pc, Module* out) const {
  const Table* t = current_.load(std::memory_order_acquire);
  if (t == nullptr) return false;
  uint32_t n = t->count < kMaxModules ? t->count : kMaxModules;
  uint32_t lo = 0, hi = n;
  while (lo < hi) {  // /proc/self/maps lists mappings by address
    uint32_t mid = (lo + hi) / 2;
    if (t->modules[mid].end <= pc) lo = mid + 1;
    else hi = mid;
  }
  if (lo == n) return false;
  Module m = t->modules[lo];
  if (pc < m.start || pc >= m.end) return false;
  *out = m;
  return true;
}

bool LearnedPredictor::init(const char* model_path, const char* tokens_path, uint32_t repredict_every,
                            char* error, size_t cap, unsigned repredict_backoff) {
  char why[256];
  if (!model_.open(model_path, why, sizeof why)) {
    format_message(error, cap, "%s: %s", model_path, why);
    return false;
  }
  if (tokens_path != nullptr && *tokens_path &&
      !tables_.open(tokens_path, model_.vocab_crc(), model_.vocab_size(), why, sizeof why)) {
    format_message(error, cap, "%s: %s", tokens_path, why);
    model_.close();
    return false;
  }
  repredict_every_ = repredict_every;
  repredict_backoff_ = repredict_backoff;
  thread_root_binary_ = tables_.find_binary("<thread-root>");
  if (g_states == nullptr) {
    void* p = mmap(nullptr, sizeof(ThreadState) * kMaxThreads, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      format_message(error, cap, "%s: cannot map the prediction caches", model_path);
      return false;
    }
    g_states = static_cast<ThreadState*>(p);  // zero pages are valid empty states
    g_key_ok = pthread_key_create(&g_state_key, release_state) == 0;
  }
  modules_.refresh(tables_);
  return true;
}

ThreadState* LearnedPredictor::thread_state() {
  ThreadState* s = tl_state;
  if (__builtin_expect(s != nullptr, 1)) return s;
  s = claim_state(reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
  if (s == nullptr) return nullptr;
  tl_state = s;
  if (g_key_ok) pthread_setspecific(g_state_key, s);
  return s;
}

namespace {

// The DWARF walk of a model run: frames up to the one that returns to the program's caller are the heap's and
// are skipped; from there on each frame's return address is kept.
struct DwarfWalk {
  uintptr_t caller;  // context.return_address
  uintptr_t* pcs;
  size_t max;
  size_t depth;
  int skipped;
  bool found;
};

_Unwind_Reason_Code dwarf_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<DwarfWalk*>(arg);
  int before = 0;
  uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
  if (ip == 0) return _URC_END_OF_STACK;
  // A signal frame's ip is the interrupted instruction itself: as a return address, the byte after it (the
  // profiler records ip there and ret - 1 elsewhere; tokens_of looks up pc - 1).
  uintptr_t ret = before ? ip + 1 : ip;
  if (!w->found) {
    if (ret != w->caller) return ++w->skipped > kMaxHeapFrames + 4 ? _URC_END_OF_STACK : _URC_NO_REASON;
    w->found = true;
  }
  if (w->depth >= w->max) return _URC_END_OF_STACK;
  w->pcs[w->depth++] = ret;
  return _URC_NO_REASON;
}

}  // namespace

bool LearnedPredictor::dwarf_allowed(uintptr_t return_address) {
  if (!dwarf_) return false;
  // libgcc's unwinder locks its registered-frames list (frames registered by a JIT) and calls malloc under
  // that lock: an allocation from the unwinder itself must not unwind again.
  Module caller, unwinder;
  if (!modules_.find(return_address - 1, &caller)) return true;
  return !(modules_.find(reinterpret_cast<uintptr_t>(&_Unwind_Backtrace), &unwinder) &&
           caller.start == unwinder.start);
}

size_t LearnedPredictor::capture_stack(const AllocationContext& context, uintptr_t stack_top, uintptr_t* pcs,
                                       size_t max, bool* broken) {
  if (broken != nullptr) *broken = false;
  if (max == 0 || context.return_address == 0) return 0;
  if (dwarf_allowed(context.return_address)) {
    // The profiler's unwinder (src/profiler/stack_capture.cc): frames of code without frame pointers and the
    // thread's root frames are found as the profile found them.
    DwarfWalk w{context.return_address, pcs, max, 0, 0, false};
    _Unwind_Backtrace(dwarf_frame, &w);
    if (w.found) return w.depth;
    // The caller's frame was not among the first frames (a heap frame without unwind tables): frame pointers.
  }
  size_t depth = 0;
  pcs[depth++] = context.return_address;
  if (stack_top == 0) return depth;
  // Up the frame-pointer chain from this function through the heap's own frames (its entry points keep frame
  // pointers, see docs/prediction.md) to the frame whose return address is the caller's: from there on, the
  // frames are the program's. Each frame is [saved rbp, return address].
  uintptr_t fp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t low = fp;
  bool found = false;
  for (int hop = 0; hop < kMaxHeapFrames; ++hop) {
    const auto* f = reinterpret_cast<const uintptr_t*>(fp);
    uintptr_t next = f[0];
    if (f[1] == context.return_address) {
      found = true;
      fp = next;
      break;
    }
    if (next <= fp || (next & 7) != 0 || next > stack_top - 16) break;
    fp = next;
  }
  // A heap frame without a frame pointer hides the caller's frame record. The frame at context.stack_address
  // (the heap's) then holds the caller's rbp if nothing between clobbered it; a wrong guess fails the checks
  // below (frames must rise within the stack and return into known code), leaving only the return address.
  if (!found) fp = context.stack_address != 0 ? *reinterpret_cast<const uintptr_t*>(context.stack_address) : 0;
  while (depth < max) {
    if (fp <= low || (fp & 7) != 0 || fp > stack_top - 16) break;
    const auto* f = reinterpret_cast<const uintptr_t*>(fp);
    uintptr_t ret = f[1];
    Module m;
    // A saved rbp that was no frame pointer, or code we do not know (yet: a library loaded since init).
    if (!modules_.find(ret - 1, &m) && !(modules_.maybe_refresh(tables_, now_ns()) && modules_.find(ret - 1, &m))) break;
    pcs[depth++] = ret;
    low = fp;
    fp = f[0];
  }
  // The chain ended before the depth bound: at a frame without frame pointer, or at the zero frame pointer of a
  // thread's start (clone3 clears rbp), with the outermost frames (start_thread ...) not walked either way.
  if (broken != nullptr) *broken = depth < max;
  return depth;
}

size_t LearnedPredictor::tokens_of(const uintptr_t* pcs, size_t depth, size_t size_bytes, uint32_t* tokens,
                                   size_t max, bool thread_root) {
  size_t limit = model_.max_tokens() < max ? model_.max_tokens() : max;
  if (limit == 0) return 0;
  size_t n = 0;
  tokens[n++] = kFirstSizeToken + size_class(size_bytes);
  for (size_t i = 0; i < depth && n < limit; ++i) {
    if (i) tokens[n++] = kSeparatorToken;
    Module m;
    FrameTokens ft{nullptr, 0, false};
    bool known = false;
    if (modules_.find(pcs[i] - 1, &m) || (modules_.maybe_refresh(tables_, now_ns()) && modules_.find(pcs[i] - 1, &m))) {
      if (m.binary >= 0 && uint32_t(m.binary) < tables_.binary_count())
        known = tables_.lookup(uint32_t(m.binary), pcs[i] - m.vaddr_bias, &ft);
    }
    if (!known) {
      if (n < limit) tokens[n++] = kUnsymbolizedToken;
      continue;
    }
    for (uint32_t k = 0; k < ft.count && n < limit; ++k) tokens[n++] = ft.ids[k];
    if (ft.terminal) return n;
  }
  FrameTokens root;
  if (thread_root && depth > 0 && thread_root_binary_ >= 0 && n < limit &&
      tables_.lookup(uint32_t(thread_root_binary_), 1, &root)) {
    tokens[n++] = kSeparatorToken;
    for (uint32_t k = 0; k < root.count && n < limit; ++k) tokens[n++] = root.ids[k];
  }
  return n;
}

unsigned LearnedPredictor::run_model(const AllocationContext& context, ThreadState* state) {
  uint64_t t0 = now_ns();
  uintptr_t stack_top = state->stack_top.load(std::memory_order_relaxed);
  if (stack_top == 0) {
    uintptr_t low = 0;
    stack_top = mapping_end(reinterpret_cast<uintptr_t>(&t0), &state->main_thread, &low);
    state->stack_low.store(low, std::memory_order_relaxed);
    state->stack_top.store(stack_top, std::memory_order_relaxed);
  }
  uintptr_t pcs[kMaxFrames];
  bool broken = false;
  size_t depth = capture_stack(context, stack_top, pcs, kMaxFrames, &broken);
  // Only the model's max_tokens are read (as training cuts them): a 16 KiB kMaxTokens array would move every
  // callee below it, and each thread's stack would keep those pages resident for good.
  const size_t limit = model_.max_tokens();
  auto* tokens = static_cast<uint32_t*>(__builtin_alloca(limit * sizeof(uint32_t)));
  size_t n = tokens_of(pcs, depth, context.size_bytes, tokens, limit, broken && !state->main_thread);
  float logits[kNumClasses];
  unsigned lc = classify(model_, tokens, n, logits, confidence_);
  if (log_fd_ >= 0) log_run(lc, tokens, n);
  if (unseen_trial_ != 0 && repredict_every_ > unseen_trial_ && !model_.knows_context(tokens, n)) lc |= kUnseenContext;
  CacheCounters::bump(state->counters.model_runs);
  CacheCounters::bump(state->counters.prediction_ns, now_ns() - t0);
  return lc;
}

uint64_t LearnedPredictor::deep_key(uint64_t key, const AllocationContext& context, uintptr_t stack_low,
                                    uintptr_t stack_top) {
  uintptr_t at = context.stack_address;
  if (stack_top == 0 || at < stack_low || at > stack_top - 16 || (at & 7) != 0) return 0;
  // The heap's entry frame is [saved rbp, return address into frame 0's function]; the saved rbp is that
  // function's frame (if it keeps one), whose record holds the return address into its caller, and so on.
  uint64_t deep = key;
  int frames = 0;
  for (uintptr_t fp = *reinterpret_cast<const uintptr_t*>(at); frames < kDeepKeyFrames; ++frames) {
    if (fp <= at || (fp & 7) != 0 || fp > stack_top - 16) break;
    const auto* f = reinterpret_cast<const uintptr_t*>(fp);
    deep = (deep ^ f[1]) * 0x9E3779B97F4A7C15ull;
    deep ^= deep >> 31;
    at = fp;
    fp = f[0];
  }
  return frames == 0 ? 0 : deep | 1;
}

unsigned LearnedPredictor::predict(const AllocationContext& context) {
  ThreadState* state = thread_state();
  if (state == nullptr || state->busy) return model_.default_class();
  uint64_t key = cache_key(context.return_address, context.stack_address, size_class(context.size_bytes));
  state->busy = true;
  auto& e = state->cache.slot(key);
  // The callers above frame 0 (0 before the thread's first model run has found its stack's bounds). Their tag
  // in the entry tells whether this allocation came by the entry's call path: the fast path comes here every
  // kPredictionCheckEvery hits, misses and re-predictions always do.
  uint64_t deep = deep_key(key, context, state->stack_low.load(std::memory_order_relaxed),
                           state->stack_top.load(std::memory_order_relaxed));
  uint16_t tag = deep == 0 ? 0 : uint16_t((deep >> 48) | 1);
  if (e.key == key && e.hits != kDeepEntryHits && tag != 0 && e.context != 0 && e.context != tag) {
    // Another call path with the same key: from now on each allocation with it is keyed by its callers too.
    e.hits = kDeepEntryHits;
    e.backoff = 0;
    CacheCounters::bump(state->counters.shared_keys);
  }
  unsigned lc;
  if (e.key == key && e.hits == kDeepEntryHits) {
    if (deep != 0 && deep != key) {
      lc = state->cache.lookup(deep, repredict_every_, state->counters, [&] { return run_model(context, state); },
                               repredict_backoff_, unseen_trial_);
    } else {
      CacheCounters::bump(state->counters.hits);
      lc = e.lifetime_class;
    }
  } else {
    lc = state->cache.lookup(key, repredict_every_, state->counters, [&] { return run_model(context, state); },
                             repredict_backoff_, unseen_trial_);
    if (e.key == key) {
      if (e.context == 0) e.context = tag;
      // The next check comes after a random number of hits (1 to kPredictionCheckEvery), not always after
      // kPredictionCheckEvery: a program whose call paths through one key repeat with a period that divides it
      // had every check meet the same path. image-server's Chain::end calls Tracer::start four times per
      // request, and the three paths after the first never ran the model (docs/prediction.md). The hits
      // counter moves by less than kPredictionCheckEvery, so re-predictions come as often as before.
      if (e.hits != kDeepEntryHits) {
        uint64_t r = (state->counters.hits.load(std::memory_order_relaxed) ^ key) * 0x9E3779B97F4A7C15ull;
        uint32_t low = uint32_t(r >> 58) & (kPredictionCheckEvery - 1);
        uint32_t jittered = (e.hits & ~(kPredictionCheckEvery - 1)) | low;
        if (jittered != kDeepEntryHits) e.hits = jittered;
      }
    }
  }
  state->busy = false;
  return lc;
}

bool LearnedPredictor::thread_cache(PredictionCacheView* view) {
  ThreadState* state = thread_state();
  if (state == nullptr) return false;
  view->entries = state->cache.entries();
  view->shift = ThreadState::kLogCacheEntries == 0 ? 64 : 64 - ThreadState::kLogCacheEntries;
  view->repredict_every = repredict_every_ == 0 ? UINT32_MAX : repredict_every_;
  view->hits = &state->counters.hits;
  return true;
}

bool LearnedPredictor::drop_thread_cache(const PredictionCacheView& view) {
  if (g_states == nullptr || view.entries == nullptr) return false;
  uintptr_t at = reinterpret_cast<uintptr_t>(view.entries), base = reinterpret_cast<uintptr_t>(g_states);
  if (at < base || (at - base) % sizeof(ThreadState) != 0 || (at - base) / sizeof(ThreadState) >= kMaxThreads)
    return false;  // not one of ours
  drop_cache_pages(reinterpret_cast<ThreadState*>(at));
  return true;
}

void LearnedPredictor::set_log_fd(int fd) { log_fd_ = fd; }

// One line per model run, "class: token ids", written with one write(2) so that lines of threads do not mix.
void LearnedPredictor::log_run(unsigned lc, const uint32_t* tokens, size_t n) {
  char line[kMaxTokens * 11 + 16];
  size_t len = 0;
  auto put_u = [&](uint32_t v) {
    char digits[12];
    int k = 0;
    do digits[k++] = char('0' + v % 10); while ((v /= 10) != 0);
    while (k) line[len++] = digits[--k];
  };
  put_u(lc);
  line[len++] = ':';
  for (size_t i = 0; i < n; ++i) {
    line[len++] = ' ';
    put_u(tokens[i]);
  }
  line[len++] = '\n';
  ssize_t w = write(log_fd_, line, len);
  (void)w;
}

PredictionTotals LearnedPredictor::totals() const {
  PredictionTotals t;
  uint32_t used = g_states_used.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < used; ++i) {
    const CacheCounters& c = g_states[i].counters;
    t.hits += c.hits.load(std::memory_order_relaxed);
    t.misses += c.misses.load(std::memory_order_relaxed);
    t.model_runs += c.model_runs.load(std::memory_order_relaxed);
    t.prediction_ns += c.prediction_ns.load(std::memory_order_relaxed);
    t.repredictions += c.repredictions.load(std::memory_order_relaxed);
    t.repredictions_changed += c.repredictions_changed.load(std::memory_order_relaxed);
    t.shared_keys += c.shared_keys.load(std::memory_order_relaxed);
    t.unseen += c.unseen.load(std::memory_order_relaxed);
  }
  return t;
}

void LearnedPredictor::trim() {
  drop_cold_warm_states();
  uint64_t runs = totals().model_runs;
  if (runs_at_trim_.exchange(runs, std::memory_order_relaxed) != runs) return;  // (ran since: still in use)
  model_.drop_resident();
  tables_.drop_resident();
}

void LearnedPredictor::report(Counters& counters) {
  PredictionTotals t = totals();
  counters.prediction_cache_hits.store(t.hits, std::memory_order_relaxed);
  counters.prediction_cache_misses.store(t.misses, std::memory_order_relaxed);
  counters.model_runs.store(t.model_runs, std::memory_order_relaxed);
  counters.prediction_ns.store(t.prediction_ns, std::memory_order_relaxed);
  counters.repredictions_changed.store(t.repredictions_changed, std::memory_order_relaxed);
  counters.prediction_keys_shared.store(t.shared_keys, std::memory_order_relaxed);
  counters.prediction_unseen_contexts.store(t.unseen, std::memory_order_relaxed);
}

}  // namespace llamalloc::model

