// The trace reader's stacks and mappings (what llama-model needs) and its time order over many thread buffers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>

#include "sim/trace_reader.h"
#include "trace_writer.h"

namespace llamalloc::sim {
namespace {

using testing::trace_alloc_event;
using testing::TraceBytes;

const uint64_t kStart = 1'000'000'000;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("llamalloc_sim_stacks_" + std::to_string(::getpid()) + "_" + name)).string();
}

void mapping(TraceBytes& t, uint64_t start, uint64_t limit, uint64_t offset, const std::string& build_id,
             const std::string& path) {
  std::string payload(sizeof(prof::MappingRecord), '\0');
  prof::MappingRecord m{start, limit, offset, uint32_t(build_id.size()), uint32_t(path.size())};
  std::memcpy(payload.data(), &m, sizeof(m));
  payload += build_id + path;
  payload.resize((payload.size() + 7) / 8 * 8, '\0');
  t.record(prof::RecordType::kMapping, payload.data(), payload.size());
}

TEST(TraceStacks, StacksAndMappingsAreReadInPlace) {
  TraceBytes t(kStart);
  t.stack(7, {0x401233, 0x401456, 0x7f00000100});
  t.events({trace_alloc_event(kStart + 10, 0x1000, 100, 7)});
  mapping(t, 0x400000, 0x402000, 0x1000, std::string("\x12\x34\xab", 3), "/usr/bin/app");
  mapping(t, 0x7f00000000, 0x7f00001000, 0, "", "/lib/libc.so.6");
  t.end();
  std::string path = t.write(temp_path("stacks.trace"));
  TraceReader reader(path);
  const uint64_t* frames = nullptr;
  uint32_t depth = 0;
  ASSERT_TRUE(reader.stack(7, &frames, &depth));
  ASSERT_EQ(depth, 3u);
  EXPECT_EQ(frames[0], 0x401233u);
  EXPECT_EQ(frames[2], 0x7f00000100u);
  EXPECT_FALSE(reader.stack(8, &frames, &depth));
  ASSERT_EQ(reader.mappings().size(), 2u);
  EXPECT_EQ(reader.mappings()[0].path, "/usr/bin/app");
  EXPECT_EQ(reader.mappings()[0].build_id, std::string("\x12\x34\xab", 3));
  EXPECT_EQ(reader.mappings()[0].file_offset, 0x1000u);
  EXPECT_EQ(reader.mappings()[1].memory_limit, 0x7f00001000u);
  int stacks = 0;
  reader.for_each_stack([&](uint32_t id, const uint64_t*, uint32_t d) { stacks += id == 7 && d == 3; });
  EXPECT_EQ(stacks, 1);
  std::remove(path.c_str());
}

TEST(TraceStacks, AStackRecordWhoseDepthDisagreesWithItsLengthIsCorrupt) {
  TraceBytes t(kStart);
  uint32_t payload[4] = {1, 5, 0, 0};  // depth 5, one address
  t.record(prof::RecordType::kStack, payload, sizeof payload);
  t.end();
  std::string path = t.write(temp_path("badstack.trace"));
  try {
    TraceReader reader(path);
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt stack record"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// Many thread buffers, each in its own time order, interleaved in the file with equal times across buffers: the
// replay order is the stable sort of the file's order by time. One case has a buffer out of order (not written by
// the profiler, but the reader must not depend on it).
void check_time_order(bool one_buffer_unsorted) {
  std::mt19937_64 rng(42);
  TraceBytes t(kStart);
  std::vector<std::pair<uint64_t, uint64_t>> file_order;  // (time, address)
  uint64_t address = 0x1000;
  for (int chunk = 0; chunk < 50; ++chunk) {
    std::vector<prof::TraceEvent> events;
    uint64_t time = kStart + rng() % 1000;
    int n = 1 + int(rng() % 20);
    for (int i = 0; i < n; ++i) {
      time += rng() % 3;  // many ties
      events.push_back(trace_alloc_event(time, address, 16));
      address += 0x100;
    }
    if (one_buffer_unsorted && chunk == 20 && n > 1) std::swap(events.front().time_ns, events.back().time_ns);
    for (const auto& e : events) file_order.push_back({e.time_ns, e.address});
    t.events(events);
  }
  t.end();
  std::string path = t.write(temp_path("order.trace"));
  std::stable_sort(file_order.begin(), file_order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  TraceReader reader(path);
  EXPECT_TRUE(reader.reordered());
  Event e;
  size_t i = 0;
  while (reader.next(&e)) {
    ASSERT_LT(i, file_order.size());
    EXPECT_EQ(e.address, file_order[i].second) << "event " << i;
    EXPECT_EQ(e.time_ns, file_order[i].first - kStart);
    ++i;
  }
  EXPECT_EQ(i, file_order.size());
  std::remove(path.c_str());
}

TEST(TraceStacks, ThreadBuffersAreMergedInTimeOrderTiesInFileOrder) { check_time_order(false); }
TEST(TraceStacks, ABufferOutOfOrderFallsBackToASort) { check_time_order(true); }

}  // namespace
}  // namespace llamalloc::sim
