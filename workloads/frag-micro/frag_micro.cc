// frag-micro: the fragmentation microbenchmark of the LLAMA paper, section 9.6.
//
// Short-lived 64 B objects make the heap swing between a bottom (~1 MB) and a large top; every 10,000
// allocations one long-lived object is allocated, so that the long-lived data (5 MB in all) ends up spread
// evenly across the address space the swings used. At the end every short-lived object is freed and the
// program reports how much memory the few live objects still pin: its own lower bounds (the distinct 2 MiB
// and 4 KiB pages that its live objects touch, computed from their addresses) and what the kernel says
// (RSS and AnonHugePages from /proc/self/smaps_rollup).
//
// With --long-lived-class N, and when the process runs under libllamalloc.so (llamalloc_malloc_class is
// found with dlsym), the long-lived objects are placed directly in lifetime class N: the oracle experiment.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/arguments.h"
#include "common/random.h"
#include "common/steady_state.h"

namespace fragmicro {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;
constexpr std::size_t kSmallPageBytes = std::size_t{4} << 10;

struct Options {
  std::size_t object_bytes = 64;
  std::size_t bottom_bytes = std::size_t{1} << 20;
  std::size_t top_bytes = std::size_t{1} << 30;
  std::size_t long_lived_total_bytes = std::size_t{5} << 20;
  std::size_t long_lived_every = 10000;
  int swings = 2;
  int long_lived_class = -1;  // -1: plain malloc
  std::uint64_t seed = 1;
  // The quiet phase after the last swing (docs/workloads.md): default 10 s, small scale 2 s, 0 disables it.
  double quiet_seconds = 10;
  bool quiet_seconds_given = false;
};

[[noreturn]] void usage_error(const std::string& message) {
  workloads::exit_with_usage("frag-micro", message,
                             "usage: frag-micro [--scale small|default] [--top-mb N] [--bottom-mb N] [--swings N]\n"
                             "                  [--long-lived-mb N] [--every N] [--long-lived-class N] [--seed N]\n"
                             "                  [--quiet-seconds S]\n");
}

void help() {
  std::printf("frag-micro: the LLAMA paper, section 9.6 fragmentation microbenchmark (see docs/workloads.md)\n");
}

std::uint64_t parse_number(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') usage_error(std::string(flag) + ": not a number: " + text);
  return value;
}

Options parse_options(int argc, char** argv) {
  Options options;
  workloads::read_flags(argc, argv, usage_error, help, [&](std::string_view arg, workloads::Arguments& args) {
    if (arg == "--scale") {
      if (args.small_scale()) {
        options.top_bytes = std::size_t{64} << 20;
        options.long_lived_total_bytes = std::size_t{512} << 10;
        options.swings = 2;
        if (!options.quiet_seconds_given) options.quiet_seconds = 2;
      }
    } else if (arg == "--top-mb") {
      options.top_bytes = parse_number("--top-mb", args.value()) << 20;
    } else if (arg == "--bottom-mb") {
      options.bottom_bytes = parse_number("--bottom-mb", args.value()) << 20;
    } else if (arg == "--swings") {
      options.swings = static_cast<int>(parse_number("--swings", args.value()));
    } else if (arg == "--long-lived-mb") {
      options.long_lived_total_bytes = parse_number("--long-lived-mb", args.value()) << 20;
    } else if (arg == "--every") {
      options.long_lived_every = parse_number("--every", args.value());
    } else if (arg == "--long-lived-class") {
      options.long_lived_class = static_cast<int>(parse_number("--long-lived-class", args.value()));
    } else if (arg == "--quiet-seconds") {
      args.quiet_seconds(options.quiet_seconds, options.quiet_seconds_given);
    } else if (arg == "--seed") {
      options.seed = parse_number("--seed", args.value());
    } else {
      return false;
    }
    return true;
  });
  if (options.top_bytes <= options.bottom_bytes) usage_error("--top-mb must be larger than --bottom-mb");
  if (options.swings < 1) usage_error("--swings must be at least 1");
  if (options.long_lived_every < 1) usage_error("--every must be at least 1");
  return options;
}

// A small, fast generator: the free order is random so that the objects that survive a downswing are
// scattered over the whole heap, as they are in a server.
class XorShift {
 public:
  explicit XorShift(std::uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() { return workloads::xorshift64(state_); }

 private:
  std::uint64_t state_;
};

using ClassMalloc = void* (*)(std::size_t, unsigned);

struct LongLived {
  unsigned char* address;
  std::size_t size_bytes;
};

struct Resident {
  std::uint64_t rss_bytes = 0;
  std::uint64_t anon_huge_pages_bytes = 0;
};

Resident read_smaps_rollup() {
  Resident resident;
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  // The first line names the rolled-up range; the rest are "Key:   <n> kB".
  while (std::getline(in, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "Rss: %llu kB", &kib) == 1) resident.rss_bytes = kib * 1024;
    if (std::sscanf(line.c_str(), "AnonHugePages: %llu kB", &kib) == 1) resident.anon_huge_pages_bytes = kib * 1024;
  }
  return resident;
}

// Bytes of distinct pages of `page_bytes` that the live objects touch: the footprint that an allocator
// would have if it returned every other page to the OS at once (the lower bound of the footprint: no allocator that keeps objects in place can do better).
std::uint64_t touched_page_bytes(const std::vector<LongLived>& objects, std::size_t page_bytes) {
  std::unordered_set<std::uintptr_t> pages;
  for (const LongLived& object : objects) {
    auto first = reinterpret_cast<std::uintptr_t>(object.address) / page_bytes;
    auto last = (reinterpret_cast<std::uintptr_t>(object.address) + object.size_bytes - 1) / page_bytes;
    for (auto page = first; page <= last; ++page) pages.insert(page);
  }
  return static_cast<std::uint64_t>(pages.size()) * page_bytes;
}

class Benchmark {
 public:
  explicit Benchmark(const Options& options) : options_(options), random_(options.seed) {
    if (options_.long_lived_class >= 0) {
      class_malloc_ = reinterpret_cast<ClassMalloc>(dlsym(RTLD_DEFAULT, "llamalloc_malloc_class"));
    }
    const std::size_t top_objects = options_.top_bytes / options_.object_bytes;
    const std::size_t bottom_objects = options_.bottom_bytes / options_.object_bytes;
    // The first upswing starts from empty, every later one from the bottom.
    allocations_planned_ = top_objects + (options_.swings - 1) * (top_objects - bottom_objects);
    std::size_t long_lived_count = std::max<std::size_t>(1, allocations_planned_ / options_.long_lived_every);
    long_lived_object_bytes_ = std::max<std::size_t>(16, (options_.long_lived_total_bytes / long_lived_count) & ~std::size_t{15});
    short_lived_.reserve(top_objects);
    long_lived_.reserve(long_lived_count + 1);
  }

  int run() {
    auto start = std::chrono::steady_clock::now();
    const std::size_t top_objects = options_.top_bytes / options_.object_bytes;
    const std::size_t bottom_objects = options_.bottom_bytes / options_.object_bytes;
    for (int swing = 0; swing < options_.swings; ++swing) {
      grow_to(top_objects);
      peak_resident_ = std::max(peak_resident_, read_smaps_rollup().rss_bytes);
      if (swing + 1 < options_.swings) shrink_to(bottom_objects);
    }
    shrink_to(0);
    // The index of the short-lived objects goes with them (it is the load's bookkeeping, not long-lived state).
    std::vector<std::uint64_t*>().swap(short_lived_);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // The quiet phase: only the long-lived objects are live and nothing runs. Their address-based footprints
    // do not change while nothing is allocated, so they are computed once, before the samples.
    steady_state::QuietPhase quiet(options_.quiet_seconds);
    std::string extra;
    if (quiet.enabled()) {
      extra = "\"footprint_bytes\": " + std::to_string(touched_page_bytes(long_lived_, kHugePageBytes)) +
              ", \"footprint4k_bytes\": " + std::to_string(touched_page_bytes(long_lived_, kSmallPageBytes)) +
              ", \"long_lived_objects\": " + std::to_string(long_lived_.size());
      const double live = static_cast<double>(live_bytes());
      quiet.run([live] { return live; });
    }
    return report(seconds, quiet.json(extra));
  }

 private:
  void grow_to(std::size_t target_objects) {
    while (short_lived_.size() < target_objects) {
      auto* object = static_cast<std::uint64_t*>(std::malloc(options_.object_bytes));
      if (object == nullptr) {
        std::fprintf(stderr, "frag-micro: out of memory after %zu allocations\n", allocations_);
        std::exit(1);
      }
      object[0] = allocations_;  // touch it, as a program would
      short_lived_.push_back(object);
      if (++allocations_ % options_.long_lived_every == 0) allocate_long_lived();
    }
  }

  void shrink_to(std::size_t target_objects) {
    while (short_lived_.size() > target_objects) {
      std::size_t victim = random_.next() % short_lived_.size();
      std::free(short_lived_[victim]);
      short_lived_[victim] = short_lived_.back();
      short_lived_.pop_back();
    }
  }

  void allocate_long_lived() {
    void* memory = class_malloc_ != nullptr
                       ? class_malloc_(long_lived_object_bytes_, static_cast<unsigned>(options_.long_lived_class))
                       : std::malloc(long_lived_object_bytes_);
    if (memory == nullptr) {
      std::fprintf(stderr, "frag-micro: out of memory for a long-lived object\n");
      std::exit(1);
    }
    auto* bytes = static_cast<unsigned char*>(memory);
    std::memset(bytes, static_cast<int>(long_lived_.size() & 0xff), long_lived_object_bytes_);
    long_lived_.push_back({bytes, long_lived_object_bytes_});
  }

  // The long-lived objects must still hold what was written into them: a broken allocator fails here.
  bool long_lived_intact() const {
    for (std::size_t i = 0; i < long_lived_.size(); ++i) {
      const unsigned char expected = static_cast<unsigned char>(i & 0xff);
      const LongLived& object = long_lived_[i];
      for (std::size_t b = 0; b < object.size_bytes; ++b) {
        if (object.address[b] != expected) return false;
      }
    }
    return true;
  }

  std::uint64_t live_bytes() const {
    std::uint64_t live = 0;
    for (const LongLived& object : long_lived_) live += object.size_bytes;
    return live;
  }

  int report(double seconds, const std::string& steady_state_json) const {
    Resident resident = read_smaps_rollup();
    const std::uint64_t live_bytes = this->live_bytes();
    const bool intact = long_lived_intact();
    std::printf(
        "{\"workload\": \"frag-micro\", \"ok\": %s, \"seconds\": %.3f, \"allocations\": %zu, "
        "\"allocations_per_second\": %.0f, "
        "\"object_bytes\": %zu, \"bottom_bytes\": %zu, \"top_bytes\": %zu, \"swings\": %d, "
        "\"long_lived_objects\": %zu, \"long_lived_object_bytes\": %zu, \"long_lived_placement\": \"%s\", "
        "\"long_lived_class\": %d, \"live_bytes\": %" PRIu64 ", \"footprint_bytes\": %" PRIu64
        ", \"footprint4k_bytes\": %" PRIu64 ", \"rss_bytes\": %" PRIu64 ", \"anon_huge_pages_bytes\": %" PRIu64
        ", \"peak_rss_bytes\": %" PRIu64 ", \"steady_state\": %s}\n",
        intact ? "true" : "false", seconds, allocations_,
        seconds > 0 ? static_cast<double>(allocations_) / seconds : 0.0, options_.object_bytes, options_.bottom_bytes,
        options_.top_bytes, options_.swings, long_lived_.size(), long_lived_object_bytes_,
        class_malloc_ != nullptr ? "llamalloc_malloc_class" : "malloc", options_.long_lived_class, live_bytes,
        touched_page_bytes(long_lived_, kHugePageBytes), touched_page_bytes(long_lived_, kSmallPageBytes),
        resident.rss_bytes, resident.anon_huge_pages_bytes, std::max(peak_resident_, resident.rss_bytes),
        steady_state_json.c_str());
    std::fflush(stdout);
    if (!intact) {
      std::fprintf(stderr, "frag-micro: a long-lived object lost its contents\n");
      return 1;
    }
    return 0;
  }

  Options options_;
  XorShift random_;
  ClassMalloc class_malloc_ = nullptr;
  std::size_t allocations_planned_ = 0;
  std::size_t long_lived_object_bytes_ = 0;
  std::size_t allocations_ = 0;
  std::uint64_t peak_resident_ = 0;
  std::vector<std::uint64_t*> short_lived_;
  std::vector<LongLived> long_lived_;
};

}  // namespace fragmicro

int main(int argc, char** argv) {
  fragmicro::Benchmark benchmark(fragmicro::parse_options(argc, argv));
  return benchmark.run();
}
