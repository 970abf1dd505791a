// Every operator new and delete: one forwarding line each.
#include <new>

#include "alloc/alloc.h"

using namespace llamalloc;

#define LLAMALLOC_NEW_EXPORT __attribute__((visibility("default")))

LLAMALLOC_NEW_EXPORT void* operator new(size_t n) { return heap_new(n); }
LLAMALLOC_NEW_EXPORT void* operator new[](size_t n) { return heap_new(n); }
LLAMALLOC_NEW_EXPORT void* operator new(size_t n, const std::nothrow_t&) noexcept { return heap_new_nothrow(n); }
LLAMALLOC_NEW_EXPORT void* operator new[](size_t n, const std::nothrow_t&) noexcept { return heap_new_nothrow(n); }
LLAMALLOC_NEW_EXPORT void* operator new(size_t n, std::align_val_t a) { return heap_new_aligned(n, size_t(a)); }
LLAMALLOC_NEW_EXPORT void* operator new[](size_t n, std::align_val_t a) { return heap_new_aligned(n, size_t(a)); }
LLAMALLOC_NEW_EXPORT void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return heap_new_aligned_nothrow(n, size_t(a)); }
LLAMALLOC_NEW_EXPORT void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept { return heap_new_aligned_nothrow(n, size_t(a)); }
LLAMALLOC_NEW_EXPORT void operator delete(void* p) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete[](void* p) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete(void* p, size_t) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete[](void* p, size_t) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete(void* p, std::align_val_t) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete(void* p, size_t, std::align_val_t) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete[](void* p, size_t, std::align_val_t) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { heap_free(p); }
LLAMALLOC_NEW_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { heap_free(p); }
