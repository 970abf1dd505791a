"""What every workload shares: the scales, the time limits, the quiet phase's defaults, the two errors and the
reading of a program's result line."""
from __future__ import annotations

import json
from typing import Callable

from ..errors import UserError


SCALES = ("small", "default")
# Wall-clock limits per run, generous: a run past them is a hang, not a slow allocator.
TIMEOUT_SECONDS = {"small": 300, "default": 1800}
# The quiet phase after the load peak (docs/workloads.md, "Steady state"): its default length per scale, as the
# programs' own defaults. `quiet_seconds=0` disables it (no "steady_state" in the result).
QUIET_SECONDS = {"small": 2.0, "default": 10.0}
# Samples per second in the quiet phase (the programs sample every 0.2 s as well).
QUIET_INTERVAL_SECONDS = 0.2


class WorkloadMissing(UserError):
    """The workload's program is not built (or cannot be built)."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


class WorkloadFailed(UserError):
    """The workload ran but its output is wrong or it exited with an error."""

    def __init__(self, message: str):
        super().__init__(message, exit_code=1)


OnStart = Callable[[int], None]


def quiet_args(quiet_seconds: float | None) -> list[str]:
    """The program's arguments for a quiet phase of `quiet_seconds` (None: none, the program's default)."""
    return [] if quiet_seconds is None else ["--quiet-seconds", f"{float(quiet_seconds):g}"]


def last_json_line(name: str, stdout: str) -> dict:
    """The program's result: the last line of its output that is a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError as e:
                raise WorkloadFailed(f"{name}: its result line is not JSON ({e})") from None
    raise WorkloadFailed(f"{name}: printed no result line")


def output_tail(text: str, lines: int = 3) -> str:
    """The last lines of a program's output, on one line, for an error message."""
    return " | ".join(text.strip().splitlines()[-lines:])


def quiet_seconds_for(name: str, scale: str, quiet_seconds: float | None) -> float:
    """The length of the quiet phase that the harness samples: `quiet_seconds`, or the scale's default."""
    quiet = QUIET_SECONDS[scale] if quiet_seconds is None else float(quiet_seconds)
    if quiet < 0:
        raise UserError(f"{name}: quiet_seconds must be >= 0, got {quiet}")
    return quiet
