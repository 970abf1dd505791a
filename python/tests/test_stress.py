"""Lifecycle stress under libllamalloc.so, with and without a model: the programs of tests/stress/
(fork from a threaded parent, dlopen/dlclose of allocating libraries, 100k short-lived threads, threads that
exit leaving their objects to the main thread, randomised multi-thread malloc/calloc/realloc/memalign with
content checks and cross-thread frees). Each program checks
every object before freeing it and prints "NAME: ok allocator=..." only when all was well; the test also
checks that the allocator in the process was llamalloc, and, with a model, that predictions were made. Every
program fails when its resident set passes a cap far above its live objects (-m; default 1024 + 64 MiB per
thread): memory that is never reused.

Environment: LLAMALLOC_STRESS_THREADS (default 4), LLAMALLOC_STRESS_SECONDS (default 2) and
LLAMALLOC_STRESS_THREAD_COUNT (stress-threads' total, default 100000). bench/soak/run.sh runs them longer."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llamalloc import paths
from llamalloc.model import modelfile
from predict_support import random_model
from test_bench import constant_model
from test_workloads_support import llamalloc_library, preload_env

THREADS = os.environ.get("LLAMALLOC_STRESS_THREADS", "4")
SECONDS = os.environ.get("LLAMALLOC_STRESS_SECONDS", "2")
THREAD_COUNT = os.environ.get("LLAMALLOC_STRESS_THREAD_COUNT", "100000")

PROGRAMS = {
    "random": ["-t", THREADS, "-s", SECONDS],
    "fork": ["-t", THREADS, "-s", SECONDS],
    "threads": ["-t", THREADS, "-n", THREAD_COUNT],
    "dlopen": ["-t", THREADS, "-s", SECONDS],
    # Threads that exit leaving their objects to the main thread: the resident set must stay small (-m MiB).
    "exit-handoff": ["-t", THREADS, "-n", "8000", "-m", "512"],
}
# The programs' own function names, so that a random model's classes vary from context to context.
WORDS = ["main", "anonymous", "namespace", "make", "worker", "churn", "child", "child_thread", "lane_thread",
         "producer", "new_obj", "stress_plugin_make", "plugin_init", "Table", "start_thread", "__clone3", "operator",
         "new", "std", "thread", "vector", "basic_string", "allocate"]


def program(name: str) -> Path:
    p = paths.build_dir() / "tests" / "stress" / f"stress-{name}"
    assert p.exists(), f"{p} is not built: build the project before the tests"
    return p


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path | None]:
    d = tmp_path_factory.mktemp("stress-models")
    # Made for these programs (the model's program list), so that `llamalloc run` has nothing to warn about.
    programs = "\n".join(f"stress-{name}" for name in PROGRAMS)
    constant = constant_model(d / "constant.model", 3)
    modelfile.write(constant, dataclasses.replace(modelfile.read(constant), program=programs))
    rnd = d / "random.model"
    modelfile.write(rnd, dataclasses.replace(random_model(seed=3, scale=2.0, words=WORDS), program=programs))
    return {"none": None, "constant": constant, "random": rnd}


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    e = preload_env(None, LLAMALLOC_CACHE_DIR=str(tmp_path_factory.mktemp("token-cache")))
    e.pop("LLAMALLOC_MODEL", None)
    return e


@pytest.mark.parametrize("model", ["none", "constant", "random"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_stress_under_llamalloc(name, model, models, env, tmp_path):
    llamalloc_library()  # fails the test when libllamalloc.so is not built
    stats = tmp_path / "stats.json"
    model_args = ["--model", str(models[model])] if models[model] else []
    e = dict(env, STRESS_EXPECT_ALLOCATOR="llamalloc")
    cmd = [sys.executable, "-m", "llamalloc", "run", *model_args, "--stats", str(stats), "--",
           str(program(name)), *PROGRAMS[name]]
    r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert r.stdout.startswith(f"stress-{name}: ok allocator=llamalloc"), r.stdout + r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
    counters = json.loads(stats.read_text()).get("counters", {})
    if model != "none":
        assert counters["model_runs"] > 0 and counters["prediction_cache_hits"] > 0, counters
    else:
        assert counters["model_runs"] == 0, counters


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_stress_programs_pass_under_glibc(name):
    """The programs themselves are right: under glibc (short runs) they pass."""
    args = ["-t", "2", "-n", "2000"] if name in ("threads", "exit-handoff") else ["-t", "2", "-s", "0.5"]
    r = subprocess.run([str(program(name)), *args], env=preload_env(None), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith(f"stress-{name}: ok allocator=glibc"), r.stdout


def test_stress_checks_catch_a_broken_realloc():
    """A preloaded realloc that damages one result in 500 is caught, with one line naming what was wrong."""
    shim = paths.build_dir() / "tests" / "stress" / "libstress-bad-realloc.so"
    assert shim.exists(), f"{shim} is not built"
    r = subprocess.run([str(program("random")), "-t", "2", "-s", "5"], env=preload_env(shim), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0
    assert "stress-random: FAIL realloc kept prefix" in r.stderr and "corrupted at offset 0" in r.stderr, r.stderr


def test_stress_refuses_the_wrong_allocator():
    r = subprocess.run([str(program("random")), "-s", "0"], env=preload_env(None, STRESS_EXPECT_ALLOCATOR="llamalloc"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "the allocator is glibc, not llamalloc" in r.stderr
