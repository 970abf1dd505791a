"""The redis workload: the real redis-server under redis-benchmark, its quiet phase sampled from outside."""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..run import start_program
from .base import OnStart, WorkloadFailed, WorkloadMissing, output_tail, quiet_seconds_for
from .quiet import sample_quiet_phase, stats_signal_env


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
            raise WorkloadMissing(f"workload redis: {script} failed: {output_tail(proc.stderr, 2)}")
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
        quiet = quiet_seconds_for("redis", scale, quiet_seconds)
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
                raise WorkloadFailed(f"redis: redis-cli {' '.join(args)} failed: {output_tail(out.stderr or out.stdout)}")
            return out.stdout.strip()

        try:
            deadline = time.monotonic() + 20
            while True:
                if proc.poll() is not None:
                    raise WorkloadFailed(f"redis: redis-server exited with status {proc.returncode} at start: "
                                         f"{output_tail(proc.stderr.read() if proc.stderr else '')}")
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
            raise WorkloadFailed(f"redis: redis-benchmark reported errors: {output_tail(text)}")
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
                                 f"{output_tail(text)}")
        return rates
