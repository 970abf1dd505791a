// operator new semantics: the new handler loop and std::bad_alloc. The only file built with exceptions.
#include <new>

#include "alloc/alloc.h"

namespace llamalloc {

void* heap_new(size_t size) {
  for (;;) {
    if (void* p = heap_malloc(size)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* heap_new_aligned(size_t size, size_t alignment) {
  for (;;) {
    if (void* p = heap_memalign(alignment, size)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

}  // namespace llamalloc
