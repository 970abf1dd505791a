"""`llamalloc aggregate --engine spark` (fleet/spark_engine.py): the Spark job writes the corpus that the DuckDB
engine writes from the same files, and the two engines add to each other's corpora.

A handful of small profiles (three modes of predict-contexts, one of them twice, and predict-threads: two programs,
so two partition folders) under a few host folders, with a corrupt, a truncated, an empty and a foreign file among
them, aggregated by each engine. Spark starts twice in all (about 10 s each): once for a whole corpus, once to add
to a DuckDB corpus; the other corpora are DuckDB's."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import llamalloc

from llamalloc import paths
from llamalloc.errors import UserError
from llamalloc.fleet import corpus
from llamalloc.fleet.parse import partition_key

SOURCE_FIELDS = ("path", "status", "reason", "host", "program", "build_id", "time_ns", "samples")
BAD_FILES = ("corrupt.prof", "truncated.prof", "notes.txt")


def record(out: Path, program: str, *args) -> Path:
    exe = paths.build_dir() / "tests" / "model" / program
    assert exe.exists(), f"{exe} is not built: build the project before the tests"
    llamalloc("record", "--sample-bytes", "1", "-o", out, "--", exe, *args)
    llamalloc("symbolize", out)
    return out


@pytest.fixture(scope="module")
def profiles(tmp_path_factory) -> tuple[Path, Path]:
    """Two sets of files: `first` (two hosts, five profiles, three bad files) and `more` (a third host: copies of
    three of the profiles, so that contexts of both sets merge, and an empty file)."""
    d = tmp_path_factory.mktemp("recorded")
    footprint1 = record(d / "footprint1.prof", "predict-contexts", "footprint", "20")
    footprint2 = record(d / "footprint2.prof", "predict-contexts", "footprint", "20")
    wrapped = record(d / "wrapped.prof", "predict-contexts", "wrapped", "20")
    frameless = record(d / "frameless.prof", "predict-contexts", "frameless", "20")
    threads = record(d / "threads.prof", "predict-threads", "2")
    root = tmp_path_factory.mktemp("fleet")
    first, more = root / "first", root / "more"
    hosts = {first / "host-a": (footprint1, wrapped, threads), first / "host-b": (footprint2, frameless),
             more / "host-c": (footprint1, threads, frameless)}
    for folder, files in hosts.items():
        folder.mkdir(parents=True)
        for f in files:
            shutil.copy(f, folder / f.name)
    data = bytearray(wrapped.read_bytes())
    for i in range(40, len(data), 7):
        data[i] ^= 0x5A
    (first / "host-b" / "corrupt.prof").write_bytes(bytes(data))
    (first / "host-b" / "truncated.prof").write_bytes(footprint1.read_bytes()[: len(footprint1.read_bytes()) // 2])
    (first / "host-b" / "notes.txt").write_text("not a profile\n")
    (more / "host-c" / "empty.prof").write_bytes(b"")
    return first, more


def aggregate(inputs, out: Path, engine: str) -> subprocess.CompletedProcess:
    extra = ["--master", "local[2]"] if engine == "spark" else []
    return llamalloc("aggregate", *inputs, "-o", out, "--engine", engine, *extra)


@pytest.fixture(scope="module")
def corpora(profiles, tmp_path_factory):
    """The first set aggregated by each engine (the Spark run's output kept for its checks)."""
    first, _ = profiles
    d = tmp_path_factory.mktemp("corpora")
    aggregate([first], d / "duckdb", "duckdb")
    spark_run = aggregate([first], d / "spark", "spark")
    return d / "duckdb", d / "spark", spark_run


def context_rows(folder: Path) -> list[tuple]:
    return sorted(corpus.contexts(folder).fetchall())


def source_rows(folder: Path) -> list[tuple]:
    return sorted(corpus.sources(folder).select(", ".join(SOURCE_FIELDS)).fetchall())


def test_spark_writes_the_corpus_that_duckdb_writes(corpora):
    duck, spark, _ = corpora
    rows = context_rows(spark)
    assert rows == context_rows(duck)
    programs = {os.path.basename(r[0]) for r in rows}
    assert programs == {"predict-contexts", "predict-threads"}
    # A context of both footprint recordings: merged from two samples, its first and last times those of two
    # profiles.
    samples = corpus.CONTEXT_COLUMNS.index("samples")
    first, last = corpus.CONTEXT_COLUMNS.index("first_time_ns"), corpus.CONTEXT_COLUMNS.index("last_time_ns")
    assert any(r[samples] >= 2 and r[first] < r[last] for r in rows)
    sources = source_rows(spark)
    assert sources == source_rows(duck)
    assert len(sources) == 8
    assert sorted(os.path.basename(s[0]) for s in sources if s[1] == "skipped") == sorted(BAD_FILES)
    assert all(s[1] == "ok" and s[7] > 0 for s in sources if os.path.basename(s[0]) not in BAD_FILES)
    manifest = corpus.read_manifest(spark)
    assert (manifest.profiles, manifest.skipped, manifest.history[-1]["engine"]) == (5, 3, "spark")
    assert manifest.contexts_rows == len(rows)  # one part per program and build, no context in two parts


def test_spark_output_names_the_bad_files_and_keeps_spark_quiet(corpora):
    _, _, run = corpora
    for name in BAD_FILES:
        assert any(line.startswith("aggregate: skipped ") and line.split(":")[1].endswith(name)
                   for line in run.stderr.splitlines()), (name, run.stderr)
    assert "aggregate: 8/8 profiles" in run.stderr  # the progress lines off a terminal
    assert "5 profiles read, 3 skipped" in run.stderr
    # Spark's own logging (banner, log level notice, warnings) stays off the output.
    noise = [line for line in run.stderr.splitlines() if not line.startswith("aggregate: ")]
    assert not noise, run.stderr


def test_the_jvm_notice_is_left_out_also_when_two_jvms_interleave_it():
    from llamalloc.fleet.spark_engine import _is_jvm_notice
    notice = b"WARNING: Using incubator modules: jdk.incubator.vector\n"
    # Spark's launcher and the driver both print it; on a loaded machine their pieces interleave.
    for line in (notice, b"WARNING: WARNING: Using incubator modules: jdk.incubator.vector\n",
                 b"Using incubator modules: jdk.incubator.vector\n", b"\n"):
        assert _is_jvm_notice(line), line
    for line in (b"WARNING: An illegal reflective access operation has occurred\n",
                 b"Error: Could not find or load main class org.apache.spark.launcher.Main\n"):
        assert not _is_jvm_notice(line), line


def test_spark_parts_have_the_duckdb_layout_and_types(corpora):
    duck, spark, _ = corpora
    schemas = {}
    for folder in (duck, spark):
        manifest = corpus.read_manifest(folder)
        assert len(manifest.contexts) == 2 and len(manifest.sources) == 1
        for rel in manifest.contexts:
            parts = Path(rel).parts
            assert parts[0] == "contexts" and parts[1].startswith("prog=") and parts[2].startswith("build="), rel
            schema = pq.read_schema(folder / rel)
            assert schema.names == list(corpus.CONTEXT_COLUMNS)  # the partition columns are in the folder names
            schemas.setdefault(folder, []).append([(f.name, str(f.type)) for f in schema])
        schemas.setdefault(folder, []).append([(f.name, str(f.type)) for f in pq.read_schema(folder /
                                                                                        manifest.sources[0])])
        assert not list(folder.glob(f"{corpus.STAGING_PREFIX}*"))
    assert schemas[duck] == schemas[spark]
    assert schemas[spark][-1] == [(f.name, str(f.type)) for f in corpus.source_schema()]


def test_engines_add_to_each_others_corpora(profiles, corpora, tmp_path):
    first, more = profiles
    duck, spark, _ = corpora
    aggregate([first, more], tmp_path / "all", "duckdb")
    expected_contexts, expected_sources = context_rows(tmp_path / "all"), source_rows(tmp_path / "all")
    assert len(expected_sources) == 12
    for base, engine in ((spark, "duckdb"), (duck, "spark")):
        merged = tmp_path / f"{base.name} + {engine}"  # a space and a '+': a path that a URI would quote
        shutil.copytree(base, merged)
        run = aggregate([first, more], merged, engine)
        assert "8 of the 12 files are in" in run.stderr
        assert "skipped" in run.stderr and "empty.prof" in run.stderr
        assert context_rows(merged) == expected_contexts, (base.name, engine)
        assert source_rows(merged) == [tuple(r) for r in expected_sources]
        history = corpus.read_manifest(merged).history
        assert [h["engine"] for h in history] == [base.name, engine]


def test_missing_java_or_pyspark_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.prof").write_bytes(b"")
    r = llamalloc("aggregate", tmp_path / "in", "-o", tmp_path / "c", "--engine", "spark",
                  env=dict(os.environ, JAVA_HOME=str(tmp_path / "no-java")), check_rc=2)
    assert r.stderr.strip().count("\n") == 0 and "JAVA_HOME" in r.stderr and "Java 17" in r.stderr, r.stderr
    from llamalloc.fleet import spark_engine
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    staging = corpus.Staging(tmp_path / "c2")
    try:
        with pytest.raises(UserError, match=r"pip install 'pyspark>=3.5'"):
            spark_engine.run([str(tmp_path)], staging, None, lambda done, total: None, lambda text: None)
    finally:
        staging.close()


def test_parts_missing_from_the_driver_folder_are_an_error(tmp_path):
    """Executors writing to disks that the driver does not see leave its folders empty while the job succeeds: the
    engine refuses that corpus instead of committing it without those contexts."""
    from llamalloc.fleet import spark_engine
    staging = corpus.Staging(tmp_path / "c")
    try:
        ok = {"status": "ok", "program": "/bin/prog", "build_id": "b1", "samples": 3}
        sources = [ok, {**ok, "build_id": "b2"}, {**ok, "status": "skipped", "samples": 0},
                   {**ok, "build_id": "b3", "samples": 0}]
        with pytest.raises(UserError, match=r"wrote no contexts into .*build=b1-.* \(nor into 1 other folders\)"):
            spark_engine._check_written(staging, sources)
        for build in ("b1", "b2"):
            folder = (staging.contexts / f"prog={partition_key('/bin/prog')}"
                      / f"build={partition_key(build)}")
            folder.mkdir(parents=True)
            (folder / "part-00000.zstd.parquet").write_bytes(b"")
        spark_engine._check_written(staging, sources)  # b3 has no samples: no folder expected
    finally:
        staging.close()
