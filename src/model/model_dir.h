// A directory of models prepared for a plain LD_PRELOAD (LLAMALLOC_MODEL_DIR; docs/prediction.md, "A model
// directory under LD_PRELOAD"). `llamalloc prepare --model-dir DIR` writes, for each build that a model of DIR is
// chosen for, the token tables DIR/BUILD-ID.tokens and one line "BUILD-ID MODEL" in DIR/builds.index. As it
// starts, the allocator reads the GNU build id of the program's executable and looks it up there. Rules: this
// runs inside the first allocation, so nothing here allocates or takes the loader's lock: stack buffers and
// open/pread/read/close only.
#pragma once

#include <cstddef>

namespace llamalloc::model {

// The index's file name in a prepared directory.
inline constexpr char kBuildIndexName[] = "builds.index";
// Capacity for a build id in hex and its NUL (a GNU build id is 20 bytes as ld writes it; up to 64 are kept).
inline constexpr size_t kBuildIdHexBytes = 129;

// The GNU build id (NT_GNU_BUILD_ID) in the ELF notes notes[0, size) laid out with `align` (4 or 8), as
// lowercase hex into hex (NUL-terminated). Its length, 0 when there is none or it does not fit.
size_t notes_build_id(const unsigned char* notes, size_t size, size_t align, char* hex, size_t capacity);
// The build id of the ELF file at `path` (64-bit ELF, read with pread), as notes_build_id gives it.
size_t file_build_id(const char* path, char* hex, size_t capacity);
// The build id of this process's executable: from its program headers in memory (getauxval(AT_PHDR), no
// loader lock), else from /proc/self/exe when it has no PT_PHDR to place them.
size_t main_build_id(char* hex, size_t capacity);

enum class PreparedModel {
  kFound,     // model and tokens are filled in
  kNoIndex,   // DIR/builds.index cannot be opened (*error_number says why): the directory is not prepared
  kNoEntry,   // the index has no line for this build id
  kTooLong,   // a path would not fit its buffer
};

// Looks `build_id` (lowercase hex) up in DIR/builds.index: the model is DIR/MODEL (MODEL as it is when absolute)
// and the token tables DIR/BUILD-ID.tokens. Lines starting with '#' and blank lines are skipped; the first line
// of the build id counts.
PreparedModel find_prepared_model(const char* dir, const char* build_id, char* model, size_t model_capacity,
                                  char* tokens, size_t tokens_capacity, int* error_number);

}  // namespace llamalloc::model
