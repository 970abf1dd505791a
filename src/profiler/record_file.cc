#include "record_file.h"

#include "elf_notes.h"

#include <elf.h>
#include <link.h>
#include <string.h>

namespace llamalloc::prof {

uint32_t padded(size_t bytes) { return static_cast<uint32_t>((bytes + 7) & ~size_t{7}); }

void write_header(Writer& w, const char magic[8], uint32_t version, uint64_t sample_bytes,
                  const ProcessIdentity& process) {
  FileHeader h{};
  memcpy(h.magic, magic, 8);
  h.version = version;
  h.header_bytes = sizeof(FileHeader);
  h.pid = process.pid;
  h.start_time_ns = process.start_time_ns;
  h.start_mono_ns = process.start_mono_ns;
  h.sample_bytes = sample_bytes;
  h.flags = kFileProgramTime;
  w.append(&h, sizeof(h));
  size_t n = strlen(process.exe_path);
  w.record(RecordType::kProgram, padded(n));
  w.append(process.exe_path, n);
  w.pad();
}

void write_stack(Writer& w, uint32_t id, const uint64_t* pcs, uint32_t depth) {
  w.record(RecordType::kStack, static_cast<uint32_t>(sizeof(StackRecord) + 8 * depth));
  StackRecord s{id, depth};
  w.append(&s, sizeof(s));
  w.append(pcs, 8 * depth);
}

// The GNU build id of a loaded object, from its PT_NOTE segments.
namespace {

size_t find_build_id(const dl_phdr_info* info, const uint8_t** id) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    auto notes = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    if (size_t n = elf_notes::gnu_build_id(notes, size_t(ph.p_memsz), size_t(ph.p_align), id)) return n;
  }
  return 0;
}

struct MappingWriter {
  Writer* writer;
  const char* exe_path;
};

int write_mapping(dl_phdr_info* info, size_t, void* arg) {
  auto& w = *static_cast<MappingWriter*>(arg)->writer;
  const char* path = info->dlpi_name;
  // The main program comes first, unnamed.
  if (path == nullptr || path[0] == '\0') path = static_cast<MappingWriter*>(arg)->exe_path;
  if (strncmp(path, "linux-vdso", 10) == 0 || strncmp(path, "linux-gate", 10) == 0) return 0;
  const uint8_t* build_id = nullptr;
  size_t build_id_bytes = find_build_id(info, &build_id);
  size_t path_bytes = strlen(path);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_X) == 0) continue;
    MappingRecord m{};
    m.memory_start = info->dlpi_addr + ph.p_vaddr;
    m.memory_limit = m.memory_start + ph.p_memsz;
    m.file_offset = ph.p_offset;
    m.build_id_bytes = static_cast<uint32_t>(build_id_bytes);
    m.path_bytes = static_cast<uint32_t>(path_bytes);
    w.record(RecordType::kMapping, padded(sizeof(m) + build_id_bytes + path_bytes));
    w.append(&m, sizeof(m));
    w.append(build_id, build_id_bytes);
    w.append(path, path_bytes);
    w.pad();
  }
  return 0;
}

}  // namespace

void write_mappings(Writer& w, const char* exe_path) {
  MappingWriter arg{&w, exe_path};
  dl_iterate_phdr(write_mapping, &arg);
}

void write_end(Writer& w, uint64_t count, uint64_t dropped) {
  EndRecord e{realtime_ns(), monotonic_ns(), count, dropped};
  w.record(RecordType::kEnd, sizeof(e));
  w.append(&e, sizeof(e));
}

}  // namespace llamalloc::prof
