"""Recording a lifetime profile: running a program under the sampling profiler (libllamalloc_prof.so in its
profile mode) and turning the raw dumps it writes into profiles (llamalloc.profile), one per process, plus the
profiles taken while it ran (a signal, an interval) and the steady-state profile."""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import profile as _profile
from . import traceformat as _raw
from . import files
from .errors import FormatError
from .run import run_under_profiler

DEFAULT_SAMPLE_BYTES = 512 * 1024


def convert_raw(raw: Path, out: Path) -> None:
    _profile.write(_profile.from_raw(raw), out)


def dump_seconds(raw: Path) -> float:
    """Seconds from the profiler's start in the process to when the raw dump was written."""
    r = _raw.read_raw(raw, _raw.RAW_PROFILE_MAGIC, _raw.RAW_PROFILE_VERSION, "raw profile dump")
    return max(0.0, (r.end[1] - r.header.start_mono_ns) / 1e9)


# Raw files the profiler writes in the temporary folder: raw.<pid> (the final profile), raw.<pid>.dump<N> (the
# N-th dump on the signal or the interval), raw.<pid>.steady (the steady-state profile), each first as .tmp.
_RAW_NAME = re.compile(r"raw\.(\d+)(?:\.(dump(\d+)|steady))?")


def parse_raw_name(path: Path) -> tuple[int, str, int] | None:
    """(pid, kind, N) with kind "final", "dump" or "steady"; None for a file being written."""
    m = _RAW_NAME.fullmatch(path.name)
    if m is None:
        return None
    kind = "final" if m.group(2) is None else ("steady" if m.group(2) == "steady" else "dump")
    return int(m.group(1)), kind, int(m.group(3) or 0)


class KeptDumps:
    """The dumps taken while the program runs, each converted to a profile of its own as soon as it appears:
    OUTPUT.at-<T>s for the program, OUTPUT.<pid>.at-<T>s for another process, T its time in seconds since the
    process started."""

    def __init__(self, out: Path):
        self.out = out
        self.by_pid: dict[int, list[tuple[int, float, Path]]] = {}  # pid -> [(N, T, profile)]
        self.names: set[str] = set()

    def name_for(self, base: str, seconds: float) -> Path:
        for name in (f"{base}.at-{seconds:.1f}s", f"{base}.at-{seconds:.3f}s"):
            if name not in self.names:
                break
        else:
            k = 2
            while f"{base}.at-{seconds:.3f}s-{k}" in self.names:
                k += 1
            name = f"{base}.at-{seconds:.3f}s-{k}"
        self.names.add(name)
        return self.out.with_name(name)

    def take(self, raw: Path, pid: int, n: int, base: str) -> None:
        try:
            seconds = dump_seconds(raw)
            profile = self.name_for(base, seconds)
            convert_raw(raw, profile)
        except FormatError:
            return  # cannot happen for a renamed file; leave it to the end
        self.by_pid.setdefault(pid, []).append((n, seconds, profile))
        raw.unlink()

    def poll(self, tmpdir: Path, base_of) -> None:
        for raw in sorted(tmpdir.glob("raw.*.dump*"), key=lambda r: parse_raw_name(r) or (0, "", 0)):
            parsed = parse_raw_name(raw)
            if parsed is not None and parsed[1] == "dump":
                self.take(raw, parsed[0], parsed[2], base_of(parsed[0]))

    def last(self, pid: int) -> tuple[int, float, Path] | None:
        dumps = self.by_pid.get(pid)
        return max(dumps) if dumps else None

    def all(self) -> list[Path]:
        return [p for pid in sorted(self.by_pid) for _, _, p in sorted(self.by_pid[pid])]


@dataclass
class Recording:
    """What `record_profile` wrote. `found` is False when the program wrote no profile (killed, or it never
    returned from exec/_exit); `note` says when the program's profile is its child's (a wrapper script)."""
    status: int
    found: bool
    note: str = ""
    messages: list[str] = field(default_factory=list)  # about the program's profile
    dumps: list[Path] = field(default_factory=list)     # taken while it ran
    children: list[Path] = field(default_factory=list)  # other processes' profiles


def record_profile(cmd: list[str], out: Path, sample_bytes: int, interval: float,
                   window: tuple[float, float] | None, preload: tuple[str, ...] = ()) -> Recording:
    """Runs cmd under the profiler and writes its profile to out (others beside it: `finish_process`,
    `KeptDumps`). window: the steady-state (START, END) in seconds since the program started, or None."""
    tmpdir = Path(tempfile.mkdtemp(prefix="llamalloc-record-"))
    try:
        template = tmpdir / "raw.%p"
        env = {
            "LLAMALLOC_PROF_MODE": "profile",
            "LLAMALLOC_PROF_OUTPUT": str(template),
            "LLAMALLOC_PROF_SAMPLE_BYTES": str(sample_bytes),
            "LLAMALLOC_PROF_INTERVAL_S": repr(float(interval)),
        }
        if window is not None:
            env["LLAMALLOC_PROF_STEADY_START_S"] = repr(window[0])
            env["LLAMALLOC_PROF_STEADY_END_S"] = repr(window[1])
        kept = KeptDumps(out)
        program_pid = {"pid": None}

        def base_of(pid: int) -> str:
            return out.name if pid == program_pid["pid"] else f"{out.name}.{pid}"

        def publish(pid: int) -> None:
            # Dumps of the running program (a server that never exits): each converted now, kept in its own file.
            program_pid["pid"] = pid
            kept.poll(tmpdir, base_of)

        pid, status = run_under_profiler(cmd, env, preload, on_poll=publish)
        program_pid["pid"] = pid
        kept.poll(tmpdir, base_of)
        raws: dict[int, dict[str, Path]] = {}
        for raw in tmpdir.glob("raw.*"):
            parsed = parse_raw_name(raw)
            if parsed is not None and parsed[1] != "dump":
                raws.setdefault(parsed[0], {})[parsed[1]] = raw
        # The program is the process started (exec keeps its pid); other processes are its children.
        result = Recording(status, found=True)
        if pid not in raws and pid not in kept.by_pid and raws:
            # A wrapper (a shell script) that allocates nothing itself, or leaves by exec/_exit: the profile of
            # its child that sampled the most is the program's.
            pid = max(raws, key=lambda p: max(r.stat().st_size for r in raws[p].values()))
            program_pid["pid"] = pid
            result.note = f" (of its child process {pid}: {cmd[0]} itself wrote no profile)"
        for p in sorted(set(raws) | set(kept.by_pid)):
            target = out if p == pid else out.with_name(f"{out.name}.{p}")
            written = finish_process(raws.get(p, {}), kept.last(p), target, window, cmd[0],
                                     result.messages if p == pid else None)
            if p != pid and written:
                result.children.append(target)
        result.found = pid in raws or pid in kept.by_pid
        result.dumps = kept.all()
        return result
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def finish_process(raws: dict[str, Path], last_dump, target: Path, window, program: str,
                   messages: list[str] | None) -> bool:
    """Writes one process's profile to target: the steady-state profile when --steady-state gave one (the exit
    profile then goes to target.at-exit), else the exit profile, else a copy of the last dump kept while it ran.
    Says which (in messages) for the program itself. False when there was nothing to write."""
    say = messages.append if messages is not None else (lambda _m: None)
    final, steady = raws.get("final"), raws.get("steady")
    if steady is not None:
        convert_raw(steady, target)
        exit_name = target.with_name(f"{target.name}.at-exit")
        if final is not None:
            convert_raw(final, exit_name)
        say(f"{target} is the steady-state profile, taken at {dump_seconds(steady):.1f} s (--steady-state "
            f"{window[0]:g}:{window[1]:g})" + (f"; the exit profile is {exit_name}" if final is not None else ""))
        return True
    if final is not None:
        convert_raw(final, target)
        if window is not None:
            say(f"warning: no steady-state profile: {program} allocated nothing at or after {window[1]:g} s "
                f"(it ran {dump_seconds(final):.1f} s); {target} is the exit profile")
        return True
    if last_dump is not None:
        files.copy_file(last_dump[2], target)
        say(f"{target} is a copy of the last profile taken while it ran ({last_dump[2].name}): it ended without "
            f"running its exit handlers")
        return True
    return False
