"""The `llamalloc` command. Each subcommand is a module in llamalloc.commands that defines `command`,
a click command (or `commands`, a list of them); llamalloc.commands.load_commands finds them, so parts never edit
this file."""
from __future__ import annotations

import sys

try:
    import click

    from . import __version__
    from .commands import load_commands
    from .errors import UserError
except KeyboardInterrupt:
    # Ctrl-C while the command starts (imports take a second or more on a loaded machine): one line and 130, as
    # at any later moment, not a traceback of the import.
    sys.stderr.write("llamalloc: interrupted\n")
    raise SystemExit(130) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="llamalloc")
def cli() -> None:
    """llamalloc: a learned, lifetime-aware huge-page allocator.

    \b
      llamalloc record -o server.prof -- ./server      sampled lifetime profile
      llamalloc train server.prof -o server.model      train the lifetime model
      llamalloc run --model server.model -- ./server   run with the allocator and the model
      llamalloc compare -- ./server                    your program under every allocator, side by side
      llamalloc top server.prof                        what stays live, by call site
      llamalloc trace -o server.trace -- ./server      every malloc/free
      llamalloc simulate server.trace --policy P       what-if replay
      llamalloc bench                                  workloads under every allocator
      llamalloc report / llamalloc demo
    """


def _add_commands() -> None:
    """Adds the subcommands once, inside main's handling of Ctrl-C: importing them takes the most of a start."""
    if not cli.commands:
        for c in load_commands():
            cli.add_command(c)


def main(argv: list[str] | None = None) -> int:
    status = _main(argv)
    if argv is None:
        # The process's own command (the `llamalloc` script, python -m llamalloc) has ended: a Ctrl-C from here on
        # interrupts nothing, and would kill the exiting interpreter (its handlers are gone) with no line and
        # status -2. A caller that passes argv (a test) keeps its handler.
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return status


def _main(argv: list[str] | None) -> int:
    try:
        _add_commands()
        # Without standalone mode, click returns the code of a ctx.exit(N) instead of raising it.
        rv = cli.main(args=argv, prog_name="llamalloc", standalone_mode=False)
        return rv if isinstance(rv, int) else 0
    except click.exceptions.Abort:
        click.echo("llamalloc: interrupted", err=True)
        return 130
    except click.exceptions.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Exit as e:
        return e.exit_code
    except UserError as e:
        click.echo(f"llamalloc: error: {e}", err=True)
        return e.exit_code
    except KeyboardInterrupt:
        click.echo("llamalloc: interrupted", err=True)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as e:
        click.echo(f"llamalloc: error: {_os_error_line(e)}", err=True)
        return 1


def _os_error_line(e: OSError) -> str:
    """What an OSError that no command turned into a UserError says, in one line. Files the tool writes are named by
    their own errors (llamalloc.files); what is left is mostly the standard output on a full disk (`> file`
    there, or /dev/full), which a click.echo that failed holds as its `file`."""
    if _failed_on_stdout(e):
        return f"cannot write the standard output: {e.strerror or e}"
    return f"{e.filename}: {e.strerror or e}" if e.filename else str(e.strerror or e)


def _failed_on_stdout(e: OSError) -> bool:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return False
    for value in tb.tb_frame.f_locals.values():
        if hasattr(value, "write") and hasattr(value, "fileno"):
            try:
                if value.fileno() == 1:
                    return True
            except (OSError, ValueError):  # (io.UnsupportedOperation is both)
                pass
    return False


if __name__ == "__main__":
    sys.exit(main())
