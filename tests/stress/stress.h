// Shared by the lifecycle stress programs (tests/stress/*.cc): options, the content pattern, random numbers,
// failure reports. Everything here calls only the C allocation API, so that the programs test whichever
// allocator is preloaded (or glibc).
//
// The pattern: byte j of an object with identity `id` is byte (j % 8) of mix(id ^ (j / 8) * K). It depends on
// the offset only, not on the object's length, so a realloc'd prefix can be checked against the old identity.
#pragma once

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace stress {

inline const char* g_name = "stress";

struct Options {
  int threads = 4;         // -t: worker threads
  double seconds = 2.0;    // -s: how long the timed part runs
  long count = 0;          // -n: program-specific count (0: the program's default)
  std::uint64_t seed = 1;  // -S: random seed
  long max_rss_mib = -1;   // -m: resident-memory cap in MiB (0: none; default 1024 + 64 per thread)
};

[[noreturn, gnu::format(printf, 1, 2)]] inline void fail(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = std::snprintf(buf, sizeof buf, "%s: FAIL ", g_name);
  std::vsnprintf(buf + n, sizeof buf - n, fmt, ap);
  va_end(ap);
  std::size_t len = std::strlen(buf);
  if (len < sizeof buf - 1) buf[len++] = '\n';
  // write(2), not stdio: the heap may be what is broken.
  (void)!write(2, buf, len);
  std::abort();
}

inline const char* allocator_name();

// Options from argv. STRESS_EXPECT_ALLOCATOR=NAME (e.g. llamalloc) in the environment: fail unless NAME is the
// allocator in this process (so that a test cannot pass by testing glibc).
inline Options parse(int argc, char** argv, const char* name, const char* usage) {
  g_name = name;
  if (const char* want = std::getenv("STRESS_EXPECT_ALLOCATOR"); want != nullptr && *want != 0)
    if (std::strcmp(want, allocator_name()) != 0) fail("the allocator is %s, not %s", allocator_name(), want);
  Options o;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (std::strcmp(a, "-h") == 0 || std::strcmp(a, "--help") == 0) {
      std::printf("usage: %s [-t THREADS] [-s SECONDS] [-n COUNT] [-S SEED] [-m MAX_RSS_MIB]\n%s\n"
                  "  -m: fail when the resident set exceeds this many MiB (0: no cap; default 1024 + 64 per\n"
                  "      thread, far above what the live objects need: a leak is one FAIL line, not an OOM kill)\n",
                  name, usage);
      std::exit(0);
    }
    if (v == nullptr || a[0] != '-' || a[1] == 0 || a[2] != 0) {
      std::fprintf(stderr, "%s: bad arguments (try -h)\n", name);
      std::exit(2);
    }
    char* end = nullptr;
    errno = 0;
    switch (a[1]) {
      case 't': o.threads = static_cast<int>(std::strtol(v, &end, 10)); break;
      case 's': o.seconds = std::strtod(v, &end); break;
      case 'n': o.count = std::strtol(v, &end, 10); break;
      case 'S': o.seed = std::strtoull(v, &end, 10); break;
      case 'm': o.max_rss_mib = std::strtol(v, &end, 10); break;
      default: std::fprintf(stderr, "%s: unknown option %s\n", name, a); std::exit(2);
    }
    if (errno != 0 || end == v || *end != 0 || o.threads < 1 || o.threads > 4096 || o.seconds < 0 || o.count < 0) {
      std::fprintf(stderr, "%s: bad value for %s: %s\n", name, a, v);
      std::exit(2);
    }
    i++;
  }
  if (o.max_rss_mib < 0) o.max_rss_mib = 1024 + 64L * o.threads;
  return o;
}

inline long resident_mib() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
  std::fclose(f);
  return resident * sysconf(_SC_PAGESIZE) / (1024 * 1024);
}

inline long g_peak_rss_mib = 0;

// Fails when the resident set is above the cap (-m): the live objects of every program are bounded, so memory
// that keeps growing is memory the allocator does not reuse.
inline void check_rss(const Options& o, const char* when) {
  long rss = resident_mib();
  if (rss > g_peak_rss_mib) g_peak_rss_mib = rss;
  if (o.max_rss_mib > 0 && rss > o.max_rss_mib)
    fail("resident memory %ld MiB is above the cap of %ld MiB (-m) %s: memory is not being reused", rss,
         o.max_rss_mib, when);
}

inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::uint64_t word_of(std::uint64_t id, std::size_t word_index) {
  return mix(id ^ (word_index * 0xD6E8FEB86659FD93ull));
}

inline void fill(void* p, std::size_t n, std::uint64_t id) {
  auto* b = static_cast<unsigned char*>(p);
  std::size_t words = n / 8;
  for (std::size_t k = 0; k < words; k++) {
    std::uint64_t w = word_of(id, k);
    std::memcpy(b + 8 * k, &w, 8);
  }
  if (n % 8) {
    std::uint64_t w = word_of(id, words);
    std::memcpy(b + 8 * words, &w, n % 8);
  }
}

// The first offset in [0, n) whose byte is not the pattern's, or n when all are.
inline std::size_t first_bad(const void* p, std::size_t n, std::uint64_t id) {
  auto* b = static_cast<const unsigned char*>(p);
  std::size_t words = n / 8;
  for (std::size_t k = 0; k < words; k++) {
    std::uint64_t w = word_of(id, k), got;
    std::memcpy(&got, b + 8 * k, 8);
    if (got != w) {
      for (std::size_t j = 0; j < 8; j++)
        if (((got >> (8 * j)) & 0xff) != ((w >> (8 * j)) & 0xff)) return 8 * k + j;
    }
  }
  if (n % 8) {
    std::uint64_t w = word_of(id, words);
    for (std::size_t j = 0; j < n % 8; j++)
      if (b[8 * words + j] != ((w >> (8 * j)) & 0xff)) return 8 * words + j;
  }
  return n;
}

inline void check(const void* p, std::size_t n, std::uint64_t id, const char* what) {
  std::size_t bad = first_bad(p, n, id);
  if (bad != n) {
    fail("%s: object %p (%zu bytes, id %" PRIx64 ") corrupted at offset %zu: byte 0x%02x", what, p, n, id, bad,
         static_cast<const unsigned char*>(p)[bad]);
  }
}

inline void check_usable(const void* p, std::size_t n, const char* what) {
  std::size_t usable = malloc_usable_size(const_cast<void*>(p));
  if (usable < n) fail("%s: malloc_usable_size(%p) = %zu < %zu asked", what, p, usable, n);
}

inline void check_zero(const void* p, std::size_t n, const char* what) {
  auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t j = 0; j < n; j++)
    if (b[j] != 0) fail("%s: calloc'd %p (%zu bytes) not zero at offset %zu", what, p, n, j);
}

struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(mix(seed) | 1) {}
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  std::size_t between(std::size_t lo, std::size_t hi) { return lo + below(hi - lo + 1); }  // inclusive
  bool chance(unsigned percent) { return below(100) < percent; }
};

// Sizes from tiny to huge: mostly small, some medium and large, a few above a 2 MiB huge page.
inline std::size_t random_size(Rng& r, std::size_t max_size) {
  unsigned c = static_cast<unsigned>(r.below(1000));
  std::size_t n;
  if (c < 550) n = r.between(1, 256);
  else if (c < 800) n = r.between(257, 8192);
  else if (c < 950) n = r.between(8193, 64 * 1024);
  else if (c < 995) n = r.between(64 * 1024 + 1, 1024 * 1024);
  else n = r.between(1024 * 1024 + 1, 4 * 1024 * 1024);
  return n < max_size ? n : max_size;
}

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Lets the workers run for o.seconds, checking the resident set every 10 ms (`when`: what is going on).
inline void run_checking_rss(const Options& o, const char* when) {
  double end = now() + o.seconds;
  while (now() < end) {
    usleep(10000);
    check_rss(o, when);
  }
}

// Empties slots that threads exchange objects through, handing each object left in one to `destroy`; returns
// how many there were.
template <typename T, std::size_t N, typename Destroy>
long drain_slots(std::atomic<T*> (&slots)[N], Destroy destroy) {
  long n = 0;
  for (auto& s : slots)
    if (T* o = s.exchange(nullptr)) {
      destroy(o);
      n++;
    }
  return n;
}

// Is llamalloc the allocator in this process? (Printed, so that the tests can check they tested it.)
inline const char* allocator_name() {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return "unknown";
  char line[4096];
  const char* name = "glibc";
  while (std::fgets(line, sizeof line, f)) {
    if (std::strstr(line, "libllamalloc")) { name = "llamalloc"; break; }
    if (std::strstr(line, "libjemalloc")) { name = "jemalloc"; break; }
    if (std::strstr(line, "libmimalloc")) { name = "mimalloc"; break; }
    if (std::strstr(line, "libtcmalloc")) { name = "tcmalloc"; break; }
  }
  std::fclose(f);
  return name;
}

}  // namespace stress
