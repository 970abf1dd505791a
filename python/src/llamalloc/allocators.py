"""The allocators that bench and compare run a program under: glibc (nothing preloaded), the peers from the
system (jemalloc, tcmalloc, mimalloc), llamalloc, llamalloc learning online, llamalloc with a model (and with a
model and learning online), or any library under a name."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .errors import UserError

SYSTEM_LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
PEER_LIBRARIES = {
    "jemalloc": SYSTEM_LIBDIR / "libjemalloc.so.2",
    "tcmalloc": SYSTEM_LIBDIR / "libtcmalloc_minimal.so.4",
    "mimalloc": SYSTEM_LIBDIR / "libmimalloc.so.2",
}
ALLOCATORS = ("glibc", "jemalloc", "tcmalloc", "mimalloc", "llamalloc")
# llamalloc with a learned model per workload (`llamalloc bench --model WORKLOAD=MODEL`).
MODEL_ALLOCATOR = "llamalloc+model"
# llamalloc learning each context's lifetime in the process (LLAMALLOC_LEARN=1; docs/prediction.md), alone and
# with the model as its head start.
ONLINE_ALLOCATOR = "llamalloc+online"
MODEL_ONLINE_ALLOCATOR = "llamalloc+model+online"
LLAMALLOC_VARIANTS = ("llamalloc", ONLINE_ALLOCATOR, MODEL_ALLOCATOR, MODEL_ONLINE_ALLOCATOR)
# The allocators that need a model, and those that learn online.
MODEL_ALLOCATORS = (MODEL_ALLOCATOR, MODEL_ONLINE_ALLOCATOR)
ONLINE_ALLOCATORS = (ONLINE_ALLOCATOR, MODEL_ONLINE_ALLOCATOR)


def display_name(name: str) -> str:
    """How tables and plots name an allocator: "llamalloc + model + online" for llamalloc+model+online."""
    return name.replace("+", " + ") if name in LLAMALLOC_VARIANTS else name


@dataclass
class Allocator:
    name: str
    library: Path | None  # None: glibc, nothing preloaded

    @property
    def is_llamalloc(self) -> bool:
        return self.name == "llamalloc" or (self.library is not None and "llamalloc" in self.library.name)

    @property
    def needs_model(self) -> bool:
        return self.name in MODEL_ALLOCATORS

    @property
    def learns(self) -> bool:
        return self.name in ONLINE_ALLOCATORS


def parse_allocators(spec: str) -> list[tuple[str, Path | None, str | None]]:
    """'glibc,jemalloc,mine=/path/lib.so' -> [(name, library or None, problem or None)].

    A name from ALLOCATORS uses Debian's library (or the llamalloc build); NAME=PATH preloads PATH under that
    name. Unknown names are bad input; a library that is not there is a problem reported for that allocator
    only, so that the others still run."""
    out: list[tuple[str, Path | None, str | None]] = []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise UserError("--allocators: empty list")
    for item in names:
        if "=" in item:
            name, _, path = item.partition("=")
            name, library = name.strip(), Path(path.strip()).expanduser()
            if not name:
                raise UserError(f"--allocators: {item!r} has no name before '='")
            problem = None if library.is_file() else f"allocator {name}: library {library} not found"
            out.append((name, library, problem))
        elif item == "glibc":
            out.append(("glibc", None, None))
        elif item in PEER_LIBRARIES:
            lib = PEER_LIBRARIES[item]
            out.append((item, lib, None if lib.is_file() else
                        f"allocator {item}: {lib} not found (install it with scripts/setup.sh)"))
        elif item in LLAMALLOC_VARIANTS:
            try:
                out.append((item, paths.native_library("libllamalloc.so"), None))
            except UserError as e:
                out.append((item, None, f"allocator {item}: {e}"))
        else:
            raise UserError(f"--allocators: unknown allocator {item!r}; known: {', '.join(ALLOCATORS)}, "
                            f"{', '.join(LLAMALLOC_VARIANTS[1:])} (or NAME=/path/to/lib.so)")
    if len({n for n, _, _ in out}) != len(out):
        raise UserError("--allocators: an allocator is named twice")
    return out


def allocator_env(allocator: Allocator, stats_path: Path | None,
                  model_env: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.pop("LLAMALLOC_STATS", None)
    env.pop("LLAMALLOC_MODEL", None)
    env.pop("LLAMALLOC_TOKENS", None)
    env.pop("LLAMALLOC_LEARN", None)
    if model_env and allocator.needs_model:
        env.update(model_env)
    if allocator.learns:
        env["LLAMALLOC_LEARN"] = "1"
    if allocator.library is not None:
        env["LD_PRELOAD"] = str(allocator.library)
    if allocator.is_llamalloc and stats_path is not None:
        env["LLAMALLOC_STATS"] = str(stats_path)
    return env
