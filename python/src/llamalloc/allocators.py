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


# What each variant adds to llamalloc alone, in words, and the likely causes when it keeps more.
_WHAT_IT_ADDS = {MODEL_ALLOCATOR: "the model", ONLINE_ALLOCATOR: "online learning",
                 MODEL_ONLINE_ALLOCATOR: "the model with online learning"}
_LIKELY_CAUSE = {
    MODEL_ALLOCATOR: "call sites whose objects split between lifetimes (`llamalloc top PROFILE` marks them with *), "
                     "or contexts the profile never saw placed on long-lived pages (LLAMALLOC_UNSEEN_TRIAL=0 turns "
                     "that off); `llamalloc simulate TRACE -p llama-default -p llama-model --model MODEL` shows the "
                     "placement",
    ONLINE_ALLOCATOR: "call sites whose objects split between lifetimes, which learning from samples cannot tell "
                      "apart (`llamalloc top PROFILE` marks them with *)",
}
_LIKELY_CAUSE[MODEL_ONLINE_ALLOCATOR] = _LIKELY_CAUSE[MODEL_ALLOCATOR]


def learning_cost_lines(figures: dict[str, tuple[float, float, float]], what: str) -> list[str]:
    """One line for each of llamalloc + model / + online / + model + online that keeps more than llamalloc alone:
    `figures` maps an allocator to (median, lowest, highest) of one memory figure over its runs, `what` names the
    figure ("after the peak", "at the peak"). More than 2% above llamalloc's median counts; beyond the spread of
    the runs it says not to deploy, within it that more runs would tell."""
    base = figures.get("llamalloc")
    if not base or not base[0]:
        return []
    b, _, b_high = base
    lines = []
    for name, adds in _WHAT_IT_ADDS.items():
        f = figures.get(name)
        if not f or f[0] is None or f[0] <= 1.02 * b:
            continue
        median, low, _ = f
        line = (f"{display_name(name)}: {adds} keeps {100 * (median - b) / b:.0f}% more {what} than llamalloc "
                f"alone ({median / 2**20:.1f} against {b / 2**20:.1f} MiB)")
        if low is not None and b_high is not None and low > b_high:
            line += f": do not deploy {adds} for this program."
        else:
            line += ", within the spread of the runs: more runs (--repeat 5) tell whether it is real."
        lines.append(line + f" Likely cause: {_LIKELY_CAUSE[name]}.")
    return lines


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
    env.pop("LLAMALLOC_MODEL_DIR", None)  # (the allocator would load the model prepared there for the program)
    env.pop("LLAMALLOC_TOKENS", None)
    env.pop("LLAMALLOC_LEARN", None)
    if model_env and allocator.needs_model:
        env.update(model_env)
    # Each variant of llamalloc says whether it learns: the library learns without a model by default
    # (LLAMALLOC_LEARN=2), so llamalloc and llamalloc+model turn it off, and the table shows what learning adds. A
    # library named by path runs with the library's defaults.
    if allocator.name in LLAMALLOC_VARIANTS:
        env["LLAMALLOC_LEARN"] = "1" if allocator.learns else "0"
    if allocator.library is not None:
        env["LD_PRELOAD"] = str(allocator.library)
    if allocator.is_llamalloc and stats_path is not None:
        env["LLAMALLOC_STATS"] = str(stats_path)
    return env
