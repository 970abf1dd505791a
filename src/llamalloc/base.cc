// Messages to stderr and fatal errors, with write(2) only: they are reported from inside malloc and free, where
// calling malloc or stdio (which may allocate, or hold a lock the interrupted code holds) could deadlock or recurse.
#include "base.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstring>

namespace llamalloc {

void write_stderr(const char* text) {
  size_t n = strlen(text);
  while (n > 0) {
    ssize_t w = write(2, text, n);
    if (w <= 0) return;
    text += w;
    n -= size_t(w);
  }
}

void fatal_pointer(const char* what, const void* address, const char* problem) {
  char line[256];
  char hex[19] = "0x";
  uintptr_t a = reinterpret_cast<uintptr_t>(address);
  int digits = 1;
  while (digits < 16 && (a >> (4 * digits)) != 0) ++digits;
  for (int i = 0; i < digits; ++i) hex[2 + i] = "0123456789abcdef"[(a >> (4 * (digits - 1 - i))) & 15];
  hex[2 + digits] = 0;
  line[0] = 0;
  strcat(line, "llamalloc: ");
  strncat(line, what, 40);
  strcat(line, " ");
  strcat(line, hex);
  strcat(line, ": ");
  strncat(line, problem, 150);
  strcat(line, "\n");
  write_stderr(line);
  abort();
}

void fatal(const char* message) {
  write_stderr("llamalloc: ");
  write_stderr(message);
  write_stderr("\n");
  abort();
}

}  // namespace llamalloc
