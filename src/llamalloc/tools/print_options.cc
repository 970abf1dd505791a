// llamalloc-options: prints the options table as Markdown (docs/options.md), or checks a file against it.
#include <cstdio>
#include <cstring>
#include <string>

#include "options.h"

int main(int argc, char** argv) {
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
  fprintf(stderr, "usage: llamalloc-options --markdown | --check FILE\n");
  return 2;
}
