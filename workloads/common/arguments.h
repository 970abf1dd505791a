// The workloads' command lines: the flags read in order, their values (whole numbers among them), the flags that
// every workload has (--scale, --quiet-seconds, -h) and the usage error. A bad command line ends the program
// through its own usage error (its message, its usage, exit status 2). Nothing here allocates but an error's
// message.
#ifndef LLAMALLOC_WORKLOADS_COMMON_ARGUMENTS_H
#define LLAMALLOC_WORKLOADS_COMMON_ARGUMENTS_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/steady_state.h"

namespace workloads {

// The program's usage error: prints `message` and the usage, and exits with status 2 (exit_with_usage).
using UsageError = void (*)(const std::string& message);
// The program's help: prints what the program is, for -h and --help.
using Help = void (*)();

// Ends the program on a bad command line: `PROGRAM: MESSAGE`, then the usage, on stderr; exit status 2.
[[noreturn]] inline void exit_with_usage(const char* program, const std::string& message, const char* usage) {
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  std::fputs(usage, stderr);
  std::exit(2);
}

// A whole number written in decimal and nothing else; false for anything else (out-of-range values saturate).
inline bool parse_number(const char* text, std::uint64_t& value) {
  char* end = nullptr;
  value = std::strtoull(text, &end, 10);
  return end != text && *end == '\0';
}

// The arguments after a flag, read by the flag's handler (read_flags).
class Arguments {
 public:
  Arguments(int argc, char** argv, UsageError usage_error) : argc_(argc), argv_(argv), usage_error_(usage_error) {}

  // Moves to the next flag; false after the last.
  bool next() { return ++index_ < argc_; }
  const char* flag() const { return argv_[index_]; }

  // The flag's value, the argument after it; a usage error when there is none.
  const char* value() {
    if (index_ + 1 >= argc_) fail(std::string(flag()) + " needs a value");
    return argv_[++index_];
  }

  // The flag's value as a whole number (parse_number); a usage error for anything else.
  std::uint64_t number() { return number_value(false); }
  // The same, and a usage error for 0.
  std::uint64_t positive_number() { return number_value(true); }

  // The value of --scale: true for small, false for default; a usage error for anything else.
  bool small_scale() {
    const std::string_view scale = value();
    if (scale != "small" && scale != "default") fail("--scale: expected small or default, got " + std::string(scale));
    return scale == "small";
  }

  // The value of --quiet-seconds: the quiet phase's length in seconds (>= 0), which a later --scale keeps.
  void quiet_seconds(double& seconds, bool& given) {
    const char* text = value();
    if (!steady_state::parse_seconds(text, seconds)) {
      fail("--quiet-seconds: expected a number of seconds >= 0, got " + std::string(text));
    }
    given = true;
  }

  [[noreturn]] void fail(const std::string& message) const {
    usage_error_(message);
    std::abort();  // a usage error exits; this is not reached
  }

 private:
  std::uint64_t number_value(bool positive) {
    const char* name = flag();
    const char* text = value();
    std::uint64_t number = 0;
    if (!parse_number(text, number) || (positive && number == 0)) {
      fail(std::string(name) + (positive ? ": expected a positive number, got " : ": expected a number, got ") + text);
    }
    return number;
  }

  int argc_;
  char** argv_;
  UsageError usage_error_;
  int index_ = 0;
};

// Reads the flags of argv in order. -h and --help print the help and exit with status 0; `flag(name, args)`
// handles every other flag, reading the values that it takes through `args`, and returns false for a flag that
// it does not know (a usage error).
template <typename Flag>
void read_flags(int argc, char** argv, UsageError usage_error, Help help, Flag&& flag) {
  for (Arguments args(argc, argv, usage_error); args.next();) {
    const std::string_view name = args.flag();
    if (name == "-h" || name == "--help") {
      help();
      std::exit(0);
    }
    if (!flag(name, args)) args.fail("unknown option " + std::string(name));
  }
}

}  // namespace workloads

#endif  // LLAMALLOC_WORKLOADS_COMMON_ARGUMENTS_H
