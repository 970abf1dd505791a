"""After the peak: the one window in which every tool measures what a program keeps after its peak (docs/bench.md,
"After the peak"). `simulate`'s table, `report`'s headline and timeline, `compare` and `top` take it from here;
src/sim/after_peak.cc is the same rule in C++ (the simulator's after_peak_* figures and llama-oracle-best's
objective), and the two agree to the byte on a timeline.

The window starts after the peak: at the first sample after the last one whose level (live bytes; RSS for a run
seen from outside) is at least PEAK_FRACTION of its maximum. It runs to the end of the program's quiet phase,
whatever that phase keeps: a quiet phase that keeps 5% of the peak is in the window. Only the exit teardown is left
out: the first sample k from the peak's end on, with something live, within the last TEARDOWN_SHARE of the time
since the first sample at the maximum, after which the level never comes back above TEARDOWN_FALL of its value at k
(the program frees at least half of what it held, and ends); the window ends with k. A fall followed by a longer
phase than that is a phase of the program and stays in the window. When nothing is left between the peak and the
teardown (the level peaks at the end, or falls from its peak straight into the teardown), the window is the peak's
last sample.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PEAK_FRACTION = 0.9
TEARDOWN_FALL = 0.5
TEARDOWN_SHARE = 0.1


@dataclass(frozen=True)
class Window:
    start: int  # index of the window's first sample
    stop: int   # one past its last (start == stop only for no samples at all)

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)

    def __len__(self) -> int:
        return self.stop - self.start


def window(times, level) -> Window:
    """The window over samples at `times` (non-decreasing, any unit) of `level` (live bytes, or RSS)."""
    t = np.asarray(times, dtype=float)
    v = np.nan_to_num(np.asarray(level, dtype=float))
    n = min(len(t), len(v))
    if n == 0:
        return Window(0, 0)
    t, v = t[:n], v[:n]
    top = v.max()
    peak_end = int(np.nonzero(v >= PEAK_FRACTION * top)[0][-1])
    # later[k] = the highest level after sample k.
    later = np.zeros(n)
    if n > 1:
        later[:-1] = np.maximum.accumulate(v[::-1])[::-1][1:]
    limit = t[-1] - TEARDOWN_SHARE * (t[-1] - t[int(np.argmax(v))])  # the first sample at the maximum
    k = np.arange(n)
    teardown = (k >= peak_end) & (k < n - 1) & (v > 0) & (t >= limit) & (later <= TEARDOWN_FALL * v)
    stop = int(np.argmax(teardown)) + 1 if teardown.any() else n
    start = peak_end + 1
    return Window(start, stop) if start < stop else Window(peak_end, peak_end + 1)


def median(values) -> float:
    """The median; for an even count the mean of the middle two rounded down, as the C++ side computes it."""
    values = np.asarray(values, dtype=float)
    return float(np.floor(np.median(values))) if len(values) else 0.0


def figures(times, live, footprint, heap_resident=None) -> dict:
    """The window over a simulated timeline and the medians over it: footprint_bytes, heap_resident_bytes (the
    footprint less what the heap gave back inside it, subreleased and purged; the footprint where the timeline has
    no such column), live_bytes, fragmentation_ratio, samples, and the times of its first and last sample
    (start_ns, end_ns, in the unit of `times`)."""
    t = np.asarray(times, dtype=float)
    live = np.nan_to_num(np.asarray(live, dtype=float))
    foot = np.nan_to_num(np.asarray(footprint, dtype=float))
    resident = foot if heap_resident is None else np.nan_to_num(np.asarray(heap_resident, dtype=float))
    w = window(t, live)
    if not len(w):
        return {"footprint_bytes": 0.0, "heap_resident_bytes": 0.0, "live_bytes": 0.0, "fragmentation_ratio": 0.0,
                "samples": 0, "start_ns": 0.0, "end_ns": 0.0}
    f, l_ = median(foot[w.slice]), median(live[w.slice])
    return {"footprint_bytes": f, "heap_resident_bytes": median(resident[w.slice]), "live_bytes": l_,
            "fragmentation_ratio": f / l_ if l_ > 0 else 0.0,
            "samples": len(w), "start_ns": float(t[w.start]), "end_ns": float(t[w.stop - 1])}
