// The one predictor interface: where the lifetime class of an allocation comes from (papers/000 section 7).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llamalloc {

struct Counters;

// What the allocation path knows about an allocation without unwinding: the caller's return address, the
// stack height (the frame address) and the size. The learned predictor hashes these into its cache (Figure 7).
struct AllocationContext {
  uintptr_t return_address;
  uintptr_t stack_address;
  size_t size_bytes;
};

// How often the heap consults the predictor.
enum class Consult : uint8_t {
  // Once per slow-path entry of a thread (a run of lines or a span is used up, a large object): the class it
  // returns is kept by the thread and used by the fast path until the next slow path. No per-allocation cost.
  kOnRefill,
  // On every allocation (a context-sensitive model with its own per-thread cache): the fast path hands each
  // allocation to the predictor first.
  kEveryAllocation,
};

class Predictor {
 public:
  virtual Consult consult() const = 0;
  // The lifetime class for an allocation. Called from any thread, possibly concurrently; must not allocate,
  // take a lock held by the heap, or unwind while the heap holds its lock (it is never called with it held).
  virtual unsigned predict(const AllocationContext& context) = 0;
  // Stores the predictor's own counters (cache hits and misses, model runs, ...) into the heap's, before the
  // statistics are written. Not on the allocation path.
  virtual void report(Counters&) {}

 protected:
  ~Predictor() = default;
};

// Without a model: every allocation gets one configured class (LLAMALLOC_DEFAULT_CLASS, default 0, < 10 ms).
// With class 0 the heap starts from the assumption that objects die young; huge pages whose objects outlive
// their deadline are promoted class by class (section 6.4), so long-lived data finds its class by itself, while
// the short-lived majority of a server's allocations is freed with its huge pages.
class DefaultPredictor final : public Predictor {
 public:
  constexpr explicit DefaultPredictor(unsigned lifetime_class) : lifetime_class_(lifetime_class) {}
  Consult consult() const override { return Consult::kOnRefill; }
  unsigned predict(const AllocationContext&) override { return lifetime_class_; }
  void set_class(unsigned lifetime_class) { lifetime_class_ = lifetime_class; }

 private:
  unsigned lifetime_class_;
};

}  // namespace llamalloc
