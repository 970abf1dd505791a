"""Helpers shared by the profiler's and tracer's tests (test_profiler_*.py, test_trace_*.py). No tests here."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from conftest import llamalloc as run_llamalloc
from llamalloc import paths

PEERS = {
    "glibc": None,
    "jemalloc": "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
    "tcmalloc": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
    "mimalloc": "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
    "llamalloc": "libllamalloc.so",  # found through llamalloc.paths
}

# The exact-profile contract of tests/profiler/prof_sites.cc: site -> (count, request size class, class index,
# alignment).
SITES = {
    "site_short": (200, 48, 0, 16),
    "site_tens": (10, 1008, 1, 16),
    "site_medium": (30, 128, 2, 16),
    "site_never": (7, 5120, 7, 16),
    "site_aligned": (5, 512, 0, 256),
    "site_inlined": (3, 64, 0, 16),
    # A realloc that llamalloc serves in place (7000 -> 6000 B) is no new object: the object stays site_resized's
    # until resize_moved's realloc moves it (to 20000 B), whatever the allocator underneath did.
    "site_resized": (6, 7168, 0, 16),
    "resize_moved": (6, 20480, 0, 16),
}
# Functions that call the allocator but make no object in the profile.
NO_SITES = ("resize_in_place",)


def program(name: str = "prof-sites") -> Path:
    p = paths.build_dir() / "tests" / "profiler" / name
    assert p.exists(), f"{p} is not built: build the project (scripts/build.sh) before the tests"
    return p


def peer_library(name: str) -> str | None:
    lib = PEERS[name]
    if lib is None:
        return None
    if name == "llamalloc":
        return str(paths.native_library(lib))  # UserError (a failure, not a skip) when it is not built
    assert Path(lib).exists(), f"{lib} is missing: scripts/setup.sh installs it"
    return lib


# conftest's, the exit status left to the callers unless they give check_rc.
llamalloc = functools.partial(run_llamalloc, check_rc=None)


def pprof() -> str:
    found = shutil.which("pprof")
    if found:
        return found
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip()
    candidate = Path(gopath or os.path.expanduser("~/go")) / "bin" / "pprof"
    assert candidate.exists(), "pprof is not installed: scripts/setup.sh installs it"
    return str(candidate)


def site_samples(prof, site: str):
    """Samples whose innermost frames include the site function (symbolized profile)."""
    return [s for s in prof.samples if site in s.stack[:3]]


def lifetime_class(lifetime_ns: int) -> int:
    bound_ns = 10_000_000
    for k in range(6):
        if lifetime_ns < bound_ns:
            return k
        bound_ns *= 10
    return 6


def lifetime_bounds(stdout: str) -> dict[str, tuple[int, int]]:
    """The lifetime bounds prof-sites printed for its timed sites ("lifetime SITE MIN_NS MAX_NS")."""
    out = {}
    for line in stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] == "lifetime":
            out[f[1]] = (int(f[2]), int(f[3]))
    return out


def assert_exact_sites(prof, bounds: dict[str, tuple[int, int]] | None = None) -> None:
    """Every site with exactly its count, size class, alignment and lifetime classes. For the timed sites the
    program's own bounds on the lifetimes (when given) decide the class: a sleep may overrun on a loaded
    machine, and the profile must then agree with what really happened, not with the nominal table."""
    for name in NO_SITES:
        assert not site_samples(prof, name), f"{name}: {[s.stack[:4] for s in site_samples(prof, name)]}"
    for site, (count, size_class, lifetime_class_nominal, alignment) in SITES.items():
        found = site_samples(prof, site)
        assert len(found) == 1, f"{site}: {len(found)} samples: {[s.stack[:4] for s in found]}"
        s = found[0]
        assert s.values["alloc_objects"] == count, site
        assert s.request_size == size_class, site
        assert s.alignment == alignment, site
        classes = s.class_counts
        if bounds and site in bounds:
            lo_ns, hi_ns = bounds[site]
            assert lo_ns <= s.min_lifetime_ns <= s.max_lifetime_ns <= hi_ns, (site, bounds[site], s)
            lo, hi = lifetime_class(lo_ns), lifetime_class(hi_ns)
            assert sum(classes[lo:hi + 1]) == count and sum(classes) == count, (site, classes, lo, hi)
            if lo == hi:
                assert classes[lo] == count, site
        else:
            expected_classes = [0] * 8
            expected_classes[lifetime_class_nominal] = count
            assert classes == expected_classes, (site, classes)
        if lifetime_class_nominal == 7:
            assert s.values["live_at_exit_objects"] == count and s.values["freed_objects"] == 0, site
        else:
            assert s.values["freed_objects"] == count and s.values["live_at_exit_objects"] == 0, site
            assert 0 <= s.min_lifetime_ns <= s.max_lifetime_ns, site
            assert s.values["lifetime_sum"] >= s.min_lifetime_ns * count, site
        assert "main" in s.stack, f"{site}: stack does not reach main: {s.stack}"
    tens = site_samples(prof, "site_tens")[0]
    assert tens.min_lifetime_ns >= 30e6
    medium = site_samples(prof, "site_medium")[0]
    assert medium.min_lifetime_ns >= 150e6
    inlined = site_samples(prof, "site_inlined")[0]
    assert inlined.stack[:2] == ["inlined_helper", "site_inlined"], inlined.stack
