"""A model for a binary, chosen from a directory of models (`llamalloc run --model-dir`, LLAMALLOC_MODEL_DIR;
docs/prediction.md, "Choosing a model for a binary"), and the same choice made ahead of time for a plain
LD_PRELOAD (`llamalloc prepare --model-dir`, `prepare_directory`; "A model directory under LD_PRELOAD").

Each `*.model` file in the directory is read (modelfile.read: a corrupt or foreign file is skipped with one warning
line naming it). The model whose metadata `build_ids` hold the build id of one of the binaries is taken; when
none does, the newest model of the same program (a `program` name whose file name is the binary's) is taken, with
one warning line saying that it was trained on another build; when no model is of that program, none is taken and
one line says so. Newest: the model's training time in its metadata (`trained_at` or `time`: seconds since the
epoch or an ISO 8601 date) if it records one, else the file's modification time.
"""
from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from . import files, symbolize
from .errors import FormatError, UserError
from .model import modelfile

MODEL_SUFFIX = ".model"


@dataclass
class _Candidate:
    path: Path
    programs: set[str]  # file names of the programs it was trained on
    build_ids: set[str]
    trained: float  # seconds since the epoch
    program_paths: list[str] = field(default_factory=list)  # the programs as its profiles recorded them


def _short(build_id: str) -> str:
    return build_id[:8] + "…" if build_id else "none"


def _trained_time(metadata: dict, path: Path) -> float:
    for key in ("trained_at", "time"):
        value = metadata.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
            if t.tzinfo is None:
                t = t.replace(tzinfo=datetime.timezone.utc)
            return t.timestamp()
    return path.stat().st_mtime


def _stderr_warning(line: str) -> None:
    print(f"llamalloc: warning: {line}", file=sys.stderr)


def _candidates(directory: Path, warn: Callable[[str], None]) -> list[_Candidate]:
    out = []
    for path in sorted(directory.iterdir()):
        if not path.name.endswith(MODEL_SUFFIX) or not path.is_file():
            continue
        try:
            m = modelfile.read(path)
            trained = _trained_time(m.metadata, path)
        except FormatError as e:
            warn(f"{path}: {e.problem}; skipped")
            continue
        except OSError as e:
            warn(f"{path}: cannot read: {e.strerror}; skipped")
            continue
        paths = [p for p in (m.program or "").split("\n") if p.strip()]
        programs = {os.path.basename(p.rstrip("/")) for p in paths}
        build_ids = {str(b).lower() for b in (m.metadata.get("build_ids") or []) if b}
        out.append(_Candidate(path, programs, build_ids, trained, paths))
    return out


def trained_programs(directory, warn: Callable[[str], None] | None = None) -> list[tuple[Path, str]]:
    """(model, program) for each program that the models of `directory` record (the `program` of their profiles,
    as the profiler wrote it), model by model in name order. Skipped files get one `warn` line each, as in
    `select_model`."""
    return [(c.path, p) for c in _candidates(check_directory(directory), warn or _stderr_warning)
            for p in c.program_paths]


def check_directory(directory, what: str = "model directory") -> Path:
    """`directory` as a Path, or a UserError naming it (and `what` named it: an option, a variable) when it is
    missing or not a directory."""
    d = Path(directory)
    if not d.exists():
        raise UserError(f"{d}: no such directory ({what})")
    if not d.is_dir():
        raise UserError(f"{d}: not a directory ({what}: a directory of .model files)")
    return d


def describe_choice(chosen, binaries: Iterable[str | os.PathLike]) -> str:
    """What a model of the running build was chosen for, in the words of one line: "BINARY: MODEL (build ID…)",
    the binary being the first of `binaries` whose build id the model records."""
    binaries = [str(b) for b in binaries]
    try:
        recorded = {str(b).lower() for b in (modelfile.read(chosen).metadata.get("build_ids") or []) if b}
    except (FormatError, OSError):
        recorded = set()
    for b in binaries:
        i = symbolize.build_id(b)
        if i and i in recorded:
            return f"{b}: {chosen} (build {_short(i)})"
    return f"{binaries[0]}: {chosen}"


def select_model(directory, binaries: str | os.PathLike | Iterable[str | os.PathLike],
                 warn: Callable[[str], None] | None = None, what: str = "model directory"
                 ) -> tuple[Path | None, str | None]:
    """The model in `directory` for `binaries` (the executable a command runs, or several: the binaries behind a
    wrapper script) and the one line to show about the choice (None when a model of this very build was found).

    A model whose build ids hold a binary's build id comes first (the newest of them if several do); then the
    newest model of the same program, by file name (the line says it was trained on another build); else
    (None, a line saying that no model fits). `warn(line)` gets one line per file that is skipped (corrupt,
    foreign, unreadable); by default it goes to stderr. A missing directory, or one that is not a directory, is
    a UserError."""
    warn = warn or _stderr_warning
    d = check_directory(directory, what)
    if isinstance(binaries, (str, os.PathLike)):
        binaries = [binaries]
    binaries = [str(b) for b in binaries]
    ids = {b: symbolize.build_id(b) for b in binaries}
    names = {os.path.basename(b.rstrip("/")) for b in binaries}
    candidates = _candidates(d, warn)

    def newest(models: list[_Candidate]) -> _Candidate:
        return max(models, key=lambda c: (c.trained, c.path.name))

    exact = [c for c in candidates if c.build_ids & {i for i in ids.values() if i}]
    if exact:
        return newest(exact).path, None
    described = ", ".join(f"{b} (build id {_short(ids[b])})" for b in binaries)
    same_program = [c for c in candidates if c.programs & names]
    if same_program:
        chosen = newest(same_program)
        trained = (f"build id {', '.join(_short(i) for i in sorted(chosen.build_ids))}" if chosen.build_ids
                   else "a build it does not record")
        return chosen.path, (f"no model in {d} was trained on this build of {described}; taking the newest model "
                             f"of the same program, {chosen.path} (trained on another build: {trained}), whose "
                             f"call sites in the functions the rebuild did not change still match")
    return None, (f"no model in {d} was trained on {described} or another build of it: running without a "
                  f"model")


#: A model directory prepared for LD_PRELOAD (`llamalloc prepare --model-dir`; src/model/model_dir.h reads it):
#: one line "BUILD-ID MODEL" per build, MODEL a file name in the directory, the build's token tables beside it in
#: BUILD-ID.tokens.
INDEX_NAME = "builds.index"
INDEX_HEADER = ("# llamalloc prepare --model-dir: the model of each build, by GNU build id; its token tables are "
                "BUILD-ID.tokens\n")


def read_index(directory) -> dict[str, str]:
    """The lines of DIR/builds.index: build id -> model file name ({} when there is none)."""
    path = Path(directory) / INDEX_NAME
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    entries: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split(None, 1)
        if len(fields) == 2 and not line.startswith("#"):
            entries.setdefault(fields[0].lower(), fields[1].strip())
    return entries


def prepare_directory(directory, binaries: list[str] | None = None, log=lambda msg: None) -> dict[str, str]:
    """Prepares the model directory `directory` for a plain LD_PRELOAD with LLAMALLOC_MODEL_DIR: for each binary
    (by default each program that a model of the directory records, where it exists), the model that `llamalloc
    run --model-dir` takes for it (select_model), its token tables (the binary and the libraries it links) in
    DIR/BUILD-ID.tokens, and its line in DIR/builds.index. The index keeps the lines of other builds
    whose files are still there. Every file is written whole (temporary file and rename), the index last.
    Returns the builds prepared now: build id -> model file name. `log` gets one line per note and warning."""
    from .prepare import is_elf, linked_libraries, prepare, resolve_program

    d = check_directory(directory, "--model-dir")
    said: set[str] = set()

    def warn(line: str) -> None:
        if line not in said:
            said.add(line)
            log(f"warning: {line}")

    if binaries:
        executables = []
        for b in binaries:
            exe = resolve_program(b, as_path=True)
            if not is_elf(exe):
                raise UserError(f"{b}: not an ELF executable (a script?): give the binary that allocates")
            executables.append(exe)
    else:
        recorded = trained_programs(d, warn)
        if not recorded:
            raise UserError(f"{d}: no model here records the program it was trained on: name the binaries "
                            f"(llamalloc prepare --model-dir {d} BINARY...)")
        executables = []
        for model, program in recorded:
            if not os.path.isfile(program) or not is_elf(program):
                warn(f"{model.name} was trained on {program}, which is not an executable here; skipped (name "
                     f"its binary: llamalloc prepare --model-dir {d} BINARY)")
                continue
            executables.append(os.path.realpath(program))
    prepared: dict[str, str] = {}
    for exe in dict.fromkeys(executables):
        build_id = symbolize.build_id(exe)
        if not build_id:
            warn(f"{exe} has no GNU build id (link it with -Wl,--build-id): the allocator cannot choose its "
                 f"model; skipped")
            continue
        chosen, message = select_model(d, exe, warn=warn, what="--model-dir")
        if chosen is None:
            warn(f"no model in {d} was trained on {exe} (build id {_short(build_id)}) or another build of it; "
                 f"not prepared")
            continue
        if message:
            warn(message)
        if "\n" in chosen.name or chosen.name != chosen.name.strip():
            warn(f"{chosen}: a model file name with a line break or edge spaces cannot be indexed; skipped")
            continue
        prepare(chosen, [exe] + linked_libraries(exe), d / f"{build_id}.tokens", log=log)
        prepared[build_id] = chosen.name
        log(f"{exe}: {chosen.name} (build {_short(build_id)}), token tables in {build_id}.tokens")
    if not prepared:
        raise UserError(f"{d}: no build prepared (the lines above say why)" if said else
                        f"{d}: no build prepared")
    index = {b: m for b, m in read_index(d).items()
             if b not in prepared and (d / m).is_file() and (d / f"{b}.tokens").is_file()}
    index.update(prepared)
    files.write_text(d / INDEX_NAME, INDEX_HEADER + "".join(f"{b} {m}\n" for b, m in sorted(index.items())))
    return prepared
