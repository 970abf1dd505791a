#include "options.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "base.h"

namespace llamalloc {

namespace {

constinit Options g_options;

// `reason` as set_option gives it ("not an integer in [1, 8]").
void warn_bad(const char* name, const char* value, const char* reason, const char* fallback) {
  char line[512];
  int n = snprintf(line, sizeof(line), "llamalloc: warning: LLAMALLOC_%s=%.200s is %s; using the default %s\n",
                   name, value, reason, fallback);
  if (n > 0) write_stderr(line);
}

void integer_reason(uint64_t lo, uint64_t hi, char* reason, size_t capacity) {
  snprintf(reason, capacity, "not an integer in [%llu, %llu]", (unsigned long long)lo, (unsigned long long)hi);
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

// The index of `text` among the '|'-separated words of `choices`.
bool parse_choice(const char* text, const char* choices, unsigned* out) {
  size_t n = strlen(text);
  unsigned index = 0;
  for (const char* word = choices;; ++index) {
    const char* bar = strchr(word, '|');
    size_t m = bar ? size_t(bar - word) : strlen(word);
    if (m == n && strncmp(word, text, n) == 0) {
      *out = index;
      return true;
    }
    if (bar == nullptr) return false;
    word = bar + 1;
  }
}

// The index-th word of `choices`, into out.
void choice_word(const char* choices, unsigned index, char* out, size_t capacity) {
  const char* word = choices;
  for (unsigned i = 0; i < index && word != nullptr; ++i) {
    word = strchr(word, '|');
    if (word != nullptr) ++word;
  }
  if (word == nullptr) word = "";
  snprintf(out, capacity, "%.*s", int(strcspn(word, "|")), word);
}

// The words of `choices` as people read them: "a, b, c".
void choice_list(const char* choices, char* out, size_t capacity) {
  size_t n = 0;
  for (const char* p = choices; *p != 0 && n + 3 < capacity; ++p) {
    if (*p == '|') {
      out[n++] = ',';
      out[n++] = ' ';
    } else {
      out[n++] = *p;
    }
  }
  out[n] = 0;
}

// A non-negative decimal number of seconds (digits, an optional fraction, an optional exponent: what Python's
// repr of a float writes), at most hi, as nanoseconds. The syntax is checked first and the text is short, so
// strtod neither allocates nor reads a locale's words ("inf", "nan", hexadecimal).
bool parse_seconds(const char* text, uint64_t hi, uint64_t* out) {
  const char* p = text;
  auto digits = [&p] {
    const char* start = p;
    while (*p >= '0' && *p <= '9') ++p;
    return p != start;
  };
  bool whole = digits();
  bool fraction = false;
  if (*p == '.') {
    ++p;
    fraction = digits();
  }
  if (!whole && !fraction) return false;
  if (*p == 'e' || *p == 'E') {
    ++p;
    if (*p == '+' || *p == '-') ++p;
    if (!digits()) return false;
  }
  if (*p != 0 || p - text > 64) return false;
  double x = strtod(text, nullptr);
  if (!(x >= 0) || x > double(hi)) return false;
  *out = static_cast<uint64_t>(x * 1e9);
  return true;
}

// Names that start with LLAMALLOC_ and are not options, yet are ours: read by the stats dump or by the llamalloc
// command; they are not misspellings.
constexpr const char* kOtherNames[] = {"STATS_INTERVAL_S", "BUILD_DIR", "LIBDIR", "CACHE_DIR",
                                       "JAX_CACHE", "REDIS_SERVER"};
constexpr size_t kMaxNameBytes = 64;

// Edit distance of two short names (at most kMaxNameBytes; longer ones count as far apart), without allocating:
// the allocator is starting.
size_t edit_distance(const char* a, size_t na, const char* b, size_t nb) {
  if (na >= kMaxNameBytes || nb >= kMaxNameBytes) return kMaxNameBytes;
  size_t row[kMaxNameBytes + 1];
  for (size_t j = 0; j <= nb; ++j) row[j] = j;
  for (size_t i = 1; i <= na; ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= nb; ++j) {
      size_t up = row[j];
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = diagonal + cost;
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diagonal = up;
    }
  }
  return row[nb];
}

constexpr char kPrefix[] = "LLAMALLOC_";
constexpr size_t kPrefixBytes = sizeof(kPrefix) - 1;

constexpr const char* kHeapOptionNames[] = {
#define LLAMALLOC_NAME(NAME, field, kind, def, lo, hi, help) #NAME,
    LLAMALLOC_OPTIONS(LLAMALLOC_NAME)
#undef LLAMALLOC_NAME
};
constexpr const char* kProfilerOptionNames[] = {
#define LLAMALLOC_NAME(NAME, field, kind, def, lo, hi, help) #NAME,
    LLAMALLOC_PROF_OPTIONS(LLAMALLOC_NAME)
#undef LLAMALLOC_NAME
};

// The name of a list nearest to name[0, n) by edit distance, over any number of lists; `exact` when one is it.
struct Nearest {
  const char* name = nullptr;
  size_t distance = kMaxNameBytes;
  bool exact = false;

  template <size_t N>
  void consider(const char* name_, size_t n, const char* const (&candidates)[N]) {
    for (const char* candidate : candidates) {
      size_t m = strlen(candidate);
      if (m == n && strncmp(candidate, name_, n) == 0) exact = true;
      size_t d = edit_distance(name_, n, candidate, m);
      if (d < distance) {
        distance = d;
        name = candidate;
      }
    }
  }
};

// "LLAMALLOC_NAME is not a llamalloc option", with the nearest name when it is a few edits away (a third of the
// name's length, at least 1, at most 3): a misspelling, then, rather than another word.
void not_an_option(const char* name, size_t n, const Nearest& nearest, char* line, size_t capacity) {
  size_t near = n / 3 < 1 ? 1 : (n / 3 > 3 ? 3 : n / 3);
  int shown = static_cast<int>(n > 200 ? 200 : n);
  if (nearest.name != nullptr && nearest.distance <= near) {
    snprintf(line, capacity, "LLAMALLOC_%.*s is not a llamalloc option (did you mean LLAMALLOC_%s?)", shown, name,
             nearest.name);
  } else {
    snprintf(line, capacity, "LLAMALLOC_%.*s is not a llamalloc option (see docs/options.md)", shown, name);
  }
}

}  // namespace

size_t check_environment_names(char* const* env, void (*warn)(const char* line), bool profiler_names) {
  size_t unknown = 0;
  for (char* const* e = env; e != nullptr && *e != nullptr; ++e) {
    const char* entry = *e;
    if (strncmp(entry, kPrefix, kPrefixBytes) != 0) continue;
    const char* name = entry + kPrefixBytes;
    const char* eq = strchr(name, '=');
    size_t n = eq ? size_t(eq - name) : strlen(name);
    if ((n >= 5 && strncmp(name, "PROF_", 5) == 0) != profiler_names) continue;
    Nearest nearest;
    nearest.consider(name, n, kHeapOptionNames);
    nearest.consider(name, n, kProfilerOptionNames);
    nearest.consider(name, n, kOtherNames);
    if (nearest.exact) continue;
    ++unknown;
    char reason[400], line[512];
    not_an_option(name, n, nearest, reason, sizeof(reason));
    if (snprintf(line, sizeof(line), "llamalloc: warning: %s; ignored\n", reason) > 0) warn(line);
  }
  return unknown;
}

// String options are copied at start into buffers of this size (init_options); a longer value is refused.
constexpr size_t kStringOptionBytes = 4096;

bool set_option(Options* options, const char* name, const char* value, char* reason, size_t capacity) {
#define LLAMALLOC_SET_Uint(NAME, field, lo, hi)                  \
  if (strcmp(name, #NAME) == 0) {                                \
    if (parse_uint(value, lo, hi, &options->field)) return true; \
    integer_reason(lo, hi, reason, capacity);                    \
    return false;                                                \
  }
#define LLAMALLOC_SET_String(NAME, field, lo, hi)                                  \
  if (strcmp(name, #NAME) == 0) {                                                  \
    if (strlen(value) >= kStringOptionBytes) {                                     \
      snprintf(reason, capacity, "not a path shorter than %zu bytes", kStringOptionBytes); \
      return false;                                                                \
    }                                                                              \
    options->field = value;                                                        \
    return true;                                                                   \
  }
#define LLAMALLOC_SET_Signal LLAMALLOC_SET_String
#define LLAMALLOC_SET(NAME, field, kind, def, lo, hi, help) LLAMALLOC_SET_##kind(NAME, field, lo, hi)
  LLAMALLOC_OPTIONS(LLAMALLOC_SET)
#undef LLAMALLOC_SET
#undef LLAMALLOC_SET_Uint
#undef LLAMALLOC_SET_String
#undef LLAMALLOC_SET_Signal
  size_t n = strlen(name);
  Nearest profiler, other;
  profiler.consider(name, n, kProfilerOptionNames);
  other.consider(name, n, kOtherNames);
  if (profiler.exact) {
    snprintf(reason, capacity, "LLAMALLOC_%s is the profiler's option (llamalloc record, llamalloc trace), not the "
             "heap's", name);
    return false;
  }
  if (other.exact) {
    snprintf(reason, capacity, "LLAMALLOC_%s is not an option of the heap's table (docs/options.md)", name);
    return false;
  }
  // The suggestion is a heap option: a profiler option's name would be refused in turn.
  Nearest nearest;
  nearest.consider(name, n, kHeapOptionNames);
  not_an_option(name, n, nearest, reason, capacity);
  return false;
}

Options read_options(const char* (*getenv_fn)(const char*)) {
  Options o;
  char reason[96], fallback[32];
#define LLAMALLOC_FALLBACK_Uint(def) snprintf(fallback, sizeof(fallback), "%llu", (unsigned long long)(def))
#define LLAMALLOC_FALLBACK_String(def) snprintf(fallback, sizeof(fallback), "%s", *(def) ? (def) : "(empty)")
#define LLAMALLOC_FALLBACK_Signal LLAMALLOC_FALLBACK_String
#define LLAMALLOC_READ(NAME, field, kind, def, lo, hi, help)                                            \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME); v != nullptr && !set_option(&o, #NAME, v, reason, \
                                                                                  sizeof(reason))) {    \
    LLAMALLOC_FALLBACK_##kind(def);                                                                     \
    warn_bad(#NAME, v, reason, fallback);                                                               \
  }
  LLAMALLOC_OPTIONS(LLAMALLOC_READ)
#undef LLAMALLOC_READ
#undef LLAMALLOC_FALLBACK_Uint
#undef LLAMALLOC_FALLBACK_String
#undef LLAMALLOC_FALLBACK_Signal
  return o;
}

ProfilerOptions read_profiler_options(const char* (*getenv_fn)(const char*)) {
  ProfilerOptions o;
  char reason[192], fallback[32], words[160];
#define LLAMALLOC_READ_Uint(NAME, field, def, lo, hi)                                             \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME)) {                                            \
    if (!parse_uint(v, lo, hi, &o.field)) {                                                       \
      integer_reason(lo, hi, reason, sizeof(reason));                                             \
      snprintf(fallback, sizeof(fallback), "%llu", (unsigned long long)(def));                    \
      warn_bad(#NAME, v, reason, fallback);                                                       \
    }                                                                                             \
  }
#define LLAMALLOC_READ_String(NAME, field, def, lo, hi) \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME)) o.field = v;
#define LLAMALLOC_READ_Choice(NAME, field, def, lo, hi)                                           \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME)) {                                            \
    if (!parse_choice(v, lo, &o.field)) {                                                         \
      choice_list(lo, words, sizeof(words));                                                      \
      snprintf(reason, sizeof(reason), "not one of %s", words);                                   \
      choice_word(lo, unsigned(def), fallback, sizeof(fallback));                                 \
      warn_bad(#NAME, v, reason, fallback);                                                       \
    }                                                                                             \
  }
#define LLAMALLOC_READ_Seconds(NAME, field, def, lo, hi)                                          \
  if (const char* v = getenv_fn("LLAMALLOC_" #NAME)) {                                            \
    if (!parse_seconds(v, hi, &o.field)) {                                                        \
      snprintf(reason, sizeof(reason), "not a number of seconds in [%llu, %llu]",                 \
               (unsigned long long)(lo), (unsigned long long)(hi));                               \
      if ((def) == kNoSeconds) {                                                                  \
        snprintf(fallback, sizeof(fallback), "(none)");                                           \
      } else {                                                                                    \
        snprintf(fallback, sizeof(fallback), "%g", double(def) / 1e9);                            \
      }                                                                                           \
      warn_bad(#NAME, v, reason, fallback);                                                       \
    }                                                                                             \
  }
#define LLAMALLOC_READ(NAME, field, kind, def, lo, hi, help) LLAMALLOC_READ_##kind(NAME, field, def, lo, hi)
  LLAMALLOC_PROF_OPTIONS(LLAMALLOC_READ)
#undef LLAMALLOC_READ
  return o;
}

const Options& options() { return g_options; }

// String options are copied here at start: the environment block is the program's, and some programs rewrite it
// (redis's setproctitle moves environ and overwrites the original strings), which would silently change them.
#define LLAMALLOC_STORAGE_Uint(NAME, field)
#define LLAMALLOC_STORAGE_String(NAME, field) static char g_option_##field[kStringOptionBytes];
#define LLAMALLOC_STORAGE_Signal LLAMALLOC_STORAGE_String
#define LLAMALLOC_STORAGE(NAME, field, kind, def, lo, hi, help) LLAMALLOC_STORAGE_##kind(NAME, field)
LLAMALLOC_OPTIONS(LLAMALLOC_STORAGE)
#undef LLAMALLOC_STORAGE

// read_options refused a longer value (set_option), so the copy fits.
static const char* keep_string_option(const char* value, char* storage) {
  memcpy(storage, value, strlen(value) + 1);
  return storage;
}

void init_options() {
  g_options = read_options([](const char* name) -> const char* { return getenv(name); });
#define LLAMALLOC_KEEP_Uint(field)
#define LLAMALLOC_KEEP_String(field) g_options.field = keep_string_option(g_options.field, g_option_##field);
#define LLAMALLOC_KEEP_Signal LLAMALLOC_KEEP_String
#define LLAMALLOC_KEEP(NAME, field, kind, def, lo, hi, help) LLAMALLOC_KEEP_##kind(field)
  LLAMALLOC_OPTIONS(LLAMALLOC_KEEP)
#undef LLAMALLOC_KEEP
  // Misspelled names would be ignored without a word (jemalloc's and mimalloc's warn too): once, at start.
  check_environment_names(environ, write_stderr);
  if (*g_options.model != 0 && *g_options.tokens == 0) {
    write_stderr("llamalloc: warning: LLAMALLOC_MODEL is set without LLAMALLOC_TOKENS: the model sees no function "
                 "names (every frame is <unsymbolized>), only sizes; prepare the tables with `llamalloc prepare "
                 "MODEL PROGRAM -o FILE` and set LLAMALLOC_TOKENS=FILE, or use `llamalloc run --model`\n");
  }
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
  put("`llamalloc run --option NAME=VALUE` and `llamalloc simulate --option NAME=VALUE` refuse a setting the heap's "
      "table refuses before anything starts: they check it with `llamalloc-options --validate NAME=VALUE ...`, "
      "which takes NAME with or without `LLAMALLOC_` and prints one line for each setting refused, "
      "`llamalloc-options: error: NAME=VALUE: <reason>` (an unknown name, with the nearest option when one is near; "
      "a value out of range), and exits with status 1 if any is.\n\n");
  put("| variable | type | default | meaning |\n| --- | --- | --- | --- |\n");
#define LLAMALLOC_DOC_Uint(NAME, def, lo, hi, help)                                                       \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | integer in [%llu, %llu] | %llu | %s |\n", #NAME,       \
           (unsigned long long)(lo), (unsigned long long)(hi), (unsigned long long)(def), help);          \
  put(line);
#define LLAMALLOC_DOC_String(NAME, def, lo, hi, help)                                                     \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | path | %s | %s |\n", #NAME, *def ? def : "(empty)", help); \
  put(line);
#define LLAMALLOC_DOC_Signal(NAME, def, lo, hi, help)                                                     \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | signal name or number | %s | %s |\n", #NAME,             \
           *def ? def : "(empty)", help);                                                                 \
  put(line);
#define LLAMALLOC_DOC(NAME, field, kind, def, lo, hi, help) LLAMALLOC_DOC_##kind(NAME, def, lo, hi, help)
  LLAMALLOC_OPTIONS(LLAMALLOC_DOC)
  put("\n## Profiler\n\n");
  put("Read by libllamalloc_prof.so when it is preloaded (`llamalloc record`, `llamalloc trace`; docs/profiler.md), "
      "in the same way.\n\n");
  put("| variable | type | default | meaning |\n| --- | --- | --- | --- |\n");
  char words[160], word[32];
#define LLAMALLOC_DOC_Choice(NAME, def, lo, hi, help)                                                     \
  choice_list(lo, words, sizeof(words));                                                                  \
  choice_word(lo, unsigned(def), word, sizeof(word));                                                     \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | one of %s | %s | %s |\n", #NAME, words, word, help);   \
  put(line);
#define LLAMALLOC_DOC_Seconds(NAME, def, lo, hi, help)                                                    \
  if ((def) == kNoSeconds) {                                                                              \
    snprintf(word, sizeof(word), "(none)");                                                               \
  } else {                                                                                                \
    snprintf(word, sizeof(word), "%g", double(def) / 1e9);                                                \
  }                                                                                                       \
  snprintf(line, sizeof(line), "| `LLAMALLOC_%s` | seconds in [%llu, %llu] | %s | %s |\n", #NAME,          \
           (unsigned long long)(lo), (unsigned long long)(hi), word, help);                               \
  put(line);
  LLAMALLOC_PROF_OPTIONS(LLAMALLOC_DOC)
#undef LLAMALLOC_DOC
  return used;
}

}  // namespace llamalloc
