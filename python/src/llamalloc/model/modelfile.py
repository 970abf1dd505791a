"""The model file (docs/formats/model.md): a fixed header, a section table, then little-endian arrays at
64-byte-aligned offsets, so that the allocator can map it read-only and point into it without copying or
allocating. This module is the one Python reader and writer; it depends on numpy and the standard library only.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import FormatError
from .classes import CLASS_UPPER_BOUNDS_NS, NUM_CLASSES, MODEL_SIZE_BUCKETS
from .tokenizer import FIRST_SIZE_TOKEN, FIRST_WORD_TOKEN, PAD, SEP, SPECIAL_TOKENS, UNK, UNSYMBOLIZED
from .. import files

MAGIC = b"LLAMODEL"
VERSION = 1
HEADER_BYTES = 128
SECTION_ENTRY_BYTES = 64
ALIGN_BYTES = 64

# magic, version, header_bytes, file_bytes, payload_crc32, section_count, num_classes, vocab_size,
# embedding_dim, hidden_dim, max_tokens, num_size_classes, first_size_token, unk, pad, sep, unsymbolized,
# default_class, class upper bounds (6 x u64). num_size_classes is the field's on-disk name
# (docs/formats/model.md); it holds MODEL_SIZE_BUCKETS, the number of <size:k> tokens.
_HEADER = struct.Struct("<8sIIQIIIIIIIIIIIIII6Q")
# name, dtype, ndim, shape[4], offset, size_bytes
_SECTION = struct.Struct("<24sII4IQQ")
assert _HEADER.size == HEADER_BYTES and _SECTION.size == SECTION_ENTRY_BYTES

DTYPES = {1: np.dtype("<f4"), 2: np.dtype("u1"), 3: np.dtype("<u4"), 4: np.dtype("<u8")}
DTYPE_CODES = {v: k for k, v in DTYPES.items()}

#: Section `decision` (u32[3]: kind, parameter, mode tie percent) of a distribution model. Kinds:
DECISION_PERCENTILE, DECISION_MODE, DECISION_SHARE = 1, 2, 3


def decision_to_array(rule: str) -> np.ndarray:
    from .dataset import MODE_TIE_PERCENT, parse_label_rule  # dataset imports pyarrow; keep this module light
    rule = parse_label_rule(rule)
    if rule == "mode":
        row = (DECISION_MODE, 0, MODE_TIE_PERCENT)
    elif rule.startswith("share"):
        row = (DECISION_SHARE, int(rule[5:]), MODE_TIE_PERCENT)
    else:
        row = (DECISION_PERCENTILE, int(rule[1:]), 0)
    return np.asarray(row, "<u4")


def decision_from_array(arr: np.ndarray) -> str | None:
    """The rule of a `decision` section, or None for a kind this reader does not know (FormatError's caller
    words it)."""
    if arr.shape != (3,):
        return None
    from .dataset import MODE_TIE_PERCENT
    kind, parameter, tie = (int(x) for x in arr)
    if kind == DECISION_MODE and tie == MODE_TIE_PERCENT:
        return "mode"
    if kind == DECISION_SHARE and 1 <= parameter <= 100 and tie == MODE_TIE_PERCENT:
        return f"share{parameter}"
    if kind == DECISION_PERCENTILE and 1 <= parameter <= 100:
        return f"p{parameter}"
    return None

#: Sections every model file has, with their dtype code and shape as a function of the header dimensions.
REQUIRED_SECTIONS = {
    "vocab.offsets": (3, lambda v, e, h, c: (v + 1,)),
    "vocab.strings": (2, None),
    "embedding": (1, lambda v, e, h, c: (v, e)),
    "lstm.w_input": (1, lambda v, e, h, c: (e, 4 * h)),
    "lstm.w_hidden": (1, lambda v, e, h, c: (h, 4 * h)),
    "lstm.bias": (1, lambda v, e, h, c: (4 * h,)),
    "lstm.folded": (1, lambda v, e, h, c: (v, 4 * h)),
    "dense.w": (1, lambda v, e, h, c: (h, c)),
    "dense.b": (1, lambda v, e, h, c: (c,)),
    "program": (2, None),
    "train.stacks": (4, None),
    "train.contexts": (4, None),
    "train.context_class": (2, None),
    "train.sites": (4, None),
    "train.site_class": (2, None),
    "metadata.json": (2, None),
}


@dataclass
class ModelFile:
    """Everything a model file holds. Arrays are float32 / uint8 / uint64 numpy arrays."""

    vocabulary: list[str]
    embedding: np.ndarray  # [vocab, embedding_dim]
    w_input: np.ndarray  # [embedding_dim, 4*hidden], gates [input, forget, cell, output]
    w_hidden: np.ndarray  # [hidden, 4*hidden]
    bias: np.ndarray  # [4*hidden]
    folded: np.ndarray  # [vocab, 4*hidden] = embedding @ w_input + bias
    dense_w: np.ndarray  # [hidden, 8]
    dense_b: np.ndarray  # [8]
    max_tokens: int
    default_class: int
    program: str = ""
    train_stacks: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    train_contexts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    train_context_class: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    train_sites: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    train_site_class: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint8))
    #: Sorted token_context_key() of every training context's token ids, as the allocator forms them (optional
    #: section `train.token_contexts`): the allocator places a context that is not among them on long-lived
    #: pages until it proves frequent (docs/prediction.md). None: a model written without it.
    train_token_contexts: np.ndarray | None = None
    #: The exact-match class of each `train_token_contexts` key (optional section `train.token_class`, u8 [n]):
    #: the label of the merged counts of the training contexts with that key. The allocator predicts a context
    #: it finds here with this class (a lookup table for what training saw) and runs the LSTM only for others.
    train_token_class: np.ndarray | None = None
    #: Sorted token_context_key() of every training context's token ids without the size token that begins
    #: them (optional section `train.token_stacks`): the code paths training saw. The allocator's rule for
    #: contexts never seen (long-lived pages until they prove frequent) applies only to a context whose code path
    #: is not here; a size the profile did not sample on a known path is not new code. None: the rule falls back
    #: to `train_token_contexts`.
    train_token_stacks: np.ndarray | None = None
    #: How a context missing from `train_token_class` is predicted (section `deploy.unseen`): False, the LSTM;
    #: True, the default class (what exact-match lookup falls back to), chosen by `train` when the LSTM predicts
    #: the held-out contexts worse than that fallback.
    unseen_default: bool = False
    metadata: dict = field(default_factory=dict)
    #: None: a label model (the class is the largest logit). A label rule ("mode", "p95", "share20"): a
    #: distribution model, whose class is that rule applied to the softmax (section `decision`).
    decision: str | None = None

    @property
    def embedding_dim(self) -> int:
        return self.embedding.shape[1]

    @property
    def hidden_dim(self) -> int:
        return self.w_hidden.shape[0]

    def params(self) -> dict:
        """The weights under the names of llamalloc.model.lstm."""
        return {"embedding": self.embedding, "w_input": self.w_input, "w_hidden": self.w_hidden,
                "bias": self.bias, "dense_w": self.dense_w, "dense_b": self.dense_b}


def _sections(m: ModelFile) -> list[tuple[str, np.ndarray]]:
    encoded = [t.encode("utf-8", "surrogatepass") + b"\0" for t in m.vocabulary]
    offsets = np.zeros(len(encoded) + 1, np.uint32)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    f32 = lambda a: np.ascontiguousarray(a, dtype="<f4")  # noqa: E731
    u8 = lambda b: np.frombuffer(b, dtype=np.uint8)  # noqa: E731
    return [
        ("vocab.offsets", offsets.astype("<u4")),
        ("vocab.strings", u8(b"".join(encoded))),
        ("embedding", f32(m.embedding)),
        ("lstm.w_input", f32(m.w_input)),
        ("lstm.w_hidden", f32(m.w_hidden)),
        ("lstm.bias", f32(m.bias)),
        ("lstm.folded", f32(m.folded)),
        ("dense.w", f32(m.dense_w)),
        ("dense.b", f32(m.dense_b)),
        ("program", u8(m.program.encode("utf-8"))),
        ("train.stacks", np.ascontiguousarray(m.train_stacks, "<u8")),
        ("train.contexts", np.ascontiguousarray(m.train_contexts, "<u8")),
        ("train.context_class", np.ascontiguousarray(m.train_context_class, np.uint8)),
        ("train.sites", np.ascontiguousarray(m.train_sites, "<u8")),
        ("train.site_class", np.ascontiguousarray(m.train_site_class, np.uint8)),
        ("metadata.json", u8(json.dumps(m.metadata, sort_keys=True).encode("utf-8"))),
    ] + ([("decision", decision_to_array(m.decision))] if m.decision is not None else []) \
      + ([("train.token_contexts", np.ascontiguousarray(m.train_token_contexts, "<u8"))]
         if m.train_token_contexts is not None else []) \
      + ([("train.token_class", np.ascontiguousarray(m.train_token_class, np.uint8))]
         if m.train_token_class is not None else []) \
      + ([("train.token_stacks", np.ascontiguousarray(m.train_token_stacks, "<u8"))]
         if m.train_token_stacks is not None else []) \
      + ([("deploy.unseen", np.array([1 if m.unseen_default else 0], "<u4"))] if m.unseen_default else [])


FNV_OFFSET = np.uint64(14695981039346656037)
FNV_PRIME = np.uint64(1099511628211)


def token_context_keys(ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The key of each row's token ids ids[i, :lengths[i]]: 64-bit FNV-1a over the ids, one u32 id a step
    (h = (h ^ id) * 1099511628211 from 14695981039346656037), as the allocator computes it
    (src/model/model_file.h, token_context_key)."""
    ids = np.asarray(ids, dtype=np.uint64)
    lengths = np.asarray(lengths, dtype=np.int64)
    h = np.full(len(lengths), FNV_OFFSET, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(ids.shape[1] if ids.ndim == 2 else 0):
            live = j < lengths
            h[live] = (h[live] ^ ids[live, j]) * FNV_PRIME
    return h


def _align(n: int) -> int:
    return (n + ALIGN_BYTES - 1) // ALIGN_BYTES * ALIGN_BYTES


def to_bytes(m: ModelFile) -> bytes:
    sections = _sections(m)
    table_end = HEADER_BYTES + SECTION_ENTRY_BYTES * len(sections)
    offset = _align(table_end)
    entries, blobs = [], []
    for name, arr in sections:
        shape = list(arr.shape) + [0] * (4 - arr.ndim)
        data = arr.tobytes()
        entries.append(_SECTION.pack(name.encode("ascii"), DTYPE_CODES[arr.dtype], arr.ndim, *shape, offset,
                                     len(data)))
        blobs.append((offset, data))
        offset = _align(offset + len(data))
    file_bytes = offset
    body = bytearray(file_bytes - HEADER_BYTES)
    body[0:len(entries) * SECTION_ENTRY_BYTES] = b"".join(entries)
    for off, data in blobs:
        body[off - HEADER_BYTES:off - HEADER_BYTES + len(data)] = data
    header = _HEADER.pack(MAGIC, VERSION, HEADER_BYTES, file_bytes, zlib.crc32(body), len(sections),
                          NUM_CLASSES, len(m.vocabulary), m.embedding_dim, m.hidden_dim, m.max_tokens,
                          MODEL_SIZE_BUCKETS, FIRST_SIZE_TOKEN, UNK, PAD, SEP, UNSYMBOLIZED, m.default_class,
                          *CLASS_UPPER_BOUNDS_NS)
    return header + bytes(body)


def write(path, m: ModelFile) -> None:
    """Writes atomically: a temporary file in the same folder, renamed into place."""
    files.write_bytes(path, to_bytes(m), durable=True)


def read(path) -> ModelFile:
    """Reads and checks a model file; any problem is a FormatError naming the file."""
    path = Path(path)
    return from_bytes(files.read_input(path, "a model file"), path)


def from_bytes(data: bytes, path="<model>") -> ModelFile:
    def bad(problem: str):
        return FormatError(path, problem)

    if len(data) < HEADER_BYTES:
        if data[:len(MAGIC)] != MAGIC[:len(data)] or not data:
            raise bad("not a llamalloc model file (bad magic)")
        raise bad(f"truncated: {len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    fields = _HEADER.unpack_from(data, 0)
    (magic, version, header_bytes, file_bytes, crc, section_count, num_classes, vocab_size, embedding_dim,
     hidden_dim, max_tokens, num_size_classes, first_size_token, unk, pad, sep, unsym, default_cls) = fields[:18]
    bounds = fields[18:]
    if magic != MAGIC:
        raise bad("not a llamalloc model file (bad magic)")
    if version != VERSION:
        raise bad(f"model file version {version}, this llamalloc reads version {VERSION}")
    if header_bytes != HEADER_BYTES:
        raise bad(f"corrupt header: header size {header_bytes}")
    if file_bytes != len(data):
        raise bad(f"truncated or padded: header says {file_bytes} bytes, file has {len(data)}")
    if zlib.crc32(data[HEADER_BYTES:]) != crc:
        raise bad("corrupt: checksum mismatch")
    if (num_classes, num_size_classes, first_size_token, unk, pad, sep, unsym) != \
            (NUM_CLASSES, MODEL_SIZE_BUCKETS, FIRST_SIZE_TOKEN, UNK, PAD, SEP, UNSYMBOLIZED) or \
            tuple(bounds) != CLASS_UPPER_BOUNDS_NS:
        raise bad("class or token layout differs from this llamalloc's")
    if not (0 <= default_cls < NUM_CLASSES and vocab_size >= FIRST_WORD_TOKEN and embedding_dim > 0
            and hidden_dim > 0 and max_tokens > 0):
        raise bad("corrupt header: impossible dimensions")
    table_end = HEADER_BYTES + section_count * SECTION_ENTRY_BYTES
    if table_end > len(data):
        raise bad("corrupt: section table runs past the end of the file")
    arrays: dict[str, np.ndarray] = {}
    for i in range(section_count):
        raw_name, dtype_code, ndim, s0, s1, s2, s3, offset, size_bytes = _SECTION.unpack_from(
            data, HEADER_BYTES + i * SECTION_ENTRY_BYTES)
        name = raw_name.rstrip(b"\0").decode("ascii", "replace")
        dtype = DTYPES.get(dtype_code)
        shape = (s0, s1, s2, s3)[:ndim] if ndim <= 4 else None
        if dtype is None or shape is None:
            raise bad(f"corrupt section {name!r}")
        if offset % ALIGN_BYTES or offset < table_end or offset + size_bytes > len(data):
            raise bad(f"corrupt section {name!r}: bad offset or size")
        if int(np.prod(shape, dtype=np.int64)) * dtype.itemsize != size_bytes:
            raise bad(f"corrupt section {name!r}: shape does not match its size")
        arrays[name] = np.frombuffer(data, dtype=dtype, count=size_bytes // dtype.itemsize,
                                     offset=offset).reshape(shape)
    dims = (vocab_size, embedding_dim, hidden_dim, num_classes)
    for name, (code, shape_of) in REQUIRED_SECTIONS.items():
        if name not in arrays:
            raise bad(f"missing section {name!r}")
        if arrays[name].dtype != DTYPES[code] or (shape_of and arrays[name].shape != shape_of(*dims)):
            raise bad(f"section {name!r} has the wrong type or shape for the header's dimensions")
    offsets = arrays["vocab.offsets"].astype(np.int64)
    strings = arrays["vocab.strings"].tobytes()
    if offsets[0] != 0 or offsets[-1] != len(strings) or np.any(np.diff(offsets) < 1):
        raise bad("corrupt vocabulary")
    try:
        vocabulary = [strings[offsets[i]:offsets[i + 1] - 1].decode("utf-8", "surrogatepass")
                      for i in range(vocab_size)]
        metadata = json.loads(arrays["metadata.json"].tobytes().decode("utf-8") or "{}")
        program = arrays["program"].tobytes().decode("utf-8")
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("corrupt vocabulary or metadata") from None
    if vocabulary[:FIRST_WORD_TOKEN] != SPECIAL_TOKENS:
        raise bad("corrupt vocabulary: special tokens differ")
    if len(arrays["train.contexts"]) != len(arrays["train.context_class"]) or \
            len(arrays["train.sites"]) != len(arrays["train.site_class"]):
        raise bad("corrupt training tables")
    token_contexts = arrays.get("train.token_contexts")
    if token_contexts is not None and (token_contexts.dtype != DTYPES[4] or token_contexts.ndim != 1 or
                                       np.any(token_contexts[1:] <= token_contexts[:-1])):
        raise bad("corrupt section 'train.token_contexts': not a sorted list of distinct u64 keys")
    token_class = arrays.get("train.token_class")
    if token_class is not None and (token_contexts is None or token_class.dtype != DTYPES[2] or
                                    token_class.shape != token_contexts.shape or
                                    np.any(token_class >= NUM_CLASSES)):
        raise bad("corrupt section 'train.token_class': not one class per 'train.token_contexts' key")
    token_stacks = arrays.get("train.token_stacks")
    if token_stacks is not None and (token_stacks.dtype != DTYPES[4] or token_stacks.ndim != 1 or
                                     np.any(token_stacks[1:] <= token_stacks[:-1])):
        raise bad("corrupt section 'train.token_stacks': not a sorted list of distinct u64 keys")
    unseen = arrays.get("deploy.unseen")
    if unseen is not None and (unseen.dtype != DTYPES[3] or unseen.shape != (1,) or int(unseen[0]) > 1):
        raise bad("corrupt section 'deploy.unseen': not one u32 of 0 or 1")
    decision = None
    if "decision" in arrays:
        decision = decision_from_array(arrays["decision"]) if arrays["decision"].dtype == DTYPES[3] else None
        if decision is None:
            raise bad("unknown decision rule in section 'decision'")
    return ModelFile(
        vocabulary=vocabulary, embedding=arrays["embedding"], w_input=arrays["lstm.w_input"],
        w_hidden=arrays["lstm.w_hidden"], bias=arrays["lstm.bias"], folded=arrays["lstm.folded"],
        dense_w=arrays["dense.w"], dense_b=arrays["dense.b"], max_tokens=max_tokens, default_class=default_cls,
        program=program, train_stacks=arrays["train.stacks"], train_contexts=arrays["train.contexts"],
        train_context_class=arrays["train.context_class"], train_sites=arrays["train.sites"],
        train_site_class=arrays["train.site_class"], train_token_contexts=token_contexts, metadata=metadata,
        decision=decision, train_token_class=token_class, train_token_stacks=token_stacks,
        unseen_default=unseen is not None and int(unseen[0]) == 1)
