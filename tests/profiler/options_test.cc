// The profiler's options (LLAMALLOC_PROF_*, the second table of options.h): a bad value warns in one line and
// keeps the default, as the heap's options do; a misspelled LLAMALLOC_PROF_ name warns with the closest name.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "options.h"

namespace llamalloc {
namespace {

std::map<std::string, std::string> g_env;

const char* fake_env(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

ProfilerOptions read_with(std::map<std::string, std::string> env, std::string* err) {
  g_env = std::move(env);
  ::testing::internal::CaptureStderr();
  ProfilerOptions o = read_profiler_options(fake_env);
  *err = ::testing::internal::GetCapturedStderr();
  return o;
}

// Every field of the table, o's against want's.
void expect_options(const ProfilerOptions& o, const ProfilerOptions& want) {
#define LLAMALLOC_EXPECT_Uint(NAME, field) EXPECT_EQ(o.field, want.field) << #NAME;
#define LLAMALLOC_EXPECT_String(NAME, field) EXPECT_STREQ(o.field, want.field) << #NAME;
#define LLAMALLOC_EXPECT_Choice LLAMALLOC_EXPECT_Uint
#define LLAMALLOC_EXPECT_Seconds LLAMALLOC_EXPECT_Uint
#define LLAMALLOC_EXPECT(NAME, field, kind, def, lo, hi, help) LLAMALLOC_EXPECT_##kind(NAME, field)
  LLAMALLOC_PROF_OPTIONS(LLAMALLOC_EXPECT)
#undef LLAMALLOC_EXPECT
}

TEST(ProfilerOptionsTest, DefaultsWithoutEnvironment) {
  std::string err;
  ProfilerOptions o = read_with({}, &err);
  EXPECT_EQ(err, "");
  expect_options(o, {.mode = 0, .output = "", .sample_bytes = 524288, .interval_ns = 0, .steady_start_ns = kNoSeconds,
                     .steady_end_ns = kNoSeconds, .signal = 12, .unwind = 0, .debug = 0});
}

TEST(ProfilerOptionsTest, GoodValuesAreRead) {
  std::string err;
  ProfilerOptions o = read_with({{"LLAMALLOC_PROF_MODE", "trace"},
                                 {"LLAMALLOC_PROF_OUTPUT", "/tmp/x.%p"},
                                 {"LLAMALLOC_PROF_SAMPLE_BYTES", "1"},
                                 {"LLAMALLOC_PROF_INTERVAL_S", "0.25"},
                                 {"LLAMALLOC_PROF_STEADY_START_S", "2"},
                                 {"LLAMALLOC_PROF_STEADY_END_S", "1e-05"},
                                 {"LLAMALLOC_PROF_SIGNAL", "10"},
                                 {"LLAMALLOC_PROF_UNWIND", "dwarf"},
                                 {"LLAMALLOC_PROF_DEBUG", "1"}},
                                &err);
  EXPECT_EQ(err, "");
  expect_options(o, {.mode = 2, .output = "/tmp/x.%p", .sample_bytes = 1, .interval_ns = 250'000'000,
                     .steady_start_ns = 2'000'000'000, .steady_end_ns = 10'000, .signal = 10, .unwind = 2, .debug = 1});
}

TEST(ProfilerOptionsTest, BadValuesWarnOnceEachAndFallBackToTheDefault) {
  std::string err;
  ProfilerOptions o = read_with({{"LLAMALLOC_PROF_MODE", "profil"},
                                 {"LLAMALLOC_PROF_SAMPLE_BYTES", "4k"},
                                 {"LLAMALLOC_PROF_INTERVAL_S", "-1"},
                                 {"LLAMALLOC_PROF_STEADY_END_S", "soon"},
                                 {"LLAMALLOC_PROF_SIGNAL", "USR2"},
                                 {"LLAMALLOC_PROF_UNWIND", "libunwind"},
                                 {"LLAMALLOC_PROF_DEBUG", "2"}},
                                &err);
  EXPECT_EQ(o.mode, 0u);
  EXPECT_EQ(o.sample_bytes, 524288u);
  EXPECT_EQ(o.interval_ns, 0u);
  EXPECT_EQ(o.steady_end_ns, kNoSeconds);
  EXPECT_EQ(o.signal, 12u);
  EXPECT_EQ(o.unwind, 0u);
  EXPECT_EQ(o.debug, 0u);
  EXPECT_EQ(err,
            "llamalloc: warning: LLAMALLOC_PROF_MODE=profil is not one of off, profile, trace; using the default "
            "off\n"
            "llamalloc: warning: LLAMALLOC_PROF_SAMPLE_BYTES=4k is not an integer in [0, 1000000000000]; using the "
            "default 524288\n"
            "llamalloc: warning: LLAMALLOC_PROF_INTERVAL_S=-1 is not a number of seconds in [0, 1000000000]; using "
            "the default 0\n"
            "llamalloc: warning: LLAMALLOC_PROF_STEADY_END_S=soon is not a number of seconds in [0, 1000000000]; "
            "using the default (none)\n"
            "llamalloc: warning: LLAMALLOC_PROF_SIGNAL=USR2 is not an integer in [0, 64]; using the default 12\n"
            "llamalloc: warning: LLAMALLOC_PROF_UNWIND=libunwind is not one of auto, fp, dwarf; using the default "
            "auto\n"
            "llamalloc: warning: LLAMALLOC_PROF_DEBUG=2 is not an integer in [0, 1]; using the default 0\n");
}

TEST(ProfilerOptionsTest, SecondsTakeOnlyDecimalNumbers) {
  for (const char* bad : {"", ".", "1.5s", "inf", "nan", "0x10", " 1", "1e", "+1", "2e9"}) {
    std::string err;
    ProfilerOptions o = read_with({{"LLAMALLOC_PROF_INTERVAL_S", bad}}, &err);
    EXPECT_EQ(o.interval_ns, 0u) << bad;
    EXPECT_NE(err.find("LLAMALLOC_PROF_INTERVAL_S="), std::string::npos) << bad;
  }
  for (auto [good, ns] : std::vector<std::pair<const char*, uint64_t>>{
           {"0", 0}, {"0.0", 0}, {"1.", 1'000'000'000}, {".5", 500'000'000}, {"1.5E+1", 15'000'000'000}}) {
    std::string err;
    EXPECT_EQ(read_with({{"LLAMALLOC_PROF_INTERVAL_S", good}}, &err).interval_ns, ns) << good;
    EXPECT_EQ(err, "") << good;
  }
}

std::vector<std::string> g_warnings;
void collect(const char* line) { g_warnings.emplace_back(line); }

TEST(ProfilerOptionsTest, MisspelledNamesWarnWithTheClosestOne) {
  char interval[] = "LLAMALLOC_PROF_INTERVL=1";
  char mode[] = "LLAMALLOC_PROF_MODE=profile";
  char heap[] = "LLAMALLOC_DEADLIN_K=3";
  char* env[] = {interval, mode, heap, nullptr};
  g_warnings.clear();
  EXPECT_EQ(check_environment_names(env, collect, /*profiler_names=*/true), 1u);
  ASSERT_EQ(g_warnings.size(), 1u);
  EXPECT_EQ(g_warnings[0],
            "llamalloc: warning: LLAMALLOC_PROF_INTERVL is not a llamalloc option (did you mean "
            "LLAMALLOC_PROF_INTERVAL_S?); ignored\n");
  // The heap checks the other names, and leaves the profiler's to the profiler: one warning each.
  g_warnings.clear();
  EXPECT_EQ(check_environment_names(env, collect), 1u);
  ASSERT_EQ(g_warnings.size(), 1u);
  EXPECT_NE(g_warnings[0].find("LLAMALLOC_DEADLIN_K"), std::string::npos);
}

TEST(ProfilerOptionsTest, MarkdownHasAProfilerSection) {
  static char buf[1 << 16];
  size_t n = format_options_markdown(buf, sizeof(buf));
  ASSERT_LT(n, sizeof(buf));
  std::string md(buf, n);
  size_t section = md.find("\n## Profiler\n");
  ASSERT_NE(section, std::string::npos);
  for (const char* name : {"LLAMALLOC_PROF_MODE", "LLAMALLOC_PROF_OUTPUT", "LLAMALLOC_PROF_SAMPLE_BYTES",
                           "LLAMALLOC_PROF_INTERVAL_S", "LLAMALLOC_PROF_STEADY_START_S", "LLAMALLOC_PROF_STEADY_END_S",
                           "LLAMALLOC_PROF_SIGNAL", "LLAMALLOC_PROF_UNWIND", "LLAMALLOC_PROF_DEBUG"})
    EXPECT_GT(md.find(std::string("`") + name + "`"), section) << name;
  EXPECT_NE(md.find("| `LLAMALLOC_PROF_MODE` | one of off, profile, trace | off |"), std::string::npos);
}

}  // namespace
}  // namespace llamalloc
