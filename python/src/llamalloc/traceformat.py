"""The record format of the profiler's files (docs/formats/trace.md): reading a trace and the raw profile dump
that llamalloc.profile turns into a profile, both written by libllamalloc_prof.so, plain or zstd-compressed. This
is the one Python reader of the format. It starts no program (recording a trace is llamalloc.trace, which
re-exports everything here), so the modules that only read these files sit below the one that runs programs.

    t = llamalloc.traceformat.load("server.trace")     # also llamalloc.trace.load
    t.events            # numpy structured array, in time order: time_ns, address, size_bytes, stack_id, ...
    t.stacks[stack_id]  # tuple of addresses, innermost first
    t.to_table()        # pyarrow.Table, one row per event (what --to-parquet writes)
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import FormatError
from . import files

TRACE_MAGIC = b"LLTRACE\0"
RAW_PROFILE_MAGIC = b"LLPRAW\0\0"
TRACE_VERSION = 1
RAW_PROFILE_VERSION = 1

# Record types (src/profiler/trace_format.h RecordType).
REC_EVENTS = 1
REC_STACK = 2
REC_MAPPING = 3
REC_SITE = 4
REC_PROGRAM = 5
REC_SYMBOLS = 6
REC_END = 0x454E44

KIND_ALLOC = 1
KIND_FREE = 2
FROM_REALLOC = 1 << 8
NO_STACK = 0xFFFFFFFF

#: FileHeader.flags (trace_format.h FileFlags): times are on the program clock, CLOCK_MONOTONIC less the
#: profiler's own time (docs/profiler.md, "Program time"). Files written before the flags have 0 there.
FLAG_PROGRAM_TIME = 1

HEADER = struct.Struct("<8sII QQQQ Q8x")  # FileHeader, 64 bytes
RECORD = struct.Struct("<II")
MAPPING = struct.Struct("<QQQII")
END = struct.Struct("<QQQQ")
EVENT_DTYPE = np.dtype([("time_ns", "<u8"), ("address", "<u8"), ("size_bytes", "<u8"), ("stack_id", "<u4"),
                        ("thread_id", "<u4"), ("alignment_bytes", "<u4"), ("kind", "<u4")])
assert EVENT_DTYPE.itemsize == 40 and HEADER.size == 64


@dataclass
class Mapping:
    memory_start: int
    memory_limit: int
    file_offset: int
    build_id: str  # hex
    path: str


@dataclass
class Header:
    magic: bytes
    version: int
    pid: int
    start_time_ns: int
    start_mono_ns: int
    sample_bytes: int
    flags: int = 0

    @property
    def program_time(self) -> bool:
        """Times are on the program clock (the profiler's own time left out), not CLOCK_MONOTONIC."""
        return bool(self.flags & FLAG_PROGRAM_TIME)


@dataclass
class RawFile:
    """The records of a trace or raw profile, as read (payloads kept as bytes where large)."""
    header: Header
    program: str = ""
    stacks: dict[int, tuple[int, ...]] = field(default_factory=dict)
    mappings: list[Mapping] = field(default_factory=list)
    event_chunks: list[bytes] = field(default_factory=list)
    sites: list[bytes] = field(default_factory=list)
    symbols: dict | None = None
    end: tuple[int, int, int, int] | None = None  # end_time_ns, end_mono_ns, count, dropped


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: zstd level of `llamalloc trace`'s files: fast (hundreds of MB/s) and about 6x smaller than the raw events.
ZSTD_LEVEL = 3


def is_compressed(path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == ZSTD_MAGIC
    except OSError:
        return False


def compress_file(src, dst, level: int = ZSTD_LEVEL) -> None:
    """Writes src compressed with zstd (one frame) to dst, streaming."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        cctx.copy_stream(fin, fout, size=os.fstat(fin.fileno()).st_size)


def _decompress(path, data: bytes) -> bytes:
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            chunks = []
            while True:
                chunk = reader.read(1 << 24)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)
    except zstandard.ZstdError as e:
        raise FormatError(path, f"corrupt zstd stream ({e})") from None


def file_bytes(path) -> bytes:
    """The bytes of a trace or raw file, decompressed when it is zstd-compressed."""
    data = Path(path).read_bytes()
    return _decompress(path, data) if data[:4] == ZSTD_MAGIC else data


def compress_bytes(data: bytes, level: int = ZSTD_LEVEL) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=level, write_checksum=True).compress(data)


def read_raw(path, magic: bytes, version: int, what: str) -> RawFile:
    """Reads any file in the record format, plain or zstd-compressed; FormatError for anything but a complete
    file of this version."""
    data = files.read_input(path, "a file")
    if data[:4] == ZSTD_MAGIC:
        data = _decompress(path, data)
    if len(data) < HEADER.size or data[:8] not in (TRACE_MAGIC, RAW_PROFILE_MAGIC):
        raise FormatError(path, f"not a llamalloc {what} (bad magic number)")
    if data[:8] != magic:
        other = "trace" if data[:8] == TRACE_MAGIC else "raw profile"
        raise FormatError(path, f"is a llamalloc {other}, not a {what}")
    m, ver, header_bytes, pid, start_ns, start_mono, sample_bytes, flags = HEADER.unpack_from(data, 0)
    if ver != version:
        raise FormatError(path, f"{what} format version {ver}; this llamalloc reads version {version}")
    if header_bytes < HEADER.size or header_bytes > len(data):
        raise FormatError(path, "corrupt header")
    raw = RawFile(Header(m, ver, pid, start_ns, start_mono, sample_bytes, flags))
    pos = header_bytes
    n = len(data)
    while pos < n:
        if pos + RECORD.size > n:
            raise FormatError(path, f"truncated at byte {pos} (cut inside a record header)")
        rtype, plen = RECORD.unpack_from(data, pos)
        pos += RECORD.size
        if plen % 8 != 0:
            raise FormatError(path, f"corrupt record at byte {pos - RECORD.size} (length {plen})")
        if pos + plen > n:
            raise FormatError(path, f"truncated at byte {pos} (a record of {plen} bytes is cut short)")
        payload = data[pos:pos + plen]
        pos += plen
        if raw.end is not None and rtype != REC_SYMBOLS:
            raise FormatError(path, "corrupt: records after the end record")
        try:
            _read_record(raw, rtype, payload)
        except (struct.error, ValueError, UnicodeDecodeError):
            raise FormatError(path, f"corrupt record of type {rtype} before byte {pos}") from None
        if rtype not in (REC_EVENTS, REC_STACK, REC_MAPPING, REC_SITE, REC_PROGRAM, REC_SYMBOLS, REC_END):
            raise FormatError(path, f"corrupt: unknown record type {rtype} before byte {pos}")
    if raw.end is None:
        raise FormatError(path, "truncated: no end record (the program was killed, or the file was cut)")
    return raw


def _read_record(raw: RawFile, rtype: int, payload: bytes) -> None:
    if rtype == REC_EVENTS:
        if len(payload) % EVENT_DTYPE.itemsize:
            raise ValueError("event payload")
        raw.event_chunks.append(payload)
    elif rtype == REC_STACK:
        stack_id, depth = struct.unpack_from("<II", payload, 0)
        if 8 + 8 * depth != len(payload):
            raise ValueError("stack length")
        raw.stacks[stack_id] = struct.unpack_from(f"<{depth}Q", payload, 8)
    elif rtype == REC_MAPPING:
        start, limit, offset, bid_len, path_len = MAPPING.unpack_from(payload, 0)
        if MAPPING.size + bid_len + path_len > len(payload):
            raise ValueError("mapping length")
        bid = payload[MAPPING.size:MAPPING.size + bid_len].hex()
        p = payload[MAPPING.size + bid_len:MAPPING.size + bid_len + path_len].decode()
        raw.mappings.append(Mapping(start, limit, offset, bid, p))
    elif rtype == REC_SITE:
        raw.sites.append(payload)
    elif rtype == REC_PROGRAM:
        raw.program = payload.rstrip(b"\0").decode()
    elif rtype == REC_SYMBOLS:
        raw.symbols = json.loads(payload.rstrip(b"\0").decode())
    elif rtype == REC_END:
        raw.end = END.unpack_from(payload, 0)


@dataclass
class Trace:
    path: str
    pid: int
    program: str
    start_time_ns: int
    start_mono_ns: int
    events: np.ndarray                   # EVENT_DTYPE, sorted by time (stable: a thread's order is kept)
    stacks: dict[int, tuple[int, ...]]   # stack id -> addresses (return address - 1), innermost first
    mappings: list[Mapping]
    symbols: dict[int, list[tuple[str, str, int]]] | None  # address -> frames (function, file, line), inner first
    dropped: int
    program_time: bool = False  # event times on the program clock (FLAG_PROGRAM_TIME), not CLOCK_MONOTONIC

    @property
    def symbolized(self) -> bool:
        return self.symbols is not None

    def frames(self, stack_id: int) -> list[str]:
        """The stack as function names (innermost first, inlined frames expanded) or 0x addresses."""
        out: list[str] = []
        for a in self.stacks.get(stack_id, ()):
            fr = self.symbols.get(a) if self.symbols else None
            if fr:
                out.extend(f[0] for f in fr)
            else:
                out.append(f"0x{a:x}")
        return out

    def to_table(self):
        """One row per event, in order. A free gets the size, alignment and stack of the allocation it ends
        (alloc_index, -1 when that allocation is not in the trace)."""
        import pyarrow as pa
        ev = self.events
        n = len(ev)
        kind = ev["kind"] & 0xFF
        size = ev["size_bytes"].astype(np.int64)
        align = ev["alignment_bytes"].astype(np.int64)
        stack = ev["stack_id"].astype(np.int64)
        alloc_index = pair_frees(ev)
        addr = ev["address"]
        frees = np.nonzero(alloc_index >= 0)[0]
        if len(frees):
            allocs = alloc_index[frees]
            size[frees] = size[allocs]
            align[frees] = align[allocs]
            stack[frees] = stack[allocs]
        stack[stack == NO_STACK] = -1
        table = pa.table({
            "seq": pa.array(np.arange(n, dtype=np.int64)),
            "time_ns": pa.array(ev["time_ns"].astype(np.int64) - self.start_mono_ns),
            "kind": pa.array(np.where(kind == KIND_ALLOC, "alloc", "free")).dictionary_encode(),
            "address": pa.array(addr),
            "size_bytes": pa.array(size),
            "alignment_bytes": pa.array(align),
            "thread_id": pa.array(ev["thread_id"].astype(np.int64)),
            "stack_id": pa.array(stack),
            "from_realloc": pa.array((ev["kind"] & FROM_REALLOC) != 0),
            "alloc_index": pa.array(alloc_index),
        })
        meta = {
            "llamalloc.trace.version": str(TRACE_VERSION),
            "llamalloc.trace.clock": "program" if self.program_time else "monotonic",
            "program": self.program,
            "pid": str(self.pid),
            "stacks": json.dumps({str(k): self.frames(k) for k in sorted(self.stacks)}),
        }
        return table.replace_schema_metadata(meta)


def pair_frees(events: np.ndarray) -> np.ndarray:
    """For each event (EVENT_DTYPE, in order), the index of the allocation a free ends; -1 for an allocation and
    for a free whose allocation is not in the trace. A free pairs with the allocation just before it at the same
    address: sorted by (address, order), an address's events alternate allocation, free, allocation, ..."""
    n = len(events)
    alloc_index = np.full(n, -1, dtype=np.int64)
    if n > 1:
        kind = events["kind"] & 0xFF
        addr = events["address"]
        order = np.lexsort((np.arange(n), addr))
        a, k = addr[order], kind[order]
        pair = (k[1:] == KIND_FREE) & (k[:-1] == KIND_ALLOC) & (a[1:] == a[:-1])
        alloc_index[order[1:][pair]] = order[:-1][pair]
    return alloc_index


def load(path) -> Trace:
    """Reads a trace; FormatError when it is truncated, corrupt, foreign or of another version."""
    raw = read_raw(path, TRACE_MAGIC, TRACE_VERSION, "trace")
    if raw.event_chunks:
        events = np.frombuffer(b"".join(raw.event_chunks), dtype=EVENT_DTYPE)
    else:
        events = np.zeros(0, dtype=EVENT_DTYPE)
    kinds = events["kind"] & 0xFF
    if len(events) and not np.isin(kinds, (KIND_ALLOC, KIND_FREE)).all():
        raise FormatError(path, "corrupt: an event of unknown kind")
    known = set(raw.stacks) | {NO_STACK}
    if len(events) and not set(np.unique(events["stack_id"]).tolist()) <= known:
        raise FormatError(path, "corrupt: an event refers to a stack that is not in the file")
    order = np.argsort(events["time_ns"], kind="stable")
    symbols = None
    if raw.symbols is not None:
        symbols = {int(k, 16): [tuple(f) for f in v] for k, v in raw.symbols.items()}
    return Trace(str(path), raw.header.pid, raw.program, raw.header.start_time_ns, raw.header.start_mono_ns,
                 events[order], raw.stacks, raw.mappings, symbols, raw.end[3], raw.header.program_time)


def write_parquet(trace_path, out_path) -> int:
    """Converts a trace to Parquet (temp file + rename); returns the number of events."""
    import pyarrow.parquet as pq
    t = load(trace_path)
    table = t.to_table()
    with files.replacing(out_path) as tmp:
        pq.write_table(table, tmp)
    return table.num_rows
