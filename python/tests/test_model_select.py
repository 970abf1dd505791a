"""Choosing a model for a binary from a directory of models (`llamalloc run --model-dir`, LLAMALLOC_MODEL_DIR;
llamalloc.model_select; docs/prediction.md, "Choosing a model for a binary").

A small C program is built twice with two build ids (same code), and a third program of another name. One model
is trained on the first build; a copy of it whose metadata names the second build's id stands for a model of the
second build (the choice reads only the metadata). The program prints the LLAMALLOC_MODEL it was given, which is
the model `run` chose."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llamalloc import model_select, paths, symbolize
from llamalloc.model import modelfile

from test_profiler_common import llamalloc

APP_C = r"""
#include <stdio.h>
#include <stdlib.h>
static void* kept[64];
__attribute__((noinline)) void work(int i) {
  free(kept[i % 64]);
  kept[i % 64] = malloc(256);
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

BUILD_A, BUILD_B, BUILD_OTHER, BUILD_D = "aa" * 20, "bb" * 20, "cc" * 20, "dd" * 20


def _copy_with_build(src: Path, dst: Path, build_id: str, mtime: float) -> Path:
    """A copy of the model `src` whose metadata says it was trained on `build_id`, with no training time (so its
    file's mtime, set here, is its age)."""
    m = modelfile.read(src)
    m.metadata = {k: v for k, v in m.metadata.items() if k not in ("trained_at", "time")}
    m.metadata["build_ids"] = [build_id]
    modelfile.write(dst, m)
    os.utime(dst, (mtime, mtime))
    return dst


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    d = tmp_path_factory.mktemp("model-select")
    (d / "app.c").write_text(APP_C)
    cc = shutil.which("cc") or shutil.which("gcc")
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(d / "cache"))
    for name in ("LLAMALLOC_MODEL", "LLAMALLOC_MODEL_DIR", "LLAMALLOC_TOKENS"):
        env.pop(name, None)
    exes = {}
    for key, build_id, name in (("a", BUILD_A, "app"), ("b", BUILD_B, "app"), ("other", BUILD_OTHER, "other")):
        (d / key).mkdir()
        exe = d / key / name
        subprocess.run([cc, "-O1", "-g", "-fno-omit-frame-pointer", f"-Wl,--build-id=0x{build_id}", "-o", str(exe),
                        str(d / "app.c")], check=True)
        assert symbolize.build_id(str(exe)) == build_id
        exes[key] = exe
    prof = d / "a" / "app.prof"
    llamalloc("record", "--sample-bytes", "1", "-o", prof, "--", exes["a"], env=env, check_rc=0)
    llamalloc("symbolize", prof, env=env, check_rc=0)
    (d / "trained").mkdir()
    model_a = d / "trained" / "a.model"
    llamalloc("train", prof, "-o", model_a, "--holdout", "0", "--hidden", "16", "--epochs", "2", env=env, check_rc=0)
    assert modelfile.read(model_a).metadata["build_ids"] == [BUILD_A]
    return d, env, exes, model_a


def run_app(env, exe, *args, extra_env=None) -> tuple[str, list[str], subprocess.CompletedProcess]:
    """`llamalloc run ARGS -- exe`: (the model the program was given, the stderr lines, the result)."""
    r = llamalloc("run", *args, "--", exe, env=dict(env, **(extra_env or {})), check_rc=0)
    assert r.stdout.startswith("model="), r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r.stdout.strip().partition("=")[2], r.stderr.splitlines(), r


def warnings(lines: list[str]) -> list[str]:
    return [line for line in lines if "warning" in line or "note:" in line]


def test_the_model_of_the_running_build_is_taken(world, tmp_path):
    d, env, exes, model_a = world
    models = tmp_path / "models"
    models.mkdir()
    a = models / "a.model"
    shutil.copyfile(model_a, a)
    os.utime(a, (1_700_000_000, 1_700_000_000))
    # b.model is the newer one: the first build takes a.model all the same, for its build id.
    b = _copy_with_build(model_a, models / "b.model", BUILD_B, 1_800_000_000)
    chosen, lines, _ = run_app(env, exes["a"], "--model-dir", models)
    assert chosen == os.path.realpath(a) and warnings(lines) == [], lines
    chosen, lines, _ = run_app(env, exes["b"], "--model-dir", models)
    assert chosen == os.path.realpath(b) and warnings(lines) == [], lines
    # The same from LLAMALLOC_MODEL_DIR, which the program itself does not see (its allocator would choose again).
    chosen, lines, _ = run_app(env, exes["a"], extra_env={"LLAMALLOC_MODEL_DIR": str(models)})
    assert chosen == os.path.realpath(a) and warnings(lines) == [], lines
    # --model wins over LLAMALLOC_MODEL_DIR.
    chosen, lines, _ = run_app(env, exes["a"], "--model", b, extra_env={"LLAMALLOC_MODEL_DIR": str(models)})
    assert chosen == os.path.realpath(b), lines


def test_only_another_builds_models_the_newest_is_taken_with_one_warning(world, tmp_path):
    d, env, exes, model_a = world
    models = tmp_path / "models"
    models.mkdir()
    older = _copy_with_build(model_a, models / "b-old.model", BUILD_B, 1_700_000_000)
    newer = _copy_with_build(model_a, models / "d-new.model", BUILD_D, 1_800_000_000)
    chosen, lines, _ = run_app(env, exes["a"], "--model-dir", models)
    assert chosen == os.path.realpath(newer), lines
    said = warnings(lines)
    assert len(said) == 1, lines
    assert said[0].startswith("llamalloc: warning: ") and str(newer) in said[0] and "another build" in said[0]
    assert BUILD_A[:8] in said[0] and BUILD_D[:8] in said[0], said
    # A training time in the metadata counts before the file's mtime.
    m = modelfile.read(older)
    m.metadata["trained_at"] = 1_900_000_000
    modelfile.write(older, m)
    os.utime(older, (1_600_000_000, 1_600_000_000))
    chosen, message = model_select.select_model(models, str(exes["a"]))
    assert chosen == older and "another build" in message


def test_an_unrelated_program_runs_without_a_model_and_one_line(world, tmp_path):
    d, env, exes, model_a = world
    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(model_a, models / "a.model")
    _copy_with_build(model_a, models / "b.model", BUILD_B, 1_800_000_000)
    chosen, lines, _ = run_app(env, exes["other"], extra_env={"LLAMALLOC_MODEL_DIR": str(models)})
    assert chosen == "(none)"
    assert len(lines) == 1 and "running without a model" in lines[0], lines
    assert os.path.realpath(exes["other"]) in lines[0], lines
    # An empty directory: the same.
    empty = tmp_path / "empty"
    empty.mkdir()
    chosen, lines, _ = run_app(env, exes["a"], "--model-dir", empty)
    assert chosen == "(none)" and len(lines) == 1 and "running without a model" in lines[0], lines


def test_a_corrupt_or_foreign_file_in_the_directory_is_skipped_with_one_warning(world, tmp_path):
    d, env, exes, model_a = world
    models = tmp_path / "models"
    models.mkdir()
    shutil.copyfile(model_a, models / "a.model")
    (models / "junk.model").write_bytes(b"not a model at all\n" * 20)
    (models / "cut.model").write_bytes(model_a.read_bytes()[:5000])
    (models / "notes.txt").write_text("not a model, and not named like one\n")
    chosen, lines, _ = run_app(env, exes["a"], "--model-dir", models)
    assert chosen == os.path.realpath(models / "a.model"), lines
    said = warnings(lines)
    assert len(said) == 2, lines
    assert any(str(models / "junk.model") in line and "skipped" in line for line in said), said
    assert any(str(models / "cut.model") in line and "skipped" in line for line in said), said
    assert "notes.txt" not in "\n".join(lines)


def test_model_with_model_dir_and_a_bad_directory_are_refused(world, tmp_path):
    d, env, exes, model_a = world
    r = llamalloc("run", "--model", model_a, "--model-dir", tmp_path, "--", exes["a"], env=env)
    assert r.returncode != 0 and r.stdout == "", r.stdout
    assert len(r.stderr.splitlines()) == 1 and "--model-dir" in r.stderr and "Traceback" not in r.stderr, r.stderr
    missing = tmp_path / "no-such-dir"
    r = llamalloc("run", "--model-dir", missing, "--", exes["a"], env=env)
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and str(missing) in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = llamalloc("run", "--", exes["a"], env=dict(env, LLAMALLOC_MODEL_DIR=str(model_a)))
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and str(model_a) in r.stderr and "not a directory" in r.stderr, r.stderr
    # The directory as an allocator option: run chooses the model itself, so it is refused.
    r = llamalloc("run", "--option", f"MODEL_DIR={tmp_path}", "--", exes["a"], env=env)
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "--model-dir" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_preloaded_allocator_says_that_the_directory_is_not_prepared(world, tmp_path):
    # Under a plain LD_PRELOAD the allocator reads only a directory that `llamalloc prepare --model-dir` prepared
    # (test_model_dir_preload.py); a directory of models alone gets one line and no model.
    d, env, exes, model_a = world
    shutil.copyfile(model_a, tmp_path / "a.model")
    lib = paths.build_dir() / "src" / "llamalloc" / "libllamalloc.so"
    r = subprocess.run([str(exes["a"])], capture_output=True, text=True, timeout=60,
                       env=dict(env, LD_PRELOAD=str(lib), LLAMALLOC_MODEL_DIR=str(tmp_path)))
    assert r.returncode == 0 and r.stdout.strip() == "model=(none)"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and f"{tmp_path}/builds.index: no such file" in lines[0], lines
    assert "llamalloc prepare --model-dir" in lines[0] and "running without a model" in lines[0], lines


def test_run_says_which_model_of_the_directory_it_took(tmp_path):
    from predict_support import random_model

    (tmp_path / "app.c").write_text(APP_C)
    exe = tmp_path / "app"
    subprocess.run([shutil.which("cc") or shutil.which("gcc"), "-O1", f"-Wl,--build-id=0x{BUILD_A}", "-o", str(exe),
                    str(tmp_path / "app.c")], check=True)
    models = tmp_path / "models"
    models.mkdir()
    m = random_model()
    m.metadata["build_ids"] = [BUILD_A]
    modelfile.write(models / "a.model", m)
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(tmp_path / "cache"))
    for name in ("LLAMALLOC_MODEL", "LLAMALLOC_MODEL_DIR", "LLAMALLOC_TOKENS"):
        env.pop(name, None)
    chosen, lines, _ = run_app(env, exe, "--model-dir", models)
    assert chosen == os.path.realpath(models / "a.model")
    said = [line for line in lines if line.startswith("llamalloc: model for ")]
    assert said == [f"llamalloc: model for {os.path.realpath(exe)}: {models / 'a.model'} (build {BUILD_A[:8]}…)"], \
        lines
