"""The LLAMA paper's pictures, drawn from simulation results, profiles and bench results with matplotlib (Agg)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only, never a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from ..simulate import PolicyResult, SimResult  # noqa: E402

MIB = 2**20
CLASS_LABELS = ["<10ms", "<100ms", "<1s", "<10s", "<100s", "<1000s", "longer", "never freed"]
# One colour per lifetime class, short (light) to long (dark), as in the paper's Figure 6.
CLASS_COLORS = ["#fde0c5", "#facba6", "#f8b58b", "#f59e72", "#f2855d", "#ef6a4c", "#eb4a40", "#8b1e3f"]
POLICY_STYLE = {
    "pages-4k": dict(color="#e6b800", label="4 KiB pages (program's own addresses)"),
    "pages-2m": dict(color="#d62728", label="2 MiB pages (program's own addresses)"),
    "mesh-4k": dict(color="#17becf", label="Mesh, 4 KiB pages"),
    "mesh-2m": dict(color="#1f77b4", label="Mesh, 2 MiB pages"),
    "tcmalloc": dict(color="#7f7f7f", label="TCMalloc filler"),
    "tcmalloc-lifetime": dict(color="#9467bd", label="TCMalloc lifetime-aware filler"),
    "llama-oracle": dict(color="#2ca02c", label="llamalloc, perfect lifetimes"),
    "llama-oracle-best": dict(color="#98df8a", label="llamalloc, perfect lifetimes, best placement options"),
    "llama-default": dict(color="#8c564b", label="llamalloc, no model"),
    "llama-model": dict(color="#e377c2", label="llamalloc, learned model"),
}


def _style(policy: str) -> dict:
    return POLICY_STYLE.get(policy, dict(label=policy))


def _label(ax, ylabel: str, title: str, *, grid_axis: str = "both", **legend) -> None:
    """The y label, the title, a light grid (on `grid_axis`) and the legend (`legend`: its keywords)."""
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis=grid_axis)
    ax.legend(**legend)


def _save(fig, path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def footprint_over_time(result: SimResult, path, title: str) -> None:
    """Figures 1, 8, 9: each policy's footprint against the live heap, over trace time, with the after-peak window
    (docs/bench.md, "After the peak"; the same for every policy) shaded."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    live_drawn = False
    for name, p in result.policies.items():
        t = p.time_s
        if not live_drawn:
            a = p.after_peak()
            if a["samples"]:
                ax.axvspan(a["start_ns"] / 1e9, a["end_ns"] / 1e9, color="#999999", alpha=0.15, lw=0,
                           label="after the peak")
            ax.plot(t, p.timeline["live_bytes"] / MIB, color="black", lw=1.6, label="live")
            live_drawn = True
        ax.plot(t, p.timeline["footprint_bytes"] / MIB, lw=1.2, **_style(name))
    ax.set_xlabel("trace time (s)")
    _label(ax, "memory (MiB)", title, fontsize=8, loc="upper left")
    _save(fig, path)


def fragmentation_bars(result: SimResult, path, title: str) -> None:
    """Average and final fragmentation ratio (footprint / live) per policy."""
    names = list(result.policies)
    avg = [result.policies[n].summary["average_fragmentation_ratio"] for n in names]
    final = [result.policies[n].summary["final_fragmentation_ratio"] for n in names]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(names) + 2), 4))
    ax.bar(x - 0.2, avg, 0.4, label="average over the run", color="#4c72b0")
    ax.bar(x + 0.2, final, 0.4, label="at the end", color="#dd8452")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_yscale("log")
    _label(ax, "footprint / live", title, grid_axis="y", fontsize=8)
    _save(fig, path)


def lifetime_distribution(counts_by_source: dict[str, np.ndarray], path) -> None:
    """Figure 2: the share of allocations in each lifetime class (bars) and its running total (line)."""
    fig, ax = plt.subplots(figsize=(8, 4))
    n = len(counts_by_source)
    width = 0.8 / max(n, 1)
    x = np.arange(8)
    for i, (source, counts) in enumerate(counts_by_source.items()):
        total = counts.sum()
        share = counts / total if total else counts
        ax.bar(x - 0.4 + width * (i + 0.5), 100 * share, width, label=f"{source} ({int(total):,} allocations)")
        ax.plot(x, 100 * np.cumsum(share), marker="o", ms=3, lw=1)
    ax.set_xticks(x, CLASS_LABELS, rotation=20)
    _label(ax, "% of allocations (line: cumulative)", "Object lifetimes by lifetime class", grid_axis="y", fontsize=8)
    _save(fig, path)


def meshing_comparison(result: SimResult, path) -> None:
    """Figure 12: (a) meshing vs llamalloc over time on 2 MiB pages, (b) final footprint at 4 KiB and 2 MiB."""
    p = result.policies
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [3, 2]})
    any_policy = next(iter(p.values()))
    a.plot(any_policy.time_s, any_policy.timeline["live_bytes"] / MIB, color="black", lw=1.5, label="live")
    for name in ("pages-2m", "mesh-2m", "tcmalloc-lifetime", "llama-oracle", "llama-model"):
        if name in p:
            a.plot(p[name].time_s, p[name].timeline["footprint_bytes"] / MIB, lw=1.2, **_style(name))
    a.set_xlabel("trace time (s)")
    _label(a, "MiB", "(a) footprint on 2 MiB pages over time", fontsize=7)
    groups = [("program's pages", "pages-4k", "pages-2m"), ("Mesh", "mesh-4k", "mesh-2m"),
              ("TCMalloc lifetime", None, "tcmalloc-lifetime"), ("llamalloc oracle", None, "llama-oracle"),
              ("llamalloc model", None, "llama-model")]
    groups = [g for g in groups if (g[1] in p) or (g[2] in p)]
    x = np.arange(len(groups))
    small = [p[g[1]].summary["final_footprint_bytes"] / MIB if g[1] in p else 0 for g in groups]
    huge = [p[g[2]].summary["final_footprint_bytes"] / MIB if g[2] in p else 0 for g in groups]
    b.bar(x - 0.2, small, 0.4, label="4 KiB pages", color="#f2b134")
    b.bar(x + 0.2, huge, 0.4, label="2 MiB pages", color="#c2410c")
    b.axhline(any_policy.summary["final_live_bytes"] / MIB, color="black", lw=1, ls="--", label="live at the end")
    b.set_xticks(x, [g[0] for g in groups], rotation=15)
    _label(b, "final footprint (MiB)", "(b) memory left at the end", grid_axis="y", fontsize=8)
    _save(fig, path)


def _bits(hex256: str) -> np.ndarray:
    value = int(hex256, 16)
    return np.array([(value >> i) & 1 for i in range(256)], dtype=bool)


def heap_map(snapshot: dict, path, max_pages: int = 64) -> int:
    """Figure 6: each huge page a row of its 256 blocks, coloured by the page's lifetime class where a block is
    live, white where free; residual blocks carry a dot. Returns how many pages were drawn."""
    pages = sorted(snapshot["pages"], key=lambda pg: (pg["class"], pg["address"]))
    shown = pages[:max_pages]
    rows = max(len(shown), 1)
    grid = np.full((rows, 256), -1)
    dots_x, dots_y = [], []
    for r, pg in enumerate(shown):
        live = _bits(pg["live"])
        if pg["kind"] != "blocks":
            live[:] = True  # a huge object fills its pages
        grid[r, live] = pg["class"]
        res = np.flatnonzero(_bits(pg["residual"]))
        dots_x += list(res)
        dots_y += [r] * len(res)
    cmap = ListedColormap(["#ffffff"] + CLASS_COLORS)
    fig_h = min(2 + 0.18 * rows, 14)
    fig, ax = plt.subplots(figsize=(11, fig_h))
    ax.imshow(grid + 1, cmap=cmap, vmin=0, vmax=8, aspect="auto", interpolation="nearest")
    if dots_x:
        ax.scatter(dots_x, dots_y, s=1.5, c="black", marker=".", linewidths=0)
    ax.set_yticks(range(len(shown)),
                  [f"{pg['state'][0].upper()} c{pg['class']}" + (" huge" if pg["kind"] != "blocks" else "")
                   for pg in shown], fontsize=6)
    ax.set_xlabel("8 KiB block within the huge page (dot: residual)")
    more = f" (first {len(shown)} of {len(pages)})" if len(pages) > len(shown) else ""
    ax.set_title(f"Heap at t = {snapshot['time_ns'] / 1e9:.3f} s: {len(pages)} huge pages{more}")
    used = sorted({pg["class"] for pg in shown})
    ax.legend(handles=[Patch(color=CLASS_COLORS[c], label=CLASS_LABELS[c]) for c in used] +
              [Patch(facecolor="white", edgecolor="grey", label="free block")],
              fontsize=7, loc="upper right", bbox_to_anchor=(1.0, -0.08), ncol=min(len(used) + 1, 5))
    _save(fig, path)
    return len(shown)


def bench_memory(rows: list[dict], workload: str, path) -> None:
    """Peak and final RSS of one workload under each allocator (medians of the bench's runs)."""
    names = [r["allocator"] for r in rows]
    peak = [(r["summary"].get("peak_rss_bytes") or 0) / MIB for r in rows]
    final = [(r["summary"].get("final_rss_bytes") or 0) / MIB for r in rows]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(names) + 2), 4))
    ax.bar(x - 0.2, peak, 0.4, label="peak RSS", color="#4c72b0")
    ax.bar(x + 0.2, final, 0.4, label="final RSS", color="#55a868")
    ax.set_xticks(x, names, rotation=15)
    _label(ax, "MiB", f"{workload}: resident memory by allocator", grid_axis="y", fontsize=8)
    _save(fig, path)


def policy_has_snapshots(p: PolicyResult) -> bool:
    return bool(p.snapshots)
