#include "sim/trace_reader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "sim/page_policy.h"
#include "trace_writer.h"

namespace llamalloc::sim {
namespace {

using testing::trace_alloc_event;
using testing::trace_free_event;
using testing::TraceBytes;

const uint64_t kStart = 1'000'000'000;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("llamalloc_sim_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TraceBytes good_trace() {
  TraceBytes t(kStart);
  t.stack(1, {0x401000, 0x402000});
  t.events({trace_alloc_event(kStart + 10, 0x1000, 100), trace_alloc_event(kStart + 20, 0x2000, 50)});
  t.events({trace_free_event(kStart + 30, 0x1000),
            prof::TraceEvent{kStart + 40, 0x2000, 0, prof::kNoStack, 7, 0, prof::kFree | prof::kEventFromRealloc},
            prof::TraceEvent{kStart + 40, 0x3000, 80, 1, 7, 16, prof::kAlloc | prof::kEventFromRealloc}});
  t.end();
  return t;
}

std::string error_of(const std::string& path) {
  try {
    TraceReader reader(path);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceReader, ReadsEventsAcrossRecordsRelativeToTheTraceStart) {
  std::string path = good_trace().write(temp_path("good.trace"));
  TraceReader reader(path);
  EXPECT_EQ(reader.event_count(), 5u);
  std::vector<Event> events;
  Event e;
  while (reader.next(&e)) events.push_back(e);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].time_ns, 10u);
  EXPECT_EQ(events[0].kind, EventKind::kAlloc);
  EXPECT_EQ(events[0].size_bytes, 100u);
  EXPECT_EQ(events[0].thread, 7u);
  EXPECT_EQ(events[2].kind, EventKind::kFree);
  // The two halves of a realloc are one event.
  EXPECT_EQ(events[3].kind, EventKind::kRealloc);
  EXPECT_EQ(events[3].time_ns, 40u);
  EXPECT_EQ(events[3].old_address, 0x2000u);
  EXPECT_EQ(events[3].address, 0x3000u);
  EXPECT_EQ(events[3].size_bytes, 80u);
  EXPECT_EQ(events[3].stack_id, 1u);
  reader.rewind();
  events.clear();
  while (reader.next(&e)) events.push_back(e);
  ASSERT_EQ(events.size(), 4u);  // a second pass pairs them again
  EXPECT_EQ(events[0].address, 0x1000u);
  EXPECT_EQ(events[3].kind, EventKind::kRealloc);
  std::remove(path.c_str());
}

TEST(TraceReader, CursorsReadTheSameEventsEachFromItsOwnPosition) {
  std::string path = good_trace().write(temp_path("cursors.trace"));
  TraceReader reader(path);
  auto all = [](EventSource& source) {
    std::vector<Event> events;
    Event e;
    while (source.next(&e)) events.push_back(e);
    return events;
  };
  std::unique_ptr<EventSource> a = reader.cursor(), b = reader.cursor();
  Event first;
  ASSERT_TRUE(a->next(&first));  // a moves on; b and the reader stay at the start
  std::vector<Event> from_b = all(*b), from_reader = all(reader);
  ASSERT_EQ(from_b.size(), 4u);
  ASSERT_EQ(from_reader.size(), 4u);
  std::vector<Event> rest_of_a = all(*a);
  ASSERT_EQ(rest_of_a.size(), 3u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(from_b[i].time_ns, from_reader[i].time_ns);
    EXPECT_EQ(from_b[i].kind, from_reader[i].kind);
    EXPECT_EQ(from_b[i].address, from_reader[i].address);
  }
  EXPECT_EQ(first.address, from_b[0].address);
  EXPECT_EQ(rest_of_a[2].kind, EventKind::kRealloc);  // each cursor pairs realloc halves itself
  a->rewind();
  EXPECT_EQ(all(*a).size(), 4u);
  EXPECT_EQ(a->event_count_hint(), reader.event_count());
  std::remove(path.c_str());
}

TEST(TraceReader, OnlyTheAllocationRightAfterAReallocsFreeInTheSameThreadIsItsOtherHalf) {
  auto realloc_free = [](uint64_t t, uint64_t address, uint32_t thread) {
    return prof::TraceEvent{kStart + t, address, 0, prof::kNoStack, thread, 0, prof::kFree | prof::kEventFromRealloc};
  };
  auto realloc_alloc = [](uint64_t t, uint64_t address, uint32_t thread) {
    return prof::TraceEvent{kStart + t, address, 64, 1, thread, 16, prof::kAlloc | prof::kEventFromRealloc};
  };
  TraceBytes t(kStart);
  t.stack(1, {0x401000});
  t.events({trace_alloc_event(kStart + 1, 0x1000, 10), trace_alloc_event(kStart + 2, 0x2000, 10), trace_alloc_event(kStart + 3, 0x3000, 10),
            realloc_free(10, 0x1000, 7),  // realloc(p, 0): no allocation half
            trace_alloc_event(kStart + 11, 0x5000, 10),
            realloc_free(20, 0x2000, 7)});  // its other half was flushed in the next record
  t.events({realloc_alloc(21, 0x6000, 7),
            realloc_free(30, 0x3000, 7), realloc_alloc(31, 0x7000, 8)});  // another thread's event
  t.end();
  std::string path = t.write(temp_path("halves.trace"));
  TraceReader reader(path);
  std::vector<EventKind> kinds;
  Event e;
  while (reader.next(&e)) kinds.push_back(e.kind);
  EXPECT_EQ(kinds, (std::vector<EventKind>{EventKind::kAlloc, EventKind::kAlloc, EventKind::kAlloc, EventKind::kFree,
                                           EventKind::kAlloc, EventKind::kFree, EventKind::kAlloc, EventKind::kFree,
                                           EventKind::kAlloc}));
  std::remove(path.c_str());
}

TEST(TraceReader, EveryTruncationIsReportedWithItsOffset) {
  TraceBytes t = good_trace();
  size_t full = t.bytes().size();
  std::string path = temp_path("cut.trace");
  for (size_t keep = 0; keep < full; keep += 4) {
    t.write(path, keep);
    std::string error = error_of(path);
    ASSERT_NE(error, "") << "a trace cut at " << keep << " bytes was accepted";
    EXPECT_NE(error.find(path + ": "), std::string::npos) << error;
    EXPECT_NE(error.find("at byte offset "), std::string::npos) << error;
    if (keep >= 8) EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  }
  // Cut inside the second event record: the offset named is that record's header.
  size_t second_record = 64 + (8 + 8 + 16) + (8 + 2 * 40);
  t.write(path, second_record + 20);
  EXPECT_NE(error_of(path).find("at byte offset " + std::to_string(second_record)), std::string::npos) << error_of(path);
  std::remove(path.c_str());
}

TEST(TraceReader, ForeignAndCorruptFilesAreRefused) {
  std::string path = temp_path("foreign.trace");
  {
    std::ofstream out(path, std::ios::binary);
    out << "PK\x03\x04 this is a zip file, not a trace, and it is long enough to hold a header......";
  }
  EXPECT_NE(error_of(path).find("not a llamalloc trace (bad magic) at byte offset 0"), std::string::npos) << error_of(path);

  TraceBytes wrong_version = good_trace();
  wrong_version.bytes()[8] = 9;
  wrong_version.write(path);
  EXPECT_NE(error_of(path).find("trace version 9"), std::string::npos) << error_of(path);

  TraceBytes bad_kind(kStart);
  bad_kind.events({trace_alloc_event(kStart, 0x1000, 8), prof::TraceEvent{kStart, 0x1000, 0, 0, 0, 0, 77}});
  bad_kind.end();
  bad_kind.write(path);
  EXPECT_NE(error_of(path).find("corrupt event: kind 77 at byte offset " + std::to_string(64 + 8 + 40)), std::string::npos)
      << error_of(path);

  TraceBytes unknown_record = good_trace();
  uint32_t junk[2] = {999, 0};
  unknown_record.bytes().append(reinterpret_cast<char*>(junk), 8);
  unknown_record.write(path);
  EXPECT_NE(error_of(path).find("data after the end record"), std::string::npos) << error_of(path);
  std::remove(path.c_str());
}

TEST(TraceReader, ThreadBuffersOutOfTimeOrderAreReplayedInTimeOrder) {
  // Thread B's buffer (the free at t=30) reached the file before thread A's (the alloc at t=10).
  TraceBytes t(kStart);
  t.events({trace_free_event(kStart + 30, 0x1000)});
  t.events({trace_alloc_event(kStart + 10, 0x1000, 4096)});
  t.end();
  std::string path = t.write(temp_path("unsorted.trace"));
  TraceReader reader(path);
  EXPECT_TRUE(reader.reordered());
  PagePolicy policy(12);
  RunResult r = replay(reader, policy, EngineOptions{});
  EXPECT_EQ(r.summary.unknown_frees, 0u);
  EXPECT_EQ(r.summary.final_live_bytes, 0u);
  EXPECT_EQ(r.summary.peak_footprint_bytes, 4096u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace llamalloc::sim
