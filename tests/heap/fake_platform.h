// A fake platform and clock for running the real heap policy on pretend memory (TCMalloc's
// mock_huge_page_static_forwarder.h is the model): data addresses are never touched, only counted.
#pragma once

#include <cstring>
#include <set>

#include "heap/heap.h"
#include "pal/pal.h"

namespace llamalloc::testing {

class FakePlatform final : public Platform {
 public:
  void* reserve(size_t bytes, size_t alignment) override {
    if (reservations_left == 0) return nullptr;
    --reservations_left;
    next_ = (next_ + alignment - 1) / alignment * alignment;
    uintptr_t a = next_;
    next_ += bytes;
    reserved_bytes += bytes;
    return reinterpret_cast<void*>(a);
  }
  bool back(void* address, size_t bytes) override {
    if (backed_bytes + bytes > back_budget_bytes) return false;
    backed_bytes += bytes;
    for (size_t off = 0; off < bytes; off += kHugePageBytes) {
      uintptr_t page = reinterpret_cast<uintptr_t>(address) + off;
      if (ever_backed.count(page)) reused_address = true;  // the heap must never reuse an address
      ever_backed.insert(page);
    }
    return true;
  }
  void release(void* address, size_t bytes) override {
    backed_bytes -= bytes;
    released_bytes += bytes;
    for (size_t off = 0; off < bytes; off += kHugePageBytes)
      released.insert(reinterpret_cast<uintptr_t>(address) + off);
  }
  void subrelease(void* address, size_t bytes) override {
    subreleased_bytes += bytes;
    subreleased_ranges.insert({reinterpret_cast<uintptr_t>(address), bytes});
  }
  void allow_huge_page(void* address, size_t bytes, bool allow) override {
    if (bytes != kHugePageBytes || reinterpret_cast<uintptr_t>(address) % kHugePageBytes != 0) bad_huge_page_advice = true;
    if (allow) no_huge_page.erase(reinterpret_cast<uintptr_t>(address));
    else no_huge_page.insert(reinterpret_cast<uintptr_t>(address));
  }
  void* map_metadata(size_t bytes) override { return real_.map_metadata(bytes); }
  void release_metadata(void* address, size_t bytes) override { memset(address, 0, bytes); }

  size_t reservations_left = 1000;
  size_t back_budget_bytes = ~size_t{0};
  size_t backed_bytes = 0;
  size_t released_bytes = 0;
  size_t reserved_bytes = 0;
  size_t subreleased_bytes = 0;  // every subrelease call, summed
  std::set<std::pair<uintptr_t, size_t>> subreleased_ranges;
  bool reused_address = false;
  std::set<uintptr_t> ever_backed, released;
  std::set<uintptr_t> no_huge_page;  // huge pages kept from being collapsed again (allow_huge_page(false))
  bool bad_huge_page_advice = false;

 private:
  uintptr_t next_ = uintptr_t{1} << 40;
  LinuxPlatform real_;
};

class FakeClock final : public Clock {
 public:
  uint64_t now_ns() override { return now; }
  uint64_t now = 1'000'000'000;
};

}  // namespace llamalloc::testing
