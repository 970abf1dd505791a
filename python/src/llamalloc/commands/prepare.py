"""`llamalloc prepare MODEL BINARY... -o FILE`: token tables for the in-process predictor."""
from __future__ import annotations

import sys

import click

from ..errors import FormatError, UserError
from ..model import modelfile
from ..prepare import note_other_builds, prepare, program_binaries, resolve_program


@click.command("prepare")
@click.argument("model", type=click.Path(dir_okay=False))
@click.argument("binaries", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Token table file to write (default: MODEL.tokens).")
@click.option("--with-libraries/--no-libraries", default=True, show_default=True,
              help="Also prepare the shared libraries each BINARY links (ldd).")
def command(model, binaries, output, with_libraries):
    """Write the token tables of BINARY... (and the libraries they load) for MODEL.

    The allocator maps them with LLAMALLOC_TOKENS=FILE (beside LLAMALLOC_MODEL=MODEL); `llamalloc run --model`
    does all this by itself. See docs/prediction.md."""
    paths: list[str] = []
    for b in binaries:
        try:
            # BINARY is a file (an existing path as given, even without a slash), else a name on PATH.
            paths.extend(program_binaries(b, as_path=True) if with_libraries else [resolve_program(b, True)])
        except UserError as e:
            if e.exit_code == 127:  # a binary to prepare, not a command to run: a missing file
                raise FormatError(b, "no such file") from None
            raise
    out = output or f"{model}.tokens"
    log = lambda m: print(f"llamalloc: {m}", file=sys.stderr)  # noqa: E731
    note_other_builds(modelfile.read(model), model, [resolve_program(b, True) for b in binaries], log)
    n = prepare(model, paths, out, log=log)
    print(f"{out}: token tables of {n} binaries", file=sys.stderr)
