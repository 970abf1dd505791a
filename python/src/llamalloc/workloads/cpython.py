"""The cpython shape of the corpus: CPython running workloads/shapes/cpython_shape.py, and the running of a program that
marks its quiet phase with files for the harness to sample from outside."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import paths
from ..run import start_program
from .base import (TIMEOUT_SECONDS, OnStart, WorkloadFailed, WorkloadMissing, last_json_line, output_tail,
                   quiet_seconds_for)
from .quiet import sample_quiet_phase, stats_signal_env


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
                                  on_start, quiet_seconds_for(self.name, scale, quiet_seconds))


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
                                     f"{output_tail(err_path.read_text() or out_path.read_text())}")
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
        raise WorkloadFailed(f"{name}: exit status {proc.returncode}: {output_tail(stderr or stdout)}")
    result = last_json_line(name, stdout)
    if result.get("ok") is not True:
        raise WorkloadFailed(f"{name}: the program reported a failed self-check: {result}")
    result["steady_state"] = steady
    return result
