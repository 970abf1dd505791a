"""The bundled workloads and the corpus of program shapes (docs/workloads.md): how to run each one at a scale
and how to check its output.

Each workload runs as one process whose memory is the thing measured (for redis: redis-server; its client
redis-benchmark runs without the allocator under test; for cpython and sqlite: the interpreter and the sqlite3
shell). `Workload.run` starts it with the given environment
(LD_PRELOAD and friends), reports the pid to sample through `on_start`, waits, checks the output and returns
the workload's own figures. A workload that cannot run raises `WorkloadMissing`; one whose output is wrong
raises `WorkloadFailed`.
"""
from __future__ import annotations

import collections
import json
import os
import re
import glob
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import queue as _queue
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import paths
from .errors import UserError
from .run import start_program

SCALES = ("small", "default")
# Wall-clock limits per run, generous: a run past them is a hang, not a slow allocator.
TIMEOUT_SECONDS = {"small": 300, "default": 1800}
# The quiet phase after the load peak (docs/workloads.md, "Steady state"): its default length per scale, as the
# programs' own defaults. `quiet_seconds=0` disables it (no "steady_state" in the result).
QUIET_SECONDS = {"small": 2.0, "default": 10.0}
# Samples per second in the quiet phase (the programs sample every 0.2 s as well).
QUIET_INTERVAL_SECONDS = 0.2
# The signal on which llamalloc writes its statistics of the moment inside a program whose quiet phase the harness
# samples from outside (LLAMALLOC_STATS_SIGNAL): one whose default action is to ignore it, and that redis-server,
# python3 and the sqlite3 shell do not use, so it is harmless under other allocators.
STATS_SIGNAL = "WINCH"
REDIS_STATS_SIGNAL = STATS_SIGNAL


class WorkloadMissing(UserError):
    """The workload's program is not built (or cannot be built)."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


class WorkloadFailed(UserError):
    """The workload ran but its output is wrong or it exited with an error."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


OnStart = Callable[[int], None]


def read_smaps_rollup(pid: int | str) -> tuple[int, int] | None:
    """(RSS, AnonHugePages) in bytes of a running process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rss = anon = None
    for line in text.splitlines():
        if line.startswith("Rss:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("AnonHugePages:"):
            anon = int(line.split()[1]) * 1024
    if rss is None:  # a zombie has an empty rollup
        return None
    return rss, anon or 0


def read_vm_hwm(pid: int | str) -> int | None:
    """The highest RSS a running process has had (VmHWM of /proc/PID/status), in bytes; None once it is gone. The
    kernel's own high-water mark: exact, where samples taken every tenth of a second miss a short peak."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f.read().decode("ascii", "replace").splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
        return None
    return None


def _quiet_args(quiet_seconds: float | None) -> list[str]:
    return [] if quiet_seconds is None else ["--quiet-seconds", f"{float(quiet_seconds):g}"]


def _last_json_line(name: str, stdout: str) -> dict:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError as e:
                raise WorkloadFailed(f"{name}: its result line is not JSON ({e})") from None
    raise WorkloadFailed(f"{name}: printed no result line")


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def stats_signal_env(env: dict[str, str], workdir: Path, name: str) -> tuple[dict[str, str], str | None]:
    """The environment of a program whose quiet phase the harness samples, and the path pattern of the statistics
    files llamalloc writes there on STATS_SIGNAL (None when nothing is preloaded: no allocator that writes them).
    The files go to a file, never to the program's stderr. Other allocators ignore the variables and the signal."""
    if not env.get("LD_PRELOAD"):
        return env, None
    env = dict(env)
    env.setdefault("LLAMALLOC_STATS_SIGNAL", STATS_SIGNAL)
    env.setdefault("LLAMALLOC_STATS", str(workdir / f"{name}-llamalloc-stats.json"))
    return env, env["LLAMALLOC_STATS"]


def sample_quiet_phase(pid: int, seconds: float, stats_pattern: str | None,
                       tick: Callable[[], int | None] | None = None, what: str = "the program") -> dict:
    """Samples a running program's quiet phase from outside, as the C++ workloads sample their own
    (workloads/common/steady_state.h): every QUIET_INTERVAL_SECONDS, the first at once, `tick()` (the idle
    program's work, done by the harness as its client; it returns the program's own live bytes or None), then
    RSS and AnonHugePages from /proc/PID/smaps_rollup and, with `stats_pattern` (stats_signal_env), llamalloc's
    footprint and live bytes from the files it writes on STATS_SIGNAL. Returns the "steady_state" block: the
    means over the samples (docs/workloads.md)."""
    signal_sent = False
    rss, anon, live, llama = [], [], [], []
    start = time.monotonic()
    i = 0
    while i * QUIET_INTERVAL_SECONDS <= seconds + 1e-9:
        delay = start + i * QUIET_INTERVAL_SECONDS - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        i += 1
        if tick is not None:
            value = tick()
            if value is not None:
                live.append(value)
        reading = read_smaps_rollup(pid)
        if reading is None:
            raise WorkloadFailed(f"{what} exited during the quiet phase")
        rss.append(reading[0])
        anon.append(reading[1])
        if stats_pattern is not None:
            llama += _collect_signal_stats(stats_pattern, pid)
            os.kill(pid, getattr(signal, f"SIG{STATS_SIGNAL}"))
            signal_sent = True
    elapsed = time.monotonic() - start
    if signal_sent:
        time.sleep(0.1)
        llama += _collect_signal_stats(stats_pattern, pid)

    def mean(values: list) -> int:
        return round(sum(values) / len(values))

    out = {"seconds": round(elapsed, 3), "interval_seconds": QUIET_INTERVAL_SECONDS, "samples": len(rss),
           "rss_bytes": mean(rss), "anon_huge_pages_bytes": mean(anon), "max_rss_bytes": max(rss),
           "last_rss_bytes": rss[-1]}
    if llama:
        out.update({"llamalloc_footprint_bytes": mean([f for f, _ in llama]),
                    "llamalloc_live_bytes": mean([lv for _, lv in llama]), "llamalloc_samples": len(llama)})
    if live:
        out["workload_live_bytes"] = mean(live)
    return out


def _quiet_seconds_for(name: str, scale: str, quiet_seconds: float | None) -> float:
    quiet = QUIET_SECONDS[scale] if quiet_seconds is None else float(quiet_seconds)
    if quiet < 0:
        raise UserError(f"{name}: quiet_seconds must be >= 0, got {quiet}")
    return quiet


@dataclass
class Workload:
    """A program built by CMake that prints one JSON result line."""

    name: str
    binary: str  # relative to the build directory
    description: str
    throughput_metric: str  # the key of its result that says how fast it went (higher is better)
    extra_args: list[str] = field(default_factory=list)
    expected_checksums: dict[str, str] = field(default_factory=dict)  # scale -> checksum, where known

    def executable(self) -> Path:
        try:
            return paths.native_binary(self.binary)
        except UserError:
            raise WorkloadMissing(f"workload {self.name}: {paths.build_dir() / self.binary} is not built "
                                  f"(build the 'workloads' target)") from None

    def command(self, scale: str, extra: list[str] | None = None) -> list[str]:
        return [str(self.executable()), "--scale", scale, *self.extra_args, *(extra or [])]

    def run(self, scale: str, env: dict[str, str], workdir: Path, on_start: OnStart | None = None,
            extra_args: list[str] | None = None, quiet_seconds: float | None = None) -> dict:
        """quiet_seconds: the length of the quiet phase after the load (None: the program's default for the
        scale, QUIET_SECONDS; 0: none)."""
        cmd = self.command(scale, [*_quiet_args(quiet_seconds), *(extra_args or [])])
        started = time.monotonic()
        proc = start_program(cmd, env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if on_start is not None:
            on_start(proc.pid)
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_SECONDS[scale])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise WorkloadFailed(f"{self.name}: still running after {TIMEOUT_SECONDS[scale]} s; killed") from None
        wall_seconds = time.monotonic() - started
        if proc.returncode != 0:
            raise WorkloadFailed(f"{self.name}: exit status {proc.returncode}: {_tail(stderr or stdout)}")
        result = _last_json_line(self.name, stdout)
        result.setdefault("seconds", wall_seconds)
        self.check(result, scale)
        return result

    def check(self, result: dict, scale: str) -> None:
        if result.get("ok") is not True:
            raise WorkloadFailed(f"{self.name}: the program reported a failed self-check: {result}")
        if result.get("errors", 0):
            raise WorkloadFailed(f"{self.name}: {result['errors']} request(s) failed")
        expected = self.expected_checksums.get(scale)
        if expected is not None and result.get("checksum") != expected:
            raise WorkloadFailed(f"{self.name}: checksum {result.get('checksum')} at scale {scale}, "
                                 f"expected {expected}")


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RedisWorkload:
    """The real redis-server (Debian's source, MALLOC=libc), driven by Debian's redis-benchmark.

    Two phases model a cache's churn: a full mix of commands with 1000 B values fills the key space, then
    FLUSHALL drops it and a smaller SET phase refills part of it, so the final RSS shows what the allocator
    gave back. Only the server runs under the allocator being measured."""

    name: str = "redis"
    description: str = "redis-server (Debian source, MALLOC=libc) under redis-benchmark, -d 1000"
    throughput_metric: str = "requests_per_second"
    clients: int = 50
    requests: dict[str, int] = field(default_factory=lambda: {"small": 20000, "default": 400000})
    keyspace: dict[str, int] = field(default_factory=lambda: {"small": 10000, "default": 200000})
    tests: str = "set,get,incr,lpush,lpop,sadd,hset,spop,mset"

    def build_script(self) -> Path:
        root = paths.repo_root()
        if root is None:
            raise WorkloadMissing("workload redis: workloads/redis/build.sh needs a source checkout")
        return root / "workloads" / "redis" / "build.sh"

    def executable(self) -> Path:
        override = os.environ.get("LLAMALLOC_REDIS_SERVER")
        if override:
            if not Path(override).is_file():
                raise WorkloadMissing(f"workload redis: LLAMALLOC_REDIS_SERVER={override} does not exist")
            return Path(override)
        script = self.build_script()
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise WorkloadMissing(f"workload redis: {script} failed: {_tail(proc.stderr, 2)}")
        return Path(proc.stdout.strip().splitlines()[-1])

    @staticmethod
    def _tool(name: str) -> str:
        found = shutil.which(name)
        if found is None:
            raise WorkloadMissing(f"workload redis: {name} not found (Debian package redis-tools)")
        return found

    def run(self, scale: str, env: dict[str, str], workdir: Path, on_start: OnStart | None = None,
            extra_args: list[str] | None = None, quiet_seconds: float | None = None) -> dict:
        """extra_args go to redis-server; quiet_seconds as for Workload.run (the harness runs the phase)."""
        quiet = _quiet_seconds_for("redis", scale, quiet_seconds)
        stats_pattern = None
        if quiet > 0:
            env, stats_pattern = stats_signal_env(env, workdir, "redis")
        server = self.executable()
        cli, benchmark = self._tool("redis-cli"), self._tool("redis-benchmark")
        port = _free_loopback_port()
        client_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("LLAMALLOC_")}
        cmd = [str(server), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(workdir), "--logfile", str(workdir / "redis.log"), "--protected-mode", "yes",
               "--maxclients", "10000", *(extra_args or [])]
        proc = start_program(cmd, env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def redis_cli(*args: str, check: bool = True) -> str:
            out = subprocess.run([cli, "-h", "127.0.0.1", "-p", str(port), *args], env=client_env,
                                 capture_output=True, text=True, timeout=60)
            if check and out.returncode != 0:
                raise WorkloadFailed(f"redis: redis-cli {' '.join(args)} failed: {_tail(out.stderr or out.stdout)}")
            return out.stdout.strip()

        try:
            deadline = time.monotonic() + 20
            while True:
                if proc.poll() is not None:
                    raise WorkloadFailed(f"redis: redis-server exited with status {proc.returncode} at start: "
                                         f"{_tail(proc.stderr.read() if proc.stderr else '')}")
                if redis_cli("ping", check=False) == "PONG":
                    break
                if time.monotonic() > deadline:
                    raise WorkloadFailed(f"redis: redis-server did not answer PING on 127.0.0.1:{port} in 20 s")
                time.sleep(0.05)
            if on_start is not None:
                on_start(proc.pid)

            n, keys = self.requests[scale], self.keyspace[scale]
            started = time.monotonic()
            fill = self._benchmark(benchmark, client_env, port, ["-t", self.tests, "-n", str(n), "-r", str(keys)])
            redis_cli("flushall")
            refill = self._benchmark(benchmark, client_env, port,
                                     ["-t", "set", "-n", str(max(1000, n // 4)), "-r", str(max(100, keys // 10))])
            seconds = time.monotonic() - started
            steady = self._quiet_phase(proc.pid, port, quiet, stats_pattern) if quiet > 0 else None

            value = "llamalloc-" + "x" * 1000
            if redis_cli("set", "llamalloc:roundtrip", value) != "OK":
                raise WorkloadFailed("redis: SET did not answer OK")
            if redis_cli("get", "llamalloc:roundtrip") != value:
                raise WorkloadFailed("redis: GET did not return the value just SET")
            info = dict(line.split(":", 1) for line in redis_cli("info", "memory").splitlines()
                        if ":" in line and not line.startswith("#"))
            dbsize = int(redis_cli("dbsize"))
            redis_cli("shutdown", "nosave", check=False)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                raise WorkloadFailed("redis: redis-server did not stop after SHUTDOWN NOSAVE") from None
            if proc.returncode != 0:
                raise WorkloadFailed(f"redis: redis-server exited with status {proc.returncode}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        rates = {**{f"fill.{k}": v for k, v in fill.items()}, **{f"refill.{k}": v for k, v in refill.items()}}
        total_requests = n * len(fill) + max(1000, n // 4)
        return {
            "workload": "redis", "ok": True, "seconds": seconds, "clients": self.clients, "value_bytes": 1000,
            "requests": total_requests, "requests_per_second": total_requests / seconds if seconds > 0 else 0.0,
            "per_test_requests_per_second": rates, "keys_at_end": dbsize,
            "used_memory_bytes": int(info.get("used_memory", "0")),
            "allocator": info.get("mem_allocator", "").strip(), "steady_state": steady,
        }

    def _quiet_phase(self, pid: int, port: int, seconds: float, stats_pattern: str | None) -> dict:
        """The quiet phase after the refill: the refilled keys stay, and a monitoring client sends INFO memory
        and DBSIZE (tiny requests) at each sample (sample_quiet_phase). The workload's live bytes are redis's own
        used_memory: the sum of malloc_usable_size of its allocations, so it includes each allocator's
        size-class rounding."""
        keys = idle_requests = 0
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            reader = sock.makefile("rb")

            def command(*words: str) -> bytes:
                sock.sendall(f"*{len(words)}\r\n".encode() +
                             b"".join(f"${len(w)}\r\n{w}\r\n".encode() for w in words))
                line = reader.readline()
                if line.startswith(b"$"):
                    n = int(line[1:])
                    return reader.read(n + 2)[:-2] if n >= 0 else b""
                if line.startswith(b"-") or not line:
                    raise WorkloadFailed(f"redis: {' '.join(words)} during the quiet phase: {line!r}")
                return line[1:].strip()

            def monitor() -> int:
                nonlocal keys, idle_requests
                info = dict(line.split(":", 1) for line in command("INFO", "memory").decode().splitlines()
                            if ":" in line and not line.startswith("#"))
                keys = int(command("DBSIZE"))
                idle_requests += 2
                return int(info.get("used_memory", "0"))

            out = sample_quiet_phase(pid, seconds, stats_pattern, monitor, "redis: redis-server")
        out.update({"keys": keys, "idle_requests": idle_requests})
        return out

    def _benchmark(self, benchmark: str, env: dict[str, str], port: int, args: list[str]) -> dict[str, float]:
        cmd = [benchmark, "-h", "127.0.0.1", "-p", str(port), "-d", "1000", "-c", str(self.clients), "-q",
               "--csv", *args]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500)
        text = out.stdout + out.stderr
        if out.returncode != 0 or re.search(r"error", text, re.IGNORECASE):
            raise WorkloadFailed(f"redis: redis-benchmark reported errors: {_tail(text)}")
        rates: dict[str, float] = {}
        for line in out.stdout.splitlines():
            cells = [c.strip('"') for c in line.split(",")]
            if len(cells) >= 2 and cells[0] != "test":
                try:
                    rates[cells[0]] = float(cells[1])
                except ValueError:
                    continue
        expected = len(args[args.index("-t") + 1].split(","))
        if len(rates) != expected:
            raise WorkloadFailed(f"redis: redis-benchmark printed {len(rates)} results, expected {expected}: "
                                 f"{_tail(text)}")
        return rates


def _shapes_dir() -> Path:
    root = paths.repo_root()
    if root is None:
        raise WorkloadMissing("the corpus's real-program shapes need a source checkout (workloads/shapes)")
    return root / "workloads" / "shapes"


def _wait_for(proc: subprocess.Popen, done: Callable[[], bool], timeout: float) -> bool:
    """Polls until done() or the process exits or the timeout passes; True when done()."""
    deadline = time.monotonic() + timeout
    while not done():
        if proc.poll() is not None or time.monotonic() > deadline:
            return done()
        time.sleep(0.01)
    return True


@dataclass
class CPythonWorkload:
    """CPython running workloads/shapes/cpython_shape.py: a Python service's heap (dicts of strings, lists,
    bytes of mixed sizes) built to a peak, mostly dropped, then idle. PYTHONMALLOC=malloc, so that every object
    goes through the allocator under test. The script marks the start of its quiet phase with a file; the
    harness samples it from outside (sample_quiet_phase) and ends the phase with another file."""

    name: str = "cpython"
    description: str = "CPython (PYTHONMALLOC=malloc) building dicts, lists and bytes to a peak, keeping a tenth"
    throughput_metric: str = "operations_per_second"

    def executable(self) -> Path:
        """Debian's interpreter, not a version manager's shim (a script that would run another program);
        the running interpreter where there is none."""
        self.script()  # a missing script is a missing workload, found before any run
        system = Path("/usr/bin/python3")
        return system if system.is_file() else Path(sys.executable)

    def script(self) -> Path:
        script = _shapes_dir() / "cpython_shape.py"
        if not script.is_file():
            raise WorkloadMissing(f"workload cpython: {script} is missing")
        return script

    def command(self, scale: str, extra: list[str] | None = None) -> list[str]:
        # -s: no user site directory; -B: no .pyc files written. Not -E or -I: they would ignore PYTHONMALLOC.
        return [str(self.executable()), "-s", "-B", str(self.script()), "--scale", scale, *(extra or [])]

    def run(self, scale: str, env: dict[str, str], workdir: Path, on_start: OnStart | None = None,
            extra_args: list[str] | None = None, quiet_seconds: float | None = None) -> dict:
        env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        env["PYTHONMALLOC"] = "malloc"
        return run_marked_program(self.name, self.command(scale, extra_args), env, Path(workdir), scale,
                                  on_start, _quiet_seconds_for(self.name, scale, quiet_seconds))


def run_marked_program(name: str, cmd: list[str], env: dict[str, str], workdir: Path, scale: str,
                       on_start: OnStart | None, quiet: float) -> dict:
    """Runs a program that prints one JSON result line and takes --quiet-seconds S, --quiet-marker FILE (created
    when its quiet phase starts) and --quiet-end FILE (whose appearance ends it). The harness samples the quiet
    phase from outside (sample_quiet_phase) for `quiet` seconds and puts the result under "steady_state"."""
    stats_pattern = None
    marker, end = workdir / f"{name}.quiet-start", workdir / f"{name}.quiet-end"
    extra = ["--quiet-seconds", f"{quiet:g}"]
    if quiet > 0:
        env, stats_pattern = stats_signal_env(env, workdir, name)
        marker.unlink(missing_ok=True)
        end.unlink(missing_ok=True)
        extra += ["--quiet-marker", str(marker), "--quiet-end", str(end)]
    out_path, err_path = workdir / f"{name}.stdout", workdir / f"{name}.stderr"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = start_program([*cmd, *extra], env, cwd=workdir, stdout=out, stderr=err)
    try:
        if on_start is not None:
            on_start(proc.pid)
        steady = None
        if quiet > 0:
            if not _wait_for(proc, marker.exists, TIMEOUT_SECONDS[scale]):
                if proc.poll() is None:
                    raise WorkloadFailed(f"{name}: no quiet phase after {TIMEOUT_SECONDS[scale]} s; killed")
                raise WorkloadFailed(f"{name}: exit status {proc.returncode} before its quiet phase: "
                                     f"{_tail(err_path.read_text() or out_path.read_text())}")
            try:
                steady = sample_quiet_phase(proc.pid, quiet, stats_pattern, None, name)
            finally:
                end.touch()
        try:
            proc.wait(timeout=TIMEOUT_SECONDS[scale])
        except subprocess.TimeoutExpired:
            raise WorkloadFailed(f"{name}: still running after {TIMEOUT_SECONDS[scale]} s; killed") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stdout, stderr = out_path.read_text(), err_path.read_text()
    if proc.returncode != 0:
        raise WorkloadFailed(f"{name}: exit status {proc.returncode}: {_tail(stderr or stdout)}")
    result = _last_json_line(name, stdout)
    if result.get("ok") is not True:
        raise WorkloadFailed(f"{name}: the program reported a failed self-check: {result}")
    result["steady_state"] = steady
    return result


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
        quiet = _quiet_seconds_for(self.name, scale, quiet_seconds)
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
                raise WorkloadFailed(f"sqlite: sqlite3 exited early: {_tail(err_path.read_text())}") from None

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
                                         f"{_tail(err_path.read_text() or chr(10).join(got))}")
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
                raise WorkloadFailed(f"sqlite: unexpected output of the load: {_tail(chr(10).join(load), 6)}")
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
                                     f"{_tail(err_path.read_text())}")
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


def _collect_signal_stats(pattern: str, pid: int) -> list[tuple[int, int]]:
    """(footprint, live bytes) of every statistics file llamalloc wrote on LLAMALLOC_STATS_SIGNAL so far
    (PATTERN with .signal-N before its .json), deleting each once read."""
    path = pattern.replace("%p", str(pid))
    base, suffix = (path[:-5], ".json") if path.endswith(".json") else (path, "")
    found = []
    for name in sorted(glob.glob(glob.escape(base) + ".signal-*" + suffix)):
        if name.endswith(".tmp"):
            continue
        try:
            data = json.loads(Path(name).read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue  # being written; the next collection takes it
        Path(name).unlink(missing_ok=True)
        if isinstance(data.get("footprint_bytes"), int) and isinstance(data.get("live_bytes"), int):
            found.append((data["footprint_bytes"], data["live_bytes"]))
    return found


AnyWorkload = Workload | RedisWorkload | CPythonWorkload | SqliteWorkload

# Checksums of image-server at each scale: every response is a pure function of the request number, so any
# allocator, schedule or revision must reproduce them.
IMAGE_SERVER_CHECKSUMS: dict[str, str] = {"small": "d7e5425465c91a01", "default": "d099b9fe48df36e5"}

WORKLOADS: dict[str, AnyWorkload] = {
    "image-server": Workload(
        "image-server", "workloads/image-server/image-server",
        "HTTP image-transform server + load generator over 127.0.0.1 (-O2)", "requests_per_second",
        expected_checksums=IMAGE_SERVER_CHECKSUMS),
    "image-server-r2": Workload(
        "image-server-r2", "workloads/image-server/image-server-r2",
        "image-server, revision 2: renamed and refactored, -O2", "requests_per_second",
        expected_checksums=IMAGE_SERVER_CHECKSUMS),
    "word-count": Workload(
        "word-count", "workloads/word-count/word-count",
        "staged word-count pipeline over a generated corpus, many threads (-O2)", "words_per_second"),
    "word-count-r2": Workload(
        "word-count-r2", "workloads/word-count/word-count-r2",
        "word-count, revision 2: renamed and refactored, -O2", "words_per_second"),
    "word-count-rebuilt": Workload(
        "word-count-rebuilt", "workloads/word-count/rebuilt/word-count",
        "word-count rebuilt with one unrelated function added (its code moved), -O2", "words_per_second"),
    "frag-micro": Workload(
        "frag-micro", "workloads/frag-micro/frag-micro",
        "the LLAMA paper, section 9.6: 64 B objects swinging 1 MB..top, 5 MB long-lived (class 7 under llamalloc)",
        "allocations_per_second", extra_args=["--long-lived-class", "7"]),
    "frag-micro-unhinted": Workload(
        "frag-micro-unhinted", "workloads/frag-micro/frag-micro",
        "frag-micro without its class hint: the long-lived objects placed as the heap or its predictor decides",
        "allocations_per_second"),
    "redis": RedisWorkload(),
}
DEFAULT_WORKLOADS = ("image-server", "word-count", "frag-micro", "redis")

# The corpus of program shapes (docs/workloads.md): the shapes of workloads/shapes/shapes (one program, one shape
# per --shape), then real programs.
SHAPES: dict[str, str] = {
    "lru-cache": "sharded LRU string cache, 4 threads; capacity cut to a tenth after the peak",
    "ttl-cache": "cache of short- and long-TTL entries with an expiry thread; the long ones stay",
    "hash-trimmed-cache": "4-thread cache server, per-request buffers; the cache trimmed by key hash to an eighth",
    "batch-arena": "batch jobs in 64 KiB-chunk arenas freed whole, a small summary kept per batch",
    "stream-pipeline": "3 stages on threads, bounded queues, realloc in stage 2; a held sink builds a backlog",
    "producer-consumer": "2 producers, 2 consumers, cross-thread frees; a backlog, then low traffic",
    "session-store": "sessions with attribute maps and buffers; a login burst, most log out",
    "ast-builder": "compiler front end: trees of small nodes, interned symbols; a whole-program link",
    "message-broker": "topics, per-subscriber queues of shared messages; slow subscribers, retention rings",
    "query-spikes-cache": "a result cache grows while query spikes on 4 workers allocate temporaries; the cache stays",
    "mixed-lifetime-cache": "one insert site; the node's hash slice (5%) kept, the other 95% expire: lifetimes by data",
    "free-all": "an import job loads a catalog on one thread, then frees all of it",
    "free-all-pool": "the import on a 4-thread pool that then idles while another thread frees all of it",
}
for _shape, _description in SHAPES.items():
    WORKLOADS[_shape] = Workload(_shape, "workloads/shapes/shapes", _description, "operations_per_second",
                                 extra_args=["--shape", _shape])
WORKLOADS["cpython"] = CPythonWorkload()
WORKLOADS["sqlite"] = SqliteWorkload()

# Names that stand for several workloads wherever workloads are chosen by name (`llamalloc bench -w corpus`).
GROUPS: dict[str, tuple[str, ...]] = {
    "corpus": (*SHAPES, "cpython", "sqlite", "image-server", "word-count", "frag-micro", "redis"),
}


def expand(names: list[str] | tuple[str, ...]) -> list[str]:
    """Workload names with every group name replaced by its workloads, in order, each once."""
    out: list[str] = []
    for name in names:
        for member in GROUPS.get(name, (name,)):
            if member not in out:
                out.append(member)
    return out


def get(name: str) -> AnyWorkload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UserError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}; "
                        f"groups: {', '.join(GROUPS)}") from None


def word_count_expected(corpus_path: Path, top: int = 20) -> dict:
    """Recounts a corpus written by `word-count --dump-corpus`, independently of the C++ code: words are the
    maximal runs of ASCII letters, lowercased; the checksum is sum(fnv1a64(word) * count) mod 2**64."""
    text = Path(corpus_path).read_text(encoding="ascii")
    counts = collections.Counter(re.findall(r"[a-z]+", text.lower()))
    mask = (1 << 64) - 1

    def fnv1a64(word: str) -> int:
        h = 0xCBF29CE484222325
        for b in word.encode():
            h = ((h ^ b) * 0x100000001B3) & mask
        return h

    checksum = sum(fnv1a64(w) * n for w, n in counts.items()) & mask
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {"words": sum(counts.values()), "distinct_words": len(counts), "checksum": f"{checksum:016x}",
            "top": [[w, n] for w, n in ranked]}


def temporary_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"llamalloc-{prefix}-"))
