"""`llamalloc record`: run a program under the sampling lifetime profiler and write its profile."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import click

from .. import profile as _profile
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


@click.command("record", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-o", "--output", default="llamalloc.prof", show_default=True, type=click.Path(dir_okay=False),
              help="Profile to write (pprof profile.proto, gzipped).")
@click.option("--sample-bytes", default=DEFAULT_SAMPLE_BYTES, show_default=True, type=click.IntRange(min=1),
              help="Mean bytes allocated between samples; 1 samples every allocation.")
@click.option("--interval", default=0.0, type=click.FloatRange(min=0),
              help="Also write the profile every this many seconds (0: at exit and on SIGUSR2 only).")
@click.option("--preload", multiple=True, metavar="LIB",
              help="A library to preload after the profiler, e.g. another allocator (repeatable).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(output, sample_bytes, interval, preload, cmd):
    """Run CMD under the sampling lifetime profiler and write its profile.

    The program's exit status is passed through. Its children that also allocate (fork, exec) get profiles of
    their own, written as OUTPUT.<pid>. Send SIGUSR2 to the program for a profile while it runs.
    """
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
        seen: dict[Path, float] = {}

        def publish(pid: int) -> None:
            # A periodic or on-signal dump of the running program: convert it now, for a server that never exits.
            raw = tmpdir / f"raw.{pid}"
            try:
                mtime = raw.stat().st_mtime_ns
            except FileNotFoundError:
                return
            if seen.get(raw) != mtime:
                seen[raw] = mtime
                try:
                    convert_raw(raw, out)
                except FormatError:
                    pass  # replaced while being read: the next poll converts the newer one

        pid, status = run_preloaded(cmd, env, preload, on_poll=publish)
        # The program is the process we started (exec keeps its pid); other processes are its children.
        raws = [r for r in sorted(tmpdir.glob("raw.*")) if not r.name.endswith(".tmp")]
        main_pid_raw = next((r for r in raws if r.name == f"raw.{pid}"), None)
        note = ""
        if main_pid_raw is None and raws:
            # A wrapper (a shell script) that allocates nothing itself, or leaves by exec/_exit: the profile of
            # its child that sampled the most is the program's.
            main_pid_raw = max(raws, key=lambda r: r.stat().st_size)
            note = (f" (of its child process {main_pid_raw.name.split('.', 1)[1]}: {cmd[0]} itself wrote no "
                    f"profile)")
        children = []
        for raw in raws:
            if raw != main_pid_raw:
                child_out = out.with_name(f"{out.name}.{raw.name.split('.', 1)[1]}")
                convert_raw(raw, child_out)
                children.append(child_out)
        if main_pid_raw is None:
            msg = f"{cmd[0]} ended without writing a profile (killed, or it never returned from exec/_exit)"
            if status != 0:
                click.echo(f"llamalloc: warning: {msg}", err=True)
                sys.exit(status)
            raise UserError(msg)
        convert_raw(main_pid_raw, out)
        if status != 0:
            click.echo(f"llamalloc: {cmd[0]} exited with status {status}; profile written to {out}", err=True)
        else:
            click.echo(f"llamalloc: profile written to {out}{note}", err=True)
        if children:
            click.echo(f"llamalloc: profiles of {len(children)} other processes: "
                       f"{', '.join(str(c) for c in children[:4])}{' ...' if len(children) > 4 else ''}", err=True)
        model = out.with_suffix(".model") if out.suffix else out.with_name(out.name + ".model")
        click.echo(f"llamalloc: next: llamalloc symbolize {out} && llamalloc train {out} -o {model}", err=True)
        # The program's status is this command's (SystemExit: cli.main keeps no status of a command's own).
        sys.exit(status)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)

