"""A model directory prepared for a plain LD_PRELOAD (`llamalloc prepare --model-dir DIR`, then
LLAMALLOC_MODEL_DIR=DIR; docs/prediction.md, "A model directory under LD_PRELOAD").

A small C program is built three times with three build ids. Models with random weights stand for models trained
on the first two builds (the choice reads only their metadata and the programs they record). The directory is
prepared once; each build then runs with libllamalloc.so preloaded and LLAMALLOC_MODEL_DIR alone, and its
statistics name the model of its build; the third build, which no model is for, runs without one after one
warning line."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import llamalloc, one_error_line, run
from llamalloc import model_select, paths, symbolize
from llamalloc.model import modelfile
from predict_support import random_model

APP_C = r"""
#include <stdio.h>
#include <stdlib.h>
static void* kept[64];
__attribute__((noinline)) void work(int i) {
  free(kept[i % 64]);
  kept[i % 64] = malloc(256 + i % 7);
  char* volatile scratch = malloc(128);
  scratch[0] = (char)i;
  free(scratch);
}
int main(void) {
  for (int i = 0; i < 2000; i++) work(i);
  const char* model = getenv("LLAMALLOC_MODEL");
  printf("model=%s\n", model != NULL && *model ? model : "(none)");
  return 0;
}
"""

BUILD_A, BUILD_B, BUILD_OTHER = "a1" * 20, "b2" * 20, "c3" * 20


def _env(d: Path) -> dict[str, str]:
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(d / "cache"))
    for name in ("LLAMALLOC_MODEL", "LLAMALLOC_MODEL_DIR", "LLAMALLOC_TOKENS", "LLAMALLOC_STATS", "LLAMALLOC_LEARN",
                 "LD_PRELOAD"):
        env.pop(name, None)
    return env


def _model_for(path: Path, program: Path, build_id: str, seed: int) -> Path:
    m = random_model(seed=seed)
    m.program = str(program)
    m.metadata["build_ids"] = [build_id]
    modelfile.write(path, m)
    return path


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("model-dir-preload")
    (d / "app.c").write_text(APP_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    exes = {}
    for key, build_id, name in (("a", BUILD_A, "app"), ("b", BUILD_B, "app"), ("other", BUILD_OTHER, "other")):
        (d / key).mkdir()
        exe = d / key / name
        subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", f"-Wl,--build-id=0x{build_id}", "-o", str(exe),
                        str(d / "app.c")], check=True)
        assert symbolize.build_id(str(exe)) == build_id
        exes[key] = exe
    models = d / "models"
    models.mkdir()
    _model_for(models / "a.model", exes["a"], BUILD_A, 0)
    _model_for(models / "b.model", exes["b"], BUILD_B, 1)
    env = _env(d)
    r = llamalloc("prepare", "--model-dir", models, env=env, check_rc=0)
    return d, env, exes, models, r


def preloaded(env, exe: Path, models: Path, stats: Path) -> tuple[dict, list[str]]:
    """exe under a plain LD_PRELOAD with LLAMALLOC_MODEL_DIR=models: (its statistics, its stderr lines)."""
    lib = paths.build_dir() / "src" / "llamalloc" / "libllamalloc.so"
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60,
                       env=dict(env, LD_PRELOAD=str(lib), LLAMALLOC_MODEL_DIR=str(models), LLAMALLOC_STATS=str(stats)))
    assert r.returncode == 0, r.stderr
    # The program was given no LLAMALLOC_MODEL: the allocator chose from the directory by itself.
    assert r.stdout.strip() == "model=(none)", r.stdout
    return json.loads(stats.read_text()), [line for line in r.stderr.splitlines() if line.strip()]


def test_prepare_writes_the_tables_and_the_index_line_of_each_trained_build(world):
    d, env, exes, models, r = world
    assert "Traceback" not in r.stderr, r.stderr
    assert model_select.read_index(models) == {BUILD_A: "a.model", BUILD_B: "b.model"}
    for build_id in (BUILD_A, BUILD_B):
        assert (models / f"{build_id}.tokens").read_bytes()[:8] == b"LLATOKEN"
    index = (models / "builds.index").read_text().splitlines()
    assert index[0].startswith("#") and index[1:] == [f"{BUILD_A} a.model", f"{BUILD_B} b.model"], index
    # Written through temporary files and renames: none is left behind.
    assert not [p.name for p in models.iterdir() if p.name.startswith(".")]
    assert "2 builds prepared" in r.stderr.splitlines()[-1], r.stderr


def test_a_preloaded_program_takes_the_model_of_its_build(world, tmp_path):
    d, env, exes, models, _ = world
    for key, build_id, model in (("a", BUILD_A, "a.model"), ("b", BUILD_B, "b.model")):
        stats, lines = preloaded(env, exes[key], models, tmp_path / f"{key}.json")
        assert lines == [], lines
        assert stats["model"] == str(models / model), stats.get("model")
        assert stats["tokens"] == str(models / f"{build_id}.tokens"), stats.get("tokens")
        assert stats["counters"]["model_runs"] > 0, stats["counters"]


def test_a_build_the_directory_has_no_model_for_runs_without_one_after_one_line(world, tmp_path):
    d, env, exes, models, _ = world
    stats, lines = preloaded(env, exes["other"], models, tmp_path / "other.json")
    assert len(lines) == 1, lines
    assert lines[0].startswith("llamalloc: warning: LLAMALLOC_MODEL_DIR: ") and str(models) in lines[0], lines
    assert BUILD_OTHER[:8] in lines[0] and "running without a model" in lines[0], lines
    assert "model" not in stats and stats["counters"]["model_runs"] == 0
    # A directory that was never prepared: one line naming its missing index, no model.
    unprepared = tmp_path / "unprepared"
    unprepared.mkdir()
    shutil.copyfile(models / "a.model", unprepared / "a.model")
    stats, lines = preloaded(env, exes["a"], unprepared, tmp_path / "unprepared.json")
    assert len(lines) == 1 and "builds.index" in lines[0] and "llamalloc prepare --model-dir" in lines[0], lines
    assert "running without a model" in lines[0] and "model" not in stats


def test_a_named_binary_is_added_with_the_choice_of_run(world, tmp_path):
    d, env, exes, models, _ = world
    only_a = tmp_path / "only-a"
    only_a.mkdir()
    shutil.copyfile(models / "a.model", only_a / "a.model")
    llamalloc("prepare", "--model-dir", only_a, env=env, check_rc=0)
    assert model_select.read_index(only_a) == {BUILD_A: "a.model"}
    # The second build of the same program: as `llamalloc run --model-dir` would, the newest model of the program
    # is taken, with one warning that it was trained on another build; the first build's line stays.
    r = llamalloc("prepare", "--model-dir", only_a, exes["b"], env=env, check_rc=0)
    said = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(said) == 1 and "another build" in said[0], r.stderr
    assert model_select.read_index(only_a) == {BUILD_A: "a.model", BUILD_B: "a.model"}
    stats, lines = preloaded(env, exes["b"], only_a, tmp_path / "b.json")
    assert lines == [] and stats["model"] == str(only_a / "a.model"), (lines, stats.get("model"))


def test_run_still_chooses_and_prepares_by_itself(world, tmp_path):
    d, env, exes, models, _ = world
    stats = tmp_path / "run.json"
    r = llamalloc("run", "--stats", stats, "--", exes["b"], env=dict(env, LLAMALLOC_MODEL_DIR=str(models)))
    assert r.stdout.strip() == f"model={os.path.realpath(models / 'b.model')}", r.stdout + r.stderr
    written = json.loads(stats.read_text())
    assert written["model"] == os.path.realpath(models / "b.model") and written["counters"]["model_runs"] > 0


def test_prepare_refuses_bad_input_in_one_line(world, tmp_path, capsys):
    d, env, exes, models, _ = world
    missing = tmp_path / "no-such-dir"
    rc, _, err = run(["prepare", "--model-dir", str(missing)], capsys)
    line = one_error_line(rc, err)
    assert str(missing) in line and "no such directory" in line, line
    a_file = tmp_path / "file"
    a_file.write_text("x")
    rc, _, err = run(["prepare", "--model-dir", str(a_file)], capsys)
    assert "not a directory" in one_error_line(rc, err)
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = run(["prepare", "--model-dir", str(empty)], capsys)
    assert str(empty) in one_error_line(rc, err)
    rc, _, err = run(["prepare", "--model-dir", str(models), str(tmp_path / "no-such-binary")], capsys)
    assert "no-such-binary" in one_error_line(rc, err) and not list(tmp_path.glob("*.tokens"))
    rc, _, err = run(["prepare", "--model-dir", str(models), "-o", str(tmp_path / "x.tokens")], capsys)
    assert "--output" in one_error_line(rc, err)
    # A binary no model of the directory is for: a warning line says why, an error line that nothing was prepared,
    # and the index is left as it was.
    before = (models / "builds.index").read_bytes()
    rc, _, err = run(["prepare", "--model-dir", str(models), str(exes["other"])], capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in err and len(lines) == 2, err
    assert "warning" in lines[0] and str(exes["other"]) in lines[0], lines
    assert lines[1].startswith("llamalloc: error: ") and "no build prepared" in lines[1], lines
    assert (models / "builds.index").read_bytes() == before
