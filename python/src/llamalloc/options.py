"""The allocator's options (LLAMALLOC_<NAME>, docs/options.md) as the library itself checks them:
`llamalloc-options --validate` runs each "NAME=VALUE" through the parser the heap reads its environment with, so
that `llamalloc run --option` and `llamalloc simulate --option` refuse, in one line and before anything starts, a
setting the allocator would only warn about and run on without.
"""
from __future__ import annotations

import subprocess
from typing import Iterable

from . import paths
from .errors import UserError

PROGRAM = "src/llamalloc/llamalloc-options"
_ERROR = "llamalloc-options: error: "


def check_options(options: Iterable[str]) -> None:
    """Raises a one-line UserError, "--option NAME=VALUE: <the library's reason>", for the first "NAME=VALUE"
    (NAME with or without LLAMALLOC_) that the heap's options table refuses: a name that is not one of its options
    (with the nearest one when it is near), or a value its parser refuses (out of range, not a number)."""
    options = [str(o) for o in options]
    if not options:
        return
    r = subprocess.run([str(paths.native_program(PROGRAM)), "--validate", *options], capture_output=True, text=True)
    if r.returncode == 0:
        return
    refused = [line[len(_ERROR):] for line in r.stderr.splitlines() if line.startswith(_ERROR)]
    message = f"--option {refused[0]}" if refused else f"llamalloc-options failed with status {r.returncode}"
    raise UserError(message, exit_code=2)
