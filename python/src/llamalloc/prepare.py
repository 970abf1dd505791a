"""Token tables for the in-process predictor (docs/formats/tokens.md, docs/prediction.md).

For every binary of a program (the executable and the shared libraries it loads), the model's token ids of each
frame the allocator may meet, computed ahead of time so that the allocation path only binary-searches a mapped
file. Names come from the same tool as training's symbolisation (`eu-addr2line -f -C -i`, through
`llamalloc.symbolize`), and tokens from the model's own vocabulary (`Vocabulary.frame_ids`), so a frame gets the
tokens it would have had in a profile:

* call sites: every `call` instruction (found with `objdump -d`) keyed by its return address; its tokens are the
  words of each (inlined) frame eu-addr2line gives for return address - 1, innermost first, separated by `@`,
  and in the program's own binary the call-site word of return address - 1 (llamalloc.profile.site_frame: its
  offset in the function symbol that holds it): exactly what a profile's stack holds for that return address;
* functions (from `nm`), the fallback for a return address that is not after a call we know: the function's
  name as eu-addr2line gives it at its entry;
* an address no symbol covers is `<unsymbolized>`, as in a profile.

The C library's start routines keep no frame pointer, so a frame-pointer walk ends at them while the profiler's
DWARF unwinder continues to `_start` (or to `clone3` for threads). Their entries carry the missing root frames
and a *terminal* flag: the allocator stops its walk there, with the same tokens as the profile.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import profile as _profile
from . import symbolize
from .errors import FormatError, UserError
from .model import modelfile
from .model.tokenizer import SEP, UNSYMBOLIZED, Vocabulary
from . import files

MAGIC = b"LLATOKEN"
VERSION = 1
HEADER = struct.Struct("<8sIIQIIII24x")  # magic, version, header_bytes, file_bytes, crc, binaries, vocab crc, size
BINARY_BYTES = 512
PATH_BYTES = 304
MAX_SEGMENTS = 4
MAX_BINARIES = 256
TERMINAL = 0x80000000
#: Part of the cache keys: bump when what prepare computes changes (cached tables are then rebuilt).
PREPARE_REVISION = 4
assert HEADER.size == 64

#: Root frames the profiler's DWARF unwinder finds above a C-library function that a frame-pointer walk cannot
#: leave (glibc is built without frame pointers): outermost function name -> the frames that follow it.
ROOT_CHAINS = {
    "__libc_start_call_main": ["__libc_start_main_impl", "_start"],
    "start_thread": ["__clone3"],
}
#: The frames every thread but the main one starts from, as the profiler's unwinder names them. A walk that
#: breaks in a thread's outermost frames (libstdc++'s std::thread trampoline keeps no frame pointer) ends with
#: them: they are the table's "<thread-root>" record (one function, [0, 1)).
THREAD_ROOT = ["start_thread", "__clone3"]
THREAD_ROOT_PATH = "<thread-root>"


@dataclass
class BinaryTable:
    path: str
    file_bytes: int
    mtime_ns: int
    build_id: str
    segments: list[tuple[int, int, int]]  # executable PT_LOADs: (file offset, vaddr, file size)
    sites: list[tuple[int, list[int], bool]] = field(default_factory=list)      # (return vaddr, ids, terminal)
    functions: list[tuple[int, int, list[int], bool]] = field(default_factory=list)  # (start, end, ids, terminal)


def vocab_crc(model: modelfile.ModelFile) -> int:
    """CRC-32 of the vocabulary sections as the model file stores them (the allocator computes the same)."""
    encoded = [t.encode("utf-8", "surrogatepass") + b"\0" for t in model.vocabulary]
    offsets = np.zeros(len(encoded) + 1, "<u4")
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    return zlib.crc32(b"".join(encoded), zlib.crc32(offsets.tobytes()))


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(f"{name} not found: install binutils and elfutils (scripts/setup.sh does)")
    return path


def _run(args: list[str]) -> str:
    r = subprocess.run(args, capture_output=True, text=True, errors="replace")
    return r.stdout if r.returncode == 0 else ""


_CALL = re.compile(r"^\s*([0-9a-f]+):\s+(?:notrack\s+|bnd\s+)?call")
_INSN = re.compile(r"^\s*([0-9a-f]+):\s")


def call_return_addresses(binary: str) -> list[int]:
    """Return addresses (ELF vaddrs) of every call instruction in the binary's code."""
    out = _run([_tool("objdump"), "-d", "--no-show-raw-insn", "-w", binary])
    rets: list[int] = []
    pending = False
    for line in out.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        if pending:
            rets.append(int(m.group(1), 16))
        pending = _CALL.match(line) is not None
    return sorted(set(rets))


def _frame_tokens(vocab: Vocabulary, names: list[str]) -> list[int]:
    ids: list[int] = []
    for i, name in enumerate(names):
        if i:
            ids.append(SEP)
        ids.extend(vocab.frame_ids(name))
    return ids


def _with_root(names: list[str]) -> tuple[list[str], bool]:
    chain = ROOT_CHAINS.get(names[-1]) if names else None
    return (names + chain, True) if chain else (names, False)


def build_binary_table(binary: str, vocab: Vocabulary) -> BinaryTable:
    path = os.path.realpath(binary)
    try:
        st = os.stat(path)
    except OSError as e:
        raise FormatError(binary, f"cannot read: {e.strerror}") from None
    if len(path.encode()) >= PATH_BYTES:
        raise UserError(f"{path}: path longer than {PATH_BYTES - 1} bytes, cannot be recorded in a token table")
    with open(path, "rb") as f:
        if f.read(4) != b"\x7fELF":
            raise FormatError(binary, "not an ELF binary")
    segments = [(s.file_offset, s.vaddr, s.filesz) for s in symbolize.load_segments(path) if s.executable]
    if not segments:
        raise FormatError(binary, "no executable segment (not a program or shared library?)")
    if len(segments) > MAX_SEGMENTS:
        raise FormatError(binary, f"{len(segments)} executable segments, at most {MAX_SEGMENTS} are supported")
    table = BinaryTable(path, st.st_size, st.st_mtime_ns, symbolize.build_id(path), segments)
    rets = call_return_addresses(path)
    funcs = symbolize.function_ranges(path)
    frames = symbolize.addr2line(path, [r - 1 for r in rets] + [s for s, _ in funcs])
    # Call-site words (llamalloc.profile.site_frame): training gave one to every frame of the program's own binary,
    # so the model's vocabulary has words of this binary exactly when it is that binary.
    sited = _profile.site_prefix(path) in vocab.site_binaries
    for ret, fr in zip(rets, frames[:len(rets)]):
        functions = [f[0] for f in fr]
        names, terminal = _with_root(functions)
        offset = _profile.function_offset(funcs, ret - 1) if sited and functions else None
        if offset is not None and functions[-1] not in _profile.UNSITED_FUNCTIONS:
            site = _profile.site_frame(path, functions[-1], offset)
            names = functions + [site] + names[len(functions):]
        ids = _frame_tokens(vocab, names) if names else [UNSYMBOLIZED]
        table.sites.append((ret, ids, terminal))
    for (start, end), fr in zip(funcs, frames[len(rets):]):
        if not fr:
            continue
        names, terminal = _with_root([fr[-1][0]])
        table.functions.append((start, end, _frame_tokens(vocab, names), terminal))
    return table


def encode_tables(tables: list[BinaryTable], crc: int, vocab_size: int) -> bytes:
    if len(tables) > MAX_BINARIES:
        raise UserError(f"{len(tables)} binaries, a token table holds at most {MAX_BINARIES}")
    records = bytearray()
    body = bytearray()
    base = HEADER.size + BINARY_BYTES * len(tables)

    def place(data: bytes) -> int:
        body.extend(b"\0" * (-(base + len(body)) % 8))
        offset = base + len(body)
        body.extend(data)
        return offset

    for t in tables:
        pool: list[int] = []
        site_rows = []
        for addr, ids, terminal in t.sites:
            site_rows.append(struct.pack("<QII", addr, len(pool), len(ids) | (TERMINAL if terminal else 0)))
            pool.extend(ids)
        func_rows = []
        for start, end, ids, terminal in t.functions:
            func_rows.append(struct.pack("<QQII", start, end, len(pool), len(ids) | (TERMINAL if terminal else 0)))
            pool.extend(ids)
        sites_off = place(b"".join(site_rows))
        funcs_off = place(b"".join(func_rows))
        tokens_off = place(np.asarray(pool, "<u4").tobytes())
        build_id = bytes.fromhex(t.build_id)[:32] if t.build_id else b""
        segs = b"".join(struct.pack("<QQQ", *s) for s in t.segments) + b"\0" * (24 * (MAX_SEGMENTS - len(t.segments)))
        rec = (t.path.encode().ljust(PATH_BYTES, b"\0")
               + struct.pack("<QqII", t.file_bytes, t.mtime_ns, len(t.segments), len(build_id))
               + build_id.ljust(32, b"\0") + segs
               + struct.pack("<QQQIII", sites_off, funcs_off, tokens_off, len(t.sites), len(t.functions), len(pool)))
        records.extend(rec.ljust(BINARY_BYTES, b"\0"))
    payload = bytes(records) + bytes(body)
    header = HEADER.pack(MAGIC, VERSION, HEADER.size, HEADER.size + len(payload), zlib.crc32(payload), len(tables),
                         crc, vocab_size)
    return header + payload


def linked_libraries(binary: str) -> list[str]:
    """The shared libraries the dynamic loader maps for `binary` (ldd), as real paths; [] for a static one."""
    r = subprocess.run([_tool("ldd"), binary], capture_output=True, text=True)
    libs = []
    for line in r.stdout.splitlines():
        m = re.search(r"=>\s*(/\S+)\s+\(", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if m and os.path.exists(m.group(1)):
            libs.append(os.path.realpath(m.group(1)))
    return libs


def _cache_dir() -> Path:
    base = os.environ.get("LLAMALLOC_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llamalloc")
    return Path(base) / "tokens"


def prepare(model_path, binaries: list[str], output, log=lambda msg: None) -> int:
    """Writes the token tables of `binaries` for the model at `model_path` into `output`; returns their count.
    Per-binary tables are cached (LLAMALLOC_CACHE_DIR, default ~/.cache/llamalloc/tokens) by model vocabulary,
    path, size and mtime."""
    model = modelfile.read(model_path)
    vocab = Vocabulary(model.vocabulary)
    crc = vocab_crc(model)
    from .progress import Bar

    tables: list[BinaryTable] = []
    reals = list(dict.fromkeys(os.path.realpath(b) for b in binaries))
    with Bar(len(reals), "prepare", "binary") as bar:
        # On a terminal the log lines go above the bar (and the bar's estimate counts binaries, the big one
        # being the C library).
        line = (lambda m: bar.line(f"llamalloc: {m}")) if bar.enabled else log
        for real in reals:
            tables.append(_cached_table(real, vocab, crc, line))
            bar.advance()
    tables.append(BinaryTable(THREAD_ROOT_PATH, 0, 0, "", [], [], [(0, 1, _frame_tokens(vocab, THREAD_ROOT), False)]))
    # Durable: the allocator evicts the pages it validated, and a page not yet written back cannot be evicted.
    files.write_bytes(output, encode_tables(tables, crc, len(vocab)), durable=True)
    return len(tables) - 1


def _cached_table(path: str, vocab: Vocabulary, crc: int, log) -> BinaryTable:
    import pickle

    try:
        st = os.stat(path)
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror}") from None
    key = hashlib.sha256(f"{VERSION}.{PREPARE_REVISION}\n{crc:08x}\n{len(vocab)}\n{path}\n{st.st_size}\n{st.st_mtime_ns}".encode()).hexdigest()
    cache = _cache_dir() / f"{key[:32]}.pickle"
    if cache.exists():
        try:
            with open(cache, "rb") as f:
                table = pickle.load(f)
            if isinstance(table, BinaryTable) and table.path == path:
                return table
        except Exception:  # a damaged cache entry is rebuilt
            pass
    log(f"preparing tokens of {path}")
    table = build_binary_table(path, vocab)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        files.write_bytes(cache, pickle.dumps(table))
    except (OSError, UserError):
        pass  # no cache: only slower next time
    return table


def resolve_program(program: str, as_path: bool = False) -> str:
    """The real path of `program`: a path, or a name looked up on PATH as a shell would (as_path: a name that is
    an existing file is that file, as for `llamalloc prepare`, whose arguments are files)."""
    if os.sep in program or (as_path and os.path.lexists(program)):
        exe = program
    else:
        exe = shutil.which(program)
    if exe is None or not os.path.exists(exe):
        raise UserError(f"{program}: command not found" if not as_path else f"{program}: no such file",
                        exit_code=127)
    if os.path.isdir(exe):
        raise UserError(f"{program}: is a directory, not a program", exit_code=126)
    return os.path.realpath(exe)


def is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}", exit_code=126) from None


def program_binaries(program: str, as_path: bool = False) -> list[str]:
    """The executable at `program` (a path or a name on PATH; as_path: an existing file first) and the libraries
    it links."""
    exe = resolve_program(program, as_path)
    if not is_elf(exe):
        raise UserError(f"{program}: not an ELF executable (a script?): give the binary that allocates to "
                        f"`llamalloc prepare`")
    return [exe] + linked_libraries(exe)


def _base(path: str) -> str:
    return os.path.basename(path.rstrip("/"))


def trained_on_other_program(model: modelfile.ModelFile, programs: list[str]) -> list[str] | None:
    """The programs the model was trained on when none of them is one of `programs` (by real path or file
    name), else None. A model of another program predicts the common library frames it knows and guesses the
    rest."""
    trained = [p for p in (model.program or "").split("\n") if p]
    if not trained or not programs:
        return None
    names = {_base(p) for p in programs} | {os.path.realpath(p) for p in programs}
    for t in trained:
        if _base(t) in names or os.path.realpath(t) in names:
            return None
    return trained


def trained_on_other_build(model: modelfile.ModelFile, binaries: list[str]) -> list[tuple[str, str]]:
    """(binary, its build id) for each of `binaries` that is a program the model was trained on (by file name or
    real path) but not a build it was trained on. Empty for a model that records no build ids (written before
    they were recorded) or a binary without one."""
    trained_ids = set(model.metadata.get("build_ids") or [])
    trained = [p for p in (model.program or "").split("\n") if p]
    if not trained_ids or not trained:
        return []
    names = {_base(t) for t in trained} | {os.path.realpath(t) for t in trained}
    out = []
    for b in binaries:
        if _base(b) in names or os.path.realpath(b) in names:
            bid = symbolize.build_id(b)
            if bid and bid not in trained_ids:
                out.append((b, bid))
    return out


def _short(build_id: str) -> str:
    return build_id[:8] + "…"


def note_other_builds(model: modelfile.ModelFile, model_path, binaries: list[str], log) -> None:
    """One note per binary that is another build of a program the model was trained on: not an error, the
    call-site words of the functions the rebuild left alone still match (docs/model.md, "Call sites")."""
    trained = ", ".join(_short(b) for b in sorted(model.metadata.get("build_ids") or []))
    for binary, bid in trained_on_other_build(model, binaries):
        log(f"note: {os.path.basename(str(model_path))} was trained on another build of {binary} (build id "
            f"{trained}, this one {_short(bid)}); call sites are matched by function and offset in it, so the "
            f"functions the rebuild did not change keep their words")


def prepare_for_run(model_path, program: str, log=None, binaries: list[str] | None = None,
                    note_builds: bool = True) -> dict[str, str]:
    """The environment that makes the allocator predict with `model_path` for `program`: LLAMALLOC_MODEL and
    LLAMALLOC_TOKENS (token tables of the program and its libraries, in the cache, rebuilt when the model or a
    binary changes). A program that is not an ELF executable (a wrapper script) is refused unless `binaries`
    names the binaries that allocate (`run --binary`): without their tables the model would see only sizes.
    note_builds=False: no note that the model was trained on another build (the caller has said so)."""
    import sys

    if log is None:
        log = lambda m: print(f"llamalloc: {m}", file=sys.stderr)  # noqa: E731
    model_path = os.path.realpath(model_path)
    model = modelfile.read(model_path)  # a bad model is refused here, before the program starts
    exe = resolve_program(program)
    found: list[str] = []
    if is_elf(exe):
        found = [exe] + linked_libraries(exe)
    elif not binaries:
        raise UserError(f"{program}: not an ELF executable (a wrapper script?): the model needs the token tables "
                        f"of the binary that allocates; name it with --binary PATH (e.g. llamalloc run --model "
                        f"{os.path.basename(model_path)} --binary ./server -- {program})")
    for b in binaries or []:
        found += program_binaries(b, as_path=True)
    executables = ([exe] if found and found[0] == exe else []) + [resolve_program(b, True) for b in binaries or []]
    other = trained_on_other_program(model, executables)
    if other is not None:
        log(f"warning: {model_path} was trained on {', '.join(other)}, not on "
            f"{', '.join(executables)}: its classes for this program's own functions are guesses; record and "
            f"train on this program (docs/prediction.md)")
    elif note_builds:
        note_other_builds(model, model_path, executables, log)
    binaries = list(dict.fromkeys(found))
    identity = [f"{vocab_crc(model):08x}", str(len(model.vocabulary))]
    for b in binaries:
        st = os.stat(b)
        identity.append(f"{b}\n{st.st_size}\n{st.st_mtime_ns}")
    key = hashlib.sha256(f"{VERSION}.{PREPARE_REVISION}\n".encode() + "\n".join(identity).encode()).hexdigest()[:32]
    out = _cache_dir() / f"{key}.tokens"
    if not out.exists():
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the token cache {out.parent}: {e.strerror}") from None
        prepare(model_path, binaries, out, log=log)
    return {"LLAMALLOC_MODEL": model_path, "LLAMALLOC_TOKENS": str(out)}
