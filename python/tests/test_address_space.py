"""The heap under address-space and data limits, and over long runs (docs/heap.md, "Address space"): programs run
under `ulimit -v` and `ulimit -d` of a few hundred MB as under glibc; a program that fills memory until malloc
fails, frees it all and fills it again gets back what glibc gets back; huge objects allocated and freed a million
times keep the address space, the writable mappings and the page tables bounded; freed memory leaves VmData
(what strict overcommit charges) as it leaves RSS."""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from pathlib import Path

import pytest

from llamalloc.paths import native_library

MiB = 1 << 20

SOURCE = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Through volatile pointers: the compiler may not drop a malloc and free whose memory is unused. */
static void* (*volatile mallocp)(size_t) = malloc;
static void (*volatile freep)(void*) = free;

/* VmSize, VmData, VmPTE of this process, in KiB (read without malloc). */
static void status(long* size, long* data, long* pte) {
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY);
  ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof(buf) - 1);
  if (fd >= 0) close(fd);
  buf[n < 0 ? 0 : n] = 0;
  char* at;
  *size = (at = strstr(buf, "VmSize:")) ? atol(at + 7) : -1;
  *data = (at = strstr(buf, "VmData:")) ? atol(at + 7) : -1;
  *pte = (at = strstr(buf, "VmPTE:")) ? atol(at + 6) : -1;
}

/* Blocks of `size` until malloc fails, each linked to the one before through its first word. */
static void* fill(size_t size, long* count) {
  void* head = NULL;
  *count = 0;
  for (;;) {
    void** p = mallocp(size);
    if (p == NULL) break;
    *p = head;
    head = p;
    ++*count;
  }
  return head;
}
static void drain(void* head) {
  while (head) {
    void* next = *(void**)head;
    freep(head);
    head = next;
  }
}

int main(int argc, char** argv) {
  long s0, d0, t0, s1, d1, t1, s2, d2, t2;
  if (argc == 3 && !strcmp(argv[1], "fill")) {
    size_t size = strtoul(argv[2], NULL, 10);
    long first, second;
    status(&s0, &d0, &t0);
    void* head = fill(size, &first);
    status(&s1, &d1, &t1);
    drain(head);
    status(&s2, &d2, &t2);
    head = fill(size, &second);
    drain(head);
    printf("{\"first\": %ld, \"second\": %ld, \"vmdata_start_kib\": %ld, \"vmdata_full_kib\": %ld, "
           "\"vmdata_freed_kib\": %ld}\n", first, second, d0, d1, d2);
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "pairs")) {
    /* `rounds` alloc/free pairs of `size` bytes, one byte written in one pair of 64. */
    long rounds = atol(argv[2]);
    size_t size = strtoul(argv[3], NULL, 10);
    long first_s = 0, first_d = 0, first_t = 0;
    for (long i = 0; i < rounds; ++i) {
      char* p = mallocp(size);
      if (p == NULL) { printf("{\"failed_at\": %ld}\n", i); return 1; }
      if (i % 64 == 0) p[(i / 64) % (size / 4096) * 4096] = 1;
      freep(p);
      if (i == 1000) status(&first_s, &first_d, &first_t);
    }
    status(&s1, &d1, &t1);
    printf("{\"vmsize_kib\": [%ld, %ld], \"vmdata_kib\": [%ld, %ld], \"vmpte_kib\": [%ld, %ld]}\n",
           first_s, s1, first_d, d1, first_t, t1);
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "commit")) {
    /* Allocates `mib` MiB in 64 KiB blocks, writes them, frees them: VmData at each step. */
    long mib = atol(argv[2]);
    status(&s0, &d0, &t0);
    long count = mib * 16;
    void** blocks = mallocp(count * sizeof(void*));
    for (long i = 0; i < count; ++i) {
      blocks[i] = mallocp(65536);
      memset(blocks[i], 1, 65536);
    }
    status(&s1, &d1, &t1);
    for (long i = 0; i < count; ++i) freep(blocks[i]);
    freep(blocks);
    status(&s2, &d2, &t2);
    printf("{\"vmdata_kib\": [%ld, %ld, %ld]}\n", d0, d1, d2);
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "sparse")) {
    /* 4096 blocks of 64 KiB, one byte written in each: resident and huge-page KiB. */
    for (int i = 0; i < 4096; ++i) ((char*)mallocp(65536))[0] = 1;
    char buf[4096];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n < 0 ? 0 : n] = 0;
    printf("{\"rss_kib\": %ld, \"anon_huge_kib\": %ld}\n", atol(strstr(buf, "\nRss:") + 5),
           atol(strstr(buf, "AnonHugePages:") + 14));
    return 0;
  }
  if (argc == 2 && !strcmp(argv[1], "mib")) {
    /* 200 live objects of 1 MiB + 33 B, written whole (CPython's bytes of 1 MiB): resident KiB. */
    for (int i = 0; i < 200; ++i) memset(mallocp((1 << 20) + 33), 1, (1 << 20) + 33);
    char buf[4096];
    int fd = open("/proc/self/smaps_rollup", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    buf[n < 0 ? 0 : n] = 0;
    printf("{\"rss_kib\": %ld}\n", atol(strstr(buf, "\nRss:") + 5));
    return 0;
  }
  return 2;
}
"""


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("address_space")
    (directory / "p.c").write_text(SOURCE)
    exe = directory / "p"
    subprocess.run([shutil.which("cc") or "gcc", "-O1", "-o", str(exe), str(directory / "p.c")], check=True)
    return exe


def run(argv, allocator: str, *, limit_as: int | None = None, limit_data: int | None = None, timeout=300,
        options: dict[str, str] | None = None):
    """Runs argv under glibc or llamalloc (LD_PRELOAD), with the given RLIMIT_AS / RLIMIT_DATA in bytes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMALLOC_") and k != "LD_PRELOAD"}
    if allocator == "llamalloc":
        env["LD_PRELOAD"] = str(native_library("libllamalloc.so"))
        env.update(options or {})

    def limits():
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
        if limit_data is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (limit_data, limit_data))

    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout, env=env,
                          preexec_fn=limits)


LIMITS = [pytest.param({"limit_as": 300 * MiB}, id="ulimit-v-300M"),
          pytest.param({"limit_data": 300 * MiB}, id="ulimit-d-300M")]


@pytest.mark.parametrize("limits", LIMITS)
@pytest.mark.parametrize("argv,expect", [
    (["ls", "/"], "usr"),
    (["python3", "-c", "import json, sqlite3; print(json.dumps(sorted({str(i): i for i in range(10000)})[:2]))"],
     '["0", "1"]'),
    (["git", "--version"], "git version"),
])
def test_programs_run_under_address_space_and_data_limits(limits, argv, expect):
    r = run(argv, "llamalloc", **limits)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert expect in r.stdout, r.stdout
    # A known limit is no surprise: nothing is printed.
    assert "llamalloc" not in r.stderr, r.stderr


# The share of glibc's count that llamalloc must reach, by object size and limit (docs/heap.md, "Known limits",
# says where the rest goes): within 10%, but for a 100 KB object, which takes 13 blocks of 8 KiB (6.5% over its
# size), 19 of them filling a huge page with 9 blocks over (3.5%).
FILL_CASES = [
    pytest.param(100, {"limit_as": 300 * MiB}, 0.9, id="100B-ulimit-v"),
    pytest.param(100, {"limit_data": 300 * MiB}, 0.9, id="100B-ulimit-d"),
    pytest.param(4000, {"limit_as": 300 * MiB}, 0.9, id="4000B-ulimit-v"),
    pytest.param(4000, {"limit_data": 300 * MiB}, 0.9, id="4000B-ulimit-d"),
    pytest.param(100_000, {"limit_as": 300 * MiB}, 0.85, id="100KB-ulimit-v"),
    pytest.param(100_000, {"limit_data": 300 * MiB}, 0.85, id="100KB-ulimit-d"),
    pytest.param(4 * MiB, {"limit_as": 300 * MiB}, 0.9, id="4MiB-ulimit-v"),
    pytest.param(4 * MiB, {"limit_data": 300 * MiB}, 0.9, id="4MiB-ulimit-d"),
    pytest.param(5 * MiB, {"limit_as": 300 * MiB}, 0.9, id="5MiB-ulimit-v"),
    pytest.param(5 * MiB, {"limit_data": 300 * MiB}, 0.9, id="5MiB-ulimit-d"),
]


@pytest.mark.parametrize("size,limits,share", FILL_CASES)
def test_fill_free_refill_gets_back_what_glibc_gets_back(program, size, limits, share):
    got = {}
    for allocator in ("glibc", "llamalloc"):
        r = run([program, "fill", size], allocator, **limits)
        assert r.returncode == 0, (allocator, r.stdout, r.stderr)
        got[allocator] = json.loads(r.stdout)
    glibc, llama = got["glibc"], got["llamalloc"]
    assert llama["first"] >= share * glibc["first"], got
    assert llama["second"] >= share * glibc["second"], got
    # Everything freed can be had again (the first ENOMEM is not permanent).
    assert llama["second"] >= 0.95 * llama["first"], got
    # What was freed left the writable mappings.
    assert llama["vmdata_freed_kib"] - llama["vmdata_start_kib"] < 0.1 * (llama["vmdata_full_kib"] - llama["vmdata_start_kib"]), got


def test_a_million_huge_pairs_keep_address_space_and_page_tables_bounded(program):
    r = run([program, "pairs", 1_000_000, 4 * MiB + 4096], "llamalloc", timeout=600)
    assert r.returncode == 0, (r.stdout, r.stderr)
    got = json.loads(r.stdout)
    (size0, size1), (data0, data1), (pte0, pte1) = got["vmsize_kib"], got["vmdata_kib"], got["vmpte_kib"]
    # After the first thousand pairs, nothing grows by more than a few huge pages' worth.
    assert size1 - size0 <= 16 * 1024, got
    assert data1 - data0 <= 16 * 1024, got
    assert pte1 - pte0 <= 64, got
    assert pte1 <= 1024, got


def test_freed_memory_leaves_vmdata_as_strict_overcommit_charges_it(program):
    # Under vm.overcommit_memory=2 the kernel charges every private writable mapping (MAP_NORESERVE is ignored):
    # VmData is that charge's share of this process. 512 MiB allocated, written and freed comes off it again.
    r = run([program, "commit", 512], "llamalloc")
    assert r.returncode == 0, (r.stdout, r.stderr)
    start, full, freed = json.loads(r.stdout)["vmdata_kib"]
    assert full - start >= 512 * 1024, r.stdout
    assert freed - start <= 32 * 1024, r.stdout


def test_sparse_touches_stay_small_unless_every_page_is_huge(program):
    # 4096 blocks of 64 KiB with one byte written each. With huge pages where dense (2, the default) the heap is
    # backed by 4 KiB pages as touched and only dense pages become huge: about what glibc keeps. With every page
    # huge from its first touch (1) they take about 256 MiB; 0 never asks for huge pages.
    glibc = json.loads(run([program, "sparse"], "glibc").stdout)
    off = json.loads(run([program, "sparse"], "llamalloc", options={"LLAMALLOC_HUGE_PAGES": "0"}).stdout)
    default = json.loads(run([program, "sparse"], "llamalloc").stdout)
    dense_only = json.loads(run([program, "sparse"], "llamalloc", options={"LLAMALLOC_HUGE_PAGES": "2"}).stdout)
    every = json.loads(run([program, "sparse"], "llamalloc", options={"LLAMALLOC_HUGE_PAGES": "1"}).stdout)
    assert off["anon_huge_kib"] == 0, off
    assert off["rss_kib"] <= 2 * glibc["rss_kib"], (off, glibc)
    for dense in (default, dense_only):
        assert dense["anon_huge_kib"] == 0, dense
        assert dense["rss_kib"] <= 1.2 * glibc["rss_kib"], (dense, glibc)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists() and "[never]" not in thp.read_text():
        assert every["anon_huge_kib"] >= 128 * 1024, every
        assert every["rss_kib"] >= 5 * off["rss_kib"], (every, off)


def test_objects_of_one_to_two_mib_cost_what_glibc_keeps(program):
    # 200 live objects of 1 MiB + 33 B, written whole: each is more than half a huge page, so nothing of its size
    # fits beside it; with its page huge from the first touch it would take 2 MiB (about 400 MiB in all). The
    # rest of its page is left unbacked, with the default options and with every setting of HUGE_PAGES.
    glibc = json.loads(run([program, "mib"], "glibc").stdout)
    for huge_pages in ("1", "0", "2"):
        ours = json.loads(run([program, "mib"], "llamalloc", options={"LLAMALLOC_HUGE_PAGES": huge_pages}).stdout)
        assert ours["rss_kib"] <= 1.1 * glibc["rss_kib"], (huge_pages, ours, glibc)
    assert glibc["rss_kib"] >= 200 * 1024, glibc


# ---------------------------------------------------------------- learning and models (docs/prediction.md)

# Prints VmData (KiB) of the process at its start, as the allocator left it.
VMDATA = ('print(next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmData:")))')
# The case of the address-space test for learning: a Python list of 100,000 items under 300 MB of `ulimit -v`.
LIST = 'l = [b"x" * 1000 for _ in range(100000)]; print("ok", len(l))'


@pytest.fixture(scope="module")
def random_model_file(tmp_path_factory) -> Path:
    from llamalloc.model import modelfile
    from predict_support import random_model
    path = tmp_path_factory.mktemp("address_space_model") / "random.model"
    modelfile.write(path, random_model())
    return path


@pytest.mark.parametrize("with_model,learn", [(False, True), (True, False), (True, True)],
                         ids=["learn", "model", "model-and-learn"])
def test_learning_or_a_model_takes_little_address_space_at_start(random_model_file, with_model, learn):
    # The prediction caches and the learner's tables are mapped as threads and contexts come: at start, a
    # process that learns or predicts has a few MiB more VmData than one that does neither, not the caches of
    # every thread it might have.
    options = {"LLAMALLOC_LEARN": "1", "LLAMALLOC_LEARN_FROM_MIB": "0"} if learn else {}
    if with_model:
        options["LLAMALLOC_MODEL"] = str(random_model_file)
    plain = run(["python3", "-c", VMDATA], "llamalloc")
    learning = run(["python3", "-c", VMDATA], "llamalloc", options=options)
    assert plain.returncode == 0 and learning.returncode == 0, (plain.stderr, learning.stderr)
    assert "cannot map" not in learning.stderr, learning.stderr
    difference_kib = int(learning.stdout) - int(plain.stdout)
    assert difference_kib < 8 * 1024, (int(plain.stdout), int(learning.stdout))


@pytest.mark.parametrize("limit_kib", [300_000, 120_000])
def test_a_program_learns_under_an_address_space_limit(tmp_path, limit_kib):
    # With learning on, the Python list runs under `ulimit -v` as it does without learning, and it learns: the
    # caches and tables fit in what the program leaves (the 120,000 KiB limit leaves about 35 MiB over its VmSize
    # without learning), and nothing is printed.
    stats = tmp_path / "stats.json"
    r = run(["python3", "-c", LIST], "llamalloc", limit_as=limit_kib * 1024,
            options={"LLAMALLOC_LEARN": "1", "LLAMALLOC_LEARN_FROM_MIB": "0", "LLAMALLOC_STATS": str(stats)})
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "ok 100000" in r.stdout, r.stdout
    assert "llamalloc" not in r.stderr, r.stderr
    online = json.loads(stats.read_text())["online"]
    assert online["contexts"] > 0 and online["samples"] > 0, online
