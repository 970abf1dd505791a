"""Lifetime classes and the model's size bucket: the Python copy of src/llamalloc/vocabulary.h.

python/tests/test_vocabulary.py checks that the two agree (docs/architecture.md fixes the numbering).
"""
from __future__ import annotations

import numpy as np

NUM_CLASSES = 8
#: Upper bounds (exclusive) of classes 0..5 in nanoseconds: 10 ms, 100 ms, 1 s, 10 s, 100 s, 1000 s.
#: Class 6 is ">= 1000 s" (freed, but late); class 7 is "never freed".
CLASS_UPPER_BOUNDS_NS = tuple(10 ** (7 + k) for k in range(6))
CLASS_NAMES = ("<10ms", "<100ms", "<1s", "<10s", "<100s", "<1000s", ">=1000s", "never")
NEVER_FREED = 7

#: The same classes written as lifetimes, for what people read (`--list`).
LIFETIME_NAMES = ("<10 ms", "<100 ms", "<1 s", "<10 s", "<100 s", "<1000 s", ">=1000 s", "never freed")

#: The LLAMA paper labels a context by the class of the 95th percentile of its lifetimes (section 5.1);
#: `--label p95` still does.
LABEL_PERCENTILE = 0.95
#: The label rule `train` uses unless told otherwise: "mode" is the class holding most of the context's objects
#: (ties: the longer class); "shareNN" the longest class holding at least NN% of them, or the mode where that is
#: longer; "pNN" the class of the NN-th percentile of its lifetimes ("median" = p50). The mode, because a rule that
#: lifts a context to a longer class for a minority of its objects places the short-lived majority among
#: long-lived objects, whose pages then stay half empty (docs/model.md, "Labels", "Distribution targets" and "The
#: mode again", has the measurements).
DEFAULT_LABEL_RULE = "mode"
#: What `train` fits unless told otherwise: "distribution", each context's class distribution, the class then
#: being the label rule applied to the predicted distribution; "label", the context's label by the rule.
DEFAULT_TARGET = "distribution"
TARGETS = ("label", "distribution")

#: A context weighs count**DEFAULT_WEIGHT_POWER in the training loss (docs/model.md has the measurements).
DEFAULT_WEIGHT_POWER = 0.5

#: The model's size bucket (vocabulary.h, `model_size_bucket`): bucket k holds sizes in (2^(k-1), 2^k], and
#: bucket 4 every size up to 16 bytes (a profile records such requests as 16, so a bucket below 4 would only ever
#: come from exact sizes, which the process and a trace see and a profile does not). 48 buckets reach 128 TiB;
#: larger requests share the last bucket.
MODEL_SIZE_BUCKETS = 48
SMALLEST_MODEL_SIZE_BUCKET = 4


def model_size_bucket(request_size_bytes) -> np.ndarray:
    """The model's size bucket of each request size (vectorised, exact for sizes below 2^53)."""
    sizes = np.maximum(np.asarray(request_size_bytes, dtype=np.int64), 1 << SMALLEST_MODEL_SIZE_BUCKET)
    minus_one = np.maximum(sizes - 1, 0).astype(np.float64)
    _, exponent = np.frexp(minus_one)  # minus_one = m * 2**exponent with m in [0.5, 1): exponent == bit_length
    return np.minimum(exponent.astype(np.int64), MODEL_SIZE_BUCKETS - 1)


def lifetime_class(lifetimes_ns) -> np.ndarray:
    """The class of each lifetime (vectorised): class k (0..5) holds lifetimes below 10 ms x 10^k, class 6 every
    longer one, and a negative lifetime (an object never freed) is class 7, never freed, as the heap counts them
    (vocabulary.h)."""
    lifetimes = np.asarray(lifetimes_ns, dtype=np.int64)
    bounded = np.searchsorted(np.asarray(CLASS_UPPER_BOUNDS_NS, dtype=np.int64), lifetimes, side="right")
    return np.where(lifetimes < 0, NEVER_FREED, bounded)
