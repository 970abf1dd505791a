"""The aggregation as a Spark job (PySpark), for more profiles than one machine parses in good time.

The job, in one pass over the profiles:

* the input paths are split into tasks of at most PROFILES_PER_TASK profiles (and at least TASKS_PER_CORE tasks
  per core, so that the cores stay busy to the end); each task parses its profiles in a Python worker on an
  executor (fleet.parse, as the DuckDB engine does) and streams their sample rows into Spark;
* Spark groups the samples by context exactly as duckdb_engine.grouping_sql does (a partial aggregation in each
  task before the shuffle, so that only the distinct contexts of a task cross the network), then hashes the
  contexts by (prog, build) so that each program and build is written by one task as one Parquet file per folder
  (the DuckDB engine's layout: staging.contexts/prog=KEY/build=KEY/*.parquet, the partition columns in the folder
  names, not in the files);
* the source rows (one per input path, skipped files included) travel back to the driver in an accumulator, which
  is how a profile is parsed once without keeping its samples anywhere: the samples only flow into the
  aggregation, and no sample ever reaches the driver.

The corpus folder (its staging folder) must be the same path on the driver and on every executor: a shared
filesystem on a cluster, where the executors write the contexts parts and the driver then moves them into place.
"""
from __future__ import annotations

import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from ..errors import UserError
from . import corpus as corpus_mod
from .parse import KEY_COLUMNS, SOURCE_COLUMNS, SUM_COLUMNS, parse_rows, partition_key

#: Profiles per task at most: a task's cost in Spark (scheduling, a Python worker's round trip) is small against
#: parsing this many, and progress still moves every few seconds.
PROFILES_PER_TASK = 64
#: Tasks per core at least, when there are enough profiles: profiles differ in size, and with several tasks per
#: core a slow one does not leave the other cores idle at the end.
TASKS_PER_CORE = 4
#: Seconds between two looks at the accumulator for the progress lines (when not on a terminal).
PROGRESS_INTERVAL = 0.5

#: Spark's log4j2 configuration for the driver (and, in local mode, the executors, which run in the driver's JVM):
#: errors only, one line each without stack traces (an error that stops the job comes back as one UserError line).
#: The level of PythonGatewayServer is the one Spark gives a PySpark driver's shell logging (else WARN, announced
#: on stderr as "Setting default log level").
#: The loggers of a failing task are off: their messages repeat the error that the job reports.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
appender.console.layout.alwaysWriteExceptions = false
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = off
logger.writer.name = org.apache.spark.sql.execution.datasources.FileFormatWriter
logger.writer.level = off
logger.python.name = org.apache.spark.api.python.PythonRunner
logger.python.level = off
"""


class _SourceRows:
    """An accumulator of source rows, (input index, row tuple) pairs: the tasks add the rows of the profiles they
    parsed; the driver reads them as the tasks finish (progress) and at the end (the corpus's sources). It is an
    AccumulatorParam by its two methods; defined here, not as a subclass, so that this module imports without
    pyspark (the engine then reports what to install)."""

    def zero(self, value):
        return []

    def addInPlace(self, value1, value2):
        value1.extend(value2)
        return value1


def _sample_rows(entries: Iterable[tuple[int, str]], sources) -> Iterator[tuple]:
    """A task: parses each (index, path) and yields its sample tuples (SAMPLE_COLUMNS order); its source row goes
    into the accumulator `sources`, which Spark sends back with the task's result."""
    names = [name for name, _ in SOURCE_COLUMNS]
    for index, path in entries:
        source, rows = parse_rows(path)
        sources.add([(index, tuple(source[name] for name in names))])
        yield from rows


def _import_pyspark() -> None:
    try:
        import pyspark.sql  # noqa: F401
    except ImportError:
        raise UserError("--engine spark needs PySpark: pip install 'pyspark>=3.5' (and a Java 17 runtime)") from None


def _find_java() -> None:
    """Spark starts `$JAVA_HOME/bin/java`, or `java` on the PATH. Where neither is set up but a JVM is installed in
    the usual place (a distribution's /usr/lib/jvm), JAVA_HOME is set to it: Java 17 first, then the newest of
    those Spark 3.5 supports (8, 11, 17), then any."""
    home = os.environ.get("JAVA_HOME")
    if home:
        if not os.access(os.path.join(home, "bin", "java"), os.X_OK):
            raise UserError(f"JAVA_HOME={home} holds no bin/java: point it at a Java 17 runtime (Spark needs one)")
        return
    if shutil.which("java"):
        return

    def version(java: str) -> int:
        m = re.search(r"(\d+)", Path(java).parents[1].name.replace("java-1.8", "java-8"))
        return int(m.group(1)) if m else 0

    found = sorted((j for j in glob.glob("/usr/lib/jvm/*/bin/java") if os.access(j, os.X_OK)),
                   key=lambda j: (version(j) == 17, version(j) <= 17, version(j)))
    if not found:
        raise UserError("--engine spark needs Java: install a Java 17 runtime (e.g. apt-get install "
                        "openjdk-17-jre-headless) or set JAVA_HOME")
    os.environ["JAVA_HOME"] = str(Path(found[-1]).parents[1])


def _spark_type(arrow_type):
    import pyarrow as pa
    from pyspark.sql import types as T
    if pa.types.is_list(arrow_type):
        return T.ArrayType(_spark_type(arrow_type.value_type), True)
    if pa.types.is_string(arrow_type):
        return T.StringType()
    if pa.types.is_int64(arrow_type):
        return T.LongType()
    raise TypeError(f"no Spark type for {arrow_type}")


def _spark_schema(arrow_schema):
    """The Spark schema of an Arrow schema of the corpus (int64 = LongType, list<string> = array<string>)."""
    from pyspark.sql import types as T
    return T.StructType([T.StructField(f.name, _spark_type(f.type), True) for f in arrow_schema])


def _settings(local: bool, staging: corpus_mod.Staging) -> dict[str, str]:
    import llamalloc
    settings = {
        # Spark's own progress bar (stages and tasks) on a terminal; elsewhere the engine's progress lines.
        "spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false",
        # The DuckDB engine's compression, so that the parts of both engines are alike.
        "spark.sql.parquet.compression.codec": "zstd",
    }
    if local:
        package_root = str(Path(llamalloc.__file__).resolve().parents[1])
        python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
        settings.update({
            # Local mode runs everything here: no web UI to start (and no port to find), the loopback address
            # whatever this host's name resolves to, and the Python workers run this Python with this llamalloc.
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executorEnv.PYTHONPATH": python_path,
        })
        if not os.environ.get("PYSPARK_PYTHON"):
            settings["spark.pyspark.python"] = sys.executable
        if not os.environ.get("SPARK_LOCAL_DIRS"):
            # Shuffle files and spills next to the corpus, as the DuckDB engine's, not in a small /tmp.
            settings["spark.local.dir"] = str(staging.path / "spark-local")
    return settings


def _quiet_logging(staging: corpus_mod.Staging) -> dict[str, str] | None:
    """Points log4j2 at _LOG4J2 through the environment of the JVM about to start (the driver's extra Java options
    are left to the user's configuration). A user's own log4j2 configuration (LOG4J_CONFIGURATION_FILE, or
    log4j2.properties in SPARK_CONF_DIR) is kept. Returns the environment to restore once the JVM runs."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if os.environ.get("LOG4J_CONFIGURATION_FILE") or (conf_dir and Path(conf_dir, "log4j2.properties").exists()):
        return None
    path = staging.path / "log4j2.properties"
    path.write_text(_LOG4J2)
    os.environ["LOG4J_CONFIGURATION_FILE"] = str(path)
    return {"LOG4J_CONFIGURATION_FILE": None}


#: What the JVM itself prints on its stderr at start, outside log4j's reach, that tells the user of `aggregate`
#: nothing: the notice of the incubator module (jdk.incubator.vector) that Spark 4 adds to the JVM's options, in
#: the pieces the JVM writes it in ("WARNING: ", "Using incubator modules: ...", the newline). Two JVMs start
#: (Spark's launcher, then the driver) and both print it; on a loaded machine their pieces interleave in the pipe,
#: as "WARNING: WARNING: Using incubator modules: jdk.incubator.vector" and a line of the rest, which a match of
#: the whole line at its start let through.
_JVM_NOTICE_PIECES = re.compile(rb"WARNING: |Using incubator modules: [\w.,]*")


def _is_jvm_notice(line: bytes) -> bool:
    """Whether a line of the JVM's stderr holds nothing but pieces of its notices (or nothing at all)."""
    return not _JVM_NOTICE_PIECES.sub(b"", line).strip()


def _jvm_stderr_filter() -> Callable[[], None]:
    """Gives the JVM about to start (it inherits fd 2) a pipe for its stderr, whose lines a thread copies to this
    process's stderr less the JVM's notices (_is_jvm_notice). Returns the function that puts fd 2 back for this process, to call once the
    JVM runs; the thread ends when the JVM, the pipe's last writer, exits."""
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    saved = os.dup(2)
    os.dup2(write_fd, 2)
    os.close(write_fd)

    def copy() -> None:
        with os.fdopen(read_fd, "rb") as pipe, os.fdopen(os.dup(saved), "wb", buffering=0) as out:
            for line in pipe:
                if not _is_jvm_notice(line):
                    out.write(line)

    threading.Thread(target=copy, name="jvm-stderr", daemon=True).start()

    def restore() -> None:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
    return restore


def _error_line(e: BaseException) -> str:
    """One line for an error of the Spark job: the Python exception of a failed task (the last line of its
    traceback), else the first line of the JVM's message (the Java exception's own, where py4j's only says which call
    failed)."""
    text = str(e)
    java = getattr(e, "java_exception", None)
    if java is not None:
        try:
            text = str(java.toString())
        except Exception:  # the JVM is gone: py4j's message is all there is
            pass
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    python = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt): ", line)]
    line = python[-1] if python else (lines[0] if lines else type(e).__name__)
    if "No module named 'llamalloc" in line:
        return ("Spark's executors cannot import llamalloc: install llamalloc (with its dependencies) in the Python "
                "that runs on every executor (PYSPARK_PYTHON)")
    return line if len(line) <= 400 else line[:400] + "..."


def _check_written(staging: corpus_mod.Staging, sources: list[dict]) -> None:
    """Every program and build with samples has a part in its folder. Executors that write to a disk the driver does
    not see (a corpus folder that is not shared on a cluster) leave the driver's folders empty while the job
    succeeds; that corpus would be silently incomplete."""
    missing = set()
    for s in sources:
        if s["status"] == "ok" and s["samples"] > 0:
            folder = (staging.contexts / f"prog={partition_key(s['program'])}"
                      / f"build={partition_key(s['build_id'] or 'none')}")
            if folder not in missing and not any(folder.glob("*.parquet")):
                missing.add(folder)
    if missing:
        others = f" (nor into {len(missing) - 1} other folders)" if len(missing) > 1 else ""
        raise UserError(f"the Spark job wrote no contexts into {sorted(missing)[0]}{others}: the corpus folder must "
                        f"be on a filesystem that the driver and every executor share, at the same path")


def _spark_errors() -> tuple[type, ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    return Py4JError, PySparkException


def _cancel_until(sc, finished: threading.Event) -> None:
    """Cancels the session's jobs every half second until the run is over: a job submitted after the first cancel
    (the interrupt came while the plan was being built) is cancelled too."""
    while True:
        try:
            sc.cancelAllJobs()
        except Exception:  # the session stopped under it: nothing left to cancel
            return
        if finished.wait(0.5):
            return


def _interrupt_handler(sc, interrupted: threading.Event, finished: threading.Event):
    """Ctrl-C while the session runs: the jobs are cancelled, the job fails, and run() raises KeyboardInterrupt.
    PySpark's own handler calls into the JVM from the signal handler, on the connection that the main thread is
    blocked on: py4j fails with tracebacks on stderr and the job runs on. The cancel goes through a thread of its
    own, which py4j gives a connection of its own. A second Ctrl-C interrupts at once."""
    def handler(signum, frame):
        if interrupted.is_set():
            raise KeyboardInterrupt
        interrupted.set()
        threading.Thread(target=_cancel_until, args=(sc, finished), name="spark-cancel", daemon=True).start()
    return handler


def _stop(spark, spark_errors) -> None:
    """Stops the session, then the JVM that this process started for it (it would otherwise live on, holding its
    memory, until this process exits). A JVM that this process did not start (PYSPARK_GATEWAY_PORT: a driver that
    runs llamalloc inside its own Spark application) is left running."""
    from pyspark import SparkContext
    try:
        spark.stop()
    except spark_errors:
        pass  # a JVM already gone (interrupted): nothing left to stop
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return
    try:
        gateway.shutdown()
    except spark_errors:
        pass
    SparkContext._gateway = SparkContext._jvm = None  # the next session starts a JVM of its own
    proc.stdin.close()  # the gateway server exits at the end of its input
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _job(spark, paths: Sequence[str], staging: corpus_mod.Staging, master: str,
         on_progress: Callable[[int, int], None], say: Callable[[str], None],
         interrupted: threading.Event) -> list[dict]:
    """The aggregation in the session `spark` (see the module's docstring); returns the source rows in the order of
    `paths`. Spark's errors are the caller's to report."""
    from pyspark.sql import functions as F

    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    n = len(paths)
    tasks = max(1, min(n, max(TASKS_PER_CORE * sc.defaultParallelism, math.ceil(n / PROFILES_PER_TASK))))
    say(f"reading {n:,} files in {tasks:,} Spark tasks on {master}"
        + (f" (Spark UI: {sc.uiWebUrl})" if sc.uiWebUrl else ""))
    sources_acc = sc.accumulator([], _SourceRows())
    rows = sc.parallelize(list(enumerate(paths)), tasks).mapPartitions(
        lambda entries: _sample_rows(entries, sources_acc))
    samples = spark.createDataFrame(rows, schema=_spark_schema(corpus_mod.sample_schema()), verifySchema=False)
    # duckdb_engine.grouping_sql, column for column. prog and build are functions of (program, build_id), so
    # grouping by them too changes no group and carries them to the write.
    aggregates = [F.sum(c).cast("long").alias(c) for c in SUM_COLUMNS] + [
        F.min("min_lifetime_ns").cast("long").alias("min_lifetime_ns"),
        F.max("max_lifetime_ns").cast("long").alias("max_lifetime_ns"),
        F.count(F.lit(1)).cast("long").alias("samples"),
        F.min("time_ns").cast("long").alias("first_time_ns"),
        F.max("time_ns").cast("long").alias("last_time_ns"),
    ]
    contexts = (samples.groupBy(*KEY_COLUMNS, "prog", "build").agg(*aggregates)
                .select(*corpus_mod.CONTEXT_COLUMNS, "prog", "build")
                .repartition("prog", "build"))
    # "file://" and the path as it is: Hadoop's Path quotes it itself, and would take a percent-encoded URI
    # (Path.as_uri) literally, writing a corpus "a+b" into a folder "a%2Bb".
    target = "file://" + str(staging.contexts.resolve())

    done = threading.Event()
    reported = [0]  # the profiles last reported done

    def track() -> None:
        while not done.wait(PROGRESS_INTERVAL):
            finished = min(n, len(sources_acc.value))  # a retried task's rows may count twice
            if finished != reported[0]:
                reported[0] = finished
                on_progress(finished, n)

    # On a terminal Spark draws its own progress bar (spark.ui.showConsoleProgress); elsewhere, lines.
    tracker = None if sys.stderr.isatty() else threading.Thread(target=track, name="spark-progress", daemon=True)
    if tracker:
        tracker.start()
    try:
        contexts.write.mode("errorifexists").partitionBy("prog", "build").parquet(target)
    finally:
        done.set()
        if tracker:
            tracker.join()
    if interrupted.is_set():  # the job ended before the cancel reached it
        raise KeyboardInterrupt
    # A task that Spark ran twice (a retry after a lost executor) added its rows twice: one per input index.
    by_index = dict(sources_acc.value)
    if len(by_index) != n:
        raise UserError(f"the Spark job returned the source rows of {len(by_index):,} of the {n:,} files")
    names = [name for name, _ in SOURCE_COLUMNS]
    sources = [dict(zip(names, by_index[i])) for i in range(n)]
    _check_written(staging, sources)
    if reported[0] != n:
        on_progress(n, n)
    return sources


def run(paths: Sequence[str], staging: corpus_mod.Staging, master: str | None,
        on_progress: Callable[[int, int], None], say: Callable[[str], None]) -> list[dict]:
    """Runs the aggregation of `paths` as a Spark job on `master` (default local[N], N this machine's cores), writes
    the staged parts and returns the source rows, one per path in the order of `paths`."""
    _import_pyspark()
    _find_java()
    from pyspark.sql import SparkSession

    local = master is None or master.startswith("local")
    master = master or f"local[{os.cpu_count() or 1}]"
    spark_errors = _spark_errors()
    restore = _quiet_logging(staging)
    builder = SparkSession.builder.master(master).appName("llamalloc aggregate")
    for key, value in _settings(local, staging).items():
        builder = builder.config(key, value)
    # The SIGINT handler to put back at the end (SparkContext replaces it with its own); None off the main thread,
    # where no handler can be set.
    previous_sigint = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        own_stderr = _jvm_stderr_filter()
        try:
            spark = builder.getOrCreate()
        except spark_errors as e:
            raise UserError(f"Spark did not start (master {master}): {_error_line(e)}") from None
        finally:
            own_stderr()
            for name, value in (restore or {}).items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        interrupted, finished = threading.Event(), threading.Event()
        try:
            if previous_sigint is not None:
                signal.signal(signal.SIGINT, _interrupt_handler(spark.sparkContext, interrupted, finished))
            sources = _job(spark, paths, staging, master, on_progress, say, interrupted)
        except spark_errors as e:
            if interrupted.is_set():
                raise KeyboardInterrupt from None
            raise UserError(f"the Spark job failed: {_error_line(e)}") from None
        finally:
            finished.set()
            _stop(spark, spark_errors)
    finally:
        if previous_sigint is not None:
            signal.signal(signal.SIGINT, previous_sigint)
    import pyarrow as pa
    import pyarrow.parquet as pq
    staging.sources.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sources, schema=corpus_mod.source_schema()),
                   staging.sources / "sources.parquet", compression="zstd")
    return sources
