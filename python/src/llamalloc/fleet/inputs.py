"""The profiles that `llamalloc aggregate` reads, from its arguments."""
from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Iterable

from ..errors import UserError

GLOB_CHARACTERS = frozenset("*?[")


def _walk(folder: Path) -> Iterable[str]:
    """Every regular file under folder, recursively, in name order; hidden files and folders (a name starting with
    ".", such as a corpus's staging folder) are left out."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as e:
        raise UserError(f"{folder}: cannot list: {e.strerror or e}") from None
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir(follow_symlinks=True):
            yield from _walk(Path(entry.path))
        elif entry.is_file(follow_symlinks=True):
            yield entry.path


def _list_file(arg: str) -> Iterable[str]:
    """@LIST: one path per line; blank lines and lines starting with # are skipped; a relative path is taken from
    the list's folder."""
    path = Path(arg[1:])
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserError(f"{path}: no such list file (for {arg})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read the list file: {getattr(e, 'strerror', None) or e}") from None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry = Path(line)
        yield str(entry if entry.is_absolute() else path.parent / entry)


def expand(args: Iterable[str]) -> list[str]:
    """The files named by args, each once, in the order given: a file; a folder (every file under it, hidden ones
    left out); a glob pattern (*, ? or [, with ** across folders; quote it so that the shell leaves it alone); or
    @LIST, a file listing one path per line. A name that is none of these is an error that names it; a file among
    them that is no profile is not (the aggregation reports and skips it)."""
    seen: set[str] = set()
    out: list[str] = []

    def add(name: str) -> None:
        key = os.path.normpath(name)
        if key not in seen:
            seen.add(key)
            out.append(name)

    for arg in args:
        if arg.startswith("@"):
            for name in _list_file(arg):
                add(name)  # a listed file that is missing is reported and skipped like a corrupt one
        elif os.path.isdir(arg):
            for name in _walk(Path(arg)):
                add(name)
        elif os.path.exists(arg):
            add(arg)
        elif GLOB_CHARACTERS & set(arg):
            matches = sorted(m for m in glob.glob(arg, recursive=True) if os.path.isfile(m))
            if not matches:
                raise UserError(f"{arg}: no file matches this pattern")
            for name in matches:
                add(name)
        else:
            raise UserError(f"{arg}: no such file or folder")
    return out
