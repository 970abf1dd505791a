"""Running a program with libraries preloaded: the one place that starts a user's program. `llamalloc run`
(libllamalloc.so), `record` and `trace` (libllamalloc_prof.so), `compare` and `bench` (each allocator) all start
it through `start_program`, so that a missing or unrunnable program is reported the same way everywhere."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable, Mapping, NoReturn

from . import files
from .errors import UserError
from .options import check_options
from .paths import native_library

ALLOCATOR_LIBRARY = "libllamalloc.so"
PROFILER_LIBRARY = "libllamalloc_prof.so"


def preload_env(preload: Iterable[str | os.PathLike], env_extra: Mapping[str, str] | None = None,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for CMD: `preload` first (in order), then any LD_PRELOAD the user already had."""
    env = dict(os.environ if base is None else base)
    libs = [str(Path(p).resolve()) if os.sep in str(p) else str(p) for p in preload]
    if env.get("LD_PRELOAD"):
        libs.append(env["LD_PRELOAD"])
    if libs:
        env["LD_PRELOAD"] = " ".join(libs)
    env.update(env_extra or {})
    return env


def end_without_output(missing: str, status: int) -> NoReturn:
    """Ends a command whose program left none of the output it was run for (`missing` says so in one line): a
    program that failed keeps its exit status, the line a warning; one that exited 0 is an error."""
    if status != 0:
        import click

        click.echo(f"llamalloc: warning: {missing}", err=True)
        sys.exit(status)
    raise UserError(missing)


def check_command(cmd: Iterable[str], command=None) -> list[str]:
    """Refuses what is not a program to run: an option word first (a mistyped option of ours, which click hands
    over as the program since everything after the options is the command), nothing at all, or a directory."""
    import difflib

    import click

    cmd = list(cmd)
    if not cmd:
        raise UserError("no command to run (usage: llamalloc COMMAND [OPTIONS] -- PROGRAM [ARGS]...)")
    first = cmd[0]
    if first.startswith("-") and first != "-":
        ctx = click.get_current_context(silent=True)
        cmd_obj = command if command is not None else (ctx.command if ctx else None)
        known: list[str] = []
        if cmd_obj is not None:
            for p in cmd_obj.params:
                known += [o for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())) if o.startswith("-")]
        name = first.split("=", 1)[0]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"no such option: {name}{hint}; options go before the program (llamalloc "
                        f"{ctx.info_name if ctx else 'COMMAND'} [OPTIONS] -- PROGRAM [ARGS]...)")
    if os.sep in first and os.path.isdir(first):
        raise UserError(f"{first}: is a directory, not a program", exit_code=126)
    return cmd


def shell_status(returncode: int) -> int:
    """A child's exit status shell style: 128 + n when killed by signal n."""
    return 128 - returncode if returncode < 0 else returncode


def start_program(cmd: list[str], env: Mapping[str, str], **popen_args) -> subprocess.Popen:
    """Starts cmd (popen_args as for subprocess.Popen: cwd, stdout, ...) and returns it. A program that is not
    there is a UserError with exit code 127, one that cannot be executed 126, as a shell says."""
    try:
        return subprocess.Popen(cmd, env=dict(env), **popen_args)
    except FileNotFoundError:
        raise UserError(f"{cmd[0]}: command not found", exit_code=127) from None
    except PermissionError:
        raise UserError(f"{cmd[0]}: permission denied", exit_code=126) from None
    except OSError as e:
        raise UserError(f"{cmd[0]}: cannot run: {e.strerror}", exit_code=126) from None


def run_program(cmd: Iterable[str], env: Mapping[str, str],
                on_poll: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Runs cmd and returns (pid, status), the status shell style (`shell_status`; 127 when the command is not
    found, 126 when it cannot be executed). on_poll(pid) is called about twice a second. Ctrl-C goes to the
    program too; this waits for it so that whatever it writes at exit is written."""
    cmd = check_command(cmd)
    child = start_program(cmd, env)
    while True:
        try:
            rc = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if on_poll is not None:
                on_poll(child.pid)
        except KeyboardInterrupt:
            continue
    return child.pid, shell_status(rc)


def run_under_profiler(cmd: Iterable[str], env_extra: Mapping[str, str], preload_after: Iterable[str] = (),
                       on_poll: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Runs cmd with the profiler library preloaded (then preload_after, then any LD_PRELOAD already set), in the
    mode env_extra's LLAMALLOC_PROF_MODE names; returns its pid and exit status as `run_program`."""
    env = preload_env([native_library(PROFILER_LIBRARY), *preload_after], env_extra)
    return run_program(cmd, env, on_poll=on_poll)


def llamalloc_env(options: Iterable[str] = (), stats: str | os.PathLike | None = None) -> dict[str, str]:
    """The environment of `llamalloc run`: libllamalloc.so preloaded; each NAME=VALUE of `options` as
    LLAMALLOC_<NAME>; with `stats`, the statistics file at exit and the snapshot before the teardown beside it
    (`before_exit_path`)."""
    extra: dict[str, str] = {}
    given: list[str] = []
    for opt in options:
        name, sep, value = opt.partition("=")
        if not sep or not name:
            raise UserError(f"--option {opt!r}: expected NAME=VALUE")
        name = name.upper()
        given.append(f"{name}={value}")
        extra[name if name.startswith("LLAMALLOC_") else f"LLAMALLOC_{name}"] = value
    # Before the program starts: the allocator itself only warns about a setting it refuses, and the run would go
    # on without the setting the user asked for.
    check_options(given)
    if stats:
        out = Path(stats)
        # Before the program starts: the allocator writes the file only at the program's exit, and could then
        # only warn.
        try:
            files.check_output_file(out, "statistics")
        except UserError as e:
            raise UserError(f"--stats {e}") from None
        extra["LLAMALLOC_STATS"] = str(out.resolve())
        extra["LLAMALLOC_STATS_BEFORE_EXIT"] = "1"
        extra["LLAMALLOC_STATS_SUMMARY"] = "1"
    return preload_env([native_library(ALLOCATOR_LIBRARY)], extra)


def before_exit_path(stats: Path) -> Path:
    """The snapshot from before the teardown that LLAMALLOC_STATS_BEFORE_EXIT writes beside the file at exit."""
    if stats.name.endswith(".json") and len(stats.name) > 5:
        return stats.with_name(stats.name[:-5] + ".before-exit.json")
    return stats.with_name(stats.name + ".before-exit")
