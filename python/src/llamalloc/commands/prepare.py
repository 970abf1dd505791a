"""`llamalloc prepare MODEL BINARY... -o FILE`: token tables for the in-process predictor; `llamalloc prepare
--model-dir DIR [BINARY...]`: a directory of models ready for LLAMALLOC_MODEL_DIR under a plain LD_PRELOAD."""
from __future__ import annotations

import sys

import click

from ..errors import FormatError, UserError
from ..model import modelfile
from ..model_select import prepare_directory
from ..prepare import note_other_builds, prepare, program_binaries, resolve_program


@click.command("prepare")
@click.argument("model", required=False, type=click.Path(dir_okay=False))
@click.argument("binaries", nargs=-1)
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Token table file to write (default: MODEL.tokens).")
@click.option("--with-libraries/--no-libraries", default=True, show_default=True,
              help="Also prepare the shared libraries each BINARY links (ldd).")
@click.option("--model-dir", "model_dir", type=click.Path(), metavar="DIR",
              help="Prepare this directory of models for LLAMALLOC_MODEL_DIR instead (no MODEL: every argument is "
                   "a BINARY, by default the programs its models were trained on): for each binary, the model "
                   "`llamalloc run --model-dir` would take, its token tables in DIR/BUILD-ID.tokens and its line "
                   "in DIR/builds.index.")
def command(model, binaries, output, with_libraries, model_dir):
    """Write the token tables of BINARY... (and the libraries they load) for MODEL.

    The allocator maps them with LLAMALLOC_TOKENS=FILE (beside LLAMALLOC_MODEL=MODEL); `llamalloc run --model`
    does all this by itself. With --model-dir DIR, the allocator finds the model of the program's build in DIR
    by itself: LD_PRELOAD=libllamalloc.so LLAMALLOC_MODEL_DIR=DIR ./app. See docs/prediction.md."""
    log = lambda m: print(f"llamalloc: {m}", file=sys.stderr)  # noqa: E731
    if model_dir is not None:
        if output:
            raise UserError("--output names one token table file; --model-dir writes them into DIR")
        if not with_libraries:
            raise UserError("--no-libraries: --model-dir always prepares the libraries a binary links (the "
                            "allocator maps one file per build)")
        named = ([model] if model else []) + list(binaries)
        try:
            prepared = prepare_directory(model_dir, named, log=log)
        except UserError as e:
            if e.exit_code == 127:  # a binary to prepare, not a command to run: a missing file
                raise UserError(str(e)) from None
            raise
        print(f"{model_dir}: {len(prepared)} build{'s' if len(prepared) != 1 else ''} prepared "
              f"(LLAMALLOC_MODEL_DIR={model_dir})", file=sys.stderr)
        return
    if not model or not binaries:
        raise click.UsageError("give MODEL and at least one BINARY, or --model-dir DIR")
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
    note_other_builds(modelfile.read(model), model, [resolve_program(b, True) for b in binaries], log)
    n = prepare(model, paths, out, log=log)
    print(f"{out}: token tables of {n} binaries", file=sys.stderr)
