// The module map (module_map.h): /proc/self/maps read with plain syscalls into a stack buffer, and the table of
// executable mappings that the walks and the token lookups of a model run search.
#include "module_map.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace llamalloc::model {

namespace {

uint64_t parse_hex(const char*& p, const char* end) {
  uint64_t v = 0;
  for (; p < end; ++p) {
    char c = *p;
    unsigned d = c >= '0' && c <= '9' ? unsigned(c - '0') : c >= 'a' && c <= 'f' ? unsigned(c - 'a' + 10) : 16;
    if (d == 16) break;
    v = v * 16 + d;
  }
  return v;
}

// Calls fn(start, end, executable, offset, path) for each line of /proc/self/maps, reading it with plain
// syscalls into a stack buffer of kBufferBytes (no stdio: it would allocate); a line longer than the buffer (a
// path of more than kBufferBytes - 80 bytes) is skipped.
template <size_t kBufferBytes = 8192, typename Fn>
bool for_each_mapping(Fn&& fn) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[kBufferBytes];
  size_t have = 0;
  bool stop = false;
  while (!stop) {
    ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
    if (n <= 0) break;
    have += size_t(n);
    char* line = buf;
    char* end = buf + have;
    while (!stop) {
      char* nl = static_cast<char*>(memchr(line, '\n', size_t(end - line)));
      if (nl == nullptr) break;
      *nl = '\0';
      const char* p = line;
      uintptr_t start = parse_hex(p, nl);
      ++p;
      uintptr_t stop_addr = parse_hex(p, nl);
      ++p;
      bool exec = p + 3 < nl && p[2] == 'x';
      p += 5;
      uint64_t offset = parse_hex(p, nl);
      // dev and inode, then spaces, then the path (may be empty)
      for (int field = 0; field < 2 && p < nl; ++field) {
        while (p < nl && *p == ' ') ++p;
        while (p < nl && *p != ' ') ++p;
      }
      while (p < nl && *p == ' ') ++p;
      stop = !fn(start, stop_addr, exec, offset, p);
      line = nl + 1;
    }
    have = size_t(end - line);
    if (have == sizeof buf - 1) have = 0;  // a line longer than the buffer: dropped
    memmove(buf, line, have);
  }
  close(fd);
  return true;
}

}  // namespace

uintptr_t mapping_end(uintptr_t address, bool* is_main_stack, uintptr_t* start_out) {
  uintptr_t found = 0;
  // A 1 KiB buffer: each thread that predicts or learns calls this once, on its own stack, and 8 KiB there were
  // two more stack pages resident for the thread's life (image-server's 20 threads with online learning: 4-8 KiB
  // more stack each). The mapping sought is a thread's stack, whose line has no path or "[stack]".
  for_each_mapping<1024>([&](uintptr_t start, uintptr_t end, bool, uint64_t, const char* path) {
    if (address >= start && address < end) {
      found = end;
      if (start_out != nullptr) *start_out = start;
      if (is_main_stack != nullptr) *is_main_stack = strcmp(path, "[stack]") == 0;
      return false;
    }
    return true;
  });
  return found;
}

bool describe_address(uintptr_t address, char* out, size_t capacity) {
  if (capacity == 0) return false;
  out[0] = '\0';
  bool found = false;
  for_each_mapping([&](uintptr_t start, uintptr_t end, bool, uint64_t offset, const char* path) {
    if (address < start || address >= end) return true;
    if (*path != '/') return false;
    char hex[20];
    int n = 0;
    uint64_t v = address - start + offset;
    do hex[n++] = "0123456789abcdef"[v & 15]; while ((v >>= 4) != 0);
    size_t len = 0;
    for (const char* c = path; *c && len + 1 < capacity; ++c) out[len++] = *c;
    for (const char* c = "+0x"; *c && len + 1 < capacity; ++c) out[len++] = *c;
    while (n > 0 && len + 1 < capacity) out[len++] = hex[--n];
    out[len] = '\0';
    found = true;
    return false;
  });
  return found;
}

void ModuleMap::refresh(const TokenTables& tables) {
  Table* cur = current_.load(std::memory_order_acquire);
  Table* next = cur == &tables_[0] ? &tables_[1] : &tables_[0];
  next->count = 0;
  // One stat per binary of the token tables: a table whose binary changed since prepare is not used.
  bool fresh[256];
  for (uint32_t b = 0; b < tables.binary_count() && b < 256; ++b) {
    struct stat st;
    const TokenTables::Binary& bin = tables.binary(b);
    fresh[b] = stat(bin.path, &st) == 0 && uint64_t(st.st_size) == bin.file_bytes &&
               int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec == bin.mtime_ns;
  }
  for_each_mapping([&](uintptr_t start, uintptr_t end, bool exec, uint64_t offset, const char* path) {
    if (!exec) return true;
    if (next->count == kMaxModules) return false;
    Module m{start, end, 0, -1};
    int b = *path == '/' ? tables.find_binary(path) : -1;
    if (b >= 0 && b < 256 && fresh[b]) {
      const TokenTables::Binary& bin = tables.binary(uint32_t(b));
      for (uint32_t s = 0; s < bin.segment_count; ++s) {
        const TokenTables::Segment& seg = bin.segments[s];
        if (offset >= seg.file_offset && offset < seg.file_offset + (seg.file_bytes ? seg.file_bytes : 1)) {
          m.vaddr_bias = start - (offset - seg.file_offset + seg.vaddr);
          m.binary = b;
          break;
        }
      }
    }
    next->modules[next->count++] = m;
    return true;
  });
  current_.store(next, std::memory_order_release);
}

bool ModuleMap::maybe_refresh(const TokenTables& tables, uint64_t now) {
  if (frozen_) return false;
  uint64_t last = last_refresh_ns_.load(std::memory_order_relaxed);
  if (now - last < kMinRefreshNs) return false;
  int pid = getpid();
  int holder = refreshing_pid_.load(std::memory_order_relaxed);
  // A holder that is not this process is the parent of a fork child: its refresh will never finish here.
  if (holder == pid || !refreshing_pid_.compare_exchange_strong(holder, pid)) return false;
  last_refresh_ns_.store(now, std::memory_order_relaxed);
  refresh(tables);
  refreshing_pid_.store(0, std::memory_order_release);
  return true;
}

void ModuleMap::load(const Module* modules, uint32_t count) {
  Table* cur = current_.load(std::memory_order_acquire);
  Table* next = cur == &tables_[0] ? &tables_[1] : &tables_[0];
  next->count = count < kMaxModules ? count : kMaxModules;
  for (uint32_t i = 0; i < next->count; ++i) next->modules[i] = modules[i];
  frozen_ = true;
  current_.store(next, std::memory_order_release);
}

bool ModuleMap::find(uintptr_t pc, Module* out) const {
  const Table* t = current_.load(std::memory_order_acquire);
  if (t == nullptr) return false;
  uint32_t n = t->count < kMaxModules ? t->count : kMaxModules;
  uint32_t lo = 0, hi = n;
  while (lo < hi) {  // /proc/self/maps lists mappings by address
    uint32_t mid = (lo + hi) / 2;
    if (t->modules[mid].end <= pc) lo = mid + 1;
    else hi = mid;
  }
  if (lo == n) return false;
  Module m = t->modules[lo];
  if (pc < m.start || pc >= m.end) return false;
  *out = m;
  return true;
}

}  // namespace llamalloc::model
