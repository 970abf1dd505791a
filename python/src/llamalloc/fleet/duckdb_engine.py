"""The aggregation on one machine: a pool of worker processes parses the profiles (fleet.parse) into Arrow
batches, which embedded DuckDB reads as one stream, groups by context and writes as the staged Parquet parts,
one folder per program and build.

Memory: the parser pool holds at most two batches per worker in flight, and DuckDB's group-by holds the distinct
contexts (the corpus itself), spilling to disk beyond its memory limit; neither grows with the number of
profiles.
"""
from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing.context import SpawnContext, SpawnProcess
from typing import Callable, Iterator, Sequence

from . import corpus as corpus_mod
from .parse import KEY_COLUMNS, SUM_COLUMNS, empty_samples, parse

#: Profiles per task of a parser process: enough that a task's overhead (a pickled batch) is small against
#: parsing, few enough that progress moves and a batch stays a few MB.
CHUNK = 16
#: Source rows written to the sources part at a time (one Parquet row group each).
SOURCE_ROWS_PER_GROUP = 8192


def _ignore_interrupts() -> None:
    """A parser process leaves Ctrl-C to the driver, which stops the pool (the terminal sends SIGINT to the whole
    process group). It starts with SIGINT blocked (_ParserProcess), so that a Ctrl-C during its start stays
    pending; ignoring the signal discards it."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _ParserProcess(SpawnProcess):
    """A parser process, started with SIGINT blocked in the starting thread, so that the spawned process inherits
    the mask: its start (an interpreter, pyarrow's import) would otherwise take a Ctrl-C as a KeyboardInterrupt
    traceback before its initializer ignores SIGINT. The pool starts its processes as tasks come, from any thread
    (DuckDB's that reads the stream among them). A Ctrl-C meanwhile reaches this process's other threads, or
    this thread when the mask is restored."""

    def start(self) -> None:
        import signal
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _ParserContext(SpawnContext):
    """Spawned, not forked (the driver holds DuckDB's threads and locks), as _ParserProcess."""
    Process = _ParserProcess


def _stop(pool: ProcessPoolExecutor) -> None:
    """Stops the pool after an error or a Ctrl-C: the tasks not started are dropped, and it waits for the few
    running (a chunk each) and for the pool's manager thread. Left running, that thread closes its wake-up pipe
    while the interpreter exits, and the interpreter's exit hook for pools writes to the closed pipe: an
    "Exception ignored" traceback after the command's last line."""
    pool.shutdown(wait=True, cancel_futures=True)


def _parse_chunk(paths: Sequence[str]):
    """A worker's task: the profiles' source rows and one Arrow batch of their samples."""
    import pyarrow as pa
    samples = empty_samples()
    sources = [parse(p, samples) for p in paths]
    return sources, pa.RecordBatch.from_pydict(samples, schema=corpus_mod.sample_schema())


def grouping_sql(samples: str) -> str:
    """The aggregation: samples grouped by context (program, build, stack, request size); counts summed, lifetime
    bounds kept, the samples merged counted, the first and last profile start times. The Spark engine runs the
    same grouping with its DataFrame API (spark_engine.py); a test compares their corpora."""
    sums = ", ".join(f"sum({c})::BIGINT AS {c}" for c in SUM_COLUMNS)
    key = ", ".join(KEY_COLUMNS)
    return f"""
        SELECT {key}, {sums}, min(min_lifetime_ns)::BIGINT AS min_lifetime_ns,
               max(max_lifetime_ns)::BIGINT AS max_lifetime_ns, count(*)::BIGINT AS samples,
               min(time_ns)::BIGINT AS first_time_ns, max(time_ns)::BIGINT AS last_time_ns,
               any_value(prog) AS prog, any_value(build) AS build
        FROM {samples} GROUP BY {key}"""


def run(paths: Sequence[str], staging: corpus_mod.Staging, workers: int,
        on_progress: Callable[[int, int], None], memory_limit: str | None = None) -> corpus_mod.SourceTally:
    """Parses `paths` in `workers` processes and writes the staged parts; returns the tally of the source rows,
    which go to the sources part as they come (held, a row per profile would grow with the fleet)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    tally = corpus_mod.SourceTally()
    done = 0
    chunks = [paths[i:i + CHUNK] for i in range(0, len(paths), CHUNK)]
    interrupted = False
    staging.sources.mkdir(parents=True, exist_ok=True)
    source_writer = pq.ParquetWriter(staging.sources / "sources.parquet", corpus_mod.source_schema(),
                                     compression="zstd")

    def batches(pool: ProcessPoolExecutor) -> Iterator[pa.RecordBatch]:
        nonlocal interrupted
        try:
            yield from _batches(pool)
        except KeyboardInterrupt:
            # DuckDB turns an exception of the stream into its own error: remembered here, raised again below.
            interrupted = True
            raise

    pending_sources: list[dict] = []

    def flush_sources() -> None:
        if pending_sources:
            source_writer.write_table(pa.Table.from_pylist(pending_sources, schema=corpus_mod.source_schema()))
            pending_sources.clear()

    def progress(n: int) -> None:
        nonlocal done
        done += n
        on_progress(done, len(paths))

    def _batches(pool: ProcessPoolExecutor) -> Iterator[pa.RecordBatch]:
        pending = set()
        queue = iter(chunks)
        for chunk in queue:  # at most 2 tasks per worker in flight: the pool runs that far ahead of DuckDB
            pending.add(pool.submit(_parse_chunk, chunk))
            if len(pending) >= 2 * workers:
                break
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                rows, batch = future.result()
                tally.add(rows)
                pending_sources.extend(rows)
                if len(pending_sources) >= SOURCE_ROWS_PER_GROUP:
                    flush_sources()
                progress(len(rows))
                for chunk in queue:
                    pending.add(pool.submit(_parse_chunk, chunk))
                    break
                if batch.num_rows:
                    yield batch

    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET temp_directory = '{staging.path / 'spill'}'")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=_ParserContext(),
                             initializer=_ignore_interrupts) as pool:
        try:
            reader = pa.RecordBatchReader.from_batches(corpus_mod.sample_schema(), batches(pool))
            con.register("sample_stream", reader)
            con.execute(f"""COPY ({grouping_sql('sample_stream')}) TO '{staging.contexts}'
                            (FORMAT PARQUET, PARTITION_BY (prog, build), COMPRESSION ZSTD)""")
        except duckdb.Error as e:
            _stop(pool)
            # Ctrl-C while DuckDB itself runs: it stops the query with its own exception.
            if interrupted or isinstance(e, duckdb.InterruptException):
                raise KeyboardInterrupt from None
            raise
        except BaseException:
            _stop(pool)
            raise
    flush_sources()
    source_writer.close()
    return tally
