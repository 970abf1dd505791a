"""Writing a file so that no reader ever sees it half-written, and an interrupted or failed write leaves what was
there before: the data goes to a temporary file in the destination's folder (a rename across file systems would
copy), which is renamed over the destination once complete and removed otherwise. Every file the tool writes goes
through here. Reading an input whole (`read_input`) is here too, so that a missing or unreadable input is reported
in the same line by every reader."""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import FormatError, UserError


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


def cannot_write_in(folder) -> str | None:
    """Why `folder` takes no file now (the system's words), or None when it does: a file of one 4 KiB block is
    created there and removed. It tries rather than asks (os.access): for root the permission bits always say yes,
    and neither a read-only mount nor a folder such as /proc shows in them. It writes a block because a full disk
    still takes an empty file."""
    try:
        fd, name = tempfile.mkstemp(prefix=".llamalloc-check-", suffix=".tmp", dir=folder)
    except OSError as e:
        return e.strerror or str(e)
    try:
        os.write(fd, bytes(4096))
    except OSError as e:
        return e.strerror or str(e)
    finally:
        os.close(fd)
        os.unlink(name)
    return None


def _try_writing_in(folder: Path, target: Path) -> None:
    """Raises a UserError that names `target` when `folder` takes no file (`cannot_write_in`)."""
    why = cannot_write_in(folder)
    if why is not None:
        raise UserError(f"{target}: cannot write in folder {folder}: {why}")


def check_output_file(path, what: str = "output") -> Path:
    """Refuses, before any long work, a file path that cannot be written: a folder, a file in a folder that does not
    exist, or one in which no file can be created. `what` names the file in the message ("model" -> "give the
    model file's path"). Returns the path."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory; give the {what} file's path")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"{path}: folder {folder} does not exist")
    _try_writing_in(folder, path)
    return path


def check_output_folder(folder) -> Path:
    """Refuses, before any long work, an output folder that cannot be written: one that is a file, or lies under a
    file, or whose nearest existing folder (itself, or where it would be created) takes no new file. Creates
    nothing. Returns the folder."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder")
    existing = folder.absolute()
    while not existing.is_dir():
        if existing.exists() or existing.is_symlink():
            raise UserError(f"{folder}: cannot create the folder: {existing} is not a folder")
        existing = existing.parent
    _try_writing_in(existing, folder)
    return folder


def missing_top(folder) -> Path | None:
    """The outermost folder of the path `folder` that is not there yet (what creating it would create first, and
    what to remove to leave nothing behind), or None when `folder` is there."""
    folder = Path(folder).absolute()
    if folder.exists():
        return None
    while not folder.parent.exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def make_folder(folder) -> Path | None:
    """Creates `folder` (and its missing parents) when it is not there. Returns the outermost folder this call
    created (what to remove to leave nothing behind), or None when it was there. An OSError becomes a UserError
    that names the folder."""
    folder = Path(folder)
    top = missing_top(folder)
    if top is None:
        return None
    try:
        folder.mkdir(parents=True)
    except FileExistsError:
        if folder.is_dir():
            return None
        raise UserError(f"{folder}: exists and is not a folder") from None
    except OSError as e:
        raise UserError(f"{folder}: cannot create the folder: {e.strerror or e}") from None
    return top


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


def read_input(path, what: str, size: int = -1) -> bytes:
    """The bytes of the file at `path` (at most `size` of them when size >= 0). A file that is missing, a directory
    (the message says it is not `what`, such as "a profile") or unreadable is a FormatError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except IsADirectoryError:
        raise FormatError(path, f"is a directory, not {what}") from None
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror}") from None
