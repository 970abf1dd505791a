"""Packaging: the wheel built from the top-level pyproject.toml (scikit-build-core, CMake with
LLAMALLOC_WHEEL) carries the native parts, and `pip install` of it in a fresh venv gives a `llamalloc` that runs the
whole loop -- record, symbolize, train, run --model, compare, trace, simulate, report -- on a program of the user's
own, from a directory outside the checkout, with no source tree or build directory on any path.

The venv has --system-site-packages so that the heavy dependencies (jax, duckdb, ...) come from the system; the
wheel itself is installed into the venv (pip --no-index: nothing is downloaded) and shadows the checkout's editable
install. The wheel's CMake build directory is kept in build/wheel, so only the first run compiles everything."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from llamalloc import paths

REPO = Path(__file__).resolve().parents[2]

PROG_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static void* keep[4096];
__attribute__((noinline)) static char* make_short(size_t n) { char* p = malloc(n); memset(p, 1, n); return p; }
__attribute__((noinline)) static char* make_long(size_t n) { char* p = malloc(n); memset(p, 2, n); return p; }
int main(int argc, char** argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 200;
  struct timespec ts = {0, 1000000};
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < 2000; i++) free(make_short(64 + (i % 8) * 48));
    keep[r % 4096] = make_long(256);
    nanosleep(&ts, NULL);
  }
  for (int k = 0; k < 4096; k++) free(keep[k]);
  puts("done");
  return 0;
}
"""

NATIVE = ["llamalloc/_native/lib/libllamalloc.so", "llamalloc/_native/lib/libllamalloc_prof.so",
          "llamalloc/_native/bin/llamalloc-sim"]


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("timeout", 300)
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd}: rc={r.returncode}\nstdout={r.stdout[-3000:]}\nstderr={r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    try:
        import scikit_build_core  # noqa: F401
    except ImportError:
        pytest.fail("scikit-build-core is not installed: scripts/setup.sh installs it (pip install -e python[dev])")
    out = tmp_path_factory.mktemp("dist")
    build_dir = Path(os.environ.get("LLAMALLOC_BUILD_DIR", REPO / "build")) / "wheel"
    # Offline: the build backend and cmake/ninja come from the system (no build isolation, no dependencies).
    _run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--disable-pip-version-check",
          "-q", "-w", out, "-C", f"build-dir={build_dir}", REPO], timeout=1500)
    wheels = list(out.glob("llamalloc-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    v = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--system-site-packages", v])
    _run([v / "bin" / "python", "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "-q", wheel])
    return v


def _user_env(venv: Path, home: Path) -> dict[str, str]:
    """The environment of a user of the installed package: its venv first on PATH, nothing of the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LLAMALLOC_BUILD_DIR", "LLAMALLOC_LIBDIR", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["LLAMALLOC_CACHE_DIR"] = str(home / "cache")
    env["MPLBACKEND"] = "Agg"
    return env


def test_pyproject_metadata_matches_the_development_one():
    """The wheel's [project] table (top-level pyproject.toml) is the development one's (python/pyproject.toml)."""
    top = tomllib.loads((REPO / "pyproject.toml").read_text())
    dev = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())
    assert top["project"] == dev["project"]
    assert top["build-system"]["build-backend"] == "scikit_build_core.build"


def test_wheel_carries_the_native_parts(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for n in NATIVE + ["llamalloc/cli.py", "llamalloc/proto/profile.proto"]:
        assert n in names, f"{n} is not in {wheel.name}"
    assert not any(n.startswith(("tests/", "workloads/", "bench/")) for n in names)
    assert not any("__pycache__" in n for n in names)


def test_installed_package_finds_its_own_native_parts(venv, tmp_path):
    code = ("import llamalloc, llamalloc.paths as p, llamalloc.simulate as s;"
            "print(llamalloc.__file__);"
            "print(p.native_library('libllamalloc.so'));"
            "print(p.native_library('libllamalloc_prof.so'));"
            "print(s.binary())")
    r = _run([venv / "bin" / "python", "-c", code], cwd=tmp_path, env=_user_env(venv, tmp_path))
    lines = r.stdout.split()
    site = str(venv.resolve())
    assert all(line.startswith(site) for line in lines), lines


def test_the_loop_on_a_users_program_outside_the_checkout(venv, tmp_path):
    home = tmp_path / "home"  # outside the checkout: pytest's tmp_path
    home.mkdir()
    assert REPO not in home.resolve().parents
    (home / "prog.c").write_text(PROG_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    _run([cc, "-O1", "-g", "-fno-omit-frame-pointer", "-o", home / "prog", home / "prog.c"], cwd=home)
    env = _user_env(venv, home)
    exe = shutil.which("llamalloc", path=env["PATH"])
    assert exe == str(venv / "bin" / "llamalloc")

    def llamalloc(*args, timeout=300):
        return _run([exe, *args], cwd=home, env=env, timeout=timeout)

    r = llamalloc("record", "-o", "p.prof", "--", "./prog", "300")
    assert "done" in r.stdout and "profile written to p.prof" in r.stderr
    llamalloc("symbolize", "p.prof")
    llamalloc("train", "p.prof", "-o", "p.model", "--epochs", "3", "--hidden", "16", timeout=600)
    assert (home / "p.model").stat().st_size > 0

    r = llamalloc("run", "--model", "p.model", "--stats", "stats.json", "--", "./prog", "100")
    assert "done" in r.stdout
    stats = json.loads((home / "stats.json").read_text())
    assert stats["format"] == "llamalloc-stats" and stats["counters"]["model_runs"] > 0
    assert json.loads((home / "stats.before-exit.json").read_text())["format"] == "llamalloc-stats"

    r = llamalloc("compare", "--allocators", "glibc,llamalloc,llamalloc+model", "--model", "p.model", "-o", "cmp",
                  "--", "./prog", "100")
    assert "least memory after the peak" in r.stdout
    result = json.loads((home / "cmp" / "compare.json").read_text())
    assert "llamalloc+model" in json.dumps(result)

    r = llamalloc("trace", "-o", "p.trace", "--", "./prog", "50")
    assert "written to p.trace" in r.stderr
    llamalloc("simulate", "p.trace", "-p", "pages-2m", "-p", "llama-oracle", "-o", "p.sim.json", "-q")
    sim = json.loads((home / "p.sim.json").read_text())
    assert {p["policy"] for p in sim["policies"]} >= {"pages-2m", "llama-oracle"}

    llamalloc("report", "--sim", "p.sim.json", "--profile", "p.prof", "-o", "report")
    assert (home / "report" / "index.html").stat().st_size > 0


def test_what_needs_a_checkout_says_so_in_one_line(venv, tmp_path):
    """bench and demo run the bundled workloads, which only a source checkout's build has."""
    r = subprocess.run([str(venv / "bin" / "llamalloc"), "bench"], capture_output=True, text=True, cwd=tmp_path,
                       env=_user_env(venv, tmp_path), timeout=300)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and lines[0].startswith("llamalloc: error: cannot find the llamalloc build"), r.stderr
