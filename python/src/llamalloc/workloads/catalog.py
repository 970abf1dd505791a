"""The workloads by name: the bundled programs, redis, the corpus of program shapes, the groups of names, and the
independent recount of word-count's corpus."""
from __future__ import annotations

import collections
import re
import tempfile
from pathlib import Path

from ..errors import UserError
from .cpython import CPythonWorkload
from .program import Workload
from .redis import RedisWorkload
from .sqlite import SqliteWorkload


AnyWorkload = Workload | RedisWorkload | CPythonWorkload | SqliteWorkload

# Checksums of image-server at each scale: every response is a pure function of the request number, so any
# allocator, schedule or revision must reproduce them.
IMAGE_SERVER_CHECKSUMS: dict[str, str] = {"small": "d7e5425465c91a01", "default": "d099b9fe48df36e5"}

WORKLOADS: dict[str, AnyWorkload] = {
    "image-server": Workload(
        "image-server", "workloads/image-server/image-server",
        "HTTP image-transform server + load generator over 127.0.0.1 (-O2)", "requests_per_second",
        expected_checksums=IMAGE_SERVER_CHECKSUMS),
    "image-server-r2": Workload(
        "image-server-r2", "workloads/image-server/image-server-r2",
        "image-server, revision 2: renamed and refactored, -O2", "requests_per_second",
        expected_checksums=IMAGE_SERVER_CHECKSUMS),
    "word-count": Workload(
        "word-count", "workloads/word-count/word-count",
        "staged word-count pipeline over a generated corpus, many threads (-O2)", "words_per_second"),
    "word-count-r2": Workload(
        "word-count-r2", "workloads/word-count/word-count-r2",
        "word-count, revision 2: renamed and refactored, -O2", "words_per_second"),
    "word-count-rebuilt": Workload(
        "word-count-rebuilt", "workloads/word-count/rebuilt/word-count",
        "word-count rebuilt with one unrelated function added (its code moved), -O2", "words_per_second"),
    "frag-micro": Workload(
        "frag-micro", "workloads/frag-micro/frag-micro",
        "the LLAMA paper, section 9.6: 64 B objects swinging 1 MB..top, 5 MB long-lived (class 7 under llamalloc)",
        "allocations_per_second", extra_args=["--long-lived-class", "7"]),
    "frag-micro-unhinted": Workload(
        "frag-micro-unhinted", "workloads/frag-micro/frag-micro",
        "frag-micro without its class hint: the long-lived objects placed as the heap or its predictor decides",
        "allocations_per_second"),
    "redis": RedisWorkload(),
}
DEFAULT_WORKLOADS = ("image-server", "word-count", "frag-micro", "redis")

# The corpus of program shapes (docs/workloads.md): the shapes of workloads/shapes/shapes (one program, one shape
# per --shape), then real programs.
SHAPES: dict[str, str] = {
    "lru-cache": "sharded LRU string cache, 4 threads; capacity cut to a tenth after the peak",
    "ttl-cache": "cache of short- and long-TTL entries with an expiry thread; the long ones stay",
    "hash-trimmed-cache": "4-thread cache server, per-request buffers; the cache trimmed by key hash to an eighth",
    "batch-arena": "batch jobs in 64 KiB-chunk arenas freed whole, a small summary kept per batch",
    "stream-pipeline": "3 stages on threads, bounded queues, realloc in stage 2; a held sink builds a backlog",
    "producer-consumer": "2 producers, 2 consumers, cross-thread frees; a backlog, then low traffic",
    "session-store": "sessions with attribute maps and buffers; a login burst, most log out",
    "ast-builder": "compiler front end: trees of small nodes, interned symbols; a whole-program link",
    "message-broker": "topics, per-subscriber queues of shared messages; slow subscribers, retention rings",
    "query-spikes-cache": "a result cache grows while query spikes on 4 workers allocate temporaries; the cache stays",
    "mixed-lifetime-cache": "one insert site; the node's hash slice (5%) kept, the other 95% expire: lifetimes by data",
    "free-all": "an import job loads a catalog on one thread, then frees all of it",
    "free-all-pool": "the import on a 4-thread pool that then idles while another thread frees all of it",
}
for _shape, _description in SHAPES.items():
    WORKLOADS[_shape] = Workload(_shape, "workloads/shapes/shapes", _description, "operations_per_second",
                                 extra_args=["--shape", _shape])
WORKLOADS["cpython"] = CPythonWorkload()
WORKLOADS["sqlite"] = SqliteWorkload()

# Names that stand for several workloads wherever workloads are chosen by name (`llamalloc bench -w corpus`).
GROUPS: dict[str, tuple[str, ...]] = {
    "corpus": (*SHAPES, "cpython", "sqlite", "image-server", "word-count", "frag-micro", "redis"),
}


def expand(names: list[str] | tuple[str, ...]) -> list[str]:
    """Workload names with every group name replaced by its workloads, in order, each once."""
    out: list[str] = []
    for name in names:
        for member in GROUPS.get(name, (name,)):
            if member not in out:
                out.append(member)
    return out


def get(name: str) -> AnyWorkload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UserError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}; "
                        f"groups: {', '.join(GROUPS)}") from None


def word_count_expected(corpus_path: Path, top: int = 20) -> dict:
    """Recounts a corpus written by `word-count --dump-corpus`, independently of the C++ code: words are the
    maximal runs of ASCII letters, lowercased; the checksum is sum(fnv1a64(word) * count) mod 2**64."""
    text = Path(corpus_path).read_text(encoding="ascii")
    counts = collections.Counter(re.findall(r"[a-z]+", text.lower()))
    mask = (1 << 64) - 1

    def fnv1a64(word: str) -> int:
        h = 0xCBF29CE484222325
        for b in word.encode():
            h = ((h ^ b) * 0x100000001B3) & mask
        return h

    checksum = sum(fnv1a64(w) * n for w, n in counts.items()) & mask
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return {"words": sum(counts.values()), "distinct_words": len(counts), "checksum": f"{checksum:016x}",
            "top": [[w, n] for w, n in ranked]}


def temporary_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"llamalloc-{prefix}-"))
