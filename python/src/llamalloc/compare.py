"""`llamalloc compare -- PROG ARGS`: a user's own command under each allocator, side by side.

Each allocator runs the command once (glibc with nothing preloaded; jemalloc, tcmalloc and mimalloc from the system;
llamalloc; llamalloc with a model when one is given). While it runs, the RSS and AnonHugePages of the process and its
children are sampled from /proc/PID/smaps_rollup. A server driven by a separate client: `--client CMD` starts CMD
(a shell command, not preloaded) once the server is up, and the server is stopped (SIGTERM) when the client is done;
the time is then the client's.

Per allocator: the peak, the steady state after the peak (the median of the RSS samples in the after-peak window,
`llamalloc.after_peak`: from the peak's end to the end of the quiet phase, without the exit teardown) and the final
memory (the last sample before the program ended or was stopped), and the time."""
from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from . import after_peak, allocators, bench
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
    repeat: int = 0  # which run of this allocator (0-based)
    status: int | None = None
    seconds: float | None = None
    samples: list = field(default_factory=list)  # (seconds, rss bytes, anon huge bytes)
    problem: str | None = None

    def figures(self) -> dict:
        if not self.samples:
            return {"peak_rss_bytes": None, "steady_rss_bytes": None, "final_rss_bytes": None,
                    "peak_anon_huge_bytes": None, "final_anon_huge_bytes": None}
        rss = [s[1] for s in self.samples]
        # After the peak (docs/bench.md): the window of every tool, over the RSS samples, which are all that a run
        # of someone else's program shows.
        w = after_peak.window([s[0] for s in self.samples], rss)
        return {"peak_rss_bytes": max(rss),
                "steady_rss_bytes": int(after_peak.median(rss[w.slice])),
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


def log_path(out_dir: Path, name: str, repeat: int) -> Path:
    return out_dir / (f"{name}.log" if repeat == 0 else f"{name}.run{repeat + 1}.log")


def run_one(name: str, env: dict, cmd: list[str], client: str | None, out_dir: Path, interval: float,
            startup: float, repeat: int = 0) -> CompareRun:
    run = CompareRun(name, repeat)
    log_file = log_path(out_dir, name, repeat)
    try:
        log = open(log_file, "wb")
    except OSError as e:
        raise UserError(f"cannot write {log_file}: {e.strerror or e}") from None
    try:
        start = time.monotonic()
        try:
            proc = start_program(cmd, env, stdout=log, stderr=subprocess.STDOUT)
        except UserError:
            log_file.unlink(missing_ok=True)  # a program that never started leaves no log
            raise
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
            run.problem = f"exited with status {run.status} (output in {log_file})"
        if client is not None and client_proc is None:
            run.problem = run.problem or f"ended before the client started ({startup:g} s)"
    finally:
        log.close()
    return run


class Interrupted(Exception):
    """Ctrl-C during compare: `runs` are the ones that finished."""

    def __init__(self, runs: list[CompareRun]):
        super().__init__("interrupted")
        self.runs = runs


def compare(cmd: list[str], allocator_spec: str, out_dir: Path, model: str | None = None,
            binaries: list[str] | None = None, client: str | None = None, interval: float = 0.05,
            startup: float = 1.0, repeat: int = 1,
            on_start: Callable[[int, int, str, int], None] | None = None,
            on_done: Callable[[int, int, CompareRun], None] | None = None) -> list[CompareRun]:
    """Runs cmd under each allocator `repeat` times, the allocators in turn within each round (so that a slow
    period of a shared machine falls on all of them). on_start(i, total, name, repeat) and on_done(i, total, run)
    report each run; Ctrl-C raises Interrupted with the runs that finished. Everything given is checked (the
    allocators, the model, the program) before out_dir is created, so that bad input leaves nothing behind."""
    from .prepare import resolve_program

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
    # "command not found", or a program that cannot be executed, before any folder or log is made and any run is
    # announced. (Asked of os.access: for root the execute bits still count, and a run would fail the same way.)
    if not os.access(resolve_program(cmd[0]), os.X_OK):
        raise UserError(f"{cmd[0]}: permission denied", exit_code=126)
    files.make_folder(out_dir)
    runs: list[CompareRun] = [CompareRun(name, problem=problem) for name, _, problem in specs if problem]
    planned = [(rep, name, library) for rep in range(repeat) for name, library, problem in specs if problem is None]
    try:
        for i, (rep, name, library) in enumerate(planned):
            if on_start is not None:
                on_start(i, len(planned), name, rep)
            allocator = allocators.Allocator(name, library)
            env = allocators.allocator_env(allocator, None, model_env)
            run = run_one(name, env, cmd, client, out_dir, interval, startup, rep)
            runs.append(run)
            if on_done is not None:
                on_done(i, len(planned), run)
    except KeyboardInterrupt:
        raise Interrupted(runs) from None
    order = {name: k for k, (name, _, _) in enumerate(specs)}
    runs.sort(key=lambda r: (order.get(r.allocator, 0), r.repeat))
    return runs


FIGURES = ("peak_rss_bytes", "steady_rss_bytes", "final_rss_bytes", "peak_anon_huge_bytes", "final_anon_huge_bytes")


@dataclass
class Summary:
    """One allocator's runs: medians, and the least and most of each figure over the runs that ended well."""
    allocator: str
    runs: int = 0  # runs that ended well
    tried: int = 0
    problem: str | None = None  # the first failed run's problem
    median: dict = field(default_factory=dict)
    low: dict = field(default_factory=dict)
    high: dict = field(default_factory=dict)


def summarize(runs: list[CompareRun]) -> list[Summary]:
    out: dict[str, Summary] = {}
    for r in runs:
        s = out.setdefault(r.allocator, Summary(r.allocator))
        s.tried += 1
        if r.problem is not None or not r.samples:
            s.problem = s.problem or r.problem or "no memory sample (it ended at once)"
    for s in out.values():
        good = [r for r in runs if r.allocator == s.allocator and r.problem is None and r.samples]
        s.runs = len(good)
        if not good:
            continue
        values = {k: [r.figures()[k] for r in good] for k in FIGURES}
        values["seconds"] = [r.seconds for r in good]
        for k, v in values.items():
            s.median[k] = statistics.median(v)
            s.low[k], s.high[k] = min(v), max(v)
    return list(out.values())


def _mib(v) -> str:
    return "-" if v is None else f"{v / bench.MiB:,.1f}"


def _spread(s: Summary, key: str) -> str:
    """The spread of a figure over the runs, as +-% of its median (half the range)."""
    m = s.median.get(key)
    if s.runs < 2 or not m:
        return ""
    return f" ±{50 * (s.high[key] - s.low[key]) / m:.0f}%"


def format_table(runs: list[CompareRun]) -> str:
    summaries = summarize(runs)
    n = max((s.tried for s in summaries), default=1)
    head = (f"{'allocator':<16} {'peak MiB':>13} {'steady MiB':>13} {'final MiB':>13} {'peak THP':>9} "
            f"{'final THP':>9} {'seconds':>12}  note")
    lines = [head, "-" * len(head)]
    for s in summaries:
        m = s.median
        secs = "-" if "seconds" not in m else f"{m['seconds']:.2f}{_spread(s, 'seconds')}"
        note = s.problem or ""
        if s.problem and s.runs:
            note = f"{s.tried - s.runs} of {s.tried} runs failed: {s.problem}"
        lines.append(f"{s.allocator:<16} {_mib(m.get('peak_rss_bytes')) + _spread(s, 'peak_rss_bytes'):>13} "
                     f"{_mib(m.get('steady_rss_bytes')) + _spread(s, 'steady_rss_bytes'):>13} "
                     f"{_mib(m.get('final_rss_bytes')) + _spread(s, 'final_rss_bytes'):>13} "
                     f"{_mib(m.get('peak_anon_huge_bytes')):>9} {_mib(m.get('final_anon_huge_bytes')):>9} "
                     f"{secs:>12}  {note}")
    runs_text = f"medians of {n} runs, ± half their range" if n > 1 else "one run each"
    lines.append(f"MiB of RSS (the process and its children), {runs_text}; THP: AnonHugePages; steady: the median "
                 f"after the peak (from the peak's end to the end of the quiet phase, without the exit teardown); "
                 f"final: the last sample before the end")
    return "\n".join(lines)


def verdict(runs: list[CompareRun], cmd: list[str] | None = None) -> str:
    """What the figures say: which allocator keeps the least after the peak, whether that is beyond the spread of
    the runs, and where llamalloc stands (when behind: the one command that shows whether lifetimes could help)."""
    ok = [s for s in summarize(runs) if s.runs and s.problem is None]
    if not ok:
        return "no allocator ran the command to the end"
    key = "steady_rss_bytes"
    ranked = sorted(ok, key=lambda s: s.median[key])
    best = ranked[0]
    lines = []
    text = f"least memory after the peak: {best.allocator} ({_mib(best.median[key])} MiB steady)"
    if len(ranked) > 1:
        nxt = ranked[1]
        b, n = best.median[key], nxt.median[key]
        text += f", {100 * (n - b) / n:.0f}% less than {nxt.allocator} ({_mib(n)} MiB)" if n else ""
        if best.runs < 2 or nxt.runs < 2:
            text += "; one run each: --repeat 3 shows whether that is beyond the noise"
        elif best.high[key] < nxt.low[key]:
            text += f"; beyond the spread of {min(best.runs, nxt.runs)} runs"
        else:
            text += (f"; within the spread of the runs ({best.allocator} {_mib(best.low[key])}-"
                     f"{_mib(best.high[key])}, {nxt.allocator} {_mib(nxt.low[key])}-{_mib(nxt.high[key])} MiB): "
                     f"not a clear difference")
    lines.append(text)
    for figure, what in ((key, "after the peak"), ("peak_rss_bytes", "at the peak")):
        lines += allocators.learning_cost_lines({s.allocator: (s.median.get(figure), s.low.get(figure), s.high.get(figure))
                                      for s in ok}, what)
    ours = [s for s in ok if s.allocator.startswith("llamalloc")]
    peers = [s for s in ok if not s.allocator.startswith("llamalloc")]
    if ours and peers:
        mine = min(ours, key=lambda s: s.median[key])
        peer = min(peers, key=lambda s: s.median[key])
        a, p = mine.median[key], peer.median[key]
        if a <= p:
            lines.append(f"{mine.allocator}: {100 * (p - a) / p if p else 0:.0f}% less memory after the peak than "
                         f"the best other allocator ({peer.allocator})")
        else:
            target = shlex.join(cmd) if cmd else "PROG ARGS"
            lines.append(f"{mine.allocator}: {100 * (a - p) / p if p else 0:.0f}% more memory after the peak than "
                         f"{peer.allocator}. Whether placing objects by lifetime could help this program (what "
                         f"an oracle that knows each object's lifetime would keep, against 2 MiB pages): "
                         f"llamalloc trace -o prog.trace -- {target} && llamalloc simulate prog.trace "
                         f"-p pages-2m -p llama-oracle")
    return "\n".join(lines)


def json_text(runs: list[CompareRun], cmd: list[str], client: str | None) -> str:
    """compare.json."""
    doc = {"format": JSON_FORMAT, "version": 1, "command": cmd, "client": client,
           "runs": [dict(asdict(r), **r.figures()) for r in runs],
           "summary": [asdict(s) for s in summarize(runs)]}
    return json.dumps(doc, indent=1)


def write_json(runs: list[CompareRun], cmd: list[str], client: str | None, path: Path) -> None:
    files.write_text(path, json_text(runs, cmd, client))


def plot_series(runs: list[CompareRun]) -> list[tuple[str, list, list, list | None]]:
    """What the plot draws: per allocator (in order, once), its first run that ended well (else any run with
    samples): times, RSS in MiB, and AnonHugePages in MiB or None when it stayed at zero."""
    out = []
    for name in dict.fromkeys(r.allocator for r in runs):
        r = next((r for r in runs if r.allocator == name and r.samples and r.problem is None),
                 next((r for r in runs if r.allocator == name and r.samples), None))
        if r is None:
            continue
        thp = [s[2] / bench.MiB for s in r.samples] if any(s[2] for s in r.samples) else None
        out.append((name, [s[0] for s in r.samples], [s[1] / bench.MiB for s in r.samples], thp))
    return out


def plot(runs: list[CompareRun], path: Path, title: str) -> Path:
    """Draws compare.png at `path` (through files.replacing)."""
    with files.replacing(path) as tmp:
        draw(runs, tmp, title)
    return path


def draw(runs: list[CompareRun], path: Path, title: str) -> None:
    """Draws the plot into the file `path` as it is (plot() is the atomic write)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.8))
    # One line per allocator (its first run that ended well): RSS solid; AnonHugePages dashed in the same color,
    # only where it is ever above zero and without a legend entry of its own (a legend of ten lines, half of them
    # flat zero, hid the plot). The legend sits outside the axes.
    for i, (name, t, rss, thp) in enumerate(plot_series(runs)):
        color = f"C{i}"
        ax.plot(t, rss, color=color, lw=1.4, label=name)
        if thp is not None:
            ax.plot(t, thp, color=color, lw=1, ls="--")
    ax.set_xlabel("seconds")
    ax.set_ylabel("MiB")
    ax.set_title(f"{title}\nRSS (solid) and AnonHugePages (dashed)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110, format="png")
    finally:
        plt.close(fig)
