"""Where the native parts are: the build tree when running from a checkout, or the install prefix."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent


def repo_root() -> Path | None:
    """The source checkout that holds this package (python/src/llamalloc), if any."""
    root = PACKAGE_DIR.parents[2]
    return root if (root / "CMakeLists.txt").exists() and (root / "src" / "llamalloc").is_dir() else None


def build_dir() -> Path:
    """LLAMALLOC_BUILD_DIR, else <checkout>/build."""
    env = os.environ.get("LLAMALLOC_BUILD_DIR")
    if env:
        return Path(env).resolve()
    root = repo_root()
    if root is not None:
        return root / "build"
    raise UserError("cannot find the llamalloc build: set LLAMALLOC_BUILD_DIR to the CMake build directory")


def _search_dirs() -> list[Path]:
    dirs = []
    env = os.environ.get("LLAMALLOC_LIBDIR")
    if env:
        dirs.append(Path(env))
    try:
        b = build_dir()
        dirs += [b / "src" / "llamalloc", b / "src" / "profiler", b / "lib", b]
    except UserError:
        pass
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
