"""A model for a binary, chosen from a directory of models (`llamalloc run --model-dir`, LLAMALLOC_MODEL_DIR;
docs/prediction.md, "Choosing a model for a binary").

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
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from . import symbolize
from .errors import FormatError, UserError
from .model import modelfile

MODEL_SUFFIX = ".model"


@dataclass
class _Candidate:
    path: Path
    programs: set[str]  # file names of the programs it was trained on
    build_ids: set[str]
    trained: float  # seconds since the epoch


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
        programs = {os.path.basename(p.rstrip("/")) for p in (m.program or "").split("\n") if p.strip()}
        build_ids = {str(b).lower() for b in (m.metadata.get("build_ids") or []) if b}
        out.append(_Candidate(path, programs, build_ids, trained))
    return out


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
