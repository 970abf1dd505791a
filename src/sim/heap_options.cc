#include "sim/heap_options.h"

#include <stdexcept>
#include <utility>

namespace llamalloc::sim {

namespace {

constexpr char kPrefix[] = "LLAMALLOC_";

// The options the replay reads besides the placement options: the predictor's rules (llama-model) and the online
// learner's (llama-online; llama-model with LEARN=1).
constexpr const char* kPredictorOptionNames[] = {"REPREDICT_EVERY",   "REPREDICT_BACKOFF",      "UNSEEN_TRIAL",
                                                 "MIN_CONFIDENCE",    "MIN_CLASS",              "LEARN",
                                                 "LEARN_MIN_SAMPLES", "LEARN_OVERRIDE_SAMPLES", "LEARN_WINDOW",
                                                 "LEARN_SAMPLE_EVERY", "LEARN_MARGIN",     "LEARN_FROM_MIB"};
// The sweeper passes' options the replay reads (llama_policy.h): subrelease's and span purge's share, and the peak
// footprint from which a single thread gets the sweeper. (SWEEP_MS is not: the passes run at its default period.)
constexpr const char* kSweeperOptionNames[] = {"SUBRELEASE", "SUBRELEASE_QUIET", "SWEEPER_FROM_MIB"};
// Options that name files: `llamalloc simulate` has flags for them (it prepares the token tables itself).
constexpr std::pair<const char*, const char*> kOptionFlags[] = {
    {"MODEL", "--model"}, {"TOKENS", "--tokens"}, {"PREDICT_LOG", "--predict-log"}};

constexpr const char* kOptionNames[] = {
#define LLAMALLOC_NAME(NAME, field, kind, def, lo, hi, help) #NAME,
    LLAMALLOC_OPTIONS(LLAMALLOC_NAME)
#undef LLAMALLOC_NAME
};

bool is_one_of(const std::string& name, const auto& names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

}  // namespace

uint64_t integer_option(const Options& options, const std::string& name) {
#define LLAMALLOC_VALUE_Uint(NAME, field) \
  if (name == #NAME) return options.field;
#define LLAMALLOC_VALUE_String(NAME, field)
#define LLAMALLOC_VALUE_Signal(NAME, field)
#define LLAMALLOC_VALUE(NAME, field, kind, def, lo, hi, help) LLAMALLOC_VALUE_##kind(NAME, field)
  LLAMALLOC_OPTIONS(LLAMALLOC_VALUE)
#undef LLAMALLOC_VALUE
#undef LLAMALLOC_VALUE_Uint
#undef LLAMALLOC_VALUE_String
#undef LLAMALLOC_VALUE_Signal
  throw std::invalid_argument(name + " is not an integer option");
}

bool is_option_name(const std::string& name) { return is_one_of(name, kOptionNames); }

void set_integer_option(Options& options, const std::string& name, uint64_t value) {
#define LLAMALLOC_SET_Uint(NAME, field) \
  if (name == #NAME) {                  \
    options.field = static_cast<decltype(options.field)>(value); \
    return;                             \
  }
#define LLAMALLOC_SET_String(NAME, field)
#define LLAMALLOC_SET_Signal(NAME, field)
#define LLAMALLOC_SET(NAME, field, kind, def, lo, hi, help) LLAMALLOC_SET_##kind(NAME, field)
  LLAMALLOC_OPTIONS(LLAMALLOC_SET)
#undef LLAMALLOC_SET
#undef LLAMALLOC_SET_Uint
#undef LLAMALLOC_SET_String
#undef LLAMALLOC_SET_Signal
  throw std::invalid_argument(name + " is not an integer option");
}

namespace {

// Sets NAME=VALUE as the library reads LLAMALLOC_NAME=VALUE; throws "<flag> NAME=VALUE: <the library's reason>".
void set_or_throw(Options* options, const std::string& flag, const std::string& name, const std::string& value) {
  char reason[512];
  if (!set_option(options, name.c_str(), value.c_str(), reason, sizeof(reason)))
    throw std::invalid_argument(flag + " " + name + "=" + value + ": " + reason);
}

}  // namespace

uint64_t option_value(const std::string& flag, const std::string& name, const std::string& value) {
  Options parsed;
  set_or_throw(&parsed, flag, name, value);
  return integer_option(parsed, name);
}

Options parse_heap_options(const std::vector<std::string>& assignments,
                           const std::function<void(const std::string&)>& warn) {
  Options options;
  for (const std::string& assignment : assignments) {
    size_t eq = assignment.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--option wants NAME=VALUE, got '" + assignment + "'");
    std::string name = assignment.substr(0, eq), value = assignment.substr(eq + 1);
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(sizeof(kPrefix) - 1);
    for (const auto& [option, flag] : kOptionFlags)
      if (name == option) throw std::invalid_argument("--option " + name + ": give it as " + flag);
    // Set on a copy: an option the replay does not model stays at its default.
    Options set = options;
    set_or_throw(&set, "--option", name, value);
    if (is_one_of(name, kPlacementOptionNames) || is_one_of(name, kPredictorOptionNames) ||
        is_one_of(name, kSweeperOptionNames)) {
      options = set;
    } else if (warn) {
      warn("--option " + name + ": the replay does not model " + kPrefix + name + "; ignored");
    }
  }
  return options;
}

}  // namespace llamalloc::sim
