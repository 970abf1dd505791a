// A queue between threads: push blocks while it is full, pop while it is empty (or held), close ends it.
//
// The queue allocates (its std::deque's blocks), and the profiler learns lifetimes from the function names on
// an allocation's stack, so the queue is defined in the namespace of the program that uses it, not in one of
// its own: the includer defines WORKLOAD_QUEUE_NAMESPACE (for example `shapes::stream`) before including this
// header, once in a translation unit.
#ifndef LLAMALLOC_WORKLOADS_COMMON_BLOCKING_QUEUE_H
#define LLAMALLOC_WORKLOADS_COMMON_BLOCKING_QUEUE_H

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>

#ifndef WORKLOAD_QUEUE_NAMESPACE
#error "define WORKLOAD_QUEUE_NAMESPACE, the program's namespace for the queue, before including blocking_queue.h"
#endif

namespace WORKLOAD_QUEUE_NAMESPACE {

template <typename T>
class BlockingQueue {
 public:
  BlockingQueue() = default;
  // At most `capacity` items wait in the queue (no limit without one).
  explicit BlockingQueue(std::size_t capacity) : capacity_(capacity) {}

  void push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_; });
    items_.push_back(std::move(item));
    not_empty_.notify_one();
  }

  // Blocks until an item comes (and the queue is not held) or the queue is closed and empty (then nothing).
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return ready(); });
    if (items_.empty()) return std::nullopt;
    return take_front();
  }

  // pop() into `out`; false when the queue is closed and empty.
  bool pop(T& out) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return ready(); });
    if (items_.empty()) return false;
    out = take_front();
    return true;
  }

  // While held, pop waits even when items are there: a consumer that is not up yet, or a sink that is down.
  void hold(bool held) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_ = held;
    not_empty_.notify_all();
  }

  // No more items come: pop drains what is left (a hold ends), then returns nothing.
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    held_ = false;
    not_empty_.notify_all();
  }

  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex_);
    return items_.size();
  }

 private:
  bool ready() const { return closed_ || (!held_ && !items_.empty()); }

  // The front item, taken out under the lock; a push that waits for room may go on.
  T take_front() {
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  const std::size_t capacity_ = std::numeric_limits<std::size_t>::max();
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  bool held_ = false;
  bool closed_ = false;
};

}  // namespace WORKLOAD_QUEUE_NAMESPACE

#endif  // LLAMALLOC_WORKLOADS_COMMON_BLOCKING_QUEUE_H
