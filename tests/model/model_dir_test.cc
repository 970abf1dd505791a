// A model directory prepared for LD_PRELOAD (model_dir.h): the build id from ELF notes, in memory and in a file,
// and the lookup of a build in DIR/builds.index. The whole path (prepare, then a preloaded program) is
// python/tests/test_model_dir_preload.py.
#include <gtest/gtest.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model_dir.h"
#include "model_file.h"

using namespace llamalloc::model;

namespace {

// One ELF note: header, name and descriptor, each padded to `align`.
void add_note(std::vector<unsigned char>& out, uint32_t type, const std::string& name,
              const std::vector<unsigned char>& desc, size_t align) {
  auto put32 = [&](uint32_t v) {
    unsigned char b[4];
    memcpy(b, &v, 4);
    out.insert(out.end(), b, b + 4);
  };
  auto pad = [&] {
    while (out.size() % align) out.push_back(0);
  };
  put32(uint32_t(name.size() + 1));
  put32(uint32_t(desc.size()));
  put32(type);
  out.insert(out.end(), name.begin(), name.end());
  out.push_back(0);
  pad();
  out.insert(out.end(), desc.begin(), desc.end());
  pad();
}

const std::vector<unsigned char> kId = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x00, 0xff,
                                        0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 0x11, 0x22};
const char kIdHex[] = "0123456789abcdef00ff1032547698badcfe1122";

TEST(ModelDirBuildId, TheGnuBuildIdNoteIsFoundAmongOthers) {
  for (size_t align : {4, 8}) {
    std::vector<unsigned char> notes;
    add_note(notes, 1, "GNU", {0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}, align);  // NT_GNU_ABI_TAG
    add_note(notes, 3, "Go", {1, 2, 3}, align);                                          // not GNU's
    add_note(notes, 3, "GNU", kId, align);
    char hex[kBuildIdHexBytes];
    ASSERT_EQ(notes_build_id(notes.data(), notes.size(), align, hex, sizeof hex), 40u) << align;
    EXPECT_STREQ(hex, kIdHex);
    // Without the note, cut short, or without room for the hex: none.
    EXPECT_EQ(notes_build_id(notes.data(), notes.size() - 24, align, hex, sizeof hex), 0u);
    EXPECT_EQ(notes_build_id(notes.data(), 11, align, hex, sizeof hex), 0u);
    EXPECT_EQ(notes_build_id(notes.data(), notes.size(), align, hex, 40), 0u);
  }
  // A descriptor size past the end is refused, not read.
  std::vector<unsigned char> bad;
  add_note(bad, 3, "GNU", kId, 4);
  uint32_t huge = 0xfffffff0u;
  memcpy(bad.data() + 4, &huge, 4);
  char hex[kBuildIdHexBytes];
  EXPECT_EQ(notes_build_id(bad.data(), bad.size(), 4, hex, sizeof hex), 0u);
}

TEST(ModelDirBuildId, TheExecutablesIdInMemoryIsTheOneInItsFile) {
  char from_file[kBuildIdHexBytes], in_memory[kBuildIdHexBytes];
  if (file_build_id("/proc/self/exe", from_file, sizeof from_file) == 0)
    GTEST_SKIP() << "this test binary was linked without a build id";
  ASSERT_GT(main_build_id(in_memory, sizeof in_memory), 0u);
  EXPECT_STREQ(in_memory, from_file);
  EXPECT_EQ(file_build_id("/no/such/file", from_file, sizeof from_file), 0u);
  EXPECT_EQ(file_build_id("/proc/self/maps", from_file, sizeof from_file), 0u);  // not ELF
}

// The warning lines cut the directory's and the executable's paths so that a line always fits with its newline.
TEST(ModelDirMessage, APrecisionCutsAString) {
  char line[64];
  format_message(line, sizeof line, "[%.3s|%.8s|%s|%.0s]\n", "abcdef", "ab", "xyz", "gone");
  EXPECT_STREQ(line, "[abc|ab|xyz|]\n");
}

class ModelDirIndex : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/model-dir.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back(0);
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override {
    unlink((dir_ + "/builds.index").c_str());
    rmdir(dir_.c_str());
  }
  void write_index(const std::string& text) { std::ofstream(dir_ + "/builds.index", std::ios::binary) << text; }
  PreparedModel find(const std::string& dir, const char* id) {
    model_[0] = tokens_[0] = 0;
    error_ = 0;
    return find_prepared_model(dir.c_str(), id, model_, sizeof model_, tokens_, sizeof tokens_, &error_);
  }
  std::string dir_;
  char model_[4096], tokens_[4096];
  int error_ = 0;
};

TEST_F(ModelDirIndex, ADirectoryWithoutAnIndexIsNotPrepared) {
  EXPECT_EQ(find(dir_, "aa"), PreparedModel::kNoIndex);
  EXPECT_EQ(error_, ENOENT);
  EXPECT_EQ(find(dir_ + "/missing", "aa"), PreparedModel::kNoIndex);
}

TEST_F(ModelDirIndex, TheLineOfTheBuildGivesTheModelAndItsTokens) {
  write_index("# llamalloc prepare --model-dir\n"
              "\n"
              "aabb other.model\n"
              "aa app v1.model \r\n"
              "cc\t/abs/c.model\n"
              "dd d.model");  // (no newline at the end)
  ASSERT_EQ(find(dir_, "aa"), PreparedModel::kFound);
  EXPECT_EQ(std::string(model_), dir_ + "/app v1.model");
  EXPECT_EQ(std::string(tokens_), dir_ + "/aa.tokens");
  ASSERT_EQ(find(dir_ + "/", "aabb"), PreparedModel::kFound);  // a prefix of another id is not it
  EXPECT_EQ(std::string(model_), dir_ + "/other.model");
  EXPECT_EQ(std::string(tokens_), dir_ + "/aabb.tokens");
  ASSERT_EQ(find(dir_, "cc"), PreparedModel::kFound);
  EXPECT_STREQ(model_, "/abs/c.model");
  ASSERT_EQ(find(dir_, "dd"), PreparedModel::kFound);
  EXPECT_EQ(std::string(model_), dir_ + "/d.model");
  EXPECT_EQ(find(dir_, "a"), PreparedModel::kNoEntry);
  EXPECT_EQ(find(dir_, "ee"), PreparedModel::kNoEntry);
  EXPECT_EQ(find(dir_, "#"), PreparedModel::kNoEntry);
}

TEST_F(ModelDirIndex, ALineLongerThanTheBufferIsSkippedWhole) {
  // The buffer holds 4095 bytes: the long line's tail, read next, would be a line of its own, "ee tail.model",
  // if it were not skipped.
  write_index("ff " + std::string(4092, 'x') + "ee tail.model\nee e.model\n");
  ASSERT_EQ(find(dir_, "ee"), PreparedModel::kFound);
  EXPECT_EQ(std::string(model_), dir_ + "/e.model");
  EXPECT_EQ(find(dir_, "ff"), PreparedModel::kNoEntry);
  // A model path that does not fit its buffer.
  write_index("ab " + std::string(4088, 'm') + "\n");
  EXPECT_EQ(find(dir_, "ab"), PreparedModel::kTooLong);
}

}  // namespace
