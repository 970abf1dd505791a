"""Every file the tool writes goes through llamalloc.files: a reader never sees it half-written, and a failed or
interrupted write leaves what was there before and no temporary file."""
from __future__ import annotations

import os
import stat

import pytest

from llamalloc import files
from llamalloc.errors import UserError


def test_a_complete_write_replaces_the_file_readable_by_all(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    files.write_text(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["out.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt):
        with files.replacing(path, durable=True) as tmp:
            tmp.write_bytes(b"half")
            raise KeyboardInterrupt
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["model"]


def test_a_folder_that_does_not_exist_is_one_clear_error(tmp_path):
    path = tmp_path / "missing" / "out.prof"
    with pytest.raises(UserError, match=r"cannot write .*missing/out\.prof"):
        files.write_bytes(path, b"x")


def test_output_checks_try_to_write_and_create_nothing(tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    # A file path: its folder must be there and take a file; a folder is refused.
    assert files.check_output_file(tmp_path / "out.json") == tmp_path / "out.json"
    with pytest.raises(UserError, match="is a directory; give the model file's path"):
        files.check_output_file(tmp_path, "model")
    with pytest.raises(UserError, match="folder .*missing does not exist"):
        files.check_output_file(tmp_path / "missing" / "out.json")
    # /proc takes no new file, whatever os.access says to root: the check tries.
    with pytest.raises(UserError, match="^/proc/out.json: cannot write in folder /proc: "):
        files.check_output_file("/proc/out.json")
    # A folder: it, or the nearest folder above it that is there, must take a file; nothing is created.
    assert files.check_output_folder(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    with pytest.raises(UserError, match="exists and is not a folder"):
        files.check_output_folder(a_file)
    with pytest.raises(UserError, match=f"cannot create the folder: {a_file} is not a folder"):
        files.check_output_folder(a_file / "sub")
    with pytest.raises(UserError, match="cannot write in folder /proc"):
        files.check_output_folder("/proc/llamalloc-out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]
    # make_folder says what it made, the outermost folder first: what to remove to leave nothing behind.
    assert files.missing_top(tmp_path / "new" / "deeper") == tmp_path / "new"
    assert files.make_folder(tmp_path / "new" / "deeper") == tmp_path / "new"
    assert files.make_folder(tmp_path / "new" / "deeper") is None and (tmp_path / "new" / "deeper").is_dir()
