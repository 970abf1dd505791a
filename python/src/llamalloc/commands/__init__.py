"""The `llamalloc` subcommands. commands/X.py is the command line of `llamalloc X`: its options, what it prints and
its exit status; it defines `command` (or `commands`, a list), which `load_commands` finds for llamalloc.cli. The
work behind it is in llamalloc/X.py (llamalloc/X/ for a package), which other commands and the tests call:

    record, trace, run, simulate, bench, compare, demo, prepare, symbolize   llamalloc/<command>.py
    report                                                                    llamalloc/report/
    train, evaluate                                                           llamalloc/model/ (the lifetime model)

run.py is also the one place that starts a user's program (record, trace, compare, bench and demo start it
there). What several commands share is a module of its own: profile.py (the profile format), traceformat.py (the
trace format), allocators.py (the allocators bench and compare run under), workloads/, files.py (writing a file
atomically), paths.py, errors.py. A module imports only from its own layer or below (docs/architecture.md,
"Python package layers"; checked by lint-imports)."""
from __future__ import annotations

import importlib
import pkgutil

import click


def load_commands() -> list[click.Command]:
    """Every subcommand: each module's `command` and `commands`, modules in name order. They are found here, so
    a new command never edits llamalloc.cli; a command that asks which others exist (demo) asks here too, since
    nothing in this package imports llamalloc.cli, the layer above it."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "command"):
            found.append(mod.command)
        found.extend(getattr(mod, "commands", []))
    return found
