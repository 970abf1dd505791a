"""One profile as rows of a corpus: runs in the engines' worker processes (a DuckDB aggregation's parser pool,
Spark's executors), never in the driver.

Each file gives one *source* row (where it came from, or why it was skipped) and, when it is a readable
profile, one *sample* row per sample. Both engines take these from here, so they read the same files the same
way.
"""
from __future__ import annotations

import hashlib
import os
import re

from ..errors import FormatError

#: The columns of a source row, in order, with their Arrow/Spark types ("string" or "int64").
SOURCE_COLUMNS = (
    ("path", "string"), ("bytes", "int64"), ("mtime_ns", "int64"), ("status", "string"), ("reason", "string"),
    ("host", "string"), ("program", "string"), ("build_id", "string"), ("time_ns", "int64"),
    ("samples", "int64"),
)
#: The columns of a sample row: the key of a context (program, build, stack, request size), then what is
#: summed or bounded over the profiles. c0..c7 are the class counts.
KEY_COLUMNS = ("program", "build_id", "stack", "request_size")
SUM_COLUMNS = ("alloc_objects", "alloc_bytes", "freed_objects", "freed_bytes", "lifetime_sum_ns",
               "live_at_exit_objects", *(f"c{k}" for k in range(8)))
#: prog and build: the corpus's partition folders of the program and the build (partition_key).
SAMPLE_COLUMNS = (*KEY_COLUMNS, *SUM_COLUMNS, "min_lifetime_ns", "max_lifetime_ns", "time_ns", "prog", "build")

STATUS_OK, STATUS_SKIPPED = "ok", "skipped"

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
#: What an unsymbolised frame (a raw address, which moves from run to run with ASLR) becomes, so that one
#: calling context recorded on a thousand hosts is one row, not a thousand (as training canonicalises it).
UNSYMBOLIZED_FRAME = "0x0"


def partition_key(value: str) -> str:
    """A folder name for a program or a build id: its last path component with anything but [A-Za-z0-9._-]
    replaced, and 8 hex digits of its SHA-1, so that two programs of one name in two folders stay apart."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", value.rsplit("/", 1)[-1])[:48] or "none"
    return f"{base}-{hashlib.sha1(value.encode()).hexdigest()[:8]}"


def _canonical(stack: list[str]) -> list[str]:
    return [UNSYMBOLIZED_FRAME if _ADDRESS.fullmatch(f) else f for f in stack]


def empty_samples() -> dict[str, list]:
    return {name: [] for name in SAMPLE_COLUMNS}


def parse(path: str, samples: dict[str, list]) -> dict:
    """Appends the samples of the profile at `path` to the column lists of `samples` and returns its source row.
    A file that is no readable llamalloc profile (missing, truncated, corrupt, foreign, another version) appends
    nothing and returns a source row with status "skipped" and the reason."""
    from .. import profile

    source = {"path": str(path), "bytes": 0, "mtime_ns": 0, "status": STATUS_SKIPPED, "reason": "",
              "host": "", "program": "", "build_id": "", "time_ns": 0, "samples": 0}
    try:
        st = os.stat(path)
        source["bytes"], source["mtime_ns"] = st.st_size, st.st_mtime_ns
    except OSError as e:
        source["reason"] = f"cannot read: {e.strerror or e}"
        return source
    try:
        prof = profile.load(path)
    except FormatError as e:
        source["reason"] = e.problem
        return source
    except (MemoryError, RecursionError, ValueError, OverflowError) as e:  # a damaged file the reader did not name
        source["reason"] = f"corrupt ({type(e).__name__})"
        return source
    program_mapping = prof.program_mapping()
    prog, build = partition_key(prof.program), partition_key(prof.build_id or "none")
    n = 0
    for smp in prof.samples:
        stack = smp.context_stack(prof.mappings, program_mapping, prof.functions)
        if not stack:
            continue
        v = smp.values
        counts = smp.class_counts
        row = (prof.program, prof.build_id, _canonical(stack), smp.request_size,
               v["alloc_objects"], v["alloc_space"], v["freed_objects"], v["freed_space"], v["lifetime_sum"],
               v["live_at_exit_objects"], *counts, smp.min_lifetime_ns, smp.max_lifetime_ns, prof.time_nanos,
               prog, build)
        for name, value in zip(SAMPLE_COLUMNS, row):
            samples[name].append(value)
        n += 1
    source.update(status=STATUS_OK, host=prof.host, program=prof.program, build_id=prof.build_id,
                  time_ns=prof.time_nanos, samples=n)
    return source


def parse_rows(path: str) -> tuple[dict, list[tuple]]:
    """parse() as a source row and a list of sample tuples in SAMPLE_COLUMNS order (Spark's rows)."""
    samples = empty_samples()
    source = parse(path, samples)
    return source, list(zip(*(samples[name] for name in SAMPLE_COLUMNS)))
