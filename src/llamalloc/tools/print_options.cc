// llamalloc-options: prints the options table as Markdown (docs/options.md), or checks a file against it; checks
// NAME=VALUE settings against the heap's table (`llamalloc run --option`, `llamalloc simulate --option`); prints
// the shared vocabulary (vocabulary.h) as JSON for python/tests/test_vocabulary.py.
#include <cstdio>
#include <cstring>
#include <string>

#include "options.h"
#include "vocabulary.h"

namespace {

// The values of vocabulary.h, and each bucket function at the sizes where its buckets change, as JSON.
void print_vocabulary() {
  using namespace llamalloc;
  printf("{\n  \"max_classes\": %u,\n  \"never_freed_class\": %u,\n  \"longest_lifetime_class\": %u,\n",
         kMaxClasses, kNeverFreedClass, kLongestLifetimeClass);
  printf("  \"class_bounds_ns\": [");
  for (unsigned c = 0; c < kLongestLifetimeClass; ++c)
    printf("%s%llu", c ? ", " : "", (unsigned long long)lifetime_class_bound_ns(c));
  printf("],\n  \"model_size_buckets\": %u,\n  \"smallest_model_size_bucket\": %u,\n", kModelSizeBuckets,
         kSmallestModelSizeBucket);
  // Sizes around every power of two up to 2^62, and small sizes one by one.
  std::string sizes, model, profile;
  auto add = [&](uint64_t size) {
    char text[96];
    snprintf(text, sizeof(text), "%s%llu", sizes.empty() ? "" : ", ", (unsigned long long)size);
    sizes += text;
    snprintf(text, sizeof(text), "%s%u", model.empty() ? "" : ", ", model_size_bucket(size));
    model += text;
    snprintf(text, sizeof(text), "%s%llu", profile.empty() ? "" : ", ",
             (unsigned long long)profile_size_bucket(size));
    profile += text;
  };
  for (uint64_t s = 0; s <= 1100; ++s) add(s);
  for (unsigned k = 11; k < 63; ++k)
    for (uint64_t s : {(uint64_t{1} << k) - 1, uint64_t{1} << k, (uint64_t{1} << k) + 1, (uint64_t{3} << (k - 1))})
      add(s);
  printf("  \"sizes\": [%s],\n  \"model_size_bucket\": [%s],\n  \"profile_size_bucket\": [%s]\n}\n",
         sizes.c_str(), model.c_str(), profile.c_str());
}

// Each NAME=VALUE (NAME with or without LLAMALLOC_) as the heap takes LLAMALLOC_NAME=VALUE at start (set_option):
// one line on stderr for each setting it refuses, "llamalloc-options: error: NAME=VALUE: <reason>"; 1 if any.
int validate(int count, char** settings) {
  constexpr char kPrefix[] = "LLAMALLOC_";
  int refused = 0;
  for (int i = 0; i < count; ++i) {
    std::string setting = settings[i];
    size_t eq = setting.find('=');
    std::string name = setting.substr(0, eq);
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(sizeof(kPrefix) - 1);
    char reason[512];
    llamalloc::Options options;
    if (eq == std::string::npos || name.empty()) {
      snprintf(reason, sizeof(reason), "expected NAME=VALUE");
    } else if (llamalloc::set_option(&options, name.c_str(), setting.c_str() + eq + 1, reason, sizeof(reason))) {
      continue;
    }
    fprintf(stderr, "llamalloc-options: error: %s: %s\n", setting.c_str(), reason);
    ++refused;
  }
  return refused ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--vocabulary") == 0) {
    print_vocabulary();
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "--validate") == 0) return validate(argc - 2, argv + 2);
  static char buf[1 << 16];
  size_t n = llamalloc::format_options_markdown(buf, sizeof(buf));
  if (n >= sizeof(buf)) {
    fprintf(stderr, "llamalloc-options: error: table larger than the buffer\n");
    return 1;
  }
  if (argc == 2 && strcmp(argv[1], "--markdown") == 0) {
    fwrite(buf, 1, n, stdout);
    return 0;
  }
  if (argc == 3 && strcmp(argv[1], "--check") == 0) {
    FILE* f = fopen(argv[2], "rb");
    if (f == nullptr) {
      fprintf(stderr, "llamalloc-options: error: cannot read %s\n", argv[2]);
      return 2;
    }
    std::string text;
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) text.append(chunk, got);
    fclose(f);
    if (text != std::string(buf, n)) {
      fprintf(stderr,
              "llamalloc-options: error: %s differs from the options table; regenerate it with "
              "llamalloc-options --markdown > %s\n",
              argv[2], argv[2]);
      return 1;
    }
    return 0;
  }
  fprintf(stderr, "usage: llamalloc-options --markdown | --check FILE | --validate NAME=VALUE ... | --vocabulary\n");
  return 2;
}
