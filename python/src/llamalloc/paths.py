"""Where the native parts are: the build tree when running from a checkout (or LLAMALLOC_BUILD_DIR), the wheel's
own copy (llamalloc/_native/{lib,bin}, installed there by `pip install` of the wheel built from the top-level
pyproject.toml), or an install prefix (`cmake --install`: PREFIX/lib and PREFIX/bin, the latter on PATH)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent
# What the wheel carries (LLAMALLOC_WHEEL in CMakeLists.txt): libllamalloc.so, libllamalloc_prof.so, llamalloc-sim.
NATIVE_DIR = PACKAGE_DIR / "_native"


def repo_root() -> Path | None:
    """The source checkout that holds this package (python/src/llamalloc), if any."""
    root = PACKAGE_DIR.parents[2]
    return root if (root / "CMakeLists.txt").exists() and (root / "src" / "llamalloc").is_dir() else None


def _build_dir_or_none() -> Path | None:
    try:
        return build_dir()
    except UserError:
        return None


def build_dir() -> Path:
    """LLAMALLOC_BUILD_DIR, else <checkout>/build."""
    env = os.environ.get("LLAMALLOC_BUILD_DIR")
    if env:
        return Path(env).resolve()
    root = repo_root()
    if root is not None:
        return root / "build"
    raise UserError("cannot find the llamalloc build (the bundled workloads of bench and demo, and the test programs, "
                    "live in a source checkout's build): set LLAMALLOC_BUILD_DIR to the CMake build directory")


def _search_dirs() -> list[Path]:
    dirs = []
    env = os.environ.get("LLAMALLOC_LIBDIR")
    if env:
        dirs.append(Path(env))
    b = _build_dir_or_none()
    if b is not None:
        dirs += [b / "src" / "llamalloc", b / "src" / "profiler", b / "lib", b]
    dirs.append(NATIVE_DIR / "lib")
    for prefix in ("/usr/local", "/usr"):
        dirs += [Path(prefix) / "lib", Path(prefix) / "lib" / "x86_64-linux-gnu"]
    return dirs


def native_library(name: str) -> Path:
    """Path of a native library (e.g. 'libllamalloc.so'), with a clear error when it is not built."""
    for d in _search_dirs():
        p = d / name
        if p.exists():
            return p
    raise UserError(f"{name} not found (looked in the build directory and install prefixes): "
                    f"build it with scripts/build.sh, or set LLAMALLOC_LIBDIR")


def native_binary(relpath: str) -> Path:
    """Path of a program built in the CMake build tree, e.g. 'workloads/frag-micro/frag-micro'."""
    p = build_dir() / relpath
    if not p.exists():
        raise UserError(f"{p} not found: build it with scripts/build.sh")
    return p


def native_program(relpath: str) -> Path:
    """A program that is installed as well as built (e.g. 'src/sim/llamalloc-sim'): from the build tree when there
    is one (a checkout, or LLAMALLOC_BUILD_DIR), else the wheel's copy, else PATH (after `cmake --install`)."""
    name = Path(relpath).name
    b = _build_dir_or_none()
    if b is not None and (b / relpath).exists():
        return b / relpath
    candidates = [NATIVE_DIR / "bin" / name]
    found = shutil.which(name)
    if found:
        candidates.append(Path(found))
    for c in candidates:
        if c.exists():
            return c
    where = f"{b / relpath}, " if b is not None else ""
    raise UserError(f"{name} not found (looked in {where}{NATIVE_DIR / 'bin'} and PATH): build it with "
                    f"scripts/build.sh, or install llamalloc (pip install of the wheel, or cmake --install)")
