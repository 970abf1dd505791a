"""Writing a file so that no reader ever sees it half-written, and an interrupted or failed write leaves what was
there before: the data goes to a temporary file in the destination's folder (a rename across file systems would
copy), which is renamed over the destination once complete and removed otherwise. Every file the tool writes goes
through here."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import UserError


@contextlib.contextmanager
def replacing(path, *, durable: bool = False) -> Iterator[Path]:
    """Yields a temporary path beside `path` for the block to write. When the block ends without an exception, the
    file is made readable by all (0644; a temporary file is private), flushed to disk if `durable`, and renamed onto
    `path`; otherwise it is removed and `path` is left as it was. An OSError, the block's or the rename's, becomes a
    UserError that names `path`."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        if durable:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes(path, data: bytes, *, durable: bool = False) -> None:
    """Writes `data` to `path` through `replacing`."""
    with replacing(path, durable=durable) as tmp:
        tmp.write_bytes(data)


def write_text(path, text: str) -> None:
    """Writes `text` (UTF-8) to `path` through `replacing`."""
    write_bytes(path, text.encode())


def copy_file(src, path) -> None:
    """Copies `src` to `path` through `replacing`."""
    import shutil

    with replacing(path) as tmp:
        shutil.copyfile(src, tmp)


def move_file(src, path) -> None:
    """Moves the complete file `src` onto `path`: a rename where both are on one file system (a reader sees the
    old file or the new one), else `copy_file` and `src` removed."""
    try:
        os.replace(src, path)
        return
    except OSError:
        pass
    copy_file(src, path)
    Path(src).unlink(missing_ok=True)
