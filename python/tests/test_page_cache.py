"""The page cache (LLAMALLOC_PAGE_CACHE_PAGES, docs/heap.md "Page cache") in a real program: the pages of freed
huge objects are reused while the sweeper thread runs, and calloc() zeroes reused pages (it skips the memset
only on fresh pages, which the kernel zeroed). A single-threaded program has no sweeper: each free keeps at most
the larger of an eighth of its pages in use and the pages of one buffer it replaces (a recent huge object, up to
16 MiB), so it reuses the buffers it replaces and keeps at most one of them when it goes quiet."""
from __future__ import annotations

import json
import subprocess
import sys

from test_workloads_support import llamalloc_library, preload_env

# CPython's bytes(n) is calloc(); b'\\xff' * n is malloc() and a fill. 5 MiB: a huge object of 3 pages. With
# `threads`, a second thread allocates first, which starts the sweeper; with `held`, the program holds 64 MiB
# (32 pages) throughout, which lets a single thread's cache keep 4 pages.
PROGRAM = """
import sys, threading, time
held = bytearray(64 << 20) if sys.argv[1] == 'held' else None
if sys.argv[1] == 'threads':
    t = threading.Thread(target=lambda: [bytearray(100) for _ in range(1000)])
    t.start(); t.join()
    time.sleep(0.05)
for i in range(4):
    x = b'\\xff' * (5 << 20)
    del x
    y = bytes(5 << 20)
    assert y.count(0) == len(y), 'calloc returned old data'
    del y
print('ok')
"""


def run(tmp_path, mode: str, **env: str) -> dict:
    stats = tmp_path / f"stats-{mode}.json"
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, timeout=120,
                         env=preload_env(llamalloc_library(), LLAMALLOC_STATS=str(stats), **env))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    return json.loads(stats.read_text())


def test_freed_huge_objects_are_reused_and_calloc_zeroes_them(tmp_path):
    stats = run(tmp_path, "threads")
    assert stats["counters"]["huge_pages_reused"] >= 9, stats["counters"]


def test_a_single_thread_reuses_the_buffers_it_replaces_and_keeps_at_most_one(tmp_path):
    assert run(tmp_path, "held")["counters"]["huge_pages_reused"] >= 9
    single = run(tmp_path, "single")
    # 8 buffers of 3 pages: all but the first reuse the one before, holding little else.
    assert single["counters"]["huge_pages_reused"] >= 3 * 7, single["counters"]
    assert single["page_cache_bytes"] <= 3 * (2 << 20), single


def test_no_cache_when_turned_off(tmp_path):
    off = run(tmp_path, "threads", LLAMALLOC_PAGE_CACHE_PAGES="0")
    assert off["counters"]["huge_pages_reused"] == 0 and off["page_cache_bytes"] == 0
