"""The figures `llamalloc demo` ends with: one row per allocator from the bench and the run with the model, and
the one-line conclusion from their steady state."""
from __future__ import annotations

from .allocators import display_name


def mib(n) -> str:
    """Bytes as MiB for a table; "-" for a missing figure."""
    return "-" if n is None else f"{n / 2**20:.1f}"


def ratio(x) -> str:
    """A ratio for a table ("1.25x"); "-" for a missing figure."""
    return "-" if x is None else f"{x:.2f}x"


def steady_rows(bench: dict, workload: str, model_run: dict, model_stats: dict):
    """One row per allocator: (name, seconds, peak RSS, steady RSS, steady footprint, steady live, final RSS).
    llamalloc + model comes from the bench (the same harness and repeats as the others) where it ran there, else
    from its own run (the workload's JSON and the allocator's statistics)."""
    rows = []
    for r in bench.get("results", []):
        if r.get("workload") != workload:
            continue
        s = r.get("summary") or {}
        foot = s.get("steady_footprint_bytes", s.get("steady_workload_footprint_bytes"))
        live = s.get("steady_live_bytes", s.get("steady_workload_live_bytes"))
        name = r.get("allocator", "?")
        rows.append((display_name(name), s.get("seconds"),
                     s.get("peak_rss_bytes"), s.get("steady_rss_bytes"), foot, live, s.get("final_rss_bytes")))
    if (model_stats or model_run) and not any(row[0] == "llamalloc + model" for row in rows):
        st = model_run.get("steady_state") or {}
        rows.append(("llamalloc + model", model_run.get("seconds"), model_stats.get("peak_rss_bytes"),
                     st.get("rss_bytes"), st.get("llamalloc_footprint_bytes"), st.get("llamalloc_live_bytes"),
                     model_stats.get("rss_bytes")))
    return rows


#: Relative difference of steady-state memory the demo's conclusion calls "about the same".
SAME_RSS = 0.05


def steady_spread(bench: dict, workload: str) -> dict:
    """Allocator (as the table names it) -> (lowest, highest) steady-state RSS over its bench runs, where it has
    at least two."""
    spread = {}
    for r in bench.get("results", []):
        if r.get("workload") != workload:
            continue
        values = [((run.get("metrics") or {}).get("steady_state") or {}).get("rss_bytes")
                  for run in r.get("runs", []) if run.get("ok")]
        values = [v for v in values if v]
        if len(values) >= 2:
            name = r.get("allocator", "?")
            spread[display_name(name)] = (min(values), max(values))
    return spread


def conclusion(rows, spread: dict | None = None) -> str:
    """The one line a user should take away, from the steady-state figures (RSS: the measure every allocator
    shares, where footprint and live bytes are llamalloc's own bookkeeping). With `spread` (`steady_spread`: each allocator's lowest and highest run), the model
    lowers or raises the resident memory only where its runs and those without it do not overlap."""
    steady = {name: rss for name, _, _, rss, _, _, _ in rows if rss}
    footprint = {name: fp for name, _, _, _, fp, _, _ in rows if fp}
    if "llamalloc + model" not in steady or "llamalloc" not in steady:
        return "No steady-state figures for llamalloc with and without the model: nothing to conclude."
    with_model, without = steady["llamalloc + model"], steady["llamalloc"]
    peers = {k: v for k, v in steady.items() if not k.startswith("llamalloc")}
    change = with_model / without - 1
    # Within SAME_RSS the resident sets are called the same: runs of one allocator differ by that much, most of a
    # small workload's resident set being the process itself (docs/bench.md).
    verdict = "lowers" if change < -SAME_RSS else "raises" if change > SAME_RSS else "keeps about the same"
    runs = ""
    spread = spread or {}
    if "llamalloc + model" in spread and "llamalloc" in spread:
        (lo_m, hi_m), (lo_n, hi_n) = spread["llamalloc + model"], spread["llamalloc"]
        verdict = "lowers" if hi_m < lo_n else "raises" if lo_m > hi_n else "keeps about the same"
        runs = f"; runs {mib(lo_m)}-{mib(hi_m)} and {mib(lo_n)}-{mib(hi_n)}"
    said = ("leaves llamalloc's resident memory about the same" if verdict == "keeps about the same"
            else f"{verdict} llamalloc's resident memory")
    line = (f"In steady state the model {said}: {mib(with_model)} MiB with it, {mib(without)} MiB without "
            f"({change:+.0%}{runs})")
    fp_model, fp_none = footprint.get("llamalloc + model"), footprint.get("llamalloc")
    if fp_model and fp_none:
        fp_change = fp_model / fp_none - 1
        pages = (f"{abs(fp_change):.0%} {'fewer' if fp_change < 0 else 'more'}" if abs(fp_change) > SAME_RSS
                 else "about as many")
        line += f"; it holds {pages} huge pages ({mib(fp_model)} MiB of them with it, {mib(fp_none)} MiB without)"
    online = steady.get("llamalloc + online")
    if online:
        line += f"; learning online without the model: {mib(online)} MiB ({online / without - 1:+.0%})"
    if peers:
        best = min(peers, key=peers.get)
        if with_model <= peers[best]:
            line += (f"; with it llamalloc keeps {peers[best] / with_model:.1f}x less than the best other allocator, "
                     f"{best} ({mib(peers[best])} MiB)")
        else:
            line += (f"; with it llamalloc keeps {with_model / peers[best]:.2f}x as much as the best other allocator, "
                     f"{best} ({mib(peers[best])} MiB)")
    return line + "."
