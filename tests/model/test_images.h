// Helpers of the model tests: a minimal valid model file image built in memory, and the resident size of a
// mapping.
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "model_file.h"

namespace llamalloc::model::test {

// A minimal valid model image: V = 52 + 2 words, E = 4, H = 4, built as docs/formats/model.md says.
struct Image {
  alignas(64) unsigned char bytes[1 << 18];  // build_model(img, 48) takes about 80 KiB
  size_t size = 0;
};

inline void put32(unsigned char* p, uint32_t v) { memcpy(p, &v, 4); }
inline void put64(unsigned char* p, uint64_t v) { memcpy(p, &v, 8); }

// What a model file and a token table file open with: the magic, version 1 and the header's size.
inline void put_file_start(unsigned char* h, const char (&magic)[9], uint32_t header_bytes) {
  memcpy(h, magic, 8);
  put32(h + 8, 1);
  put32(h + 12, header_bytes);
}

// With token_contexts: also a section train.token_contexts of those keys, in the order given; with token_class
// (one class per key) a section train.token_class; with unseen 0 or 1 a section deploy.unseen of that value; with
// token_stacks a section train.token_stacks of those keys.
inline void build_model(Image& img, uint32_t hidden = 4, const uint64_t* token_contexts = nullptr, uint32_t contexts = 0,
                        const uint8_t* token_class = nullptr, int unseen = -1, const uint64_t* token_stacks = nullptr,
                        uint32_t stacks = 0) {
  memset(img.bytes, 0, sizeof img.bytes);
  const uint32_t V = 54, E = 4, H = hidden;
  struct Sec {
    const char* name;
    uint32_t dtype, ndim, s0, s1;
    uint64_t bytes;
  };
  // vocabulary strings: "<pad>\0..." simplified to one byte + NUL per token (the C++ reader checks structure)
  Sec secs[] = {{"vocab.offsets", 3, 1, V + 1, 0, 4ull * (V + 1)}, {"vocab.strings", 2, 1, 2 * V, 0, 2ull * V},
                {"lstm.folded", 1, 2, V, 4 * H, 4ull * V * 4 * H},   {"lstm.w_hidden", 1, 2, H, 4 * H, 4ull * H * 4 * H},
                {"dense.w", 1, 2, H, 8, 4ull * H * 8},              {"dense.b", 1, 1, 8, 0, 32},
                {"train.token_contexts", 4, 1, contexts, 0, 8ull * contexts},
                {"train.token_class", 2, 1, contexts, 0, contexts},
                {"deploy.unseen", 3, 1, 1, 0, 4},
                {"train.token_stacks", 4, 1, stacks, 0, 8ull * stacks}};
  Sec* last = secs + (token_contexts != nullptr ? 7 : 6);
  if (token_class != nullptr) *last++ = secs[7];
  if (unseen >= 0) *last++ = secs[8];
  if (token_stacks != nullptr) *last++ = secs[9];
  const uint32_t n = uint32_t(last - secs);
  uint64_t off = 128 + 64 * n;
  off = (off + 63) / 64 * 64;
  unsigned char* h = img.bytes;
  put_file_start(h, "LLAMODEL", 128);
  put32(h + 28, n);
  put32(h + 32, 8);
  put32(h + 36, V);
  put32(h + 40, E);
  put32(h + 44, H);
  put32(h + 48, 16);
  put32(h + 52, 48);
  put32(h + 56, 4);
  put32(h + 60, 1);
  put32(h + 64, 0);
  put32(h + 68, 2);
  put32(h + 72, 3);
  put32(h + 76, 0);
  uint64_t bound = 10000000ull;
  for (int k = 0; k < 6; ++k, bound *= 10) put64(h + 80 + 8 * k, bound);
  for (uint32_t s = 0; s < n; ++s) {
    if (off + secs[s].bytes > sizeof img.bytes) abort();  // a model larger than Image holds: enlarge it
    unsigned char* e = h + 128 + 64 * s;
    strncpy(reinterpret_cast<char*>(e), secs[s].name, 24);
    put32(e + 24, secs[s].dtype);
    put32(e + 28, secs[s].ndim);
    put32(e + 32, secs[s].s0);
    put32(e + 36, secs[s].s1);
    put64(e + 48, off);
    put64(e + 56, secs[s].bytes);
    unsigned char* data = h + off;
    if (s == 0)
      for (uint32_t i = 0; i <= V; ++i) put32(data + 4 * i, 2 * i);
    if (s == 1)
      for (uint32_t i = 0; i < V; ++i) data[2 * i] = 'a';
    if (strcmp(secs[s].name, "train.token_contexts") == 0) memcpy(data, token_contexts, 8ull * contexts);
    if (strcmp(secs[s].name, "train.token_class") == 0) memcpy(data, token_class, contexts);
    if (strcmp(secs[s].name, "deploy.unseen") == 0) put32(data, uint32_t(unseen));
    if (strcmp(secs[s].name, "train.token_stacks") == 0) memcpy(data, token_stacks, 8ull * stacks);
    if (s >= 2 && s < 6) {
      float* f = reinterpret_cast<float*>(data);
      for (uint64_t i = 0; i < secs[s].bytes / 4; ++i) f[i] = float((i * 37 % 101) - 50) / 50.0f;
    }
    off = (off + secs[s].bytes + 63) / 64 * 64;
  }
  img.size = off;
  put64(h + 16, img.size);
  put32(h + 24, crc32(0, h + 128, img.size - 128));
}

inline void reseal(Image& img) { put32(img.bytes + 24, crc32(0, img.bytes + 128, img.size - 128)); }

// Resident KiB of the mapping that contains `address` (/proc/self/smaps), -1 if none.
inline long resident_kib(const void* address) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  bool in = false;
  long kib = -1;
  uintptr_t a = reinterpret_cast<uintptr_t>(address);
  while (f && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) in = a >= lo && a < hi;
    else if (in && strncmp(line, "Rss:", 4) == 0) kib = atol(line + 4);
  }
  if (f) fclose(f);
  return kib;
}

// Resident KiB of [address, address + bytes) (mincore), whatever mapping holds it: the Rss of a whole mapping
// moves when the kernel merges it with an anonymous neighbour that something else maps or drops.
inline long resident_kib_in(const void* address, size_t bytes) {
  uintptr_t lo = reinterpret_cast<uintptr_t>(address) & ~uintptr_t{4095};
  uintptr_t hi = (reinterpret_cast<uintptr_t>(address) + bytes + 4095) & ~uintptr_t{4095};
  unsigned char v[4096];
  size_t pages = (hi - lo) / 4096;
  if (pages > sizeof v || mincore(reinterpret_cast<void*>(lo), hi - lo, v) != 0) return -1;
  long kib = 0;
  for (size_t i = 0; i < pages; ++i) kib += (v[i] & 1) ? 4 : 0;
  return kib;
}

}  // namespace llamalloc::model::test
