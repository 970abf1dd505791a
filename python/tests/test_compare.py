"""`llamalloc compare` runs a user's own command (or a server and its client) under several allocators
and compares peak, steady-state and final memory and time."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from test_profiler_common import llamalloc

PEAK_C = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char** argv) {
  enum { N = 40000 };
  static char* p[N];
  for (int i = 0; i < N; i++) { p[i] = malloc(256); memset(p[i], 1, 256); }
  usleep(200000);
  for (int i = 0; i < N; i++) { free(p[i]); }
  if (argc > 1) for (;;) pause();  /* a server: runs until stopped */
  usleep(200000);
  return 0;
}
"""


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    (d / "peak.c").write_text(PEAK_C)
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-o", str(d / "peak"), str(d / "peak.c")], check=True)
    return d / "peak"


def test_compare_a_program_under_three_allocators(prog, tmp_path):
    out = tmp_path / "cmp"
    r = llamalloc("compare", "--allocators", "glibc,jemalloc,llamalloc", "-o", out, "--", prog)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.split()
            and line.split()[0] in ("glibc", "jemalloc", "llamalloc")}
    assert set(rows) == {"glibc", "jemalloc", "llamalloc"}
    assert "peak MiB" in r.stdout and "steady MiB" in r.stdout and "final MiB" in r.stdout
    verdict = [line for line in r.stdout.splitlines() if line.startswith("least memory after the peak: ")]
    assert len(verdict) == 1
    doc = json.loads((out / "compare.json").read_text())
    assert [x["allocator"] for x in doc["runs"]] == ["glibc", "jemalloc", "llamalloc"]
    for x in doc["runs"]:
        assert x["status"] == 0 and x["problem"] is None
        assert x["peak_rss_bytes"] >= 40000 * 256  # the program's peak is seen
        assert x["peak_rss_bytes"] >= x["steady_rss_bytes"]
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_compare_a_server_driven_by_a_client(prog, tmp_path):
    out = tmp_path / "cmp"
    r = llamalloc("compare", "--allocators", "glibc,llamalloc", "--client", "sleep 0.3", "--startup", "0.5",
                  "-o", out, "--", prog, "serve")
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "compare.json").read_text())
    for x in doc["runs"]:
        assert x["problem"] is None, x
        assert x["status"] == 128 + 15  # stopped (SIGTERM) when the client was done: the server never ends itself
        assert x["peak_rss_bytes"] >= 40000 * 256


def test_compare_bad_input_is_one_line(prog, tmp_path):
    r = llamalloc("compare", "--allocators", "glibc,nosuch", "-o", tmp_path / "c", "--", prog)
    assert r.returncode == 2 and r.stderr.startswith("llamalloc: error: --allocators: unknown allocator 'nosuch'")
    r = llamalloc("compare", "--alocators", "glibc", "--", prog)
    assert r.returncode == 2 and "no such option: --alocators (did you mean --allocators?)" in r.stderr
