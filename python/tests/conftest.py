"""Helpers that several test files share (pytest loads this file before them; they import its helpers with
`from conftest import ...`)."""
from __future__ import annotations

import subprocess
import sys

import pytest


def llamalloc(*args, env=None, cwd=None, check_rc: int | None = 0, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m llamalloc ARGS` (each argument through str), its output captured; its exit status must be
    `check_rc` unless that is None."""
    r = subprocess.run([sys.executable, "-m", "llamalloc", *map(str, args)], capture_output=True, text=True,
                       env=env, cwd=cwd, timeout=timeout)
    if check_rc is not None:
        assert r.returncode == check_rc, f"rc={r.returncode}\nstdout={r.stdout}\nstderr={r.stderr}"
    return r


def run(argv, capsys) -> tuple[int, str, str]:
    """`llamalloc ARGV` in this process (llamalloc.cli.main): its exit status, and its output as capsys took it."""
    from llamalloc.cli import main

    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def one_error_line(rc: int, err: str) -> str:
    """The line of a bad-input report: exit status 2 and one line on stderr (blank lines aside), or the test fails."""
    lines = [line for line in err.splitlines() if line]
    assert rc == 2 and len(lines) == 1, f"rc={rc}\n{err}"
    return lines[0]


@pytest.fixture
def full_disk_figures(monkeypatch):
    """Every matplotlib figure's savefig fails as on a full disk (ENOSPC): the outputs of report and compare."""
    import errno
    import os

    import matplotlib.figure

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)


def former_output(folder, existed: bool, name: str, text: str) -> None:
    """When `existed`, `folder` holds `name` with `text`, as a former run left it (what a failed write must keep)."""
    if existed:
        folder.mkdir()
        (folder / name).write_text(text)
