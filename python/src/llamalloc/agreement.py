"""Lifetime-class agreement between a trace and a sampled profile of the same program run the same way
(docs/profiler.md, "Program time"): does the cheap profile see the objects' lifetimes as the dense trace does?

    a = llamalloc.agreement.compare("run.trace", "run.prof")
    a.agreement          # 0..1: the overlap of the two class distributions by objects

Definition. Each distribution is over the eight lifetime classes (model/classes.py), by objects:
- the trace's: every object it records, its class from its lifetime (free time - allocation time, in the
  trace's clock); an object not freed by the end of the trace is class 7;
- the profile's: the sum over its samples of their class counts, which the profile holds already unbiased by the
  sampler's weights (an object of s bytes is sampled about s / sample_bytes times as often as a 1-byte one, and
  counts as about sample_bytes / s objects), so both estimate the same objects.
The agreement is the overlap sum_c min(p_trace[c], p_profile[c]), 1 - the total variation distance: the share
of objects that both put in the same class, were the two matched as closely as their histograms allow. 1 when
the distributions are equal, 0 when they share no class.

The trace counts each half of a realloc as an object of its own; the profile keeps an object that llamalloc's
realloc would keep in place (docs/profiler.md, "realloc"). A program that reallocs little (the bundled workloads)
differs by those few objects.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import profile as _profile
from . import traceformat
from .model.classes import NEVER_FREED, NUM_CLASSES, lifetime_class

#: What the profiler's own time may change: the agreement of a sparse profile with a dense trace of the same run
#: is at least this on the bundled workloads (python/tests/test_profiler_clock.py, bench/profiler/agreement.py).
MIN_AGREEMENT = 0.95


@dataclass
class Agreement:
    agreement: float             # overlap of the two distributions by objects, 0..1
    trace_objects: np.ndarray    # objects per class in the trace (NUM_CLASSES)
    profile_objects: np.ndarray  # estimated objects per class in the profile (NUM_CLASSES)
    trace_clock: str             # "program" or "monotonic"
    profile_clock: str


#: The class of each lifetime (model.classes.lifetime_class: the one definition).
lifetime_classes = lifetime_class


def trace_lifetimes(t: traceformat.Trace) -> tuple[np.ndarray, int]:
    """The lifetimes (ns) of the trace's freed objects, and the number of objects still live at its end. A free
    is paired with the allocation just before it at the same address."""
    ev = t.events
    n = len(ev)
    kind = ev["kind"] & 0xFF
    allocs = int(np.count_nonzero(kind == traceformat.KIND_ALLOC))
    if n < 2:
        return np.zeros(0, dtype=np.int64), allocs
    order = np.lexsort((np.arange(n), ev["address"]))
    a, k = ev["address"][order], kind[order]
    pair = (k[1:] == traceformat.KIND_FREE) & (k[:-1] == traceformat.KIND_ALLOC) & (a[1:] == a[:-1])
    times = ev["time_ns"].astype(np.int64)
    lifetimes = times[order[1:][pair]] - times[order[:-1][pair]]
    return lifetimes, allocs - len(lifetimes)


def trace_class_objects(t: traceformat.Trace) -> np.ndarray:
    """Objects per lifetime class in a trace (class 7: live at its end)."""
    lifetimes, live = trace_lifetimes(t)
    counts = np.bincount(lifetime_classes(lifetimes), minlength=NUM_CLASSES).astype(np.float64)
    counts[NEVER_FREED] += live
    return counts


def profile_class_objects(p: _profile.Profile) -> np.ndarray:
    """Estimated objects per lifetime class in a profile: its samples' (unbiased) class counts summed."""
    counts = np.zeros(NUM_CLASSES, dtype=np.float64)
    for s in p.samples:
        counts += np.asarray(s.class_counts, dtype=np.float64)
    return counts


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """sum_c min(a_c / sum a, b_c / sum b); 0 when either is empty."""
    sa, sb = float(a.sum()), float(b.sum())
    if sa <= 0 or sb <= 0:
        return 0.0
    return float(np.minimum(a / sa, b / sb).sum())


def compare(trace_path, profile_path) -> Agreement:
    """The class agreement of a trace and a profile (see the module's definition); FormatError on a bad file."""
    t = traceformat.load(trace_path)
    p = _profile.load(profile_path)
    tc, pc = trace_class_objects(t), profile_class_objects(p)
    return Agreement(overlap(tc, pc), tc, pc, "program" if t.program_time else "monotonic", p.lifetime_clock)
