"""Helpers that several test files share (pytest loads this file before them; they import its helpers with
`from conftest import ...`)."""
from __future__ import annotations

import subprocess
import sys


def llamalloc(*args, env=None, cwd=None, check_rc: int | None = 0, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m llamalloc ARGS` (each argument through str), its output captured; its exit status must be
    `check_rc` unless that is None."""
    r = subprocess.run([sys.executable, "-m", "llamalloc", *map(str, args)], capture_output=True, text=True,
                       env=env, cwd=cwd, timeout=timeout)
    if check_rc is not None:
        assert r.returncode == check_rc, f"rc={r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}"
    return r
