#include "sim/trace_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "sim/page_policy.h"
#include "trace_writer.h"

namespace llamalloc::sim {
namespace {

using testing::AllocEvent;
using testing::FreeEvent;
using testing::TraceBytes;

const uint64_t kStart = 1'000'000'000;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("llamalloc_sim_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TraceBytes GoodTrace() {
  TraceBytes t(kStart);
  t.Stack(1, {0x401000, 0x402000});
  t.Events({AllocEvent(kStart + 10, 0x1000, 100), AllocEvent(kStart + 20, 0x2000, 50)});
  t.Events({FreeEvent(kStart + 30, 0x1000),
            prof::TraceEvent{kStart + 40, 0x2000, 0, prof::kNoStack, 7, 0, prof::kFree | prof::kEventFromRealloc},
            prof::TraceEvent{kStart + 40, 0x3000, 80, 1, 7, 16, prof::kAlloc | prof::kEventFromRealloc}});
  t.End();
  return t;
}

std::string ErrorOf(const std::string& path) {
  try {
    TraceReader reader(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceReader, ReadsEventsAcrossRecordsRelativeToTheTraceStart) {
  std::string path = GoodTrace().Write(TempPath("good.trace"));
  TraceReader reader(path);
  EXPECT_EQ(reader.event_count(), 5u);
  std::vector<Event> events;
  Event e;
  while (reader.Next(&e)) events.push_back(e);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].time_ns, 10u);
  EXPECT_EQ(events[0].kind, EventKind::kAlloc);
  EXPECT_EQ(events[0].size_bytes, 100u);
  EXPECT_EQ(events[0].thread, 7u);
  EXPECT_EQ(events[2].kind, EventKind::kFree);
  EXPECT_EQ(events[3].kind, EventKind::kFree);  // the two halves of a realloc
  EXPECT_EQ(events[4].kind, EventKind::kAlloc);
  EXPECT_EQ(events[4].address, 0x3000u);
  reader.Rewind();
  ASSERT_TRUE(reader.Next(&e));
  EXPECT_EQ(e.address, 0x1000u);
  std::remove(path.c_str());
}

TEST(TraceReader, EveryTruncationIsReportedWithItsOffset) {
  TraceBytes t = GoodTrace();
  size_t full = t.bytes().size();
  std::string path = TempPath("cut.trace");
  for (size_t keep = 0; keep < full; keep += 4) {
    t.Write(path, keep);
    std::string error = ErrorOf(path);
    ASSERT_NE(error, "") << "a trace cut at " << keep << " bytes was accepted";
    EXPECT_NE(error.find(path + ": "), std::string::npos) << error;
    EXPECT_NE(error.find("at byte offset "), std::string::npos) << error;
    if (keep >= 8) EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  }
  // Cut inside the second event record: the offset named is that record's header.
  size_t second_record = 64 + (8 + 8 + 16) + (8 + 2 * 40);
  t.Write(path, second_record + 20);
  EXPECT_NE(ErrorOf(path).find("at byte offset " + std::to_string(second_record)), std::string::npos) << ErrorOf(path);
  std::remove(path.c_str());
}

TEST(TraceReader, ForeignAndCorruptFilesAreRefused) {
  std::string path = TempPath("foreign.trace");
  {
    std::ofstream out(path, std::ios::binary);
    out << "PK\x03\x04 this is a zip file, not a trace, and it is long enough to hold a header......";
  }
  EXPECT_NE(ErrorOf(path).find("not a llamalloc trace (bad magic) at byte offset 0"), std::string::npos) << ErrorOf(path);

  TraceBytes wrong_version = GoodTrace();
  wrong_version.bytes()[8] = 9;
  wrong_version.Write(path);
  EXPECT_NE(ErrorOf(path).find("trace version 9"), std::string::npos) << ErrorOf(path);

  TraceBytes bad_kind(kStart);
  bad_kind.Events({AllocEvent(kStart, 0x1000, 8), prof::TraceEvent{kStart, 0x1000, 0, 0, 0, 0, 77}});
  bad_kind.End();
  bad_kind.Write(path);
  EXPECT_NE(ErrorOf(path).find("corrupt event: kind 77 at byte offset " + std::to_string(64 + 8 + 40)), std::string::npos)
      << ErrorOf(path);

  TraceBytes unknown_record = GoodTrace();
  uint32_t junk[2] = {999, 0};
  unknown_record.bytes().append(reinterpret_cast<char*>(junk), 8);
  unknown_record.Write(path);
  EXPECT_NE(ErrorOf(path).find("data after the end record"), std::string::npos) << ErrorOf(path);
  std::remove(path.c_str());
}

TEST(TraceReader, ThreadBuffersOutOfTimeOrderAreReplayedInTimeOrder) {
  // Thread B's buffer (the free at t=30) reached the file before thread A's (the alloc at t=10).
  TraceBytes t(kStart);
  t.Events({FreeEvent(kStart + 30, 0x1000)});
  t.Events({AllocEvent(kStart + 10, 0x1000, 4096)});
  t.End();
  std::string path = t.Write(TempPath("unsorted.trace"));
  TraceReader reader(path);
  EXPECT_TRUE(reader.reordered());
  PagePolicy policy(12);
  RunResult r = Replay(reader, policy, EngineOptions{});
  EXPECT_EQ(r.summary.unknown_frees, 0u);
  EXPECT_EQ(r.summary.final_live_bytes, 0u);
  EXPECT_EQ(r.summary.peak_footprint_bytes, 4096u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llamalloc::sim
