"""Helpers shared by the workload, bench and real-program tests (no tests here).

The allocator under test is the project's libllamalloc.so, found through llamalloc.paths. A test that needs it
FAILS when it is missing: a missing allocator is a broken build, not a reason to skip. LLAMALLOC_TEST_PRELOAD
overrides the library (only for developing these tests against another allocator, e.g. jemalloc)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamalloc import paths
from llamalloc.errors import UserError


def llamalloc_library() -> Path:
    override = os.environ.get("LLAMALLOC_TEST_PRELOAD")
    if override:
        if not Path(override).is_file():
            pytest.fail(f"LLAMALLOC_TEST_PRELOAD={override} does not exist")
        return Path(override)
    try:
        return paths.native_library("libllamalloc.so")
    except UserError as e:
        pytest.fail(f"libllamalloc.so is required: {e}")


def is_real_llamalloc(library: Path) -> bool:
    return "llamalloc" in library.name


def preload_env(library: Path | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LLAMALLOC_STATS")}
    if library is not None:
        env["LD_PRELOAD"] = str(library)
    env.update(extra)
    return env
