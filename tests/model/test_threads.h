// Helper of the model tests: a thread on a stack the test chose, as the prediction caches key warm states by the
// mapping a thread's stack is in.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>

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

}  // namespace llamalloc::model::test
