#include "sim/heap_options.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
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
                                                 "LEARN_SAMPLE_EVERY", "LEARN_MARGIN"};
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

// The (name, value) pairs read_options sees through its getenv-like function, which cannot carry a context.
const std::vector<std::pair<std::string, std::string>>* g_assignments = nullptr;

const char* lookup(const char* variable) {
  if (std::strncmp(variable, kPrefix, sizeof(kPrefix) - 1) != 0) return nullptr;
  const char* name = variable + sizeof(kPrefix) - 1;
  const char* found = nullptr;
  for (const auto& [n, value] : *g_assignments)
    if (n == name) found = value.c_str();
  return found;
}

// What a call writes to stderr (the library's option warnings, written there with write(2)), captured.
std::string stderr_of(const std::function<void()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("cannot make a pipe to read the option parser's warnings");
  std::fflush(stderr);
  int saved = ::dup(2);
  ::dup2(fds[1], 2);
  ::close(fds[1]);
  fn();
  ::dup2(saved, 2);
  ::close(saved);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) text.append(buf, size_t(n));
  ::close(fds[0]);
  return text;
}

// The library's warning about a value, "llamalloc: warning: LLAMALLOC_NAME=VALUE is not ...; using the default
// D", reduced to its reason ("not ...").
std::string reason_of(const std::string& warning, const std::string& name, const std::string& value) {
  std::string line = warning.substr(0, warning.find('\n'));
  std::string head = std::string("llamalloc: warning: ") + kPrefix + name + "=" + value.substr(0, 200) + " is ";
  if (line.rfind(head, 0) != 0) return line;
  line = line.substr(head.size());
  size_t tail = line.find("; using the default");
  return tail == std::string::npos ? line : line.substr(0, tail);
}

// The library's words for a name that is not an option (check_environment_names: with the closest option when
// one is near).
std::string unknown_name_message(const std::string& name) {
  static std::string message;
  message.clear();
  std::string entry = kPrefix + name + "=";
  char* env[] = {entry.data(), nullptr};
  check_environment_names(env, [](const char* line) { message = line; });
  const std::string warning = "llamalloc: warning: ";
  std::string m = message.rfind(warning, 0) == 0 ? message.substr(warning.size()) : message;
  size_t tail = m.find("; ignored");
  if (tail != std::string::npos) m = m.substr(0, tail);
  return m.empty() ? std::string(kPrefix) + name + " is not a llamalloc option (see docs/options.md)" : m;
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

// The library's parser on one assignment: its warning is the refusal ("" when it takes the value).
std::string refusal_of(const std::string& name, const std::string& value, Options* parsed) {
  std::vector<std::pair<std::string, std::string>> one = {{name, value}};
  g_assignments = &one;
  Options o;
  std::string warning = stderr_of([&] { o = read_options(lookup); });
  g_assignments = nullptr;
  if (parsed != nullptr) *parsed = o;
  return warning.empty() ? std::string() : reason_of(warning, name, value);
}

}  // namespace

uint64_t option_value(const std::string& flag, const std::string& name, const std::string& value) {
  if (!is_one_of(name, kOptionNames))
    throw std::invalid_argument(flag + " " + name + "=" + value + ": " + unknown_name_message(name));
  Options parsed;
  std::string refusal = refusal_of(name, value, &parsed);
  if (!refusal.empty()) throw std::invalid_argument(flag + " " + name + "=" + value + ": " + refusal);
  return integer_option(parsed, name);
}

Options parse_heap_options(const std::vector<std::string>& assignments,
                           const std::function<void(const std::string&)>& warn) {
  std::vector<std::pair<std::string, std::string>> replayed;
  for (const std::string& assignment : assignments) {
    size_t eq = assignment.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("--heap-option wants NAME=VALUE, got '" + assignment + "'");
    std::string name = assignment.substr(0, eq), value = assignment.substr(eq + 1);
    if (name.rfind(kPrefix, 0) == 0) name = name.substr(sizeof(kPrefix) - 1);
    if (!is_one_of(name, kOptionNames))
      throw std::invalid_argument("--heap-option " + assignment + ": " + unknown_name_message(name));
    for (const auto& [option, flag] : kOptionFlags)
      if (name == option) throw std::invalid_argument("--heap-option " + name + ": give it as " + flag);
    std::string refusal = refusal_of(name, value, nullptr);
    if (!refusal.empty()) throw std::invalid_argument("--heap-option " + name + "=" + value + ": " + refusal);
    if (is_one_of(name, kPlacementOptionNames) || is_one_of(name, kPredictorOptionNames)) {
      replayed.emplace_back(name, value);
    } else if (warn) {
      warn("--heap-option " + name + ": the replay does not model " + kPrefix + name + "; ignored");
    }
  }
  g_assignments = &replayed;
  Options options = read_options(lookup);
  g_assignments = nullptr;
  return options;
}

}  // namespace llamalloc::sim
