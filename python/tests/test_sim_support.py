"""Hand-made trace files for the simulator's tests, laid out byte for byte as docs/formats/trace.md says
(src/profiler/trace_format.h): a 64-byte header, records of (type, payload bytes), an end record."""
from __future__ import annotations

import struct
from pathlib import Path

START_MONO_NS = 1_000_000_000
MS = 1_000_000
EVENTS, STACK, END = 1, 2, 0x454E44
ALLOC, FREE = 1, 2


def header(start_mono_ns: int = START_MONO_NS) -> bytes:
    return b"LLTRACE\0" + struct.pack("<IIQQQQQQ", 1, 64, 4242, 0, start_mono_ns, 0, 0, 0)


def record(kind: int, payload: bytes) -> bytes:
    return struct.pack("<II", kind, len(payload)) + payload


def alloc(t_ms: float, address: int, size: int, stack: int = 1, thread: int = 1) -> bytes:
    return struct.pack("<QQQIIII", START_MONO_NS + int(t_ms * MS), address, size, stack, thread, 16, ALLOC)


def free(t_ms: float, address: int, thread: int = 1) -> bytes:
    return struct.pack("<QQQIIII", START_MONO_NS + int(t_ms * MS), address, 0, 0xFFFFFFFF, thread, 0, FREE)


def trace_bytes(events: list[bytes]) -> bytes:
    body = header() + record(STACK, struct.pack("<II", 1, 1) + struct.pack("<Q", 0x401000))
    if events:
        body += record(EVENTS, b"".join(events))
    return body + record(END, struct.pack("<QQQQ", 0, 0, len(events), 0))


def write_trace(path: Path, events: list[bytes]) -> Path:
    path.write_bytes(trace_bytes(events))
    return path


MAPPING = 3


def stack_record(stack_id: int, frames: list[int]) -> bytes:
    """A STACK record: frames are return address - 1, innermost first."""
    return record(STACK, struct.pack("<II", stack_id, len(frames)) + b"".join(struct.pack("<Q", f) for f in frames))


def mapping_record(start: int, limit: int, file_offset: int, path: str, build_id: bytes = b"") -> bytes:
    """A MAPPING record: one executable PT_LOAD of a loaded object."""
    payload = struct.pack("<QQQII", start, limit, file_offset, len(build_id), len(path.encode())) + build_id
    payload += path.encode()
    return record(MAPPING, payload + b"\0" * (-len(payload) % 8))


def trace_with(records: list[bytes], events: list[bytes]) -> bytes:
    """A trace with the given STACK and MAPPING records before its events."""
    body = header() + b"".join(records)
    if events:
        body += record(EVENTS, b"".join(events))
    return body + record(END, struct.pack("<QQQQ", 0, 0, len(events), 0))
