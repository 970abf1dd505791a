"""Running a user's program with libraries preloaded: the one place that starts CMD for record, trace and run."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .errors import UserError


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


def run_program(cmd: Iterable[str], env: Mapping[str, str],
                on_poll: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Runs cmd and returns (pid, status), the status shell style: 128 + n when killed by signal n, 127 when the
    command is not found, 126 when it cannot be executed. on_poll(pid) is called about twice a second. Ctrl-C goes
    to the program too; we wait for it so that whatever it writes at exit is written."""
    cmd = check_command(cmd)
    try:
        child = subprocess.Popen(cmd, env=dict(env))
    except FileNotFoundError:
        raise UserError(f"{cmd[0]}: command not found", exit_code=127) from None
    except PermissionError:
        raise UserError(f"{cmd[0]}: permission denied", exit_code=126) from None
    except OSError as e:
        raise UserError(f"{cmd[0]}: cannot run: {e.strerror}", exit_code=126) from None
    while True:
        try:
            rc = child.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if on_poll is not None:
                on_poll(child.pid)
        except KeyboardInterrupt:
            continue
    return child.pid, (128 - rc if rc < 0 else rc)
