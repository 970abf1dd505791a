"""Issue 13: runtime statistics from the library while the program runs (llamalloc_stats_json and
llamalloc_stats_print in include/llamalloc.h)."""
from __future__ import annotations

import json
import subprocess

from linked_support import build_linked

PROG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <llamalloc.h>
int main(void) {
  enum { N = 20000 };
  static void* p[N];
  for (int i = 0; i < N; i++) { p[i] = malloc(512); memset(p[i], 1, 512); }
  char buf[8192];
  size_t n = llamalloc_stats_json(buf, sizeof buf);
  if (n == 0 || n >= sizeof buf) return 3;
  buf[n] = 0;
  printf("%s\n", buf);
  if (llamalloc_stats_json(buf, 10) != 0) return 4;  /* too small: 0, nothing promised */
  llamalloc_stats_print();
  for (int i = 0; i < N; i++) free(p[i]);
  return 0;
}
"""


def test_stats_while_running(tmp_path):
    exe = build_linked(tmp_path, PROG, "s")
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    now = json.loads(r.stdout)
    printed = json.loads(r.stderr)
    for doc in (now, printed):
        assert doc["footprint_bytes"] >= 20000 * 512
        assert doc["live_bytes"] >= 20000 * 512 - 2 * 256 * 1024
