"""`llamalloc compare -- PROG ARGS`: a user's own command under each allocator, side by side.

Each allocator runs the command once (glibc with nothing preloaded; jemalloc, tcmalloc and mimalloc from the system;
llamalloc; llamalloc with a model when one is given). While it runs, the RSS and AnonHugePages of the process and its
children are sampled from /proc/PID/smaps_rollup. A server driven by a separate client: `--client CMD` starts CMD
(a shell command, not preloaded) once the server is up, and the server is stopped (SIGTERM) when the client is done;
the time is then the client's.

Per allocator: the peak, the steady state after the peak (the median of the samples after the peak sample) and the
final memory (the last sample before the program ended or was stopped), and the time."""
from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from . import allocators, bench
from .errors import UserError
from .run import shell_status, start_program
from . import files

DEFAULT_ALLOCATORS = "glibc,jemalloc,tcmalloc,mimalloc,llamalloc"
JSON_FORMAT = "llamalloc-compare"
#: With --client: seconds the server gets to stop after SIGTERM before SIGKILL.
STOP_GRACE_S = 10.0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def tree_memory(pid: int) -> tuple[int, int] | None:
    """(RSS, AnonHugePages) of pid and its descendants, or None once pid is gone."""
    top = bench.read_smaps_rollup(pid)
    if top is None:
        return None
    rss, anon = top
    stack, seen = _children(pid), {pid}
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        r = bench.read_smaps_rollup(c)
        if r is not None:
            rss, anon = rss + r[0], anon + r[1]
        stack += _children(c)
    return rss, anon


@dataclass
class CompareRun:
    allocator: str
    status: int | None = None
    seconds: float | None = None
    samples: list = field(default_factory=list)  # (seconds, rss bytes, anon huge bytes)
    problem: str | None = None

    def figures(self) -> dict:
        if not self.samples:
            return {"peak_rss_bytes": None, "steady_rss_bytes": None, "final_rss_bytes": None,
                    "peak_anon_huge_bytes": None, "final_anon_huge_bytes": None}
        rss = [s[1] for s in self.samples]
        peak_at = max(range(len(rss)), key=rss.__getitem__)
        after = rss[peak_at + 1:]
        return {"peak_rss_bytes": rss[peak_at],
                "steady_rss_bytes": int(statistics.median(after)) if after else rss[peak_at],
                "final_rss_bytes": rss[-1],
                "peak_anon_huge_bytes": max(s[2] for s in self.samples),
                "final_anon_huge_bytes": self.samples[-1][2]}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_one(name: str, env: dict, cmd: list[str], client: str | None, out_dir: Path, interval: float,
            startup: float) -> CompareRun:
    run = CompareRun(name)
    log = open(out_dir / f"{name}.log", "wb")
    try:
        start = time.monotonic()
        proc = start_program(cmd, env, stdout=log, stderr=subprocess.STDOUT)
        samples = run.samples
        client_proc = None
        client_start = None
        try:
            while True:
                reading = tree_memory(proc.pid)
                now = time.monotonic() - start
                if reading is not None and proc.poll() is None:
                    samples.append((round(now, 4), reading[0], reading[1]))
                if proc.poll() is not None:
                    break
                if client is not None:
                    if client_proc is None and now >= startup:
                        client_start = time.monotonic()
                        client_proc = subprocess.Popen(client, shell=True, stdout=log, stderr=subprocess.STDOUT)
                    elif client_proc is not None and client_proc.poll() is not None:
                        run.seconds = time.monotonic() - client_start
                        if client_proc.returncode != 0:
                            run.problem = f"client exited with status {client_proc.returncode}"
                        _stop(proc)
                        break
                time.sleep(interval)
        except KeyboardInterrupt:
            for p in (client_proc, proc):
                if p is not None and p.poll() is None:
                    p.kill()
            raise
        proc.wait()
        if run.seconds is None:
            run.seconds = time.monotonic() - start
        run.status = shell_status(proc.returncode)
        stopped_by_us = client is not None and run.status == 128 + signal.SIGTERM
        if run.status != 0 and not stopped_by_us and run.problem is None:
            run.problem = f"exited with status {run.status} (output in {out_dir / (name + '.log')})"
        if client is not None and client_proc is None:
            run.problem = run.problem or f"ended before the client started ({startup:g} s)"
    finally:
        log.close()
    return run


def compare(cmd: list[str], allocator_spec: str, out_dir: Path, model: str | None = None,
            binaries: list[str] | None = None, client: str | None = None, interval: float = 0.05,
            startup: float = 1.0, progress: Callable | None = None) -> list[CompareRun]:
    specs = allocators.parse_allocators(allocator_spec)
    if model is not None and not any(n == allocators.MODEL_ALLOCATOR for n, _, _ in specs):
        specs.append((allocators.MODEL_ALLOCATOR, *allocators.parse_allocators("llamalloc")[0][1:]))
    for n, _, _ in specs:
        if n in allocators.MODEL_ALLOCATORS and model is None:
            raise UserError(f"{n} needs --model FILE")
    model_env = None
    if model is not None:
        from .prepare import prepare_for_run

        model_env = prepare_for_run(model, cmd[0], binaries=list(binaries or []))
    runs = []
    items = specs if progress is None else progress(specs)
    for name, library, problem in items:
        if problem is not None:
            runs.append(CompareRun(name, problem=problem))
            continue
        allocator = allocators.Allocator(name, library)
        env = allocators.allocator_env(allocator, None, model_env)
        runs.append(run_one(name, env, cmd, client, out_dir, interval, startup))
    return runs


def _mib(v) -> str:
    return "-" if v is None else f"{v / bench.MiB:,.1f}"


def format_table(runs: list[CompareRun]) -> str:
    head = (f"{'allocator':<16} {'peak MiB':>9} {'steady MiB':>10} {'final MiB':>9} {'peak THP':>9} "
            f"{'final THP':>9} {'seconds':>8}  note")
    lines = [head, "-" * len(head)]
    for r in runs:
        f = r.figures()
        secs = "-" if r.seconds is None else f"{r.seconds:.2f}"
        lines.append(f"{r.allocator:<16} {_mib(f['peak_rss_bytes']):>9} {_mib(f['steady_rss_bytes']):>10} "
                     f"{_mib(f['final_rss_bytes']):>9} {_mib(f['peak_anon_huge_bytes']):>9} "
                     f"{_mib(f['final_anon_huge_bytes']):>9} {secs:>8}  {r.problem or ''}")
    lines.append("MiB of RSS (the process and its children); THP: AnonHugePages; steady: the median after the peak; "
                 "final: the last sample before the end")
    return "\n".join(lines)


def verdict(runs: list[CompareRun]) -> str:
    ok = [r for r in runs if r.problem is None and r.figures()["steady_rss_bytes"] is not None]
    if not ok:
        return "no allocator ran the command to the end"
    best = min(ok, key=lambda r: r.figures()["steady_rss_bytes"])
    rest = sorted((r for r in ok if r is not best), key=lambda r: r.figures()["steady_rss_bytes"])
    tail = ""
    if rest:
        nxt = rest[0]
        b, n = best.figures()["steady_rss_bytes"], nxt.figures()["steady_rss_bytes"]
        tail = f", {100 * (n - b) / n:.0f}% less than {nxt.allocator} ({_mib(n)} MiB)" if n else ""
    return (f"least memory after the peak: {best.allocator} ({_mib(best.figures()['steady_rss_bytes'])} MiB "
            f"steady{tail})")


def write_json(runs: list[CompareRun], cmd: list[str], client: str | None, path: Path) -> None:
    doc = {"format": JSON_FORMAT, "version": 1, "command": cmd, "client": client,
           "runs": [dict(asdict(r), **r.figures()) for r in runs]}
    files.write_text(path, json.dumps(doc, indent=1))


def plot(runs: list[CompareRun], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    for i, r in enumerate(runs):
        if not r.samples:
            continue
        color = f"C{i}"
        t = [s[0] for s in r.samples]
        ax.plot(t, [s[1] / bench.MiB for s in r.samples], color=color, lw=1.4, label=f"{r.allocator} RSS")
        ax.plot(t, [s[2] / bench.MiB for s in r.samples], color=color, lw=1, ls="--",
                label=f"{r.allocator} AnonHugePages")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    with files.replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return path
