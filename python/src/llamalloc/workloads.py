"""The bundled workloads (docs/workloads.md): how to run each one at a scale and how to check its output.

Each workload runs as one process whose memory is the thing measured (for redis: redis-server; its client
redis-benchmark runs without the allocator under test). `Workload.run` starts it with the given environment
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
import tempfile
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
# The signal on which llamalloc writes its statistics of the moment inside redis-server (LLAMALLOC_STATS_SIGNAL):
# one whose default action is to ignore it, and that redis does not use, so it is harmless under other allocators.
REDIS_STATS_SIGNAL = "WINCH"


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
        quiet = QUIET_SECONDS[scale] if quiet_seconds is None else float(quiet_seconds)
        if quiet < 0:
            raise UserError(f"redis: quiet_seconds must be >= 0, got {quiet}")
        stats_pattern = None
        if quiet > 0 and env.get("LD_PRELOAD"):
            # Under llamalloc, its statistics of the moment on a signal, to a file (never to the server's stderr,
            # a pipe nobody reads until the end). Other allocators ignore the variables and the signal.
            env = dict(env)
            env.setdefault("LLAMALLOC_STATS_SIGNAL", REDIS_STATS_SIGNAL)
            env.setdefault("LLAMALLOC_STATS", str(workdir / "redis-llamalloc-stats.json"))
            stats_pattern = env["LLAMALLOC_STATS"]
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
        and DBSIZE (tiny requests) at each sample, every QUIET_INTERVAL_SECONDS. Samples redis-server's RSS and
        AnonHugePages from /proc/PID/smaps_rollup, its own used_memory (the workload's live bytes: the sum of
        malloc_usable_size of its allocations, so it includes each allocator's size-class rounding) and, under
        llamalloc, its footprint and live bytes (LLAMALLOC_STATS_SIGNAL files). The means, as the programs'
        "steady_state"."""
        signal_sent = False
        rss, anon, used, llama = [], [], [], []
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

            start = time.monotonic()
            i = 0
            while i * QUIET_INTERVAL_SECONDS <= seconds + 1e-9:
                delay = start + i * QUIET_INTERVAL_SECONDS - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                i += 1
                info = dict(line.split(":", 1) for line in command("INFO", "memory").decode().splitlines()
                            if ":" in line and not line.startswith("#"))
                keys = int(command("DBSIZE"))
                idle_requests += 2
                used.append(int(info.get("used_memory", "0")))
                reading = read_smaps_rollup(pid)
                if reading is None:
                    raise WorkloadFailed("redis: redis-server exited during the quiet phase")
                rss.append(reading[0])
                anon.append(reading[1])
                if stats_pattern is not None:
                    llama += _collect_signal_stats(stats_pattern, pid)
                    os.kill(pid, getattr(signal, f"SIG{REDIS_STATS_SIGNAL}"))
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
        out.update({"workload_live_bytes": mean(used), "keys": keys, "idle_requests": idle_requests})
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


# Checksums of image-server at each scale: every response is a pure function of the request number, so any
# allocator, schedule or revision must reproduce them.
IMAGE_SERVER_CHECKSUMS: dict[str, str] = {"small": "d7e5425465c91a01", "default": "d099b9fe48df36e5"}

WORKLOADS: dict[str, Workload | RedisWorkload] = {
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
    "frag-micro": Workload(
        "frag-micro", "workloads/frag-micro/frag-micro",
        "the LLAMA paper, section 9.6: 64 B objects swinging 1 MB..top, 5 MB long-lived (class 7 under llamalloc)",
        "allocations_per_second", extra_args=["--long-lived-class", "7"]),
    "redis": RedisWorkload(),
}
DEFAULT_WORKLOADS = ("image-server", "word-count", "frag-micro", "redis")


def get(name: str) -> Workload | RedisWorkload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UserError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}") from None


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
