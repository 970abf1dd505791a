// The GNU build id in an object's ELF notes: the profiler records each loaded object's (src/profiler/
// record_file.cc) and the allocator finds its executable's model by it (src/model/model_dir.cc). Header-only so
// that each library compiles it with its own flags; it reads only inside the bytes it is given, and neither
// allocates nor calls anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace llamalloc::elf_notes {

inline constexpr uint32_t kGnuBuildId = 3;  // NT_GNU_BUILD_ID

// The descriptor of the NT_GNU_BUILD_ID note named "GNU" in notes[0, size), laid out with `align` (4, or 8 for a
// PT_NOTE segment aligned to 8): its bytes in *id and their count; 0 when there is none or a note runs past the end.
inline size_t gnu_build_id(const unsigned char* notes, size_t size, size_t align, const unsigned char** id) {
  if (align != 8) align = 4;
  auto padded = [align](size_t n) { return (n + align - 1) & ~(align - 1); };
  size_t at = 0;
  while (at <= size && size - at >= 12) {
    uint32_t name_bytes, desc_bytes, type;
    memcpy(&name_bytes, notes + at, 4);
    memcpy(&desc_bytes, notes + at + 4, 4);
    memcpy(&type, notes + at + 8, 4);
    size_t name_at = at + 12;
    if (name_bytes > size - name_at) return 0;
    // The padding is counted from the note's start (as glibc's ELF_NOTE_NEXT_OFFSET does): with 8-byte
    // alignment, a 4-byte name ends aligned and the descriptor follows it at once.
    size_t desc_at = at + padded(12 + size_t(name_bytes));
    if (desc_at > size || desc_bytes > size - desc_at) return 0;
    if (type == kGnuBuildId && name_bytes == 4 && memcmp(notes + name_at, "GNU", 4) == 0) {
      *id = notes + desc_at;
      return desc_bytes;
    }
    at += padded(desc_at - at + desc_bytes);
  }
  return 0;
}

}  // namespace llamalloc::elf_notes
