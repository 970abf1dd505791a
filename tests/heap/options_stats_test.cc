// Options (one table, LLAMALLOC_<NAME>, one-line warnings) and the statistics JSON (docs/heap.md).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "alloc/alloc.h"
#include "alloc/heap_config.h"
#include "options.h"
#include "stats.h"

namespace llamalloc {
namespace {

// ---- a minimal JSON reader: objects, arrays, strings without escapes, non-negative integers ----
struct Json {
  enum Kind { kNumber, kString, kArray, kObject } kind = kNumber;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> fields;
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& s) : s_(s) {}
  Json parse() {
    Json v = value();
    space();
    if (pos_ != s_.size()) throw std::runtime_error("trailing text");
    return v;
  }

 private:
  void space() {
    while (pos_ < s_.size() && isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  void expect(char c) {
    space();
    if (pos_ >= s_.size() || s_[pos_] != c) throw std::runtime_error(std::string("expected ") + c);
    ++pos_;
  }
  Json value() {
    space();
    if (pos_ >= s_.size()) throw std::runtime_error("unexpected end");
    Json v;
    char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::kObject;
      ++pos_;
      space();
      if (s_[pos_] == '}') return ++pos_, v;
      for (;;) {
        std::string key = string();
        expect(':');
        if (v.fields.count(key)) throw std::runtime_error("duplicate key " + key);
        v.fields[key] = value();
        space();
        if (s_[pos_] == ',') { ++pos_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::kArray;
      ++pos_;
      space();
      if (s_[pos_] == ']') return ++pos_, v;
      for (;;) {
        v.items.push_back(value());
        space();
        if (s_[pos_] == ',') { ++pos_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::kString;
      v.text = string();
      return v;
    }
    size_t end = pos_;
    while (end < s_.size() && (isdigit(static_cast<unsigned char>(s_[end])) || s_[end] == '-')) ++end;
    if (end == pos_) throw std::runtime_error("bad value");
    v.number = std::stod(s_.substr(pos_, end - pos_));
    pos_ = end;
    return v;
  }
  std::string string() {
    expect('"');
    size_t end = s_.find('"', pos_);
    if (end == std::string::npos) throw std::runtime_error("unterminated string");
    std::string r = s_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return r;
  }
  const std::string& s_;
  size_t pos_ = 0;
};

// Every field of the statistics file (docs/heap.md).
void expect_complete_and_sane(const Json& j) {
  ASSERT_EQ(j.kind, Json::kObject);
  EXPECT_EQ(j.fields.at("format").text, "llamalloc-stats");
  EXPECT_EQ(j.fields.at("version").number, 1);
  for (const char* f : {"live_bytes", "peak_live_bytes", "footprint_bytes", "peak_footprint_bytes", "rss_bytes",
                        "anon_huge_pages_bytes", "num_classes"})
    ASSERT_TRUE(j.fields.count(f)) << "missing " << f;
  double live = j.fields.at("live_bytes").number, peak_live = j.fields.at("peak_live_bytes").number;
  double footprint = j.fields.at("footprint_bytes").number;
  EXPECT_LE(live, peak_live);
  EXPECT_LE(footprint, j.fields.at("peak_footprint_bytes").number);
  EXPECT_EQ(std::fmod(footprint, double(kHugePageBytes)), 0.0);
  // Subreleased blocks are free blocks of pages in use: never more than the footprint, whole blocks.
  ASSERT_TRUE(j.fields.count("subreleased_bytes"));
  EXPECT_LE(j.fields.at("subreleased_bytes").number, footprint);
  EXPECT_EQ(std::fmod(j.fields.at("subreleased_bytes").number, double(kBlockBytes)), 0.0);
  const Json& by_class = j.fields.at("huge_pages_by_class");
  ASSERT_EQ(by_class.kind, Json::kArray);
  ASSERT_EQ(by_class.items.size(), size_t(j.fields.at("num_classes").number));
  double pages = 0;
  for (const Json& n : by_class.items) pages += n.number;
  EXPECT_EQ(pages * kHugePageBytes, footprint);
  EXPECT_GT(j.fields.at("rss_bytes").number, 0);
  const Json& counters = j.fields.at("counters");
  for (const char* c : {"block_spans_handed_out", "blocks_recycled", "deadlines_expired", "promotions", "demotions", "huge_pages_released", "huge_slack_pages",
                        "prediction_cache_hits", "prediction_cache_misses", "model_runs", "repredictions_changed",
                        "prediction_keys_shared", "prediction_unseen_contexts", "prediction_caches_dropped"})
    EXPECT_TRUE(counters.fields.count(c)) << "missing counter " << c;
}

TEST(StatsTest, JsonHasEveryDesignFieldAndTracksLiveBytes) {
  flush_live_bytes();
  double live_before = double(g_page_heap.gauges().live_bytes.load());
  std::vector<void*> objs;
  // 10240 B is a size class: live bytes count the usable bytes of small objects (see docs/heap.md).
  for (int i = 0; i < 1000; ++i) objs.push_back(heap_malloc(10240));  // 10 MB live
  flush_live_bytes();
  char buf[8192];
  ASSERT_GT(format_stats_json(g_page_heap, buf, sizeof(buf)), 0u);
  Json j = JsonReader(buf).parse();
  expect_complete_and_sane(j);
  EXPECT_EQ(j.fields.at("live_bytes").number, live_before + 1000 * 10240);
  EXPECT_GE(j.fields.at("footprint_bytes").number, 1000 * 10240);
  EXPECT_GE(j.fields.at("counters").fields.at("block_spans_handed_out").number, 0);
  for (void* p : objs) heap_free(p);
  flush_live_bytes();
  ASSERT_GT(format_stats_json(g_page_heap, buf, sizeof(buf)), 0u);
  Json after = JsonReader(buf).parse();
  EXPECT_EQ(after.fields.at("live_bytes").number, live_before);
  EXPECT_GE(after.fields.at("peak_live_bytes").number, 1000 * 10000);
}

TEST(StatsTest, FileIsWrittenWholeThroughRename) {
  std::string path = ::testing::TempDir() + "/llamalloc_stats_test.json";
  ASSERT_TRUE(write_stats_file(g_page_heap, path.c_str()));
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  expect_complete_and_sane(JsonReader(ss.str()).parse());
  EXPECT_NE(access(path.c_str(), F_OK), -1);
  EXPECT_EQ(access((path + ".tmp").c_str(), F_OK), -1) << "no temporary left behind";
  EXPECT_FALSE(write_stats_file(g_page_heap, "/nonexistent-dir/x.json"));
  char expanded[64];
  ASSERT_TRUE(expand_stats_path("s.%p.json", expanded, sizeof(expanded)));
  EXPECT_EQ(std::string(expanded), "s." + std::to_string(getpid()) + ".json");
}

// The snapshots beside the file at exit: the tag goes before a final .json, else after a dot; %p still expands.
TEST(StatsTest, TaggedPathsPutTheTagBeforeTheJsonExtension) {
  char out[128];
  ASSERT_TRUE(tagged_stats_path("/d/stats.json", "before-exit", out, sizeof(out)));
  EXPECT_STREQ(out, "/d/stats.before-exit.json");
  ASSERT_TRUE(tagged_stats_path("stats", "signal-12", out, sizeof(out)));
  EXPECT_STREQ(out, "stats.signal-12");
  ASSERT_TRUE(tagged_stats_path(".json", "x", out, sizeof(out)));
  EXPECT_STREQ(out, ".json.x");
  ASSERT_TRUE(tagged_stats_path("s.%p.json", "signal-1", out, sizeof(out)));
  EXPECT_EQ(std::string(out), "s." + std::to_string(getpid()) + ".signal-1.json");
  char tiny[16];
  EXPECT_FALSE(tagged_stats_path("stats.json", "before-exit", tiny, sizeof(tiny)));
}

TEST(StatsTest, SignalNamesAndNumbers) {
  EXPECT_EQ(parse_signal("USR1"), SIGUSR1);
  EXPECT_EQ(parse_signal("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(parse_signal("usr2"), SIGUSR2);
  EXPECT_EQ(parse_signal("winch"), SIGWINCH);
  EXPECT_EQ(parse_signal(std::to_string(SIGUSR1).c_str()), SIGUSR1);
  EXPECT_EQ(parse_signal("40"), 40);  // a real-time signal
  for (const char* bad : std::initializer_list<const char*>{"", "KILL", "SIGSTOP", "SEGV", "9", "0", "65", "USR",
                                                            "1x", "SIGSIGUSR1", nullptr})
    EXPECT_EQ(parse_signal(bad), 0) << (bad ? bad : "(null)");
}

#ifdef LLAMALLOC_SHARED_LIBRARY
// The preloaded library writes the file at exit of a real program.
TEST(StatsTest, PreloadedProgramWritesStatsAtExit) {
  std::string path = ::testing::TempDir() + "/llamalloc_stats_exit.json";
  std::string out = ::testing::TempDir() + "/llamalloc_stats_exit.out";
  unlink(path.c_str());
  std::string cmd = "LLAMALLOC_STATS=" + path + " LD_PRELOAD=" LLAMALLOC_SHARED_LIBRARY
                    " sh -c 'echo hello; ls / >/dev/null' > " + out;
  ASSERT_EQ(system(cmd.c_str()), 0);
  std::ifstream in(path), o(out);
  std::stringstream ss, os;
  ss << in.rdbuf();
  os << o.rdbuf();
  EXPECT_EQ(os.str(), "hello\n");
  expect_complete_and_sane(JsonReader(ss.str()).parse());
}

// Programs may overwrite their environment block in place (redis's setproctitle does, to make room for its
// title): options read at start must not change with it.
TEST(StatsTest, ProgramThatOverwritesItsEnvironmentStillGetsItsStats) {
  std::string path = ::testing::TempDir() + "/llamalloc_stats_environ.json";
  unlink(path.c_str());
  // The interpreter itself (a python3 on PATH may be a shim script whose own children would write the file).
  std::string cmd = "PY=$(python3 -c 'import sys; print(sys.executable)') && LLAMALLOC_STATS=" + path +
                    " LD_PRELOAD=" LLAMALLOC_SHARED_LIBRARY " \"$PY\" -c '\n"
                    "import ctypes\n"
                    "libc = ctypes.CDLL(None)\n"
                    "env = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, \"environ\")\n"
                    "i = 0\n"
                    "while env[i]:\n"
                    "    ctypes.memset(env[i], 0, len(ctypes.string_at(env[i])))\n"
                    "    i += 1\n"
                    "'";
  ASSERT_EQ(system(cmd.c_str()), 0);
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "no statistics file at " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  expect_complete_and_sane(JsonReader(ss.str()).parse());
}
#endif

const char* fake_env(const char* name) {
  static const std::map<std::string, std::string> env = {
      {"LLAMALLOC_CLASSES", "abc"}, {"LLAMALLOC_DEFAULT_CLASS", "3"}, {"LLAMALLOC_DEADLINE_K", "0"},
      {"LLAMALLOC_STATS", "/tmp/s.json"}};
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

TEST(OptionsTest, BadValuesWarnOnceEachAndFallBackToTheDefault) {
  ::testing::internal::CaptureStderr();
  Options o = read_options(fake_env);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(o.classes, 8u);
  EXPECT_EQ(o.default_class, 3u);
  EXPECT_EQ(o.deadline_k, 4u);
  EXPECT_STREQ(o.stats, "/tmp/s.json");
  EXPECT_EQ(err,
            "llamalloc: warning: LLAMALLOC_CLASSES=abc is not an integer in [2, 8]; using the default 8\n"
            "llamalloc: warning: LLAMALLOC_DEADLINE_K=0 is not an integer in [1, 1000]; using the default 4\n");
}

// One setting as the library takes it at start: what `llamalloc-options --validate` and the replay check.
TEST(OptionsTest, SetOptionTakesWhatReadOptionsTakesAndSaysWhyNot) {
  Options o;
  char reason[256] = "";
  EXPECT_TRUE(set_option(&o, "DEADLINE_K", "7", reason, sizeof(reason)));
  EXPECT_EQ(o.deadline_k, 7u);
  EXPECT_TRUE(set_option(&o, "MODEL", "/m.model", reason, sizeof(reason)));
  EXPECT_STREQ(o.model, "/m.model");
  EXPECT_TRUE(set_option(&o, "MODEL_DIR", "/models", reason, sizeof(reason)));
  EXPECT_STREQ(o.model_dir, "/models");
  auto refusal = [&](const char* name, const char* value) {
    Options before = o;
    EXPECT_FALSE(set_option(&o, name, value, reason, sizeof(reason))) << name << "=" << value;
    EXPECT_EQ(o.deadline_k, before.deadline_k);
    return std::string(reason);
  };
  EXPECT_EQ(refusal("DEADLINE_K", "0"), "not an integer in [1, 1000]");
  EXPECT_EQ(refusal("CLASSES", "abc"), "not an integer in [2, 8]");
  EXPECT_EQ(refusal("DEADLIN_K", "3"),
            "LLAMALLOC_DEADLIN_K is not a llamalloc option (did you mean LLAMALLOC_DEADLINE_K?)");
  EXPECT_EQ(refusal("NO_SUCH_THING", "1"), "LLAMALLOC_NO_SUCH_THING is not a llamalloc option (see docs/options.md)");
  EXPECT_EQ(refusal("PROF_MODE", "trace"),
            "LLAMALLOC_PROF_MODE is the profiler's option (llamalloc record, llamalloc trace), not the heap's");
  EXPECT_EQ(refusal("CACHE_DIR", "/d"), "LLAMALLOC_CACHE_DIR is not an option of the heap's table (docs/options.md)");
  EXPECT_EQ(refusal("STATS", std::string(4096, 'x').c_str()), "not a path shorter than 4096 bytes");
  EXPECT_EQ(o.deadline_k, 7u);
}

TEST(OptionsTest, DefaultsWithoutEnvironment) {
  Options o = read_options([](const char*) -> const char* { return nullptr; });
  EXPECT_EQ(o.classes, 8u);
  EXPECT_EQ(o.default_class, 1u);
  EXPECT_STREQ(o.stats, "");
}

// Each option of the heap's placement reaches the heap's configuration (the heap's tests show what each field
// changes): a value other than the default, read from the environment, is the value the heap is built with.
TEST(OptionsTest, EveryPlacementOptionReachesTheHeapConfig) {
  static const std::map<std::string, std::string> env = {
      {"LLAMALLOC_CLASSES", "6"},           {"LLAMALLOC_DEADLINE_K", "7"},  {"LLAMALLOC_SAME_CLASS_RECYCLING", "0"},
      {"LLAMALLOC_SMALL_HEAP_PAGES", "3"},  {"LLAMALLOC_SHARED_CLASS", "5"}, {"LLAMALLOC_SUBRELEASE", "20"},
      {"LLAMALLOC_LONG_CLASS", "2"},        {"LLAMALLOC_SPAN_RECYCLING", "0"}, {"LLAMALLOC_DENSE_FIRST", "0"},
      {"LLAMALLOC_DEFAULT_CLASS", "0"}};
  HeapConfig defaults = heap_config_of(read_options([](const char*) -> const char* { return nullptr; }));
  HeapConfig c = heap_config_of(read_options([](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  }));
  EXPECT_EQ(c.num_classes, 6u);
  EXPECT_EQ(c.deadline_k, 7u);
  EXPECT_FALSE(c.same_class_recycling);
  EXPECT_EQ(c.small_heap_pages, 3u);
  EXPECT_EQ(c.shared_class_min, 5u);
  EXPECT_EQ(c.subrelease_percent, 20u);
  EXPECT_EQ(c.long_class_min, 2u);
  EXPECT_FALSE(c.span_recycling);
  EXPECT_FALSE(c.dense_first);
  EXPECT_NE(defaults.num_classes, c.num_classes);
  EXPECT_NE(defaults.deadline_k, c.deadline_k);
  EXPECT_NE(defaults.same_class_recycling, c.same_class_recycling);
  EXPECT_NE(defaults.small_heap_pages, c.small_heap_pages);
  EXPECT_NE(defaults.shared_class_min, c.shared_class_min);
  EXPECT_NE(defaults.subrelease_percent, c.subrelease_percent);
  EXPECT_NE(defaults.long_class_min, c.long_class_min);
  EXPECT_NE(defaults.span_recycling, c.span_recycling);
  EXPECT_NE(defaults.dense_first, c.dense_first);
}

TEST(OptionsTest, MarkdownListsEveryOption) {
  char buf[1 << 16];
  size_t n = format_options_markdown(buf, sizeof(buf));
  ASSERT_LT(n, sizeof(buf));
  std::string md(buf, n);
  for (const char* name : {"LLAMALLOC_CLASSES", "LLAMALLOC_DEFAULT_CLASS", "LLAMALLOC_DEADLINE_K", "LLAMALLOC_STATS",
                           "LLAMALLOC_MODEL"})
    EXPECT_NE(md.find(name), std::string::npos) << name;
}

// A predictor consulted on every allocation (what the learned predictor does) steers objects by class.
class BySizePredictor final : public Predictor {
 public:
  Consult consult() const override { return Consult::kEveryAllocation; }
  unsigned predict(const AllocationContext& c) override {
    ++calls;
    return c.size_bytes == 777 ? 5 : 0;
  }
  int calls = 0;
};

TEST(PredictorTest, EveryAllocationPredictorSeesEachAllocationAndPlacesByClass) {
  Predictor* before = predictor();
  BySizePredictor p;
  set_predictor(&p);
  void* a = heap_malloc(777);
  void* b = heap_malloc(100);
  void* c = heap_malloc(777);
  set_predictor(before);
  EXPECT_EQ(p.calls, 3);
  EXPECT_GE(g_page_heap.page_info(reinterpret_cast<uintptr_t>(a)).lifetime_class, 5u);
  EXPECT_GE(g_page_heap.page_info(reinterpret_cast<uintptr_t>(c)).lifetime_class, 5u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c) & ~(kBlockSpanBytes - 1), reinterpret_cast<uintptr_t>(a) & ~(kBlockSpanBytes - 1))
      << "same class, same span";
  heap_free(a);
  heap_free(b);
  heap_free(c);
}

}  // namespace
}  // namespace llamalloc
