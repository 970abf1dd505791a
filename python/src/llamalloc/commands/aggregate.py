"""`llamalloc aggregate PROFILES... -o CORPUS`: a fleet's profiles into one training corpus (docs/fleet.md)."""
from __future__ import annotations

import os
import shutil
import time

import click

from ..errors import UserError

#: Skipped files named one per line in the summary; the rest are counted (every one is in the corpus's sources).
SHOWN_SKIPPED = 10


@click.command("aggregate")
@click.argument("profiles", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Corpus folder: created, or added to when it is a corpus already (files it has read are not "
                   "read again).")
@click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb", show_default=True,
              help="duckdb: embedded, on this machine. spark: a Spark job (PySpark), for more data than one "
                   "machine holds.")
@click.option("--master", default=None, metavar="URL",
              help="With --engine spark: the Spark master (local[N], spark://HOST:PORT, yarn, ...). Default "
                   "local[N] with N this machine's cores.")
@click.option("--workers", type=click.IntRange(1, 1024), default=None,
              help="With --engine duckdb: parser processes (default: this machine's cores).")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="With --engine duckdb: DuckDB's memory limit (e.g. 2GB); beyond it the group-by spills to the "
                   "corpus's staging folder.")
def command(profiles, output, engine, master, workers, memory_limit):
    """Aggregate PROFILES (files, folders, quoted glob patterns, or @LIST files of paths) into the training corpus
    CORPUS: one row per calling context (program, build, stack, request size) with its lifetime counts summed over
    the profiles, partitioned by program and build, and one row per file read saying where it came from (host,
    build, time) or why it was skipped. A corrupt, truncated or foreign file is reported and skipped. Until the
    end nothing of CORPUS changes: interrupted, it is the corpus it was. `llamalloc train CORPUS` trains on it."""
    from ..fleet import corpus as corpus_mod
    from ..fleet import inputs
    from ..progress import Bar

    if master and engine != "spark":
        raise UserError("--master is a Spark setting: give --engine spark with it")
    if (workers or memory_limit) and engine != "duckdb":
        raise UserError("--workers and --memory-limit are DuckDB settings: leave them out with --engine spark")
    existed = os.path.exists(output)
    manifest = corpus_mod.open_output(output)
    paths = inputs.expand(profiles)
    if not paths:
        raise UserError("no files to read (the folders given are empty)")
    known = corpus_mod.ingested(output, manifest) if manifest.sources else set()
    fresh = []
    for p in paths:
        identity = corpus_mod.file_identity(p)
        if identity is None or identity not in known:
            fresh.append(os.path.abspath(p))
    already, given = len(paths) - len(fresh), len(paths)
    del paths, known  # (only the files to read are kept while they are read)
    say = lambda text: click.echo(f"aggregate: {text}", err=True)
    if already:
        say(f"{already:,} of the {given:,} files are in {output} already; reading the other {len(fresh):,}")
    if not fresh:
        say(f"nothing new: {output} is unchanged")
        return
    workers = workers or os.cpu_count() or 1
    started = time.monotonic()
    staging = corpus_mod.Staging(output)
    bar = Bar(len(fresh), "aggregate", "profile", prefix="aggregate: ")
    last_line = [started]

    def on_progress(done: int, total: int) -> None:
        bar.set(done, total)
        now = time.monotonic()
        if not bar.enabled and (now - last_line[0] >= 10 or done == total):
            last_line[0] = now
            rate = done / max(now - started, 1e-9)
            left = (total - done) / rate if rate > 0 else 0
            bar.line(f"{done:,}/{total:,} profiles, {rate:,.0f}/s, about {left:,.0f} s left")

    try:
        if engine == "duckdb":
            from ..fleet import duckdb_engine
            bar.line(f"reading {len(fresh):,} files with {workers} parser processes into DuckDB")
            tally = duckdb_engine.run(fresh, staging, workers, on_progress, memory_limit)
        else:
            from ..fleet import spark_engine
            tally = corpus_mod.SourceTally.of(spark_engine.run(fresh, staging, master, on_progress, bar.line))
        if not tally.ok:
            # Nothing to add: no corpus is made or changed, and no `train` is suggested.
            bar.close()
            raise UserError(_none_read(tally, output), exit_code=1)
        builds = tally.builds
        seconds = time.monotonic() - started
        entry = {"engine": engine, "profiles": tally.ok, "skipped": tally.skipped, "seconds": round(seconds, 3),
                 "builds": {p: sorted(b) for p, b in builds.items()}}
        bar.close()
        with _interrupt_deferred() as interrupt:
            new = corpus_mod.commit(staging, manifest, entry)
        if interrupt.pending:
            raise UserError(f"interrupted: the aggregation had ended: {output} holds the {tally.ok:,} profiles "
                            f"read", exit_code=130)
    except KeyboardInterrupt:
        bar.close()
        raise UserError(f"interrupted: {output} is as it was before this aggregation", exit_code=130) from None
    finally:
        bar.close()
        staging.close()
        if not existed and not corpus_mod.is_corpus(output):
            shutil.rmtree(output, ignore_errors=True)  # a new corpus that never was: no empty folder left
    for s in tally.first_skipped[:SHOWN_SKIPPED]:
        say(f"skipped {s['path']}: {s['reason']}")
    if tally.skipped > SHOWN_SKIPPED:
        say(f"... and {tally.skipped - SHOWN_SKIPPED:,} more skipped files (all of them are in the corpus's sources, "
            f"status 'skipped')")
    rate = (tally.ok + tally.skipped) / max(seconds, 1e-9)
    programs = ", ".join(f"{os.path.basename(p) or '?'} ({len(b)} build{'s' if len(b) != 1 else ''})"
                         for p, b in sorted(builds.items()))
    say(f"{tally.ok:,} profiles read, {tally.skipped:,} skipped, in {seconds:,.1f} s ({rate:,.0f} files/s); "
        f"{programs or 'no program'}")
    say(f"{output}: {new.profiles:,} profiles of {len(new.builds)} program(s), "
        f"{sum(len(b) for b in new.builds.values())} build(s); {new.contexts_rows - manifest.contexts_rows:,} "
        f"context rows added, {new.contexts_rows:,} in all")
    say(f"next: llamalloc train {output} -o MODEL" + (" --program NAME" if len(new.builds) > 1 else ""))


class _interrupt_deferred:
    """Ctrl-C waits while the staged parts move into the corpus and its manifest is replaced: interrupted there,
    the corpus would hold parts its manifest does not list. `pending` says whether one came meanwhile."""

    def __enter__(self):
        import signal
        self.pending = False
        self._signal = signal
        self._previous = signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, signum, frame) -> None:
        self.pending = True

    def __exit__(self, *exc) -> None:
        self._signal.signal(self._signal.SIGINT, self._previous)


#: Skipped files named in the one line of an aggregation that read none.
NAMED_WHEN_NONE_READ = 3


def _none_read(tally, output) -> str:
    """One line: that no file given could be read, the first few with their reasons, and that nothing was
    written."""
    shown = "; ".join(f"{s['path']}: {s['reason']}" for s in tally.first_skipped[:NAMED_WHEN_NONE_READ])
    more = tally.skipped - min(len(tally.first_skipped), NAMED_WHEN_NONE_READ)
    count = f" (none of the {tally.skipped:,} files)" if tally.skipped > 1 else ""
    return (f"no profile could be read{count}: {shown}" + (f"; and {more:,} more" if more else "")
            + f"; nothing was written to {output}")
