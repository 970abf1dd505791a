#include "sim/heap_options.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace llamalloc::sim {
namespace {

std::string error_of(const std::vector<std::string>& assignments) {
  try {
    parse_heap_options(assignments, nullptr);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(HeapOptions, AssignmentsSetTheTablesFieldsAndTheRestStayAtTheirDefaults) {
  std::vector<std::string> warnings;
  Options o = parse_heap_options({"DEADLINE_K=7", "LLAMALLOC_LONG_CLASS=8", "MIN_CLASS=0", "DEADLINE_K=9"},
                                 [&](const std::string& line) { warnings.push_back(line); });
  EXPECT_EQ(o.deadline_k, 9u);  // the later one wins
  EXPECT_EQ(o.long_class, 8u);
  EXPECT_EQ(o.min_class, 0u);
  EXPECT_EQ(o.small_heap_pages, Options{}.small_heap_pages);
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(integer_option(o, "LONG_CLASS"), 8u);
}

TEST(HeapOptions, BadNamesAndValuesAreOneLineErrorsInTheLibrarysWords) {
  EXPECT_EQ(error_of({"LONG_CLASS=9"}), "--option LONG_CLASS=9: not an integer in [1, 8]");
  EXPECT_EQ(error_of({"DEADLINE_K=-1"}), "--option DEADLINE_K=-1: not an integer in [1, 1000]");
  EXPECT_EQ(error_of({"LONG_CLAS=4"}),
            "--option LONG_CLAS=4: LLAMALLOC_LONG_CLAS is not a llamalloc option (did you mean "
            "LLAMALLOC_LONG_CLASS?)");
  EXPECT_EQ(error_of({"TOKENS=t"}), "--option TOKENS: give it as --tokens");
  EXPECT_EQ(error_of({"LONG_CLASS"}), "--option wants NAME=VALUE, got 'LONG_CLASS'");
}

TEST(HeapOptions, AnOptionTheReplayDoesNotModelIsNamedAndIgnored) {
  std::vector<std::string> warnings;
  Options o = parse_heap_options({"SWEEP_MS=100"}, [&](const std::string& line) { warnings.push_back(line); });
  EXPECT_EQ(o.sweep_ms, Options{}.sweep_ms);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("LLAMALLOC_SWEEP_MS"), std::string::npos);
  // The sweeper passes' share and start are the replay's (it runs span purge and subrelease).
  warnings.clear();
  o = parse_heap_options({"SUBRELEASE=0", "SUBRELEASE_QUIET=70", "SWEEPER_FROM_MIB=0"},
                         [&](const std::string& line) { warnings.push_back(line); });
  EXPECT_EQ(o.subrelease, 0u);
  EXPECT_EQ(o.subrelease_quiet, 70u);
  EXPECT_EQ(o.sweeper_from_mib, 0u);
  EXPECT_TRUE(warnings.empty());
}

TEST(HeapOptions, OneValueIsReadAndSetByTheLibrarysTable) {
  EXPECT_EQ(option_value("--search", "LONG_CLASS", "8"), 8u);
  EXPECT_TRUE(is_option_name("DENSE_FIRST"));
  EXPECT_FALSE(is_option_name("DENSE_FRST"));
  try {
    option_value("--search", "DEADLINE_K", "0");
    ADD_FAILURE() << "DEADLINE_K=0 taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--search DEADLINE_K=0: not an integer in [1, 1000]");
  }
  Options o;
  set_integer_option(o, "SHARED_CLASS", 8);
  EXPECT_EQ(o.shared_class, 8u);
  EXPECT_EQ(integer_option(o, "SHARED_CLASS"), 8u);
  EXPECT_THROW(set_integer_option(o, "MODEL", 1), std::invalid_argument);
}

}  // namespace
}  // namespace llamalloc::sim
