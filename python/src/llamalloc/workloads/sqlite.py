"""The sqlite shape of the corpus: the sqlite3 shell on an in-memory database, fed SQL through its standard input, the
harness its idle client in the quiet phase."""
from __future__ import annotations

import queue as _queue
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..run import start_program
from .base import TIMEOUT_SECONDS, OnStart, WorkloadFailed, WorkloadMissing, output_tail, quiet_seconds_for
from .quiet import sample_quiet_phase, stats_signal_env


@dataclass
class SqliteWorkload:
    """The sqlite3 shell on an in-memory database, fed SQL through its standard input: a table of text and blob
    rows inserted in one transaction (the peak) and indexed, nine rows in ten deleted, then the quiet phase, in
    which the harness is an idle client: one point query and `.stats` (sqlite's own heap in use: the
    workload's live bytes) at each sample. auto_vacuum=FULL and a cache larger than the data make sqlite's
    memory follow the data: freed pages leave the database and the page cache at each commit."""

    name: str = "sqlite"
    description: str = "sqlite3 shell, in-memory database: rows of text and blobs inserted, indexed, 90% deleted"
    throughput_metric: str = "rows_per_second"
    rows: dict[str, int] = field(default_factory=lambda: {"small": 24000, "default": 144000})
    keep_one_in: int = 10
    delete_chunks: int = 8

    def executable(self) -> Path:
        system = Path("/usr/bin/sqlite3")
        found = system if system.is_file() else (Path(shutil.which("sqlite3")) if shutil.which("sqlite3") else None)
        if found is None:
            raise WorkloadMissing("workload sqlite: sqlite3 not found (Debian package sqlite3)")
        return found

    def load_sql(self, scale: str) -> str:
        """The load: the peak, the index, the deletes (in chunks, each its own transaction), the checks."""
        n = self.rows[scale]
        chunk = -(-n // self.delete_chunks)
        deletes = "".join(f"DELETE FROM orders WHERE id % {self.keep_one_in} != 0 "
                          f"AND id > {lo} AND id <= {lo + chunk};\n" for lo in range(0, n, chunk))
        return (".bail on\n"
                "PRAGMA auto_vacuum = FULL;\n"
                "PRAGMA cache_size = -4000000;\n"
                "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer TEXT NOT NULL, note TEXT, body BLOB);\n"
                f"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {n})\n"
                "INSERT INTO orders SELECT x,\n"
                "  printf('customer-%08d-%s', x, substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26)),\n"
                "  printf('%.*c', 16 + x * 7 % 400, 'n'), zeroblob(64 + (x * 2654435761) % 2000) FROM n;\n"
                "CREATE INDEX orders_customer ON orders(customer);\n"
                "SELECT 'peak', count(*), sum(length(body)) FROM orders;\n"
                ".stats\n"
                f"{deletes}"
                "PRAGMA integrity_check;\n"
                + self.check_sql() + ".stats\nSELECT 'load-end';\n")

    @staticmethod
    def check_sql() -> str:
        return ("SELECT 'kept', count(*), sum(length(customer)), sum(length(note)), sum(length(body)), sum(id) "
                "FROM orders;\n")

    def expected(self, scale: str) -> str:
        """The 'kept' line of check_sql, computed here from the formulas of load_sql."""
        ids = [x for x in range(1, self.rows[scale] + 1) if x % self.keep_one_in == 0]
        customer = sum(18 + 26 - x % 26 for x in ids)
        note = sum(16 + x * 7 % 400 for x in ids)
        body = sum(64 + (x * 2654435761) % 2000 for x in ids)
        return f"kept|{len(ids)}|{customer}|{note}|{body}|{sum(ids)}"

    def run(self, scale: str, env: dict[str, str], workdir: Path, on_start: OnStart | None = None,
            extra_args: list[str] | None = None, quiet_seconds: float | None = None) -> dict:
        """extra_args go to sqlite3; quiet_seconds as for Workload.run (the harness runs the phase)."""
        quiet = quiet_seconds_for(self.name, scale, quiet_seconds)
        workdir = Path(workdir)
        stats_pattern = None
        if quiet > 0:
            env, stats_pattern = stats_signal_env(env, workdir, self.name)
        err_path = workdir / "sqlite.stderr"
        with open(err_path, "w") as err:
            proc = start_program([str(self.executable()), "-batch", *(extra_args or []), ":memory:"], env,
                                 cwd=workdir, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                 bufsize=1)
        lines: _queue.Queue = _queue.Queue()

        def pump() -> None:
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, name="sqlite-stdout", daemon=True).start()

        def send(text: str) -> None:
            try:
                proc.stdin.write(text)
                proc.stdin.flush()
            except BrokenPipeError:
                raise WorkloadFailed(f"sqlite: sqlite3 exited early: {output_tail(err_path.read_text())}") from None

        def read_until(sentinel: str) -> list[str]:
            got = []
            while True:
                try:
                    line = lines.get(timeout=TIMEOUT_SECONDS[scale])
                except _queue.Empty:
                    raise WorkloadFailed(f"sqlite: no answer in {TIMEOUT_SECONDS[scale]} s") from None
                if line is None:
                    proc.wait()
                    raise WorkloadFailed(f"sqlite: sqlite3 exited with status {proc.returncode}: "
                                         f"{output_tail(err_path.read_text() or chr(10).join(got))}")
                if line == sentinel:
                    return got
                got.append(line)

        try:
            if on_start is not None:
                on_start(proc.pid)
            started = time.monotonic()
            send(self.load_sql(scale))
            load = read_until("load-end")
            seconds = time.monotonic() - started
            memory = _memory_used(load)
            if len(memory) != 2 or "ok" not in load:
                raise WorkloadFailed(f"sqlite: unexpected output of the load: {output_tail(chr(10).join(load), 6)}")
            kept = next((line for line in load if line.startswith("kept|")), None)
            if kept != self.expected(scale):
                raise WorkloadFailed(f"sqlite: after the deletes {kept!r}, expected {self.expected(scale)!r}")
            steady = None
            if quiet > 0:
                idle_requests = 0
                step = self.keep_one_in

                def query() -> int:
                    nonlocal idle_requests
                    row = step * (1 + idle_requests % (self.rows[scale] // step))
                    send(f"SELECT 'idle', count(*) FROM orders WHERE id = {row};\n.stats\nSELECT 'idle-end';\n")
                    got = read_until("idle-end")
                    if "idle|1" not in got:
                        raise WorkloadFailed(f"sqlite: row {row} is missing in the quiet phase")
                    idle_requests += 1
                    return _memory_used(got)[0][0]

                steady = sample_quiet_phase(proc.pid, quiet, stats_pattern, query, "sqlite: sqlite3")
                steady.update({"rows": int(kept.split("|")[1]), "idle_requests": idle_requests})
            send(self.check_sql() + "SELECT 'check-end';\n")
            final = read_until("check-end")
            proc.stdin.close()  # the end of its input: sqlite3 exits
            proc.wait(timeout=60)
            if proc.returncode != 0:
                raise WorkloadFailed(f"sqlite: sqlite3 exited with status {proc.returncode}: "
                                     f"{output_tail(err_path.read_text())}")
            if final != [kept]:
                raise WorkloadFailed(f"sqlite: after the quiet phase {final}, expected {kept!r}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        n = self.rows[scale]
        return {"workload": "sqlite", "ok": True, "seconds": seconds, "rows": n,
                "rows_per_second": n / seconds if seconds > 0 else 0.0, "rows_kept": int(kept.split("|")[1]),
                "checksum": kept.split("|", 1)[1].replace("|", "-"),
                "peak_live_bytes": memory[1][1], "live_bytes": memory[1][0], "steady_state": steady}


def _memory_used(lines: list[str]) -> list[tuple[int, int]]:
    """(now, max) of every "Memory Used: N (max M) bytes" line of sqlite3's .stats: its own heap in use."""
    found = []
    for line in lines:
        m = re.match(r"Memory Used:\s+(\d+) \(max (\d+)\) bytes", line)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
    return found
