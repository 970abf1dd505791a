"""Lifetime profiles: pprof's profile.proto, gzipped (docs/formats/profile.md). This is the one Python reader
and writer of the format.

    p = llamalloc.profile.load("server.prof")      # Profile; FormatError on a bad file
    table = llamalloc.profile.samples_table(["a.prof", "b.prof"])   # pyarrow.Table, one row per sample
"""
from __future__ import annotations

import bisect
import gzip
import os
import socket
import struct
import zlib
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from .errors import FormatError
from .proto import profile_pb2
from . import traceformat as _raw
from . import files

VERSION = 1
MARKER = "llamalloc-profile"
LIFETIME_CLASSES = 8

# Sample types, in this order (the contract of docs/formats/profile.md).
SAMPLE_TYPES = [
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("freed_objects", "count"),
    ("freed_space", "bytes"),
    ("lifetime_sum", "nanoseconds"),
    ("lifetime_sumsq", "milliseconds_squared"),
    ("live_at_exit_objects", "count"),
    ("live_at_exit_space", "bytes"),
] + [(f"class_{k}", "count") for k in range(LIFETIME_CLASSES)]
INDEX = {name: i for i, (name, _) in enumerate(SAMPLE_TYPES)}
INT64_MAX = (1 << 63) - 1
#: The comment that says which clock the lifetimes were measured on: "program" (the profiler's own time left
#: out; docs/profiler.md, "Program time") or "monotonic". A profile without it is from before the program clock.
CLOCK_COMMENT = "lifetime_clock="
#: The comment that names the machine the profile was recorded on (its host name), for a fleet's corpus
#: (docs/fleet.md). A profile without it has host "".
HOST_COMMENT = "host="

SITE = struct.Struct("<IIQQQdQQQdQQQQ8Q")  # SiteRecord, 168 bytes
assert SITE.size == 168


@dataclass
class Frame:
    function: str
    file: str
    line: int


@dataclass
class Location:
    address: int
    mapping: int            # index into Profile.mappings, -1 if none
    frames: list[Frame]     # innermost (inlined) first; empty when not symbolized


#: The call-site word of a frame in the program's own binary (docs/model.md, "Call sites"): two allocations in one
#: function (two maps of one type filled in one loop, as word-count's) have the same function names and differ
#: only in where the function calls. A profile location's address is the return address - 1; the word names the
#: binary, the function that holds that address (the outermost, not inlined, frame) and the address's offset from
#: the start of that function's symbol: "<site:BINARY/FUNCTION+OFFSET>" (hex). `prepare` computes the same word
#: from the binary for the same call. The offset is taken within the function, not the file, so that a rebuild
#: which moves the function (code added or removed elsewhere) keeps its words; a rebuild that changes the
#: function itself gives it new ones (<unk> to a model of the old build, as a renamed function's). "/" ends the
#: binary's name because no file name holds one.
SITE_PREFIX = "<site:"
#: Frames that get no call-site word: the process's start routine, whose one call is into the C library; a walk
#: in the process ends in the C library's start routines, whose token-table entries name it (prepare.ROOT_CHAINS).
UNSITED_FUNCTIONS = frozenset({"_start"})
#: The comment `llamalloc symbolize` writes: the symbols of the program's own binary that hold a location, as
#: "START+SIZE" (hex file offsets) separated by spaces, from which a location's offset in its function follows.
FUNCTIONS_COMMENT = "program_functions="


def site_prefix(binary: str) -> str:
    """What every call-site word of `binary` starts with: "<site:NAME/"."""
    return f"{SITE_PREFIX}{os.path.basename(binary)}/"


def site_frame(binary: str, function: str, offset: int) -> str:
    """The call-site word of the address `offset` bytes into `function` (its outermost frame's name) of `binary`."""
    return f"{site_prefix(binary)}{function}+{offset:x}>"


def site_binary_prefix(word: str) -> str:
    """The "<site:NAME/" of a call-site word; "" for an older word without the function ("<site:NAME+OFFSET>")."""
    slash = word.find("/", len(SITE_PREFIX))
    return word[:slash + 1] if slash >= 0 else ""


def is_site_frame(frame: str) -> bool:
    return frame.startswith(SITE_PREFIX) and frame.endswith(">")


def function_offset(functions: list[tuple[int, int]], address: int) -> int | None:
    """The offset of `address` from the start of the function range [start, end) of the sorted, non-overlapping
    `functions` that holds it; None where none does."""
    i = bisect.bisect_right(functions, (address, INT64_MAX)) - 1
    if i >= 0 and functions[i][0] <= address < functions[i][1]:
        return address - functions[i][0]
    return None


def format_functions(functions: list[tuple[int, int]]) -> str:
    return FUNCTIONS_COMMENT + " ".join(f"{start:x}+{end - start:x}" for start, end in sorted(functions))


def parse_functions(comment: str) -> list[tuple[int, int]]:
    """The function ranges of a FUNCTIONS_COMMENT; ValueError if it is not one."""
    out = []
    for item in comment[len(FUNCTIONS_COMMENT):].split():
        start, size = item.split("+")
        out.append((int(start, 16), int(start, 16) + int(size, 16)))
    return sorted(out)


def functions_only(stack) -> list[str]:
    """A context's stack without its call-site words: the function names (and unsymbolised addresses)."""
    return [f for f in stack if not is_site_frame(f)]


@dataclass
class Sample:
    locations: list[Location]   # innermost first
    values: dict[str, int]      # by sample type name
    request_size: int
    alignment: int
    min_lifetime_ns: int
    max_lifetime_ns: int

    @property
    def stack(self) -> list[str]:
        """Function names (inlined frames expanded), or "0x<address>" where not symbolized; innermost first."""
        out: list[str] = []
        for loc in self.locations:
            if loc.frames:
                out.extend(f.function for f in loc.frames)
            else:
                out.append(f"0x{loc.address:x}")
        return out

    def context_stack(self, mappings: list, program_mapping: int,
                      functions: list[tuple[int, int]] = ()) -> list[str]:
        """The stack a model sees: `stack`, with each symbolised location in the program's own binary (mapping
        `program_mapping`) followed by its call-site word, where one of `functions` (the binary's function
        ranges, file offsets: `Profile.functions`) holds it."""
        out: list[str] = []
        for loc in self.locations:
            if loc.frames:
                out.extend(f.function for f in loc.frames)
                if loc.mapping == program_mapping >= 0 and loc.frames[-1].function not in UNSITED_FUNCTIONS:
                    m = mappings[program_mapping]
                    offset = function_offset(functions, loc.address - m.memory_start + m.file_offset)
                    if offset is not None:
                        out.append(site_frame(m.path, loc.frames[-1].function, offset))
            else:
                out.append(f"0x{loc.address:x}")
        return out

    @property
    def class_counts(self) -> list[int]:
        return [self.values[f"class_{k}"] for k in range(LIFETIME_CLASSES)]


@dataclass
class Profile:
    path: str
    program: str
    build_id: str
    sample_bytes: int
    symbolized: bool
    time_nanos: int
    duration_nanos: int
    mappings: list[_raw.Mapping]
    samples: list[Sample]
    proto: object  # the profile_pb2.Profile message
    lifetime_clock: str = "monotonic"  # "program" or "monotonic" (CLOCK_COMMENT)
    #: The program binary's function ranges (file offsets) that hold a location, as `llamalloc symbolize` found
    #: them (FUNCTIONS_COMMENT); empty before symbolisation, and then the stacks have no call-site words.
    functions: list[tuple[int, int]] = field(default_factory=list)
    host: str = ""  # the machine it was recorded on (HOST_COMMENT)

    def program_mapping(self) -> int:
        """The index of the program's own executable mapping (its path is the program's), or -1."""
        for i, m in enumerate(self.mappings):
            if m.path == self.program:
                return i
        return -1


# ---- writing -------------------------------------------------------------------------------------------------

class _Strings:
    def __init__(self, table):
        self.table = table
        self.index = {s: i for i, s in enumerate(table)}
        if not table:
            self.add("")

    def add(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = len(self.table)
            self.table.append(s)
            self.index[s] = i
        return i


def _mapping_index(mappings: list[_raw.Mapping], address: int) -> int:
    for i, m in enumerate(mappings):
        if m.memory_start <= address < m.memory_limit:
            return i
    return -1


def from_raw(raw_path) -> profile_pb2.Profile:
    """Builds the profile.proto message from the profiler's raw dump (docs/formats/profile.md, "raw dump")."""
    raw = _raw.read_raw(raw_path, _raw.RAW_PROFILE_MAGIC, _raw.RAW_PROFILE_VERSION, "raw profile dump")
    p = profile_pb2.Profile()
    st = _Strings(p.string_table)
    for name, unit in SAMPLE_TYPES:
        vt = p.sample_type.add()
        vt.type, vt.unit = st.add(name), st.add(unit)
    p.default_sample_type = st.add("alloc_space")
    p.period_type.type, p.period_type.unit = st.add("space"), st.add("bytes")
    p.period = raw.header.sample_bytes
    p.time_nanos = raw.header.start_time_ns
    end_time_ns, _, sampled, dropped = raw.end
    p.duration_nanos = max(0, end_time_ns - raw.header.start_time_ns)
    p.comment.append(st.add(f"{MARKER} v{VERSION}"))
    p.comment.append(st.add(f"program={raw.program}"))
    p.comment.append(st.add(f"pid={raw.header.pid}"))
    p.comment.append(st.add(f"{HOST_COMMENT}{socket.gethostname()}"))
    p.comment.append(st.add(f"sampled_allocations={sampled} dropped={dropped}"))
    p.comment.append(st.add(f"{CLOCK_COMMENT}{'program' if raw.header.program_time else 'monotonic'}"))

    # mapping[0] must be the main binary: the profiler lists it first.
    mappings = sorted(raw.mappings, key=lambda m: (m.path != raw.program,))
    for i, m in enumerate(mappings):
        pm = p.mapping.add()
        pm.id = i + 1
        pm.memory_start, pm.memory_limit, pm.file_offset = m.memory_start, m.memory_limit, m.file_offset
        pm.filename = st.add(m.path)
        pm.build_id = st.add(m.build_id)

    location_ids: dict[int, int] = {}

    def location(address: int) -> int:
        lid = location_ids.get(address)
        if lid is None:
            lid = len(location_ids) + 1
            location_ids[address] = lid
            loc = p.location.add()
            loc.id, loc.address = lid, address
            mi = _mapping_index(mappings, address)
            if mi >= 0:
                loc.mapping_id = mi + 1
        return lid

    k_request, k_align = st.add("request_size"), st.add("alignment")
    k_min, k_max = st.add("min_lifetime"), st.add("max_lifetime")
    u_bytes, u_ns = st.add("bytes"), st.add("nanoseconds")
    for payload in raw.sites:
        f = SITE.unpack_from(payload, 0)
        (stack_id, align, req, n_alloc, alloc_bytes, weight, n_freed, freed_bytes, lt_sum, lt_sumsq,
         lt_min, lt_max, live_n, live_bytes) = f[:14]
        classes = f[14:22]
        if stack_id not in raw.stacks:
            raise FormatError(raw_path, f"corrupt: a site refers to stack {stack_id}, which is not in the file")
        if n_alloc == 0:
            continue
        scale = weight / n_alloc  # unbiasing weight of the sampler (1 at one sample per allocation)

        def scaled(x: float) -> int:
            return min(INT64_MAX, int(round(x * scale)))

        s = p.sample.add()
        s.location_id.extend(location(a) for a in raw.stacks[stack_id])
        values = [n_alloc, alloc_bytes, n_freed, freed_bytes, lt_sum, lt_sumsq, live_n, live_bytes, *classes]
        s.value.extend(scaled(v) for v in values)
        for key, num, unit in ((k_request, req, u_bytes), (k_align, align, u_bytes),
                               (k_min, lt_min, u_ns), (k_max, lt_max, u_ns)):
            lab = s.label.add()
            lab.key, lab.num, lab.num_unit = key, num, unit
    return p


def write(message: profile_pb2.Profile, out_path) -> None:
    """Writes the message gzipped, through a temporary file renamed into place."""
    files.write_bytes(out_path, gzip.compress(message.SerializeToString(), mtime=0))


# ---- reading -------------------------------------------------------------------------------------------------

def _strings(p: profile_pb2.Profile, path):
    """The string of each index of p's string table; an index out of range is a FormatError naming `path`."""
    strings = p.string_table
    n = len(strings)

    def s(i: int) -> str:
        if not 0 <= i < n:
            raise FormatError(path, f"corrupt: string index {i} out of range")
        return strings[i]

    return s


def load_proto(path) -> profile_pb2.Profile:
    """The raw profile_pb2.Profile of a llamalloc profile; FormatError for anything else."""
    data = files.read_input(path, "a profile")
    if data[:2] != b"\x1f\x8b":
        raise FormatError(path, "not a llamalloc profile (not gzip-compressed profile.proto)")
    try:
        body = gzip.decompress(data)
    except (EOFError, OSError, zlib.error):
        raise FormatError(path, "truncated or corrupt gzip data") from None
    p = profile_pb2.Profile()
    try:
        p.ParseFromString(body)
    except DecodeError:
        raise FormatError(path, "corrupt profile.proto data") from None
    s = _strings(p, path)

    markers = [s(c) for c in p.comment if s(c).startswith(MARKER + " v")]
    if not markers:
        raise FormatError(path, "not a llamalloc profile (no 'llamalloc-profile' version marker; "
                                "a pprof profile from another tool?)")
    ver = markers[0][len(MARKER) + 2:]
    if ver != str(VERSION):
        raise FormatError(path, f"profile format version {ver}; this llamalloc reads version {VERSION}")
    types = [(s(t.type), s(t.unit)) for t in p.sample_type]
    if types != SAMPLE_TYPES:
        raise FormatError(path, "corrupt: sample types differ from llamalloc-profile v1")
    return p


def load(path) -> Profile:
    """Reads a llamalloc profile; FormatError on truncated, corrupt, foreign or other-version files."""
    p = load_proto(path)
    s = _strings(p, path)

    mappings = [_raw.Mapping(m.memory_start, m.memory_limit, m.file_offset, s(m.build_id), s(m.filename))
                for m in p.mapping]
    mapping_index = {m.id: i for i, m in enumerate(p.mapping)}
    functions = {f.id: (s(f.name), s(f.filename)) for f in p.function}
    locations: dict[int, Location] = {}
    for loc in p.location:
        frames = []
        for line in loc.line:
            if line.function_id not in functions:
                raise FormatError(path, f"corrupt: location {loc.id} refers to a missing function")
            name, file = functions[line.function_id]
            frames.append(Frame(name, file, line.line))
        locations[loc.id] = Location(loc.address, mapping_index.get(loc.mapping_id, -1), frames)
    label_keys = {}
    samples = []
    nvalues = len(SAMPLE_TYPES)
    for smp in p.sample:
        if len(smp.value) != nvalues:
            raise FormatError(path, "corrupt: a sample has the wrong number of values")
        try:
            locs = [locations[i] for i in smp.location_id]
        except KeyError:
            raise FormatError(path, "corrupt: a sample refers to a missing location") from None
        labels = {}
        for lab in smp.label:
            key = label_keys.get(lab.key)
            if key is None:
                key = label_keys[lab.key] = s(lab.key)
            labels[key] = lab.num
        samples.append(Sample(locs, dict(zip((t for t, _ in SAMPLE_TYPES), smp.value)),
                              labels.get("request_size", 0), labels.get("alignment", 0),
                              labels.get("min_lifetime", 0), labels.get("max_lifetime", 0)))
    program = ""
    host = ""
    lifetime_clock = "monotonic"
    functions: list[tuple[int, int]] = []
    for c in p.comment:
        if s(c).startswith("program="):
            program = s(c)[len("program="):]
        elif s(c).startswith(CLOCK_COMMENT):
            lifetime_clock = s(c)[len(CLOCK_COMMENT):]
        elif s(c).startswith(HOST_COMMENT):
            host = s(c)[len(HOST_COMMENT):]
        elif s(c).startswith(FUNCTIONS_COMMENT):
            try:
                functions = parse_functions(s(c))
            except ValueError:
                raise FormatError(path, f"corrupt: bad {FUNCTIONS_COMMENT.rstrip('=')} comment") from None
    if not program and mappings:
        program = mappings[0].path
    build_id = mappings[0].build_id if mappings else ""
    symbolized = any(m.has_functions for m in p.mapping)
    return Profile(str(path), program, build_id, p.period, symbolized, p.time_nanos, p.duration_nanos,
                   mappings, samples, p, lifetime_clock, functions, host)


def sampled_allocations(path) -> int | None:
    """The allocations the profiler sampled for this profile (its `sampled_allocations=` comment: the samples
    behind the estimated counts), or None when the profile does not say."""
    p = load_proto(path)
    for c in p.comment:
        text = p.string_table[c] if 0 <= c < len(p.string_table) else ""
        if text.startswith("sampled_allocations="):
            try:
                return int(text.split()[0].split("=", 1)[1])
            except (IndexError, ValueError):
                return None
    return None


def samples_table(paths):
    """One row per sample of each profile (columns in docs/formats/profile.md, "samples_table")."""
    import pyarrow as pa
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    cols: dict[str, list] = {k: [] for k in (
        "profile", "program", "build_id", "stack", "request_size", "alloc_objects", "alloc_bytes",
        "freed_objects", "freed_bytes", "lifetime_sum_ns", "live_at_exit_objects", "class_counts",
        "min_lifetime_ns", "max_lifetime_ns")}
    for path in paths:
        prof = load(path)
        program_mapping = prof.program_mapping()
        for smp in prof.samples:
            v = smp.values
            cols["profile"].append(str(path))
            cols["program"].append(prof.program)
            cols["build_id"].append(prof.build_id)
            cols["stack"].append(smp.context_stack(prof.mappings, program_mapping, prof.functions))
            cols["request_size"].append(smp.request_size)
            cols["alloc_objects"].append(v["alloc_objects"])
            cols["alloc_bytes"].append(v["alloc_space"])
            cols["freed_objects"].append(v["freed_objects"])
            cols["freed_bytes"].append(v["freed_space"])
            cols["lifetime_sum_ns"].append(v["lifetime_sum"])
            cols["live_at_exit_objects"].append(v["live_at_exit_objects"])
            cols["class_counts"].append(smp.class_counts)
            cols["min_lifetime_ns"].append(smp.min_lifetime_ns)
            cols["max_lifetime_ns"].append(smp.max_lifetime_ns)
    i64 = pa.int64()
    schema = pa.schema([
        ("profile", pa.string()), ("program", pa.string()), ("build_id", pa.string()),
        ("stack", pa.list_(pa.string())), ("request_size", i64), ("alloc_objects", i64), ("alloc_bytes", i64),
        ("freed_objects", i64), ("freed_bytes", i64), ("lifetime_sum_ns", i64), ("live_at_exit_objects", i64),
        ("class_counts", pa.list_(i64)), ("min_lifetime_ns", i64), ("max_lifetime_ns", i64)])
    return pa.table(cols, schema=schema)
