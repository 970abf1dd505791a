"""The two baselines any model must beat (the LLAMA paper, section 2.2), and the hashes that let the model file carry
them: an exact-match lookup of the whole calling context (what a profile-guided table does), and the allocation
site alone (innermost frame plus size bucket). A context missing from a table gets the table's default class,
the most common class by weight in training.

Keys are the first 8 bytes (little-endian uint64) of BLAKE2b over UTF-8 text:
  stack   = frames joined by "\\n"
  context = stack + "\\n#" + decimal size bucket
  site    = innermost frame + "\\n#" + decimal size bucket
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Sequence

import duckdb
import numpy as np
import pyarrow as pa

from .classes import NUM_CLASSES
from .dataset import Contexts, labels_from_counts


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def stack_hash(stack: Sequence[str]) -> int:
    return _hash("\n".join(stack))


def context_hash(stack: Sequence[str], size_bucket: int) -> int:
    return _hash("\n".join(stack) + f"\n#{int(size_bucket)}")


def site_hash(stack: Sequence[str], size_bucket: int) -> int:
    return _hash((stack[0] if stack else "") + f"\n#{int(size_bucket)}")


def hashes(keys) -> np.ndarray:
    return np.fromiter(keys, dtype=np.uint64)


@dataclass
class LookupTable:
    """Sorted uint64 keys and the class of each."""

    keys: np.ndarray  # uint64 [n], sorted, unique
    classes: np.ndarray  # uint8 [n]
    default_class: int

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(predicted classes, found mask) for uint64 keys."""
        keys = np.asarray(keys, dtype=np.uint64)
        if len(self.keys) == 0:
            return np.full(len(keys), self.default_class, np.int64), np.zeros(len(keys), bool)
        pos = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        found = self.keys[pos] == keys
        return np.where(found, self.classes[pos].astype(np.int64), self.default_class), found


def default_class(contexts: Contexts) -> int:
    """The most common label by weight (ties: the shorter-lived class)."""
    totals = np.bincount(contexts.labels, weights=contexts.weights, minlength=NUM_CLASSES)
    return int(np.argmax(totals))


def exact_match_table(contexts: Contexts) -> LookupTable:
    keys = hashes(context_hash(s, c) for s, c in zip(contexts.stacks, contexts.size_buckets))
    order = np.argsort(keys, kind="stable")
    return LookupTable(keys[order], contexts.labels[order].astype(np.uint8), default_class(contexts))


def site_table(contexts: Contexts) -> LookupTable:
    """Per (innermost frame, size bucket): the label (by the contexts' label rule) of all its contexts' merged
    counts."""
    table = pa.table({
        "site": pa.array(hashes(site_hash(s, c) for s, c in zip(contexts.stacks, contexts.size_buckets))),
        **{f"c{k}": pa.array(contexts.class_counts[:, k]) for k in range(NUM_CLASSES)},
    })
    con = duckdb.connect()
    con.register("contexts", table)
    cols = ", ".join(f"sum(c{k})::BIGINT AS c{k}" for k in range(NUM_CLASSES))
    result = con.sql(f"SELECT site, {cols} FROM contexts GROUP BY site ORDER BY site").fetchnumpy()
    counts = np.stack([np.asarray(result[f"c{k}"], np.int64) for k in range(NUM_CLASSES)], axis=1)
    return LookupTable(np.asarray(result["site"], np.uint64),
                       labels_from_counts(counts, contexts.label_rule).astype(np.uint8), default_class(contexts))


def context_keys(contexts: Contexts) -> np.ndarray:
    return hashes(context_hash(s, c) for s, c in zip(contexts.stacks, contexts.size_buckets))


def site_keys(contexts: Contexts) -> np.ndarray:
    return hashes(site_hash(s, c) for s, c in zip(contexts.stacks, contexts.size_buckets))


def stack_keys(contexts: Contexts) -> np.ndarray:
    return np.unique(hashes(stack_hash(s) for s in contexts.stacks))
