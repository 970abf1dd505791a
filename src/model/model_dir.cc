// A model directory prepared for LD_PRELOAD (model_dir.h): the executable's build id from its ELF notes, and its
// line in DIR/builds.index, with stack buffers and plain syscalls (the allocator is starting).
#include "model_dir.h"

#include "elf_notes.h"

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace llamalloc::model {

namespace {

// Reads n bytes at `offset`; false on an error or a short file.
bool read_at(int fd, void* out, size_t n, uint64_t offset) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    ssize_t r = pread(fd, p, n, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= size_t(r);
    offset += uint64_t(r);
  }
  return true;
}

// `parts` one after the other into out; false when they do not fit.
bool join(char* out, size_t capacity, std::initializer_list<const char*> parts) {
  size_t used = 0;
  for (const char* part : parts) {
    size_t n = strlen(part);
    if (used + n >= capacity) return false;
    memcpy(out + used, part, n);
    used += n;
  }
  out[used] = '\0';
  return true;
}

}  // namespace

size_t notes_build_id(const unsigned char* notes, size_t size, size_t align, char* hex, size_t capacity) {
  const unsigned char* id = nullptr;
  size_t bytes = elf_notes::gnu_build_id(notes, size, align, &id);
  if (bytes == 0 || 2 * bytes + 1 > capacity) return 0;
  for (size_t i = 0; i < bytes; ++i) {
    hex[2 * i] = "0123456789abcdef"[id[i] >> 4];
    hex[2 * i + 1] = "0123456789abcdef"[id[i] & 15];
  }
  hex[2 * bytes] = '\0';
  return 2 * bytes;
}

size_t file_build_id(const char* path, char* hex, size_t capacity) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t found = 0;
  ElfW(Ehdr) eh;
  if (read_at(fd, &eh, sizeof eh, 0) && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
      eh.e_ident[EI_CLASS] == (sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32) &&
      eh.e_phentsize == sizeof(ElfW(Phdr))) {
    for (unsigned i = 0; i < eh.e_phnum && i < 256 && found == 0; ++i) {
      ElfW(Phdr) ph;
      if (!read_at(fd, &ph, sizeof ph, eh.e_phoff + uint64_t(i) * sizeof ph)) break;
      if (ph.p_type != PT_NOTE) continue;
      unsigned char notes[2048];  // a build id note is 36 bytes; the notes before it are as small
      size_t n = ph.p_filesz < sizeof notes ? size_t(ph.p_filesz) : sizeof notes;
      if (read_at(fd, notes, n, ph.p_offset)) found = notes_build_id(notes, n, size_t(ph.p_align), hex, capacity);
    }
  }
  close(fd);
  return found;
}

size_t main_build_id(char* hex, size_t capacity) {
  // The executable's program headers as the kernel mapped them: PT_PHDR gives their own virtual address, hence
  // the load bias, and every PT_NOTE lies in a loaded segment.
  const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(getauxval(AT_PHDR));
  size_t count = getauxval(AT_PHNUM);
  uintptr_t bias = 0;
  bool placed = false;
  for (size_t i = 0; ph != nullptr && i < count; ++i) {
    if (ph[i].p_type == PT_PHDR) {
      bias = reinterpret_cast<uintptr_t>(ph) - uintptr_t(ph[i].p_vaddr);
      placed = true;
    }
  }
  if (!placed) return file_build_id("/proc/self/exe", hex, capacity);
  for (size_t i = 0; i < count; ++i) {
    if (ph[i].p_type != PT_NOTE) continue;
    const auto* notes = reinterpret_cast<const unsigned char*>(bias + uintptr_t(ph[i].p_vaddr));
    size_t n = notes_build_id(notes, size_t(ph[i].p_memsz), size_t(ph[i].p_align), hex, capacity);
    if (n != 0) return n;
  }
  return 0;
}

PreparedModel find_prepared_model(const char* dir, const char* build_id, char* model, size_t model_capacity,
                                  char* tokens, size_t tokens_capacity, int* error_number) {
  size_t dir_bytes = strlen(dir);
  const char* slash = dir_bytes > 0 && dir[dir_bytes - 1] == '/' ? "" : "/";
  char path[4096];
  if (!join(path, sizeof path, {dir, slash, kBuildIndexName})) return PreparedModel::kTooLong;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (error_number != nullptr) *error_number = errno;
    return PreparedModel::kNoIndex;
  }
  size_t id_bytes = strlen(build_id);
  PreparedModel result = PreparedModel::kNoEntry;
  // Its lines, "BUILD-ID MODEL", read into a stack buffer; a line longer than the buffer is skipped.
  char buf[4096];
  size_t have = 0;
  bool skipping = false, done = false, at_end = false;
  auto take = [&](char* line, char* end) {  // one line, without its newline
    if (*line == '#') return;
    if (end > line && end[-1] == '\r') --end;
    *end = '\0';
    if (size_t(end - line) <= id_bytes || memcmp(line, build_id, id_bytes) != 0 ||
        (line[id_bytes] != ' ' && line[id_bytes] != '\t'))
      return;
    char* name = line + id_bytes;
    while (*name == ' ' || *name == '\t') ++name;
    while (end > name && (end[-1] == ' ' || end[-1] == '\t')) *--end = '\0';
    if (*name == '\0') return;
    bool absolute = *name == '/';
    bool ok = join(model, model_capacity, {absolute ? "" : dir, absolute ? "" : slash, name}) &&
              join(tokens, tokens_capacity, {dir, slash, build_id, ".tokens"});
    result = ok ? PreparedModel::kFound : PreparedModel::kTooLong;
    done = true;
  };
  while (!done && !at_end) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      at_end = true;
      if (have > 0 && !skipping) take(buf, buf + have);  // a last line without its newline
      break;
    }
    have += size_t(n);
    char* line = buf;
    char* end = buf + have;
    while (!done) {
      char* nl = static_cast<char*>(memchr(line, '\n', size_t(end - line)));
      if (nl == nullptr) break;
      if (!skipping) take(line, nl);
      skipping = false;
      line = nl + 1;
    }
    have = size_t(end - line);
    if (have == sizeof buf - 1) {  // no newline in a full buffer: the rest of this line is skipped
      have = 0;
      skipping = true;
    }
    memmove(buf, line, have);
  }
  close(fd);
  return result;
}

}  // namespace llamalloc::model
