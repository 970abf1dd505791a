"""The trace simulator from Python: runs the native replay engine (`llamalloc-sim`, src/sim) and reads its
results. docs/simulator.md describes the policies and both output files:

- ``NAME.json``: {"format": "llamalloc-sim", "version": 1, "trace", "interval_ns", "seed", "timeline_csv",
  "policies": [{"policy", "summary": {...}, "extras": {...}, optional "snapshots": [...]}]}
- ``NAME.timeline.csv``: one row per policy and sample: policy, time_ns, live_bytes, footprint_bytes and the
  policies' extra columns (empty where a policy has none).
"""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import paths
from .errors import FormatError, UserError

FORMAT = "llamalloc-sim"
VERSION = 1
BINARY = "src/sim/llamalloc-sim"
POLICIES = ("pages-4k", "pages-2m", "mesh-4k", "mesh-2m", "tcmalloc", "tcmalloc-lifetime", "llama-oracle", "llama-default")
ALIASES = {"mesh": ("mesh-4k", "mesh-2m")}


@dataclass
class PolicyResult:
    policy: str
    summary: dict
    extras: dict
    timeline: dict[str, np.ndarray]  # column -> values (float; NaN where the CSV cell is empty)
    snapshots: list = field(default_factory=list)

    @property
    def time_s(self) -> np.ndarray:
        return self.timeline["time_ns"] / 1e9


@dataclass
class SimResult:
    path: Path
    trace: str
    interval_ns: int
    policies: dict[str, PolicyResult]


def binary() -> Path:
    return paths.native_binary(BINARY)


def simulate(trace: str | os.PathLike, policies: Iterable[str], out: str | os.PathLike,
             interval_ms: float = 10.0, mesh_period_ms: float = 100.0, seed: int = 1,
             snapshot_ms: Iterable[float] = (), deadline_k: int = 4, thread_idle_ms: float = 1000.0, progress: Callable[[str], None] | None = None) -> SimResult:
    """Replays `trace` through each policy; writes `out` (JSON) and its timeline CSV; returns the result."""
    trace = Path(trace)
    if not trace.exists():
        raise UserError(f"{trace}: no such trace file")
    policies = list(policies)
    if not policies:
        raise UserError("simulate: give at least one --policy")
    for p in policies:
        if p == "llama-model":
            raise UserError("llama-model is not available yet: the learned predictor cannot yet be fed the trace's "
                            "stacks (docs/simulator.md); use llama-oracle (perfect lifetimes) or llama-default")
        if p not in POLICIES and p not in ALIASES:
            raise UserError(f"unknown policy '{p}' (known: {', '.join(POLICIES + tuple(ALIASES))})")
    out = Path(out)
    cmd = [str(binary()), str(trace), "--out", str(out), "--interval-ms", repr(float(interval_ms)),
           "--mesh-period-ms", repr(float(mesh_period_ms)), "--seed", str(int(seed)),
           "--deadline-k", str(int(deadline_k)), "--thread-idle-ms", repr(float(thread_idle_ms))]
    for p in policies:
        cmd += ["--policy", p]
    for t in snapshot_ms:
        cmd += ["--snapshot-ms", repr(float(t))]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    last_error = None
    assert proc.stderr is not None
    for line in proc.stderr:
        line = line.rstrip("\n")
        if line.startswith("llamalloc-sim: error: "):
            last_error = line[len("llamalloc-sim: error: "):]
        elif progress is not None:
            progress(line.removeprefix("llamalloc-sim: "))
    rc = proc.wait()
    if rc != 0:
        # The engine's error already names the file and the byte offset; keep it to one line.
        raise UserError(last_error or f"llamalloc-sim failed with status {rc}", exit_code=2 if rc == 2 else 1)
    return load(out)


def _number(text: str) -> float:
    return float(text) if text != "" else math.nan


def load(path: str | os.PathLike) -> SimResult:
    """Reads a simulation result written by `simulate` (or `llamalloc simulate`)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(path, f"not a simulation result (not JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise FormatError(path, "not a llamalloc simulation result")
    if doc.get("version") != VERSION:
        raise FormatError(path, f"simulation result version {doc.get('version')}, this llamalloc reads {VERSION}")
    try:
        csv_path = path.parent / doc["timeline_csv"]
        policies = {p["policy"]: PolicyResult(p["policy"], p["summary"], p.get("extras", {}), {},
                                              p.get("snapshots", [])) for p in doc["policies"]}
    except (KeyError, TypeError) as e:
        raise FormatError(path, f"corrupt simulation result (missing {e})") from None
    rows: dict[str, list[list[float]]] = {name: [] for name in policies}
    try:
        with open(csv_path, newline="") as f:
            reader = csv.reader(f)
            header = next(reader)
            if header[:4] != ["policy", "time_ns", "live_bytes", "footprint_bytes"]:
                raise FormatError(csv_path, "not a simulation timeline (unexpected columns)")
            for n, row in enumerate(reader, start=2):
                if len(row) != len(header) or row[0] not in rows:
                    raise FormatError(csv_path, f"corrupt timeline at line {n}")
                rows[row[0]].append([_number(v) for v in row[1:]])
    except FileNotFoundError:
        raise FormatError(csv_path, "timeline file missing (it is written beside the JSON)") from None
    except (StopIteration, ValueError):
        raise FormatError(csv_path, "corrupt timeline") from None
    for name, result in policies.items():
        table = np.array(rows[name], dtype=float).reshape(-1, len(header) - 1)
        for i, column in enumerate(header[1:]):
            values = table[:, i]
            if column in ("time_ns", "live_bytes", "footprint_bytes") or not np.all(np.isnan(values)):
                result.timeline[column] = values
    return SimResult(path, doc.get("trace", ""), int(doc.get("interval_ns", 0)), policies)
