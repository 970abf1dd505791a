// Helper of the model tests: a thread on a stack the test chose, as the prediction caches key warm states by the
// mapping a thread's stack is in.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>

#include <cstddef>
#include <functional>

namespace llamalloc::model::test {

// Runs fn on a thread whose stack is `stack` (bytes), and joins it.
inline void run_on_stack(void* stack, size_t bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstack(&attr, stack, bytes), 0);
  pthread_t t;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, &attr, trampoline, const_cast<std::function<void()>*>(&fn)), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

// Two thread stacks, each a mapping of its own as glibc's thread stacks are (an inaccessible page between them):
// a, of kBytes, and b, of kBytes - 4096 after the page. Unmapped with the object.
class TwoStacks {
 public:
  static constexpr size_t kBytes = 1 << 20;

  TwoStacks() {
    void* m = mmap(nullptr, 2 * kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(static_cast<char*>(m) + kBytes, 4096, PROT_NONE) != 0) {
      ADD_FAILURE() << "cannot map two thread stacks";
      return;
    }
    mapping_ = m;
    a = m;
    b = static_cast<char*>(m) + kBytes + 4096;
  }
  ~TwoStacks() {
    if (mapping_ != nullptr) munmap(mapping_, 2 * kBytes);
  }
  TwoStacks(const TwoStacks&) = delete;
  TwoStacks& operator=(const TwoStacks&) = delete;

  void* a = nullptr;
  void* b = nullptr;

 private:
  void* mapping_ = nullptr;
};

}  // namespace llamalloc::model::test
