#include "options.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "base.h"

namespace llamalloc {

namespace {

constinit Options g_options;

void warn_bad(const char* name, const char* value, const char* expected, const char* fallback) {
  char line[512];
  int n = snprintf(line, sizeof(line), "llamalloc: warning: LLAMALLOC_%s=%.200s is not %s; using the default %s\n",
                   name, value, expected, fallback);
  if (n > 0) write_stderr(line);
}

bool parse_uint(const char* text, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (*text == 0) return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    if (v > (~uint64_t{0} - 9) / 10) return false;
    v = v * 10 + uint64_t(*p - '0');
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

Options read_options(const char* (*getenv_fn)(const char*)) {
  Options o;
  char expected[96], fallback[32];
#define LLAMALLOC_READ_Uint(NAME, field, def, lo, hi)                                             \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME)) {                                            \
    if (!parse_uint(v, lo, hi, &o.field)) {                                                       \
      snprintf(expected, sizeof(expected), "an integer in [%llu, %llu]", (unsigned long long)(lo), \
               (unsigned long long)(hi));                                                         \
      snprintf(fallback, sizeof(fallback), "%llu", (unsigned long long)(def));                    \
      warn_bad(#NAME, v, expected, fallback);                                                     \
    }                                                                                             \
  }
#define LLAMALLOC_READ_String(NAME, field, def, lo, hi) \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME)) o.field = v;
#define LLAMALLOC_READ(NAME, field, kind, def, lo, hi, help) LLAMALLOC_READ_##kind(NAME, field, def, lo, hi)
  LLAMALLOC_OPTIONS(LLAMALLOC_READ)
#undef LLAMALLOC_READ
  (void)expected;
  (void)fallback;
  return o;
}

const Options& options() { return g_options; }

// String options are copied here at start: the environment block is the program's, and some programs rewrite it
// (redis's setproctitle moves environ and overwrites the original strings), which would silently change them.
constexpr size_t kStringOptionBytes = 4096;
#define LLAMALLOC_STORAGE_Uint(NAME, field)
#define LLAMALLOC_STORAGE_String(NAME, field) static char g_option_##field[kStringOptionBytes];
#define LLAMALLOC_STORAGE(NAME, field, kind, def, lo, hi, help) LLAMALLOC_STORAGE_##kind(NAME, field)
LLAMALLOC_OPTIONS(LLAMALLOC_STORAGE)
#undef LLAMALLOC_STORAGE

static const char* keep_string_option(const char* name, const char* value, const char* fallback, char* storage) {
  size_t n = strlen(value);
  if (n >= kStringOptionBytes) {
    warn_bad(name, value, "a path shorter than 4096 bytes", *fallback ? fallback : "(empty)");
    return fallback;
  }
  memcpy(storage, value, n + 1);
  return storage;
}

void init_options() {
  g_options = read_options([](const char* name) -> const char* { return getenv(name); });
#define LLAMALLOC_KEEP_Uint(NAME, field, def)
#define LLAMALLOC_KEEP_String(NAME, field, def) \
  g_options.field = keep_string_option(#NAME, g_options.field, def, g_option_##field);
#define LLAMALLOC_KEEP(NAME, field, kind, def, lo, hi, help) LLAMALLOC_KEEP_##kind(NAME, field, def)
  LLAMALLOC_OPTIONS(LLAMALLOC_KEEP)
#undef LLAMALLOC_KEEP
}

size_t format_options_markdown(char* buf, size_t capacity) {
  size_t used = 0;
  auto put = [&](const char* text) {
    size_t n = strlen(text);
    if (used + n < capacity) memcpy(buf + used, text, n);
    used += n;
    if (used < capacity) buf[used] = 0;
  };
  char line[1024];
  put("# Options\n\n");
  put("<!-- Generated from src/llamalloc/options.h by `llamalloc-options --markdown`; a test checks it. -->\n\n");
  put("Each option is an environment variable, read once when the allocator starts. A bad value gives one "
      "warning line naming the variable, and the default is used.\n\n");
  put("| variable | type | default | meaning |\n| --- | --- | --- | --- |\n");
#define LLAMALLOC_DOC_Uint(NAME, def, lo, hi, help)                                                       \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | integer in [%llu, %llu] | %llu | %s |\n", #NAME,       \
           (unsigned long long)(lo), (unsigned long long)(hi), (unsigned long long)(def), help);          \
  put(line);
#define LLAMALLOC_DOC_String(NAME, def, lo, hi, help)                                                     \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | path | %s | %s |\n", #NAME, *def ? def : "(empty)", help); \
  put(line);
#define LLAMALLOC_DOC(NAME, field, kind, def, lo, hi, help) LLAMALLOC_DOC_##kind(NAME, def, lo, hi, help)
  LLAMALLOC_OPTIONS(LLAMALLOC_DOC)
#undef LLAMALLOC_DOC
  return used;
}

}  // namespace llamalloc
