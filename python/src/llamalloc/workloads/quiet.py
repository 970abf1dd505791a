"""A program's memory read from outside while it runs: RSS and AnonHugePages from /proc, and the quiet phase after the
load peak sampled from outside (docs/workloads.md, "Steady state"), for the programs that do not sample their own."""
from __future__ import annotations

import glob
import json
import os
import signal
import time
from pathlib import Path
from typing import Callable

from .base import QUIET_INTERVAL_SECONDS, WorkloadFailed


# The signal on which llamalloc writes its statistics of the moment inside a program whose quiet phase the harness
# samples from outside (LLAMALLOC_STATS_SIGNAL): one whose default action is to ignore it, and that redis-server,
# python3 and the sqlite3 shell do not use, so it is harmless under other allocators.
STATS_SIGNAL = "WINCH"
REDIS_STATS_SIGNAL = STATS_SIGNAL


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
