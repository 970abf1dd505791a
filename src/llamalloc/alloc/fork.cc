// fork(): the child inherits the heap, with only the thread that forked.
//
// Rules, and why:
// - Every lock of the runtime is held across fork() (pthread_atfork), so that no other thread of the parent is
//   halfway through a change to what it guards when the child's copy is made. They are taken in the runtime's
//   lock order (the shared heap's, the heap pool's, then the page heap's) so that fork() cannot deadlock with
//   a thread that takes them in that order.
// - In the child they are made anew instead of unlocked: the thread that locked them is the parent's.
// - The child's heap is the parent's: the heaps of the parent's other threads stay on the live list (their
//   owners do not exist in the child, so they stay idle, and the child's sweeper takes back their empty spans);
//   the objects in them stay valid, and any thread of the child may free them (remote frees).
// - The sweeper thread is not copied (alloc/sweeper.cc: forget_sweeper_in_fork_child).
#include <pthread.h>

#include "alloc/runtime_internal.h"

namespace llamalloc {

namespace {

void prepare_fork() {
  g_page_heap.shared_lock().lock();
  current_predictor()->before_fork();
  g_heap_pool.lock.lock();
  g_page_heap.lock().lock();
}

void parent_after_fork() {
  g_page_heap.lock().unlock();
  g_heap_pool.lock.unlock();
  current_predictor()->after_fork(false);
  g_page_heap.shared_lock().unlock();
}

void child_after_fork() {
  g_page_heap.lock().reset_after_fork();
  g_heap_pool.lock.reset_after_fork();
  current_predictor()->after_fork(true);
  g_page_heap.shared_lock().reset_after_fork();
  forget_sweeper_in_fork_child();
}

}  // namespace

void install_fork_handlers() { pthread_atfork(prepare_fork, parent_after_fork, child_after_fork); }

}  // namespace llamalloc
