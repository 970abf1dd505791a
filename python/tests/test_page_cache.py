"""The page cache (LLAMALLOC_PAGE_CACHE_PAGES, docs/heap.md "Page cache"), in a real program: freed huge objects
are reused, and calloc() zeroes the reused pages (it skips the memset only on fresh pages, which the kernel
zeroed). Off by default."""
from __future__ import annotations

import json
import subprocess
import sys

from test_workloads_support import llamalloc_library, preload_env

# CPython's bytes(n) is calloc(); b'\xff' * n is malloc() and a fill. 5 MiB: a huge object of 3 pages.
PROGRAM = """
for i in range(4):
    x = b'\\xff' * (5 << 20)
    del x
    y = bytes(5 << 20)
    assert y.count(0) == len(y), 'calloc returned old data'
    del y
print('ok')
"""


def run(tmp_path, **env: str) -> dict:
    stats = tmp_path / "stats.json"
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120,
                         env=preload_env(llamalloc_library(), LLAMALLOC_STATS=str(stats), **env))
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    return json.loads(stats.read_text())


def test_freed_huge_objects_are_reused_and_calloc_zeroes_them(tmp_path):
    stats = run(tmp_path, LLAMALLOC_PAGE_CACHE_PAGES="16")
    assert stats["counters"]["huge_pages_reused"] >= 9, stats["counters"]
    assert "page_cache_bytes" in stats


def test_off_by_default_every_free_huge_page_goes_back(tmp_path):
    stats = run(tmp_path)
    assert stats["counters"]["huge_pages_reused"] == 0
    assert stats["page_cache_bytes"] == 0
