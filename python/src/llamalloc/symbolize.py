"""Offline symbolisation of profiles and traces: addresses -> (demangled function, file, line), inlined frames
expanded innermost first, stored in the file itself so that training can happen on another machine.

Uses elfutils' addr2line (`eu-addr2line -f -C -i -a -e BINARY`, one batch per mapped binary; binutils'
addr2line names the wrong function for the last byte of a call inside an inlined body) and readelf for the
program headers and build id. A binary that is missing, or whose build id differs from the one recorded, is
skipped with a warning: its addresses stay unsymbolised rather than being given wrong names.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass

from . import profile as _profile
from . import traceformat
from .errors import FormatError, UserError
from . import files

Frames = list[tuple[str, str, int]]  # (function, file, line), innermost first


@dataclass
class Segment:
    file_offset: int
    vaddr: int
    filesz: int
    executable: bool


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UserError(f"{name} not found: install elfutils and binutils (scripts/setup.sh does)")
    return path


def _readelf(args: list[str], binary: str) -> str:
    r = subprocess.run([_tool("readelf"), "-W", *args, binary], capture_output=True, text=True)
    return r.stdout if r.returncode == 0 else ""


def load_segments(binary: str) -> list[Segment]:
    out = []
    for line in _readelf(["-l"], binary).splitlines():
        f = line.split()
        if len(f) >= 7 and f[0] == "LOAD":
            out.append(Segment(int(f[1], 16), int(f[2], 16), int(f[4], 16), "E" in "".join(f[6:-1])))
    return out


def build_id(binary: str) -> str:
    m = re.search(r"Build ID:\s*([0-9a-fA-F]+)", _readelf(["-n"], binary))
    return m.group(1).lower() if m else ""


def function_ranges(binary: str) -> list[tuple[int, int]]:
    """Non-overlapping [start, end) ELF vaddrs of the code symbols (nm, dynamic symbols too), sorted. The
    functions of call-site words (llamalloc.profile.site_frame), for a profile and for `prepare` alike."""
    ranges: set[tuple[int, int]] = set()
    for extra in ([], ["-D"]):
        r = subprocess.run([_tool("nm"), "--defined-only", "-S", "-P", *extra, binary], capture_output=True,
                           text=True, errors="replace")
        for line in (r.stdout if r.returncode == 0 else "").splitlines():
            f = line.split()
            if len(f) >= 4 and f[1] in "tTwWiI" and f[1] != "":
                start, size = int(f[2], 16), int(f[3], 16)
                if size > 0:
                    ranges.add((start, start + size))
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start < out[-1][1]:
            continue  # an alias or a symbol nested in the previous one: the outer range names it
        out.append((start, end))
    return out


def addr2line(binary: str, elf_addresses: list[int]) -> list[Frames]:
    """Frames for each address (empty where addr2line knows nothing)."""
    if not elf_addresses:
        return []
    stdin = "".join(f"0x{a:x}\n" for a in elf_addresses)
    r = subprocess.run([_tool("eu-addr2line"), "-f", "-C", "-i", "-a", "-e", binary], input=stdin,
                       capture_output=True, text=True)
    if r.returncode != 0:
        return [[] for _ in elf_addresses]
    results: list[Frames] = []
    lines = r.stdout.splitlines()
    i = 0
    while i < len(lines):
        if not lines[i].startswith("0x"):
            i += 1
            continue
        i += 1
        frames: Frames = []
        while i + 1 < len(lines) and not lines[i].startswith("0x"):
            func, where = lines[i], lines[i + 1]
            i += 2
            func = func.split(" inlined at ", 1)[0]  # "f inlined at file:line:col in caller"
            m = re.match(r"^(.*?):(\d+)(?::\d+)?$", where)
            file, line_no = (m.group(1), int(m.group(2))) if m else ("", 0)
            if func == "??":
                continue
            frames.append((func, "" if file == "??" else file, line_no))
        results.append(frames)
    if len(results) != len(elf_addresses):  # an output we could not follow: better nothing than misaligned names
        return [[] for _ in elf_addresses]
    return results


def symbolize_addresses(mappings: list[traceformat.Mapping], addresses: set[int],
                        warn=lambda msg: None) -> dict[int, Frames]:
    """Frames for every address that falls in a mapping whose binary is here and matches its build id."""
    by_mapping: dict[int, list[int]] = {}
    for a in addresses:
        for i, m in enumerate(mappings):
            if m.memory_start <= a < m.memory_limit:
                by_mapping.setdefault(i, []).append(a)
                break
    result: dict[int, Frames] = {}
    checked: dict[str, bool] = {}
    for i, addrs in sorted(by_mapping.items()):
        m = mappings[i]
        if m.path not in checked:
            ok = os.path.isfile(m.path)
            if not ok:
                warn(f"{m.path}: not found, its addresses stay unsymbolized")
            elif m.build_id and build_id(m.path) not in ("", m.build_id):
                warn(f"{m.path}: build id differs from the recorded {m.build_id}, its addresses stay unsymbolized")
                ok = False
            checked[m.path] = ok
        if not checked[m.path]:
            continue
        segs = [s for s in load_segments(m.path) if s.file_offset <= m.file_offset < s.file_offset + max(1, s.filesz)]
        if not segs:
            warn(f"{m.path}: no segment at file offset 0x{m.file_offset:x}, its addresses stay unsymbolized")
            continue
        seg = segs[0]
        elf = [a - m.memory_start + (m.file_offset - seg.file_offset) + seg.vaddr for a in addrs]
        for a, frames in zip(addrs, addr2line(m.path, elf)):
            if frames:
                result[a] = frames
    return result


def _record_program_functions(p, mappings: list[traceformat.Mapping], resolved_mappings: set[int]) -> None:
    """Replaces the profile's FUNCTIONS_COMMENT by the function ranges (file offsets) of the program's own binary
    that hold one of its symbolised locations: what a location's call-site word needs (profile.site_frame)."""
    comments = [c for c in p.comment if not p.string_table[c].startswith(_profile.FUNCTIONS_COMMENT)]
    del p.comment[:]
    p.comment.extend(comments)
    program = next((p.string_table[c][len("program="):] for c in comments
                    if p.string_table[c].startswith("program=")), mappings[0].path if mappings else "")
    ids = [m.id for i, m in enumerate(p.mapping) if mappings[i].path == program and m.id in resolved_mappings]
    if not ids:
        return
    segments = [s for s in load_segments(program) if s.executable]
    ranges = []
    for start, end in function_ranges(program):
        seg = next((s for s in segments if s.vaddr <= start < s.vaddr + s.filesz), None)
        if seg is not None:
            ranges.append((start - seg.vaddr + seg.file_offset, end - seg.vaddr + seg.file_offset))
    ranges.sort()
    by_start = {start: (start, end) for start, end in ranges}
    by_id = {m.id: m for m in p.mapping}
    held = set()
    for loc in p.location:
        if loc.mapping_id in ids and loc.line:
            m = by_id[loc.mapping_id]
            a = loc.address - m.memory_start + m.file_offset
            offset = _profile.function_offset(ranges, a)
            if offset is not None:
                held.add(by_start[a - offset])
    p.comment.append(_profile._Strings(p.string_table).add(_profile.format_functions(sorted(held))))


def symbolize_profile(path, out, warn) -> int:
    p = _profile.load_proto(path)
    strings = _profile._Strings(p.string_table)
    mappings = [traceformat.Mapping(m.memory_start, m.memory_limit, m.file_offset, p.string_table[m.build_id],
                               p.string_table[m.filename]) for m in p.mapping]
    symbols = symbolize_addresses(mappings, {loc.address for loc in p.location}, warn)
    del p.function[:]
    functions: dict[tuple[str, str], int] = {}
    for loc in p.location:
        del loc.line[:]
        for func, file, line_no in symbols.get(loc.address, []):
            fid = functions.get((func, file))
            if fid is None:
                fid = functions[(func, file)] = len(functions) + 1
                f = p.function.add()
                f.id = fid
                f.name = strings.add(func)
                f.system_name = f.name
                f.filename = strings.add(file)
            ln = loc.line.add()
            ln.function_id, ln.line = fid, line_no
    resolved_mappings = {loc.mapping_id for loc in p.location if loc.line}
    _record_program_functions(p, mappings, resolved_mappings)
    for m in p.mapping:
        done = m.id in resolved_mappings
        m.has_functions = m.has_filenames = m.has_line_numbers = m.has_inline_frames = done
    _profile.write(p, out)
    return len(symbols)


def symbolize_trace(path, out, warn) -> int:
    raw = traceformat.read_raw(path, traceformat.TRACE_MAGIC, traceformat.TRACE_VERSION, "trace")
    addresses = {a for st in raw.stacks.values() for a in st}
    symbols = symbolize_addresses(raw.mappings, addresses, warn)
    compressed = traceformat.is_compressed(path)
    data = traceformat.file_bytes(path)
    header_bytes = struct.unpack_from("<I", data, 12)[0]
    parts = [data[:header_bytes]]
    end = b""
    pos = header_bytes
    while pos < len(data):
        rtype, plen = traceformat.RECORD.unpack_from(data, pos)
        rec = data[pos:pos + traceformat.RECORD.size + plen]
        pos += traceformat.RECORD.size + plen
        if rtype == traceformat.REC_END:
            end = rec
        elif rtype != traceformat.REC_SYMBOLS:
            parts.append(rec)
    table = json.dumps({f"{a:x}": [list(f) for f in fr] for a, fr in sorted(symbols.items())}).encode()
    table += b"\0" * (-len(table) % 8)
    parts.append(traceformat.RECORD.pack(traceformat.REC_SYMBOLS, len(table)) + table)
    parts.append(end)
    body = b"".join(parts)
    files.write_bytes(out, traceformat.compress_bytes(body) if compressed else body)
    return len(symbols)


def symbolize(path, out=None, warn=lambda msg: None) -> int:
    """Symbolizes a profile or a trace into out (default: in place); returns how many addresses got names."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror}") from None
    out = out or path
    if head[:2] == b"\x1f\x8b":
        return symbolize_profile(path, out, warn)
    if head == traceformat.TRACE_MAGIC or (head[:4] == traceformat.ZSTD_MAGIC
                                           and traceformat.file_bytes(path)[:8] == traceformat.TRACE_MAGIC):
        return symbolize_trace(path, out, warn)
    raise FormatError(path, "neither a llamalloc profile nor a llamalloc trace")
