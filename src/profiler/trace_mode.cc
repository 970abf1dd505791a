// The trace (PROF_MODE=trace, `llamalloc trace`): every allocation and free is an event in the trace file
// (trace_format.h). A thread appends its events to a buffer of its own, written to the file when it is full,
// when the thread exits and when the trace ends; a stack is written to the file the first time it is seen, so
// it always precedes the events that name it. Rules: the file is written only under g_file_mutex; a buffer
// changes only under its own spin lock (held by its thread, or by whoever flushes it at the end); after the
// trace is closed the writer is a closed one, so a late flush writes nothing.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>

#include "profiler_internal.h"
#include "program_clock.h"

namespace llamalloc::prof {

namespace {

constexpr uint32_t kBufferEvents = 4096;  // 160 KiB per thread
constexpr uint32_t kMaxBuffers = 4096;    // threads alive at once that trace

struct TraceBuffer {
  SpinLock lock;
  uint32_t count;
  bool in_use;
  TraceEvent events[kBufferEvents];
};

pthread_mutex_t g_file_mutex = PTHREAD_MUTEX_INITIALIZER;
int g_trace_fd = -1;
char* g_trace_write_buffer;
Writer g_trace_writer;  // guarded by g_file_mutex
TraceBuffer* g_buffers[kMaxBuffers];
std::atomic<uint32_t> g_buffer_count{0};
SpinLock g_buffers_lock;
pthread_key_t g_buffer_key;
__thread TraceBuffer* t_buffer __attribute__((tls_model("initial-exec")));

void flush_buffer_locked(TraceBuffer* b) {
  if (b->count == 0) return;
  HookTimer hook;  // a write of 160 KiB: the profiler's time, also when a free fills the buffer
  pthread_mutex_lock(&g_file_mutex);
  g_trace_writer.record(RecordType::kEvents, static_cast<uint32_t>(sizeof(TraceEvent) * b->count));
  g_trace_writer.append(b->events, sizeof(TraceEvent) * b->count);
  g_trace_writer.flush();
  pthread_mutex_unlock(&g_file_mutex);
  g_events.fetch_add(b->count, std::memory_order_relaxed);
  b->count = 0;
}

void release_buffer(void* arg) {
  auto* b = static_cast<TraceBuffer*>(arg);
  b->lock.lock();
  flush_buffer_locked(b);
  b->lock.unlock();
  if (t_buffer == b) t_buffer = nullptr;
  SpinLockHolder hold(g_buffers_lock);
  b->in_use = false;
}

TraceBuffer* acquire_buffer() {
  TraceBuffer* found = nullptr;
  {
    SpinLockHolder hold(g_buffers_lock);
    uint32_t n = g_buffer_count.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i) {
      if (!g_buffers[i]->in_use) {
        found = g_buffers[i];
        break;
      }
    }
    if (found == nullptr && n < kMaxBuffers) {
      found = static_cast<TraceBuffer*>(map_zeroed(sizeof(TraceBuffer)));
      if (found != nullptr) {
        g_buffers[n] = found;
        g_buffer_count.store(n + 1, std::memory_order_release);
      }
    }
    if (found != nullptr) found->in_use = true;
  }
  if (found == nullptr) return nullptr;
  t_buffer = found;
  pthread_setspecific(g_buffer_key, found);  // flushed by release_buffer when the thread exits
  return found;
}

void emit(const TraceEvent& e) {
  TraceBuffer* b = t_buffer;
  if (LLPROF_UNLIKELY(b == nullptr)) {
    b = acquire_buffer();
    if (b == nullptr) {
      g_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  b->lock.lock();
  b->events[b->count++] = e;
  if (b->count == kBufferEvents) flush_buffer_locked(b);
  b->lock.unlock();
}

uint32_t trace_stack() {
  uint64_t pcs[kMaxStackDepth];
  int depth = capture_stack(pcs, kMaxStackDepth);
  bool is_new = false;
  uint32_t id = g_stacks.intern(pcs, depth, &is_new);
  if (is_new) {
    pthread_mutex_lock(&g_file_mutex);
    write_stack(g_trace_writer, id, pcs, static_cast<uint32_t>(depth));
    g_trace_writer.flush();
    pthread_mutex_unlock(&g_file_mutex);
  }
  if (id == kNoStack) g_dropped.fetch_add(1, std::memory_order_relaxed);
  return id;
}

bool open_trace() {
  char path[kPathBytes];
  output_path(path, sizeof(path));
  g_trace_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (g_trace_fd < 0) return false;
  g_trace_writer.open(g_trace_fd, g_trace_write_buffer, kWriterBytes);
  write_header(g_trace_writer, kTraceMagic, kTraceVersion, 0, process_identity());
  g_trace_writer.flush();
  return g_trace_writer.ok();
}

}  // namespace

bool init_trace_buffer() {
  g_trace_write_buffer = static_cast<char*>(map_zeroed(kWriterBytes));
  return g_trace_write_buffer != nullptr;
}

bool start_trace() { return pthread_key_create(&g_buffer_key, release_buffer) == 0 && open_trace(); }

void reset_trace_locks_after_fork() {
  g_buffers_lock.reset_after_fork();
  pthread_mutex_init(&g_file_mutex, nullptr);
}

bool restart_trace_after_fork() {
  uint32_t n = g_buffer_count.load(std::memory_order_relaxed);
  for (uint32_t i = 0; i < n; ++i) {
    g_buffers[i]->lock.reset_after_fork();
    g_buffers[i]->count = 0;  // the parent writes its own events
    g_buffers[i]->in_use = g_buffers[i] == t_buffer;
  }
  return open_trace();
}

void trace_alloc(void* ptr, size_t size_bytes, size_t alignment_bytes, uint32_t flags) {
  TraceEvent e;
  e.stack_id = trace_stack();
  e.time_ns = hook_program_ns();  // the allocation's return, less the profiler's time before it
  e.address = reinterpret_cast<uint64_t>(ptr);
  e.size_bytes = size_bytes;
  e.thread_id = thread_id();
  e.alignment_bytes = static_cast<uint32_t>(alignment_bytes);
  e.kind = kAlloc | flags;
  emit(e);
}

void trace_free(void* ptr, uint64_t time_ns, uint32_t flags) {
  TraceEvent e{time_ns, reinterpret_cast<uint64_t>(ptr), 0, kNoStack, thread_id(), 0, kFree | flags};
  emit(e);
}

void end_trace(bool in_signal) {
  g_mode.store(static_cast<int>(Mode::kOff), std::memory_order_relaxed);
  uint32_t n = g_buffer_count.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    if (in_signal) {
      if (lock_bounded(g_buffers[i]->lock)) {
        flush_buffer_locked(g_buffers[i]);
        g_buffers[i]->lock.unlock();
      }
      continue;
    }
    g_buffers[i]->lock.lock();
    flush_buffer_locked(g_buffers[i]);
    g_buffers[i]->lock.unlock();
  }
  if (in_signal) {
    if (pthread_mutex_trylock(&g_file_mutex) != 0) return;  // the interrupted thread is writing: give up
  } else {
    pthread_mutex_lock(&g_file_mutex);
  }
  write_mappings(g_trace_writer, g_exe_path);
  write_end(g_trace_writer, g_events.load(std::memory_order_relaxed), g_dropped.load(std::memory_order_relaxed));
  g_trace_writer.flush();
  close(g_trace_fd);
  g_trace_fd = -1;
  g_trace_writer = Writer();  // not ok: a thread still flushing its buffer writes nothing (the fd may be reused)
  pthread_mutex_unlock(&g_file_mutex);
}

}  // namespace llamalloc::prof
