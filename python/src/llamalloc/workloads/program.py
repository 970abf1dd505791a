"""The bundled workloads built by CMake (image-server, word-count, frag-micro, the shapes): one program that prints
one JSON result line and samples its own quiet phase."""
from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..errors import UserError
from ..run import start_program
from .base import TIMEOUT_SECONDS, OnStart, WorkloadFailed, WorkloadMissing, last_json_line, output_tail, quiet_args


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
        cmd = self.command(scale, [*quiet_args(quiet_seconds), *(extra_args or [])])
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
            raise WorkloadFailed(f"{self.name}: exit status {proc.returncode}: {output_tail(stderr or stdout)}")
        result = last_json_line(self.name, stdout)
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
