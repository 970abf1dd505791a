"""`llamalloc aggregate` on one machine (DuckDB): a fleet's profiles into a corpus; bad files reported and
skipped; profiles added without reading the old ones; an interrupted aggregation leaves the corpus it found;
`train CORPUS` learns from the same contexts as from the profiles."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import llamalloc as run_llamalloc

from llamalloc import paths, profile
from llamalloc.fleet import corpus, synthetic
from llamalloc.model import dataset
from llamalloc.model.pipeline import load_samples


def program() -> Path:
    p = paths.build_dir() / "tests" / "model" / "predict-contexts"
    assert p.exists(), f"{p} is not built: build the project before the tests"
    return p


def llamalloc(*args, **kw):
    return run_llamalloc(*args, timeout=600, **kw)  # a corpus of many profiles takes minutes to aggregate


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dict(os.environ, LLAMALLOC_CACHE_DIR=str(tmp_path_factory.mktemp("token-cache")))
    e.pop("LLAMALLOC_MODEL", None)
    return e


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, env) -> list[Path]:
    """Two symbolized profiles of two shapes of one program."""
    d = tmp_path_factory.mktemp("recorded")
    out = []
    for mode in ("footprint", "sites"):
        prof = d / f"{mode}.prof"
        llamalloc("record", "--sample-bytes", "1", "-o", prof, "--", program(), mode, 10, env=env)
        llamalloc("symbolize", prof, env=env)
        out.append(prof)
    return out


def fleet(recorded, folder: Path, count: int, seed: int) -> list[Path]:
    return synthetic.write_fleet(recorded, folder, count, hosts=5, builds=2, seed=seed)


def expected_contexts(profiles: list[Path]) -> dict:
    """(program, build, stack, size) -> [alloc objects, class counts...], summed over the profiles' samples."""
    out: dict = {}
    for path in profiles:
        prof = profile.load(path)
        pm = prof.program_mapping()
        for smp in prof.samples:
            stack = tuple("0x0" if f.startswith("0x") else f for f in smp.context_stack(prof.mappings, pm,
                                                                                         prof.functions))
            key = (prof.program, prof.build_id, stack, smp.request_size)
            row = out.setdefault(key, [0] * 9)
            row[0] += smp.values["alloc_objects"]
            for k, c in enumerate(smp.class_counts):
                row[1 + k] += c
    return out


def corpus_contexts(folder: Path) -> dict:
    rows = corpus.contexts(folder).fetchall()
    names = corpus.CONTEXT_COLUMNS
    out = {}
    for r in rows:
        d = dict(zip(names, r))
        out[(d["program"], d["build_id"], tuple(d["stack"]), d["request_size"])] = \
            [d["alloc_objects"], *(d[f"c{k}"] for k in range(8))]
    return out


def test_a_fleet_of_profiles_becomes_one_corpus_and_bad_files_are_named_and_skipped(recorded, tmp_path, env):
    profiles = fleet(recorded, tmp_path / "fleet", 24, seed=1)
    bad = tmp_path / "fleet" / "host-bad"
    bad.mkdir()
    (bad / "notes.txt").write_text("not a profile\n")
    (bad / "cut.prof").write_bytes(profiles[0].read_bytes()[:200])
    (bad / "cpu.prof").write_bytes(b"\x1f\x8b" + os.urandom(64))
    listed = tmp_path / "more.txt"
    listed.write_text(f"# two more, one missing\n{recorded[0]}\n{tmp_path / 'missing.prof'}\n")
    out = tmp_path / "corpus"
    r = llamalloc("aggregate", tmp_path / "fleet", f"@{listed}", "-o", out, "--workers", "2", env=env)
    for name in ("notes.txt", "cut.prof", "cpu.prof", "missing.prof"):
        assert name in r.stderr, r.stderr  # each skipped file is named
    assert "25 profiles read, 4 skipped" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    m = corpus.read_manifest(out)
    assert (m.profiles, m.skipped) == (25, 4)
    assert sorted(len(b) for b in m.builds.values()) == [3]  # two synthetic builds and the recorded one
    # The corpus's contexts are the profiles' samples summed per context.
    assert corpus_contexts(out) == expected_contexts([*profiles, recorded[0]])
    # Each file is a source row: where it came from, or why it was skipped.
    src = {r[0]: r for r in corpus.sources(out).query("s", "SELECT path, status, host, reason FROM s").fetchall()}
    assert len(src) == 29
    assert {src[str(p.resolve())][2] for p in profiles} <= {f"host-{i:05d}" for i in range(5)}
    assert src[str((bad / "notes.txt").resolve())][1] == "skipped"
    assert "gzip" in src[str((bad / "notes.txt").resolve())][3]


def test_new_profiles_are_added_without_reading_the_old_ones_and_give_the_same_corpus(recorded, tmp_path, env):
    first = fleet(recorded, tmp_path / "day1", 12, seed=2)
    second = fleet(recorded, tmp_path / "day2", 12, seed=3)
    out = tmp_path / "corpus"
    llamalloc("aggregate", tmp_path / "day1", "-o", out, env=env)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.parquet")}
    r = llamalloc("aggregate", tmp_path / "day1", tmp_path / "day2", "-o", out, env=env)
    assert "12 of the 24 files are in" in r.stderr and "12 profiles read" in r.stderr, r.stderr
    assert all(p.stat().st_mtime_ns == t for p, t in before.items()), "an old part was rewritten"
    assert corpus.read_manifest(out).profiles == 24
    at_once = tmp_path / "at-once"
    llamalloc("aggregate", tmp_path / "day1", tmp_path / "day2", "-o", at_once, env=env)
    assert corpus_contexts(out) == corpus_contexts(at_once) == expected_contexts(first + second)
    r = llamalloc("aggregate", tmp_path / "day2", "-o", out, env=env)
    assert "nothing new" in r.stderr


def interrupted_aggregation(args, env, delay_s: float) -> tuple[int, list[str]]:
    """Starts `llamalloc aggregate ARGS` in a process group of its own, with the default SIGINT handler (a test run
    under nohup or in the background ignores SIGINT, and a child inherits that), and sends SIGINT to the group, as
    a terminal's Ctrl-C does, `delay_s` after its parser processes start. Returns its status and its stderr lines
    other than the progress lines printed before."""
    proc = subprocess.Popen([sys.executable, "-m", "llamalloc", "aggregate", *map(str, args)], stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    seen = ""
    while "parser processes" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.readline()
    time.sleep(delay_s)
    os.killpg(proc.pid, signal.SIGINT)
    err = seen + proc.stderr.read()
    status = proc.wait(timeout=120)
    return status, [line for line in err.splitlines() if line and not line.startswith("aggregate: ")]


def test_an_interrupted_aggregation_leaves_the_corpus_it_found(recorded, tmp_path, env):
    out = tmp_path / "corpus"
    fleet(recorded, tmp_path / "old", 8, seed=4)
    llamalloc("aggregate", tmp_path / "old", "-o", out, env=env)
    manifest = (out / corpus.MANIFEST).read_bytes()
    parts = sorted(p for p in out.rglob("*.parquet"))
    fleet(recorded, tmp_path / "new", 6000, seed=5)
    # Ctrl-C reaches the parser processes too: one line from the command, none from them, and exit 130. (A moment
    # into the reading; the whole of it takes a few seconds even on a quiet machine.)
    status, lines = interrupted_aggregation([tmp_path / "new", "-o", out, "--workers", "2"], env, 0.3)
    assert status == 130, lines
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert (out / corpus.MANIFEST).read_bytes() == manifest
    assert sorted(p for p in out.rglob("*.parquet")) == parts
    assert not list(out.glob(".staging-*"))
    # A new corpus interrupted as its parser processes start leaves no folder at all.
    fresh = tmp_path / "fresh"
    status, lines = interrupted_aggregation([tmp_path / "new", "-o", fresh], env, 0)
    assert status == 130, lines
    assert len(lines) == 1 and "interrupted" in lines[0], lines
    assert not fresh.exists()


def test_training_reads_the_same_contexts_from_a_corpus_as_from_its_profiles(recorded, tmp_path, env):
    profiles = fleet(recorded, tmp_path / "fleet", 10, seed=6)
    out = tmp_path / "corpus"
    llamalloc("aggregate", tmp_path / "fleet", "-o", out, env=env)
    quiet = lambda _msg: None
    from_corpus = dataset.build_contexts(load_samples([out]), quiet)
    from_profiles = dataset.build_contexts(load_samples(profiles), quiet)
    assert from_corpus.stacks == from_profiles.stacks
    assert (from_corpus.class_counts == from_profiles.class_counts).all()
    assert (from_corpus.labels == from_profiles.labels).all()
    # One program's partition; an unknown one is refused by name.
    program_name = program().name
    assert dataset.build_contexts(load_samples([out], programs=[program_name]), quiet).stacks == from_corpus.stacks
    r = llamalloc("train", out, "-o", tmp_path / "m.model", "--program", "nope", env=env, check_rc=2)
    assert "no program nope" in r.stderr and "Traceback" not in r.stderr


def test_train_writes_a_model_that_names_the_builds_of_the_corpus(recorded, tmp_path, env):
    fleet(recorded, tmp_path / "fleet", 6, seed=7)
    out = tmp_path / "corpus"
    llamalloc("aggregate", tmp_path / "fleet", "-o", out, env=env)
    model = tmp_path / "fleet.model"
    llamalloc("train", out, "-o", model, "--holdout", "0", "--hidden", "16", "--epochs", "2", env=env)
    from llamalloc.model import modelfile
    m = modelfile.read(model)
    builds = {b for bs in corpus.read_manifest(out).builds.values() for b in bs}
    assert set(m.metadata["build_ids"]) == builds


def test_bad_outputs_and_inputs_get_one_line(recorded, tmp_path, env):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    r = llamalloc("aggregate", recorded[0], "-o", a_file, env=env, check_rc=2)
    assert "is not a folder" in r.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.csv").write_text("x")
    r = llamalloc("aggregate", recorded[0], "-o", other, env=env, check_rc=2)
    assert "not a corpus" in r.stderr
    r = llamalloc("aggregate", tmp_path / "nothing-*.prof", "-o", tmp_path / "c", env=env, check_rc=2)
    assert "no file matches" in r.stderr
    r = llamalloc("aggregate", tmp_path / "absent", "-o", tmp_path / "c", env=env, check_rc=2)
    assert "no such file or folder" in r.stderr
    good = tmp_path / "good"
    llamalloc("aggregate", recorded[0], "-o", good, env=env)
    (good / corpus.MANIFEST).write_text("{ not json")
    r = llamalloc("train", good, "-o", tmp_path / "m.model", env=env, check_rc=2)
    assert "corrupt corpus manifest" in r.stderr and "Traceback" not in r.stderr
    for r in (r,):
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_only_unreadable_inputs_are_one_error_and_write_nothing(recorded, tmp_path, env):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "notes.txt").write_text("not a profile\n")
    (bad / "cpu.prof").write_bytes(b"\x1f\x8b" + os.urandom(64))
    out = tmp_path / "corpus"
    r = llamalloc("aggregate", bad, "-o", out, "--workers", "1", env=env, check_rc=1)
    errors = [line for line in r.stderr.splitlines() if line.startswith("llamalloc: ")]
    assert len(errors) == 1, r.stderr
    assert errors[0].startswith("llamalloc: error: no profile could be read (none of the 2 files): "), errors
    assert "notes.txt" in errors[0] and "cpu.prof" in errors[0] and f"nothing was written to {out}" in errors[0]
    assert "llamalloc train" not in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()
    # A corpus that is there stays as it was.
    llamalloc("aggregate", recorded[0], "-o", out, env=env)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    llamalloc("aggregate", bad, "-o", out, "--workers", "1", env=env, check_rc=1)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
