"""Double frees and writes after free under the production library (no invariant checker): each is reported in one
line and the process stopped before any memory is handed out twice (docs/heap.md, "Bad frees"). The owner's
free does not read the block, so a block it frees twice is caught when its span's list next reaches the block
(the malloc that would hand it out again) or when the span goes back; a write into a freed block is caught when
the block's link is followed (without the check, the program crashed on a wild pointer from the free list)."""
from __future__ import annotations

import os
import re
import signal
import subprocess

import pytest

from linked_support import build_linked

SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Through volatile pointers: the compiler may not drop a malloc and free whose memory is unused. */
static void* (*volatile mallocp)(size_t) = malloc;
static void (*volatile freep)(void*) = free;
#define malloc(n) mallocp(n)
#define free(p) freep(p)

/* Every pointer handed out, to see one handed out twice while it is live. */
static void* seen[200000];
static int n_seen;
static void note(void* p) {
  for (int i = 0; i < n_seen; ++i)
    if (seen[i] == p) { printf("HANDED OUT TWICE %p\n", p); fflush(stdout); _exit(3); }
  seen[n_seen++] = p;
}

int main(int argc, char** argv) {
  const char* mode = argv[1];
  if (!strcmp(mode, "in-a-row")) {
    void* a = malloc(100); void* keep = malloc(100);
    free(a); free(a);
    for (int i = 0; i < 20000; ++i) note(malloc(100));
    (void)keep;
  } else if (!strcmp(mode, "later")) {
    void* a = malloc(100); void* b = malloc(100); void* keep = malloc(100);
    free(a); free(b); free(a);  /* a -> b -> a on the span's list */
    for (int i = 0; i < 20000; ++i) note(malloc(100));
    (void)keep;
  } else if (!strcmp(mode, "never-allocated")) {
    /* A pointer to a free block of a live span that was never handed out: caught as a double free is. */
    char* a = malloc(100); void* keep = malloc(100);
    free(a + 3 * 112);
    for (int i = 0; i < 20000; ++i) note(malloc(100));
    (void)keep;
  } else if (!strcmp(mode, "write-after-free")) {
    void* a = malloc(100); void* keep = malloc(100);
    free(a);
    memset(a, 0x41, 16);
    for (int i = 0; i < 20000; ++i) malloc(100);
    (void)keep;
  } else if (!strcmp(mode, "empties-span")) {
    /* 7000 B objects: a span of a few. Fill one span, start the next, then free all of the first but one, one of
       them twice (not in a row): the span counts none in use while first[0] is live. */
    void* first[64]; int n = 0;
    first[n++] = malloc(7000);
    for (;;) {
      void* p = malloc(7000);
      if ((char*)p < (char*)first[0] || (char*)p >= (char*)first[0] + 65536) { (void)p; break; }
      first[n++] = p;
    }
    if (n < 4) { printf("span of %d\n", n); return 2; }
    free(first[1]); free(first[2]); free(first[1]);
    for (int i = 3; i < n; ++i) free(first[i]);
    memset(first[0], 1, 7000);  /* still the program's */
    for (int i = 0; i < 2000; ++i) note(malloc(7000));
  } else if (!strcmp(mode, "ok")) {
    /* Random frees and reuse, no bad free: nothing is reported. */
    void* live[4096] = {0};
    unsigned x = 1;
    for (int i = 0; i < 400000; ++i) {
      x = x * 1103515245u + 12345u;
      int k = (x >> 8) % 4096;
      if (live[k]) { free(live[k]); live[k] = 0; }
      else live[k] = malloc(16 + (x >> 20) % 3000);
    }
    for (int k = 0; k < 4096; ++k) free(live[k]);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_linked(tmp_path_factory.mktemp("bad_frees"), SOURCE)


def run(program, mode):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_")}
    return subprocess.run([str(program), mode], capture_output=True, text=True, timeout=60, env=env)


# A block freed twice, or a free block freed: reported by the free that finds it on a list (another thread's, or
# the owner's into a span with remote frees waiting), by the malloc whose list reaches it again, or when its span
# goes back; never as a plain "double free" for a block that was never handed out.
DOUBLE = (r"llamalloc: (free of 0x[0-9a-f]+: double free|free into the span of 0x[0-9a-f]+: double free|malloc: freed "
          r"block 0x[0-9a-f]+: its link was overwritten: written after it was freed, or freed twice$)")


@pytest.mark.parametrize("mode,message", [
    ("in-a-row", DOUBLE),
    ("later", DOUBLE),
    ("never-allocated", DOUBLE),
    ("write-after-free", r"llamalloc: malloc: freed block 0x[0-9a-f]+: its link was overwritten: written after it "
                         r"was freed, or freed twice$"),
    ("empties-span", DOUBLE),
])
def test_bad_free_is_reported_in_one_line_before_memory_is_handed_out_twice(program, mode, message):
    r = run(program, mode)
    assert "HANDED OUT TWICE" not in r.stdout, r.stdout
    assert r.returncode == -signal.SIGABRT, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert re.match(message, lines[0]), lines[0]


def test_a_program_without_bad_frees_runs_clean(program):
    r = run(program, "ok")
    assert r.returncode == 0 and r.stderr == "", r.stderr
