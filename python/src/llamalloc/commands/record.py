"""`llamalloc record`: run a program under the sampling lifetime profiler and write its profile."""
from __future__ import annotations

import math
import re
import shutil
import sys
import tempfile
from pathlib import Path

import click

from .. import profile as _profile
from .. import trace as _raw
from ..errors import FormatError, UserError
from ..launch import check_command, preload_env, run_program
from ..paths import native_library

PROFILER_LIBRARY = "libllamalloc_prof.so"
DEFAULT_SAMPLE_BYTES = 512 * 1024


def run_preloaded(cmd: tuple[str, ...], env_extra: dict[str, str], preload_after: tuple[str, ...],
                  on_poll=None) -> tuple[int, int]:
    """Runs cmd with the profiler preloaded (then preload_after, then any LD_PRELOAD already set) and returns
    its pid and exit status, shell style (llamalloc.launch.run_program)."""
    env = preload_env([native_library(PROFILER_LIBRARY), *preload_after], env_extra)
    return run_program(cmd, env, on_poll=on_poll)


def convert_raw(raw: Path, out: Path) -> None:
    _profile.write(_profile.from_raw(raw), out)


def dump_seconds(raw: Path) -> float:
    """Seconds from the profiler's start in the process to when the raw dump was written."""
    r = _raw.read_raw(raw, _raw.RAW_PROFILE_MAGIC, _raw.RAW_PROFILE_VERSION, "raw profile dump")
    return max(0.0, (r.end[1] - r.header.start_mono_ns) / 1e9)


def parse_steady_state(spec: str | None) -> tuple[float, float] | None:
    """--steady-state END or START:END (seconds since the program started) -> (START, END); START defaults
    to END."""
    if spec is None:
        return None
    parts = spec.split(":")
    try:
        if len(parts) not in (1, 2):
            raise ValueError
        values = [float(x) for x in parts]
    except ValueError:
        raise UserError(f"--steady-state: {spec!r} is not END or START:END (seconds since the program "
                        f"started, e.g. 30 or 10:30)") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise UserError(f"--steady-state: {spec!r}: times must be finite and not negative")
    start, end = (values[0], values[0]) if len(values) == 1 else values
    if end <= 0:
        raise UserError(f"--steady-state: {spec!r}: END must be after the start (greater than 0)")
    if end < start:
        raise UserError(f"--steady-state: {spec!r}: END ({end:g} s) is before START ({start:g} s)")
    return start, end


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


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default="llamalloc.prof", show_default=True, type=click.Path(dir_okay=False),
              help="Profile to write (pprof profile.proto, gzipped).")
@click.option("--sample-bytes", default=DEFAULT_SAMPLE_BYTES, show_default=True, type=click.IntRange(min=1),
              help="Mean bytes allocated between samples; 1 samples every allocation.")
@click.option("--interval", default=0.0, type=click.FloatRange(min=0),
              help="Also take a profile every this many seconds, kept as OUTPUT.at-<T>s (0: none).")
@click.option("--steady-state", "steady_state", default=None, metavar="[START:]END",
              help="Seconds since the program started: sample allocations until START (default END), and make "
                   "the profile taken at END OUTPUT (objects live then count as long-lived); the exit profile is "
                   "kept as OUTPUT.at-exit. The program keeps running.")
@click.option("--preload", multiple=True, metavar="LIB",
              help="A library to preload after the profiler, e.g. another allocator (repeatable).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(output, sample_bytes, interval, steady_state, preload, cmd):
    """Run CMD under the sampling lifetime profiler and write its profile.

    The program's exit status is passed through. Its children that also allocate (fork, exec) get profiles of
    their own, written as OUTPUT.<pid>. Send SIGUSR2 to the program for a profile while it runs: each one is
    kept as OUTPUT.at-<T>s (T: seconds since it started).
    """
    window = parse_steady_state(steady_state)
    cmd = check_command(cmd)
    out = Path(output)
    if out.parent and not out.parent.exists():
        raise UserError(f"{out.parent}: no such directory")
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

        pid, status = run_preloaded(cmd, env, preload, on_poll=publish)
        program_pid["pid"] = pid
        kept.poll(tmpdir, base_of)
        files: dict[int, dict[str, Path]] = {}
        for raw in tmpdir.glob("raw.*"):
            parsed = parse_raw_name(raw)
            if parsed is not None and parsed[1] != "dump":
                files.setdefault(parsed[0], {})[parsed[1]] = raw
        # The program is the process we started (exec keeps its pid); other processes are its children.
        note = ""
        if pid not in files and pid not in kept.by_pid and files:
            # A wrapper (a shell script) that allocates nothing itself, or leaves by exec/_exit: the profile of
            # its child that sampled the most is the program's.
            pid = max(files, key=lambda p: max(r.stat().st_size for r in files[p].values()))
            program_pid["pid"] = pid
            note = f" (of its child process {pid}: {cmd[0]} itself wrote no profile)"
        messages: list[str] = []
        children = []
        for p in sorted(set(files) | set(kept.by_pid)):
            target = out if p == pid else out.with_name(f"{out.name}.{p}")
            written = finish_process(files.get(p, {}), kept.last(p), target, window, cmd[0],
                                     messages if p == pid else None)
            if p != pid and written:
                children.append(target)
        if pid not in files and pid not in kept.by_pid:
            msg = f"{cmd[0]} ended without writing a profile (killed, or it never returned from exec/_exit)"
            if status != 0:
                click.echo(f"llamalloc: warning: {msg}", err=True)
                sys.exit(status)
            raise UserError(msg)
        if status != 0:
            click.echo(f"llamalloc: {cmd[0]} exited with status {status}; profile written to {out}{note}", err=True)
        else:
            click.echo(f"llamalloc: profile written to {out}{note}", err=True)
        for m in messages:
            click.echo(f"llamalloc: {m}", err=True)
        dumps = kept.all()
        if dumps:
            click.echo(f"llamalloc: {len(dumps)} profiles taken while it ran (SIGUSR2, --interval): "
                       f"{', '.join(str(d) for d in dumps[:6])}{' ...' if len(dumps) > 6 else ''}", err=True)
        if children:
            click.echo(f"llamalloc: profiles of {len(children)} other processes: "
                       f"{', '.join(str(c) for c in children[:4])}{' ...' if len(children) > 4 else ''}", err=True)
        model = out.with_suffix(".model") if out.suffix else out.with_name(out.name + ".model")
        click.echo(f"llamalloc: next: llamalloc symbolize {out} && llamalloc train {out} -o {model}", err=True)
        # The program's status is this command's (SystemExit: cli.main keeps no status of a command's own).
        sys.exit(status)
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
        shutil.copyfile(last_dump[2], target)
        say(f"{target} is a copy of the last profile taken while it ran ({last_dump[2].name}): it ended without "
            f"running its exit handlers")
        return True
    return False
