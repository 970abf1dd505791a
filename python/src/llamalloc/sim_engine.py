"""llamalloc-sim, the native replay engine (src/sim), as far as running a program needs it: where the binary is,
how its one-line errors read, and its check of the library's options (`check_heap_options`), which refuses a bad
`llamalloc run --option` the way `simulate --heap-option` refuses it. llamalloc.simulate runs the replays
themselves; this module is the part of it that llamalloc.run shares, kept below both so that starting a program
does not depend on the simulator's Python side (docs/architecture.md, "Python package layers").
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterable

from . import paths
from .errors import UserError

BINARY = "src/sim/llamalloc-sim"


def binary() -> Path:
    return paths.native_program(BINARY)


def error_of(r: subprocess.CompletedProcess) -> UserError:
    lines = [line for line in r.stderr.splitlines() if line.startswith("llamalloc-sim: error: ")]
    message = lines[-1][len("llamalloc-sim: error: "):] if lines else f"llamalloc-sim failed with status {r.returncode}"
    return UserError(message, exit_code=2 if r.returncode == 2 else 1)


def check_heap_options(heap_options: Iterable[str], search: Iterable[str] = ()) -> None:
    """Raises a one-line UserError naming the first bad "NAME=VALUE" (not an option of the library's table, or a
    value the library's parser refuses), or bad "--search NAME=V1,V2,..." (not a placement option, or a value
    refused), as llamalloc-sim checks them; at once, before tokens are prepared."""
    args = [str(binary())]
    for o in heap_options:
        args += ["--heap-option", str(o)]
    for spec in search:
        args += ["--search", str(spec)]
    r = subprocess.run(args + ["--check-heap-options"], capture_output=True, text=True)
    if r.returncode != 0:
        raise error_of(r)
