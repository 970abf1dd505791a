"""A training corpus on disk (docs/formats/corpus.md): a folder of Parquet parts and the manifest that lists them.

    CORPUS/corpus.json                                        the manifest (written last, atomically)
    CORPUS/contexts/prog=KEY/build=KEY/part-UUID.parquet      contexts: (program, build, stack, size) -> sums
    CORPUS/sources/part-UUID.parquet                          one row per file read: where it came from, or why
                                                              it was skipped

Only the parts the manifest lists are the corpus. An aggregation writes its parts into a hidden staging folder
inside CORPUS, moves them into place, and then replaces the manifest: interrupted at any point before that, the
corpus is the one it was (the parts it moved are not listed, and the next aggregation removes them). Adding
profiles writes new parts beside the old ones, which are never read again: a context found by several
aggregations has a row in each part, and `contexts()` sums them.
"""
from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import files
from ..errors import UserError
from .parse import KEY_COLUMNS, SAMPLE_COLUMNS, SOURCE_COLUMNS, SUM_COLUMNS, partition_key

FORMAT = "llamalloc-corpus"
VERSION = 1
MANIFEST = "corpus.json"
STAGING_PREFIX = ".staging-"

#: Columns of a contexts part: the key, the sums, the lifetime bounds, how many profile samples were merged and
#: when the context was first and last seen (the profiles' start times).
CONTEXT_COLUMNS = (*KEY_COLUMNS, *SUM_COLUMNS, "min_lifetime_ns", "max_lifetime_ns", "samples", "first_time_ns",
                   "last_time_ns")


def arrow_schema(columns, list_columns=("stack",)):
    import pyarrow as pa
    types = dict(SOURCE_COLUMNS)
    fields = []
    for name in columns:
        if name in list_columns:
            fields.append((name, pa.list_(pa.string())))
        elif types.get(name) == "string" or name in ("program", "build_id", "prog", "build"):
            fields.append((name, pa.string()))
        else:
            fields.append((name, pa.int64()))
    return pa.schema(fields)


def sample_schema():
    return arrow_schema(SAMPLE_COLUMNS)


def source_schema():
    return arrow_schema([name for name, _ in SOURCE_COLUMNS])


@dataclass
class Manifest:
    contexts: list[str] = field(default_factory=list)  # part paths relative to the corpus folder
    sources: list[str] = field(default_factory=list)
    builds: dict[str, list[str]] = field(default_factory=dict)  # program -> build ids
    profiles: int = 0  # profiles read into the corpus
    skipped: int = 0  # files reported and skipped
    contexts_rows: int = 0  # rows in the contexts parts (a context added by two aggregations counts twice)
    updated: str = ""
    history: list[dict] = field(default_factory=list)  # one entry per aggregation: engine, counts, seconds

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "version": VERSION, "updated": self.updated,
                           "profiles": self.profiles, "skipped": self.skipped, "contexts_rows": self.contexts_rows,
                           "builds": self.builds, "contexts": self.contexts, "sources": self.sources,
                           "history": self.history}, indent=1, sort_keys=False) + "\n"


class SourceTally:
    """What the summary and the manifest need of an aggregation's source rows, without keeping them: the counts,
    the first skipped files, the builds of each program (the rows themselves go to the sources part as they
    come)."""

    def __init__(self, keep_skipped: int = 10):
        self.ok = 0
        self.skipped = 0
        self.first_skipped: list[dict] = []
        self.builds: dict[str, set] = {}
        self.keep_skipped = keep_skipped

    def add(self, rows) -> None:
        for row in rows:
            if row["status"] == "ok":
                self.ok += 1
                self.builds.setdefault(row["program"], set()).add(row["build_id"])
            else:
                self.skipped += 1
                if len(self.first_skipped) < self.keep_skipped:
                    self.first_skipped.append({"path": row["path"], "reason": row["reason"]})

    @classmethod
    def of(cls, rows) -> "SourceTally":
        tally = cls()
        tally.add(rows)
        return tally


def is_corpus(path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def read_manifest(folder) -> Manifest:
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: not a corpus (no {MANIFEST}; write one with `llamalloc aggregate`)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: corrupt corpus manifest ({getattr(e, 'msg', None) or e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path}: not a llamalloc corpus manifest")
    if data.get("version") != VERSION:
        raise UserError(f"{path}: corpus format version {data.get('version')}; this llamalloc reads version "
                        f"{VERSION}")
    try:
        m = Manifest(contexts=list(data["contexts"]), sources=list(data["sources"]), builds=dict(data["builds"]),
                     profiles=int(data["profiles"]), skipped=int(data["skipped"]),
                     contexts_rows=int(data.get("contexts_rows", 0)), updated=str(data.get("updated", "")),
                     history=list(data.get("history", [])))
    except (KeyError, TypeError, ValueError):
        raise UserError(f"{path}: corrupt corpus manifest (a field is missing or of the wrong type)") from None
    for rel in (*m.contexts, *m.sources):
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise UserError(f"{path}: corrupt corpus manifest (a part outside the corpus: {rel})")
    return m


def open_output(folder) -> Manifest:
    """The manifest of the corpus at `folder` to add to, or an empty one for a new corpus. A folder that exists and
    is neither a corpus nor empty (other than what an interrupted aggregation left) is refused."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder}: exists and is not a folder (a corpus is a folder)")
    if is_corpus(folder):
        return read_manifest(folder)
    if folder.is_dir():
        stray = [p.name for p in folder.iterdir()
                 if not p.name.startswith(STAGING_PREFIX) and p.name not in ("contexts", "sources")]
        if stray:
            raise UserError(f"{folder}: exists and is not a corpus (it holds {', '.join(sorted(stray)[:3])}); "
                            f"give a new folder or an existing corpus")
    return Manifest()


def ingested(folder, manifest: Manifest) -> set[tuple[str, int, int]]:
    """(absolute path, size, mtime) of every file the corpus has read already, skipped ones included."""
    if not manifest.sources:
        return set()
    import duckdb
    con = duckdb.connect()
    parts = [str(Path(folder) / rel) for rel in manifest.sources]
    rows = con.execute("SELECT path, bytes, mtime_ns FROM read_parquet(?)", [parts]).fetchall()
    return {(p, b, m) for p, b, m in rows}


def file_identity(path: str) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return os.path.abspath(path), st.st_size, st.st_mtime_ns


class Staging:
    """A hidden folder inside the corpus for one aggregation's parts; removed on close whatever happened."""

    def __init__(self, folder):
        self.corpus = Path(folder)
        try:
            self.corpus.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create {self.corpus}: {e.strerror or e}") from None
        self.path = self.corpus / f"{STAGING_PREFIX}{uuid.uuid4().hex}"
        self.path.mkdir()

    @property
    def contexts(self) -> Path:
        return self.path / "contexts"

    @property
    def sources(self) -> Path:
        return self.path / "sources"

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _staged_parts(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if p.is_file()) if root.is_dir() else []


def commit(staging: Staging, manifest: Manifest, entry: dict) -> Manifest:
    """Moves the staged parts into the corpus under new names and replaces the manifest (the step that makes them
    part of it). Parts of an earlier interrupted aggregation, never listed, are removed first."""
    import pyarrow.parquet as pq

    corpus = staging.corpus
    listed = set(manifest.contexts) | set(manifest.sources)
    for sub in ("contexts", "sources"):
        for part in _staged_parts(corpus / sub):
            rel = str(part.relative_to(corpus))
            if rel not in listed:
                part.unlink(missing_ok=True)
    for other in corpus.glob(f"{STAGING_PREFIX}*"):
        if other != staging.path:
            shutil.rmtree(other, ignore_errors=True)
    new = Manifest(list(manifest.contexts), list(manifest.sources), {k: list(v) for k, v in manifest.builds.items()},
                   manifest.profiles, manifest.skipped, manifest.contexts_rows, manifest.updated,
                   list(manifest.history))
    added_rows = 0
    for part in _staged_parts(staging.contexts):
        rel_dir = part.parent.relative_to(staging.contexts)
        rows = pq.ParquetFile(part).metadata.num_rows
        if rows == 0:
            continue
        dest = corpus / "contexts" / rel_dir / f"part-{uuid.uuid4().hex}.parquet"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, dest)
        new.contexts.append(str(dest.relative_to(corpus)))
        added_rows += rows
    for part in _staged_parts(staging.sources):
        if pq.ParquetFile(part).metadata.num_rows == 0:
            continue
        dest = corpus / "sources" / f"part-{uuid.uuid4().hex}.parquet"
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(part, dest)
        new.sources.append(str(dest.relative_to(corpus)))
    for program, builds in entry.pop("builds", {}).items():
        known = set(new.builds.get(program, []))
        new.builds[program] = sorted(known | set(builds))
    new.profiles += entry["profiles"]
    new.skipped += entry["skipped"]
    new.contexts_rows += added_rows
    new.updated = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    new.history.append({**entry, "contexts_rows": added_rows, "at": new.updated})
    with files.replacing(corpus / MANIFEST, durable=True) as tmp:
        tmp.write_text(new.to_json())
    return new


# ---- reading -------------------------------------------------------------------------------------------------

def _select_parts(folder: Path, manifest: Manifest, programs=(), builds=()) -> list[str]:
    """The contexts parts of the given programs (names or basenames) and build ids (or prefixes), all when none
    are given; by their partition folders, so that nothing else is opened."""
    wanted_programs = {partition_key(p) for p in manifest.builds
                       if not programs or p in programs or p.rsplit("/", 1)[-1] in programs}
    if programs and not wanted_programs:
        known = ", ".join(sorted(manifest.builds)) or "none"
        raise UserError(f"{folder}: no program {', '.join(programs)} in this corpus (it has: {known})")
    wanted_builds = None
    if builds:
        wanted_builds = {partition_key(b) for bs in manifest.builds.values() for b in bs
                         if any(b.startswith(x) for x in builds)}
        if not wanted_builds:
            raise UserError(f"{folder}: no build {', '.join(builds)} in this corpus")
    out = []
    for rel in manifest.contexts:
        parts = Path(rel).parts  # contexts/prog=KEY/build=KEY/part-...
        prog = parts[1].split("=", 1)[-1] if len(parts) > 3 else ""
        build = parts[2].split("=", 1)[-1] if len(parts) > 3 else ""
        if prog in wanted_programs and (wanted_builds is None or build in wanted_builds):
            out.append(str(folder / rel))
    return out


def contexts(folder, programs=(), builds=(), con=None):
    """The corpus's contexts as a DuckDB relation, the rows of its parts summed per context (CONTEXT_COLUMNS),
    read from the Parquet parts as DuckDB streams them (a corpus larger than memory spills to disk)."""
    import duckdb
    folder = Path(folder)
    manifest = read_manifest(folder)
    parts = _select_parts(folder, manifest, programs, builds)
    if not parts:
        raise UserError(f"{folder}: the corpus holds no contexts" + (" of that program or build"
                                                                     if programs or builds else ""))
    con = con or duckdb.connect()
    sums = ", ".join(f"sum({c})::BIGINT AS {c}" for c in (*SUM_COLUMNS, "samples"))
    key = ", ".join(KEY_COLUMNS)
    return con.sql(f"""
        SELECT {key}, {sums}, min(min_lifetime_ns) AS min_lifetime_ns, max(max_lifetime_ns) AS max_lifetime_ns,
               min(first_time_ns) AS first_time_ns, max(last_time_ns) AS last_time_ns
        FROM read_parquet({parts!r}, union_by_name = true, hive_partitioning = false)
        GROUP BY {key}""")


def training_samples(folder, programs=(), builds=()):
    """The corpus as the samples table that training reads (llamalloc.profile.samples_table's columns), one row per
    context; `profile` names the corpus."""
    rel = contexts(folder, programs, builds)
    counts = ", ".join(f"c{k}" for k in range(8))
    return rel.query("ctx", f"""
        SELECT '{str(folder).replace("'", "''")}' AS profile, program, build_id, stack, request_size, alloc_objects,
               alloc_bytes, freed_objects, freed_bytes, lifetime_sum_ns, live_at_exit_objects,
               [{counts}]::BIGINT[] AS class_counts, min_lifetime_ns, max_lifetime_ns
        FROM ctx ORDER BY program, build_id, stack, request_size""").to_arrow_table()


def sources(folder):
    """Every file the corpus read or skipped, as a DuckDB relation (SOURCE_COLUMNS)."""
    import duckdb
    folder = Path(folder)
    manifest = read_manifest(folder)
    if not manifest.sources:
        raise UserError(f"{folder}: the corpus lists no sources")
    parts = [str(folder / rel) for rel in manifest.sources]
    return duckdb.connect().sql(f"SELECT * FROM read_parquet({parts!r}, union_by_name = true)")
