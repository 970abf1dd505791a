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
