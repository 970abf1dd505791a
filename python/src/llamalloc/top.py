"""`llamalloc top PROFILE|TRACE`: what is live after the peak, by call site (heaptrack's and memray's first
question): bytes, objects, the site's lifetime class and, from a trace, the huge pages those objects pin.

A site is the innermost frame of the allocation's stack that is not the allocator's own entry point, with its file
and line where the file is symbolized, and the two callers above it for context. From a profile, "live" is what
the profile holds live (`live_at_exit_*`: at exit, or at the time a kept profile was taken); from a trace, the
allocations not freed at the end of the after-peak window (`llamalloc.after_peak`: the end of the quiet phase, before
the exit teardown), or at `--at SECONDS`, whose addresses give the 2 MiB pages they sit on. A profile or a trace
that was not symbolized is symbolized here, in memory, as `llamalloc symbolize` would (symbols_here); on a terminal
a bar shows the steps of reading a trace (llamalloc.progress).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import after_peak, files
from .errors import UserError
from .model.classes import CLASS_NAMES, NUM_CLASSES, lifetime_class

HUGE_PAGE_SHIFT = 21
#: The note's word for frames without names.
UNSYMBOLIZED = "not symbolized: run `llamalloc symbolize` for names"
#: A site is "mixed" when at least MIXED_MIN_SHARE of its objects live this many classes (each 10x) longer than
#: its most common class: a minority that outlives the rest by 1000x or more (Site.mixed_share).
MIXED_CLASSES = 3
MIXED_MIN_SHARE = 0.01
#: Frames that are the allocation's entry, not its site.
ENTRY_FUNCTIONS = frozenset({"malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc", "memalign",
                             "valloc", "pvalloc", "operator new", "operator new[]", "__libc_malloc",
                             "__libc_calloc", "__libc_realloc", "strdup", "strndup"})


@dataclass
class Site:
    name: str
    bytes: int = 0
    objects: int = 0
    class_counts: list = field(default_factory=lambda: [0] * NUM_CLASSES)
    pages: set | None = None  # 2 MiB page numbers of its live objects (traces only)

    @property
    def lifetime_class(self) -> int:
        return int(np.argmax(self.class_counts)) if any(self.class_counts) else NUM_CLASSES - 1

    @property
    def mixed_share(self) -> float:
        """The share of the site's objects that live at least MIXED_CLASSES classes (1000x) longer than most of
        them, where that share is between MIXED_MIN_SHARE and one half; else 0. Such a site's survivors and
        temporaries come from one call stack, so no prediction by context can place them apart: whichever class
        the site gets, the survivors pin the temporaries' pages or the temporaries fill long-lived ones."""
        total = sum(self.class_counts)
        if total == 0:
            return 0.0
        mode = self.lifetime_class
        share = sum(self.class_counts[mode + MIXED_CLASSES:]) / total
        return share if MIXED_MIN_SHARE <= share < 0.5 else 0.0


#: Prefixes of the standard library's own frames (std::allocator, make_unique, vector growth): the site is the
#: program's frame that called them.
LIBRARY_PREFIXES = ("std::", "__gnu_cxx::", "void std::", "decltype", "__")


def _is_entry(function: str) -> bool:
    base = function.split("(", 1)[0].strip()
    return base in ENTRY_FUNCTIONS or base.startswith("operator new")


def short(function: str) -> str:
    """A C++ name without its parameters and template arguments: `a::b<T>::f(int) const` -> `a::b<…>::f`."""
    out, depth = [], 0
    for ch in function:
        if ch == "<":
            if depth == 0:
                out.append("<…>")
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0 and out and not "".join(out).endswith("operator"):
            break
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or function


def site_name(frames: list[tuple[str, str, int]]) -> str:
    """'function (file:line) <- caller <- caller' from (function, file, line) frames, innermost first: the first
    frame that is neither the allocation's entry point nor the standard library's."""
    frames = [f for f in frames if f[0] and not _is_entry(f[0])] or frames
    inner = [f for f in frames if not f[0].startswith(LIBRARY_PREFIXES)] or frames
    if not inner:
        return "?"
    fn, file, line = inner[0]
    where = f" ({Path(file).name}:{line})" if file and line else ""
    callers = [short(f[0]) for f in inner[1:3]]
    return " <- ".join([f"{short(fn)}{where}", *callers])


def from_profile(path, warn=lambda msg: None) -> tuple[list[Site], str]:
    from . import profile
    prof = profile.load(path)
    symbols, symbolized = {}, "symbolized"
    if not prof.symbolized:
        addresses = {loc.address for smp in prof.samples for loc in smp.locations}
        symbols, symbolized = symbols_here(prof.mappings, addresses, "profile", warn)
    sites: dict[str, Site] = {}
    for smp in prof.samples:
        frames = []
        for loc in smp.locations:
            if loc.frames:
                frames.extend((f.function, f.file, f.line) for f in loc.frames)
            else:
                frames.extend(symbols.get(loc.address) or [(f"0x{loc.address:x}", "", 0)])
        name = site_name(frames)
        s = sites.setdefault(name, Site(name))
        s.bytes += smp.values["live_at_exit_space"]
        s.objects += smp.values["live_at_exit_objects"]
        for k, c in enumerate(smp.class_counts):
            s.class_counts[k] += c
    note = "live when the profile was taken, estimated from the samples; " + symbolized
    return [s for s in sites.values() if s.bytes > 0], note


def trace_symbols(t, warn) -> tuple[dict, str]:
    """The trace's frames by address and the word for the note: its own symbols where it was symbolized, else
    those found here (symbols_here)."""
    if t.symbolized:
        return t.symbols, "symbolized"
    return symbols_here(t.mappings, {a for st in t.stacks.values() for a in st}, "trace", warn)


def symbols_here(mappings, addresses: set[int], what: str, warn) -> tuple[dict, str]:
    """Frames by address of what `llamalloc symbolize` finds for `addresses` of a file that was not symbolized
    (`what`: "trace" or "profile") in the binaries here (llamalloc.symbolize), and the word for the note. The
    binaries that are missing or changed are named in one warning; their frames stay addresses."""
    if not mappings:
        return {}, UNSYMBOLIZED
    from . import symbolize
    skipped: list[str] = []
    try:
        symbols = symbolize.symbolize_addresses(mappings, addresses, lambda msg: skipped.append(msg))
    except UserError as e:  # the tools are not installed
        warn(f"frames stay addresses: {e}")
        return {}, UNSYMBOLIZED
    if skipped:
        binaries = [m.split(": ", 1)[0] for m in skipped]
        warn(f"{len(binaries)} binar{'y' if len(binaries) == 1 else 'ies'} of the {what} missing or changed here, "
             f"{'its' if len(binaries) == 1 else 'their'} frames stay addresses: {', '.join(binaries)}")
    return symbols, ("symbolized here" if symbols else "not symbolized: its binaries are not here")


def from_trace(path, at_seconds: float | None, warn=lambda msg: None) -> tuple[list[Site], str]:
    from . import traceformat
    from .progress import Bar
    with Bar(4, "top", "step") as bar:
        bar.describe("top: reading")
        t = traceformat.load(path)
        bar.advance()
        bar.describe("top: pairing frees")
        ev = t.events
        kind = (ev["kind"] & 0xFF) == traceformat.KIND_ALLOC
        times = ev["time_ns"].astype(np.int64) - t.start_mono_ns
        sizes = ev["size_bytes"].astype(np.int64)
        alloc_index = traceformat.pair_frees(ev)
        n = len(times)
        freed_at = np.full(n, -1, np.int64)
        frees = np.nonzero((~kind) & (alloc_index >= 0))[0]
        freed_at[alloc_index[frees]] = times[frees]
        cut = after_peak_end(times, kind, sizes, alloc_index) if at_seconds is None else int(at_seconds * 1e9)
        bar.advance()
        bar.describe("top: symbolizing")
        symbols, symbolized = trace_symbols(t, warn)
        bar.advance()
        bar.describe("top: counting")
        allocs = np.nonzero(kind & (times <= cut))[0]
        is_live = (freed_at[allocs] < 0) | (freed_at[allocs] > cut)
        lifetimes = np.where(freed_at[allocs] >= 0, freed_at[allocs] - times[allocs], -1)
        classes = np.minimum(lifetime_class(lifetimes), NUM_CLASSES - 1).astype(np.int64)
        stack_ids, by_stack = np.unique(ev["stack_id"][allocs], return_inverse=True)
        by_stack = by_stack.reshape(-1)

        # A site is a name: stacks that differ only below the frames it shows are one site.
        site_names: dict[str, int] = {}
        site_of_stack = np.zeros(len(stack_ids), np.int64)
        for j, stack_id in enumerate(stack_ids.tolist()):
            frames = []
            for a in t.stacks.get(stack_id, ()):
                frames.extend(symbols.get(a) or [(f"0x{a:x}", "", 0)])
            site_of_stack[j] = site_names.setdefault(site_name(frames), len(site_names))
        k = len(site_names)
        site = site_of_stack[by_stack]
        class_counts = np.bincount(site * NUM_CLASSES + classes, minlength=k * NUM_CLASSES).reshape(k, NUM_CLASSES)
        live = allocs[is_live]
        live_site = site[is_live]
        live_bytes = np.zeros(k, np.int64)
        np.add.at(live_bytes, live_site, sizes[live])
        live_objects = np.bincount(live_site, minlength=k)
        # The 2 MiB pages of each live object, first to last, as (site, page) pairs.
        addresses = ev["address"][live].astype(np.uint64)
        first = addresses >> np.uint64(HUGE_PAGE_SHIFT)
        last = (addresses + np.maximum(sizes[live], 1).astype(np.uint64) - np.uint64(1)) >> np.uint64(HUGE_PAGE_SHIFT)
        span = (last - first).astype(np.int64) + 1
        starts = np.cumsum(span) - span
        step = np.arange(int(span.sum()), dtype=np.int64) - np.repeat(starts, span)
        pairs = np.unique(np.rec.fromarrays(
            [np.repeat(live_site, span), np.repeat(first, span) + step.astype(np.uint64)], names="site,page"))
        bounds = np.searchsorted(pairs["site"], np.arange(k + 1))
        pages = [set(pairs["page"][bounds[j]:bounds[j + 1]].tolist()) for j in range(k)]
        sites = []
        for name, j in site_names.items():
            s = Site(name, int(live_bytes[j]), int(live_objects[j]), class_counts[j].tolist(), pages[j])
            if s.objects > 0:
                sites.append(s)
        bar.advance()
    when = (f"at the end of the quiet phase after the peak, {cut / 1e9:.2f} s" if at_seconds is None
            else f"at {at_seconds:g} s")
    return sites, f"live {when}; {symbolized}"


#: The live-bytes timeline that places the after-peak window in a trace: one sample every SAMPLE_NS, as
#: `llamalloc simulate` samples by default.
SAMPLE_NS = 10_000_000


def after_peak_end(times: np.ndarray, is_alloc: np.ndarray, sizes: np.ndarray, alloc_index: np.ndarray) -> int:
    """The time of the after-peak window's last sample (docs/bench.md, "After the peak"): the end of the quiet
    phase, before the exit teardown, on the trace's live bytes sampled every SAMPLE_NS (each sample the state just
    before the first event at or after it; the last, the state at the end)."""
    if not len(times):
        return 0
    delta = np.where(is_alloc, sizes.astype(np.int64), 0)
    frees = np.nonzero((~is_alloc) & (alloc_index >= 0))[0]
    delta[frees] = -sizes[alloc_index[frees]].astype(np.int64)
    live = np.cumsum(delta)
    first, last = int(times[0]), int(times[-1])
    grid = np.arange(first - first % SAMPLE_NS, last + 1, SAMPLE_NS, dtype=np.int64)
    before = np.searchsorted(times, grid, side="left")  # the events before each sample
    sample_live = np.where(before > 0, live[np.maximum(before - 1, 0)], 0)
    sample_times = np.append(grid, last)
    sample_live = np.append(sample_live, live[-1])
    w = after_peak.window(sample_times, sample_live)
    end = int(sample_times[w.stop - 1])
    return end if w.stop == len(sample_times) else end - 1  # a sample shows the state before its time


def load(path, at_seconds: float | None = None, warn=lambda msg: None) -> tuple[list[Site], str, bool]:
    """The sites of a profile or a trace (by its first bytes: a profile is gzip), most live bytes first; the
    note; whether it is a trace. A profile or a trace that was not symbolized is symbolized here (symbols_here);
    `warn` gets the one line about binaries that are missing or changed."""
    head = files.read_input(path, "a profile or a trace", size=2)
    if head == b"\x1f\x8b":
        if at_seconds is not None:
            raise UserError("--at applies to a trace: a profile holds what was live when it was taken (record "
                            "--interval or --steady-state keeps profiles of other times)")
        sites, note = from_profile(path, warn)
        is_trace = False
    else:
        sites, note = from_trace(path, at_seconds, warn)
        is_trace = True
    sites.sort(key=lambda s: (-s.bytes, s.name))
    return sites, note, is_trace


def format_top(sites: list[Site], note: str, is_trace: bool, limit: int) -> str:
    total_bytes = sum(s.bytes for s in sites)
    total_objects = sum(s.objects for s in sites)
    lines = [f"{total_bytes / 2**20:,.1f} MiB live in {total_objects:,} objects from {len(sites):,} call sites ({note})"]
    if is_trace:
        pages = set().union(*(s.pages for s in sites)) if sites else set()
        lines[0] += f"; they sit on {len(pages):,} huge pages ({len(pages) * 2:,} MiB)"
    head = f"{'live MiB':>9} {'share':>6} {'objects':>10} {'class':>8}" + (f" {'pages':>6}" if is_trace else "") + \
        "  call site"
    lines += [head, "-" * max(len(head), 60)]
    for s in sites[:limit]:
        share = 100 * s.bytes / total_bytes if total_bytes else 0
        cls = CLASS_NAMES[s.lifetime_class] + ("*" if s.mixed_share else "")
        row = f"{s.bytes / 2**20:>9,.2f} {share:>5.1f}% {s.objects:>10,} {cls:>8}"
        if is_trace:
            row += f" {len(s.pages):>6,}"
        lines.append(f"{row}  {s.name}")
    if len(sites) > limit:
        rest = sites[limit:]
        lines.append(f"... {len(rest):,} more sites: {sum(s.bytes for s in rest) / 2**20:,.2f} MiB (--limit N)")
    lines.append("class: the lifetime class most of the site's objects had (the profile's counts, or the trace's "
                 "lifetimes)" + ("; pages: the 2 MiB pages its live objects touch (a page with several sites' "
                                 "objects counts for each)" if is_trace else ""))
    mixed = [s for s in sites[:limit] if s.mixed_share]
    if mixed:
        lines.append("*: mixed lifetimes from one call site, which no prediction by call stack can separate:")
        for s in mixed:
            lines.append(f"  {short_site(s.name)}: {100 * s.mixed_share:.1f}% of its objects live 1000x longer "
                         f"than most ({CLASS_NAMES[s.lifetime_class]}); allocate those from a call site of their "
                         f"own (or copy them out when they are kept) for lifetimes to keep them apart")
    return "\n".join(lines)


def short_site(name: str) -> str:
    """The site's own frame, without its callers."""
    return name.split(" <- ", 1)[0]
