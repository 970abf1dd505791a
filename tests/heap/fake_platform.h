// A fake platform and clock for running the real heap policy on pretend memory (TCMalloc's
// mock_huge_page_static_forwarder.h is the model): data addresses are never touched, only counted.
#pragma once

#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "page_heap/page_heap.h"
#include "pal/pal.h"

namespace llamalloc::testing {

class FakePlatform final : public Platform {
 public:
  // Address space: regions of `bytes` (at least min_bytes, at most what address_space_budget leaves).
  void* reserve(size_t bytes, size_t min_bytes, size_t alignment, size_t* got) override {
    if (reservations_left == 0) return nullptr;
    if (bytes > address_space_budget - reserved_bytes) bytes = address_space_budget - reserved_bytes;
    if (bytes < min_bytes) return nullptr;
    --reservations_left;
    next_ = (next_ + alignment - 1) / alignment * alignment;
    uintptr_t a = next_;
    next_ += alignment;  // the rest of the aligned slot stays free (a reservation may grow into it)
    reserved_bytes += bytes;
    reservation_ends[a + bytes] = a;
    *got = bytes;
    return reinterpret_cast<void*>(a);
  }
  int extend(void* address, size_t bytes) override {
    uintptr_t a = reinterpret_cast<uintptr_t>(address);
    if (bytes > address_space_budget - reserved_bytes) return ENOMEM;
    // Inside a reservation: a range given back (holes, by 4 KiB page) is taken again whole, unless another mapping
    // took it.
    if (holes.count(a) || holes.count(a - 4096)) {
      for (uintptr_t p = a; p < a + bytes; p += 4096)
        if (!holes.count(p) || taken.count(p)) return EEXIST;
      for (uintptr_t p = a; p < a + bytes; p += 4096) holes.erase(p);
      reserved_bytes += bytes;
      return 0;
    }
    auto it = reservation_ends.find(a);
    if (it == reservation_ends.end() || a + bytes > blocked_from) return EEXIST;
    uintptr_t start = it->second;
    reservation_ends.erase(it);
    reservation_ends[a + bytes] = start;
    reserved_bytes += bytes;
    ++extensions;
    return 0;
  }
  void unreserve(void* address, size_t bytes) override {
    uintptr_t a = reinterpret_cast<uintptr_t>(address);
    for (uintptr_t p = a; p < a + bytes; p += 4096)
      if (!holes.insert(p).second) unreserved_twice = true;
    reserved_bytes -= bytes;
    // Its memory goes with it.
    for (uintptr_t page = a & ~(kHugePageBytes - 1); page < a + bytes; page += kHugePageBytes) {
      auto it = backed.find(page);
      if (it == backed.end()) continue;
      size_t from = a > page ? a - page : 0, to = a + bytes - page < kHugePageBytes ? a + bytes - page : kHugePageBytes;
      // (Backed bytes of a page are a prefix of it; the heap unreserves suffixes or whole pages.)
      size_t gone = from < it->second ? (to < it->second ? to : it->second) - from : 0;
      if (from < it->second && to < it->second) backed_twice = true;  // a hole inside backed memory: a bug here
      it->second -= gone;
      backed_bytes -= gone;
      if (it->second == 0) backed.erase(it);
    }
  }
  size_t address_space_left() override {
    return address_space_budget == ~size_t{0} ? ~size_t{0} : address_space_budget - reserved_bytes;
  }
  // Backed bytes are counted per huge page (a huge object's last page may be backed in part).
  bool back(void* address, size_t bytes) override {
    if (backed_bytes + bytes > back_budget_bytes) return false;
    uintptr_t a = reinterpret_cast<uintptr_t>(address);
    for (uintptr_t page = a & ~(kHugePageBytes - 1); page < a + bytes; page += kHugePageBytes) {
      size_t from = a > page ? a - page : 0;
      size_t to = a + bytes - page < kHugePageBytes ? a + bytes - page : kHugePageBytes;
      auto it = backed.find(page);
      if (it == backed.end()) {
        if (ever_backed.count(page)) reused_address = true;
        ever_backed.insert(page);
        if (from != 0) backed_twice = true;  // (backed bytes of a page are a prefix of it)
        backed[page] = to;
      } else {
        if (from != it->second) backed_twice = true;  // backed again without a release in between
        it->second = to;
      }
      backed_bytes += to - from;
    }
    return true;
  }
  void release(void* address, size_t bytes) override {
    for (size_t off = 0; off < bytes; off += kHugePageBytes) {
      uintptr_t page = reinterpret_cast<uintptr_t>(address) + off;
      auto it = backed.find(page);
      if (it == backed.end()) {
        released_unbacked = true;
        continue;
      }
      backed_bytes -= it->second;
      released_bytes += it->second;
      backed.erase(it);
      released.insert(page);
    }
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
  size_t resident_small_pages(void* address, size_t bytes) override {
    auto it = resident.find(reinterpret_cast<uintptr_t>(address));
    return it != resident.end() ? it->second : default_resident < bytes / 4096 ? default_resident : bytes / 4096;
  }
  Collapse collapse_huge_page(void* address, size_t bytes) override {
    if (bytes != kHugePageBytes || reinterpret_cast<uintptr_t>(address) % kHugePageBytes != 0) bad_huge_page_advice = true;
    collapsed.push_back(reinterpret_cast<uintptr_t>(address));
    return collapse_result;
  }
  void advise_huge_page(void* address, size_t bytes) override {
    if (bytes != kHugePageBytes || reinterpret_cast<uintptr_t>(address) % kHugePageBytes != 0) bad_huge_page_advice = true;
    advised.push_back(reinterpret_cast<uintptr_t>(address));
  }
  void* map_metadata(size_t bytes) override { return real_.map_metadata(bytes); }
  void* reserve_metadata(size_t bytes) override {
    ++metadata_reservations;
    return real_.reserve_metadata(bytes);
  }
  void unmap_metadata(void* address, size_t bytes) override {
    --metadata_reservations;
    real_.unmap_metadata(address, bytes);
  }
  bool commit_metadata(void* address, size_t bytes) override { return real_.commit_metadata(address, bytes); }
  void release_metadata(void* address, size_t bytes) override { memset(address, 0, bytes); }

  std::map<uintptr_t, size_t> resident;  // 4 KiB pages resident by huge page (absent: default_resident)
  size_t default_resident = ~size_t{0};  // (at most all of them)
  std::vector<uintptr_t> collapsed;      // collapse_huge_page calls, in order
  std::vector<uintptr_t> advised;        // advise_huge_page calls, in order
  Collapse collapse_result = Collapse::kDone;
  size_t reservations_left = 1000;
  size_t back_budget_bytes = ~size_t{0};
  size_t backed_bytes = 0;
  size_t released_bytes = 0;
  size_t reserved_bytes = 0;
  size_t address_space_budget = ~size_t{0};  // finite: an RLIMIT_AS (reserve and extend stay within it)
  uintptr_t blocked_from = ~uintptr_t{0};    // another mapping from here on: extend stops below it
  size_t extensions = 0;
  size_t metadata_reservations = 0;  // reserved and not given back
  std::set<uintptr_t> holes;  // 4 KiB pages given back inside reservations (unreserve)
  std::set<uintptr_t> taken;  // of those, pages another mapping took: extend() refuses them
  bool unreserved_twice = false;
  std::map<uintptr_t, uintptr_t> reservation_ends;  // end -> start of each reservation
  size_t subreleased_bytes = 0;  // every subrelease call, summed
  std::set<std::pair<uintptr_t, size_t>> subreleased_ranges;
  bool reused_address = false;      // an address backed, released and backed again
  bool backed_twice = false;        // backed while already backed: a bug
  bool released_unbacked = false;   // released while not backed: a bug
  std::map<uintptr_t, size_t> backed;  // huge page -> bytes of it backed
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
