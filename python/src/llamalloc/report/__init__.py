"""`llamalloc report`: the LLAMA paper's pictures for the user's own program, as PNG files and one self-contained HTML
page (images embedded), from simulation results (`llamalloc simulate`), bench results (`llamalloc bench`) and
profiles (`llamalloc record`). docs/report.md lists what is drawn from what."""
from __future__ import annotations

import base64
import html
import json
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from .. import allocators
from .. import bench as _bench
from .. import simulate as sim
from ..errors import FormatError, UserError
from .. import files

MIB = 2**20
MAX_HEAP_MAPS = 4


@dataclass
class Figure:
    file: str      # PNG name in the output folder
    title: str
    caption: str


@dataclass
class Section:
    title: str
    intro: str = ""
    figures: list[Figure] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # HTML


#: Call sites listed per profile in "What stays live".
TOP_SITES = 10


@dataclass
class Report:
    out_dir: Path
    html_path: Path
    png_paths: list[Path]
    conclusions: list[str] = field(default_factory=list)


def sim_conclusion(result, trace_name: str, profile_every_allocation: bool = False) -> str | None:
    """The page's opening sentences for a replay: `simulate.conclusion`, the verdict `llamalloc simulate` prints,
    from the after-peak figures (docs/bench.md, "After the peak"); with `profile_every_allocation` (every --profile
    recorded every allocation) it does not advise a denser profile."""
    return sim.conclusion(result, trace_name, profile_every_allocation)


def sim_learning_costs(result, trace_name: str) -> list[str]:
    """A line for each replayed policy with a model or online learning that keeps more after the peak than
    llama-default (llamalloc without a model): `allocators.learning_cost_lines`, in the words and by the rule of
    `compare` and `bench` (more than 2% above), with the trace and the policy in front. llama-model stands for
    llamalloc + model, or for llamalloc + model + online when it was replayed learning (LEARN=1: its extras carry
    the learner's figures); llama-online for llamalloc + online. A replay is deterministic: one replay per policy
    has no spread, so the after-peak footprints are used as they are and a line always says not to deploy."""
    p = result.policies
    default = p.get("llama-default")
    if default is None:
        return []
    stands_for = []
    model = p.get("llama-model")
    if model is not None:
        stands_for.append((allocators.MODEL_ONLINE_ALLOCATOR if "learn_started" in model.extras
                           else allocators.MODEL_ALLOCATOR, model))
    online = p.get("llama-online")
    if online is not None:
        stands_for.append((allocators.ONLINE_ALLOCATOR, online))
    base = default.after_peak()["footprint_bytes"]
    lines = []
    for name, policy in stands_for:
        f = policy.after_peak()["footprint_bytes"]
        for line in allocators.learning_cost_lines({"llamalloc": (base, base, base), name: (f, f, f)},
                                                   "after the peak"):
            lines.append(f"{trace_name}: {policy.policy}: "
                         + line.removeprefix(f"{allocators.display_name(name)}: "))
    return lines


def bench_learning_costs(doc: dict) -> list[str]:
    """Per workload of a bench result, the lines `llamalloc bench` prints under its table
    (`bench.learning_costs_of`): each llamalloc variant with a model or online learning that keeps more than
    llamalloc alone, after the peak (each run's steady RSS) or at it (each run's peak RSS), judged over the spread
    of the runs. A result without its runs gives none."""
    def number(v):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    runs: dict[str, dict[str, list[tuple]]] = {}
    for r in doc["results"]:
        if isinstance(r, dict) and isinstance(r.get("runs"), list):
            runs.setdefault(str(r.get("workload")), {})[str(r.get("allocator"))] = [
                (number(_steady_rss(x)), number(x.get("peak_rss_bytes")))
                for x in r["runs"] if isinstance(x, dict) and x.get("ok")]
    return _bench.learning_costs_of(runs)


def _steady_rss(run: dict):
    """A bench run's RSS in its quiet phase after the load (its workload's "steady_state" block), or None."""
    metrics = run.get("metrics")
    block = metrics.get("steady_state") if isinstance(metrics, dict) else None
    return block.get("rss_bytes") if isinstance(block, dict) else None


def profiles_record_every_allocation(paths: list[Path]) -> bool:
    """Whether there are profiles and each recorded every allocation (`llamalloc record --sample-bytes 1`; a
    sample period of 0 or 1 byte, `profile.load(...).sample_bytes`)."""
    from .. import profile
    return bool(paths) and all(profile.load(p).sample_bytes <= 1 for p in paths)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "sim"


def _mib(n) -> str:
    return "–" if n is None else f"{n / MIB:,.1f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _sim_table(result: sim.SimResult) -> str:
    rows = []
    for name, p in result.policies.items():
        s, a = p.summary, p.after_peak()
        rows.append([name, _mib(s["peak_footprint_bytes"]), _mib(a["footprint_bytes"]),
                     _mib(a["heap_resident_bytes"]), _mib(a["live_bytes"]),
                     _mib(s["final_footprint_bytes"]), _mib(s["final_live_bytes"]), _mib(s["peak_live_bytes"]),
                     f"{s['average_fragmentation_ratio']:.2f}x", f"{s['final_fragmentation_ratio']:.2f}x",
                     f"{s['events_per_second']:.3g}"])
    return _table(["policy", "peak footprint MiB", "after-peak footprint MiB", "after-peak heap-resident MiB",
                   "after-peak live MiB",
                   "final footprint MiB", "final live MiB", "peak live MiB", "average footprint/live",
                   "final footprint/live", "replay events/s"], rows)


def load_bench(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FormatError(path, "no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(path, f"not a bench result (not JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != "llamalloc-bench":
        raise FormatError(path, "not a llamalloc bench result")
    if not isinstance(doc.get("results"), list):
        raise FormatError(path, "corrupt bench result (no results list)")
    return doc


def profile_class_counts(paths: list[Path]) -> dict[str, np.ndarray]:
    """Allocations per lifetime class, summed over each profile's samples (llamalloc.profile.samples_table)."""
    from .. import profile
    out = {}
    for p in paths:
        table = profile.samples_table([p])
        counts = np.zeros(8, dtype=float)
        for row in table.column("class_counts").to_pylist():
            if row:
                counts[:len(row)] += np.asarray(row[:8], dtype=float)
        out[f"profile {Path(p).name}"] = counts
    return out


def _pick_snapshots(snapshots: list, n: int) -> list:
    if len(snapshots) <= n:
        return snapshots
    idx = np.unique(np.linspace(0, len(snapshots) - 1, n).round().astype(int))
    return [snapshots[i] for i in idx]


def make_report(sims: Iterable[Path] = (), bench: Path | None = None, profiles: Iterable[Path] = (),
                out_dir: Path = Path("llamalloc-report"),
                progress: Callable[[str], None] | None = None) -> Report:
    """Reads every input first (so that a bad one fails before anything is written), then draws."""
    from . import figures
    say = progress or (lambda _msg: None)
    sims, profiles = [Path(s) for s in sims], [Path(p) for p in profiles]
    if not sims and bench is None and not profiles:
        raise UserError("report: nothing to report: give --sim, --bench or --profile files")
    out_dir = files.check_output_folder(out_dir)  # before the inputs are read and the figures drawn
    sim_results = [(p, sim.load(p)) for p in sims]
    bench_doc = load_bench(bench) if bench is not None else None
    class_counts = profile_class_counts(profiles) if profiles else {}
    every_allocation = profiles_record_every_allocation(profiles)
    for path, result in sim_results:
        oracle = result.policies.get("llama-oracle")
        if oracle is not None and "allocs_class_0" in oracle.extras:
            class_counts[f"trace {Path(result.trace).name or path.name}"] = np.array(
                [oracle.extras.get(f"allocs_class_{c}", 0) for c in range(8)], dtype=float)

    created = files.make_folder(out_dir)
    try:
        staging = Path(tempfile.mkdtemp(prefix=".report-", dir=out_dir))
    except OSError as e:
        _remove_created(created)
        raise UserError(f"{out_dir}: cannot write in the folder: {e.strerror or e}") from None
    sections: list[Section] = []
    conclusions: list[str] = []
    done = False
    try:
        used_stems: set[str] = set()
        for path, result in sim_results:
            stem = _safe(path.name.removesuffix(".json").removesuffix(".sim"))
            while stem in used_stems:
                stem += "_"
            used_stems.add(stem)
            trace_name = Path(result.trace).name or path.name
            conclusion = sim_conclusion(result, trace_name, every_allocation)
            if conclusion:
                conclusions.append(conclusion)
            conclusions += sim_learning_costs(result, trace_name)
            say(f"drawing {trace_name}")
            sec = Section(f"Simulation of {trace_name}",
                          f"From {path.name}: the trace replayed under each policy, sampled every "
                          f"{result.interval_ns / 1e6:g} ms of trace time.")
            f = f"footprint-{stem}.png"
            figures.footprint_over_time(result, staging / f, f"{trace_name}: footprint per policy against live")
            sec.figures.append(Figure(f, "Footprint over time (the LLAMA paper, Figures 1, 8, 9)",
                                      "Bytes of pages that hold at least one live byte under each policy, against "
                                      "the bytes the program has live. The gap is fragmentation. Shaded: after "
                                      "the peak, from the live peak's end to the end of the quiet phase, the "
                                      "window of every after-peak figure."))
            f = f"fragmentation-{stem}.png"
            figures.fragmentation_bars(result, staging / f, f"{trace_name}: fragmentation ratio")
            sec.figures.append(Figure(f, "Fragmentation ratio", "footprint / live, averaged over the run and at "
                                      "its end (log scale; 1 = no fragmentation)."))
            if any(n.startswith("mesh") for n in result.policies):
                f = f"meshing-{stem}.png"
                figures.meshing_comparison(result, staging / f)
                sec.figures.append(Figure(f, "Meshing comparison (the LLAMA paper, Figure 12)",
                                          "Mesh frees 4 KiB pages whose live objects do not overlap; on 2 MiB pages "
                                          "a huge page only goes back when all of its small pages do."))
            oracle = result.policies.get("llama-oracle") or result.policies.get("llama-default")
            if oracle is not None and oracle.snapshots:
                for k, snap in enumerate(_pick_snapshots(oracle.snapshots, MAX_HEAP_MAPS)):
                    f = f"heap-map-{stem}-{k}.png"
                    figures.heap_map(snap, staging / f)
                    sec.figures.append(Figure(f, f"Heap map at {snap['time_ns'] / 1e9:.3f} s "
                                              "(the LLAMA paper, Figure 6)",
                                              f"{oracle.policy}: every huge page in use, one row each, its 256 "
                                              "blocks coloured by the page's lifetime class when live; dots mark "
                                              "residual blocks; O/A = open/active."))
            sec.tables.append(_sim_table(result))
            best = result.policies.get("llama-oracle-best")
            if best is not None and best.search:
                sec.intro += " " + sim.search_summary(best) + "."
            first = next(iter(result.policies.values())).summary
            if first.get("unknown_frees"):
                sec.intro += (f" {first['unknown_frees']} frees named an address that was never allocated "
                              "(counted and skipped).")
            sections.append(sec)
        if profiles:
            from .. import top as top_mod
            sec = Section("What stays live, by call site", "From each profile: what it holds live (at exit, or when "
                          "it was taken), most bytes first, as `llamalloc top` lists it.")
            for path in profiles:
                sites, note, _ = top_mod.load(path)
                total = sum(x.bytes for x in sites) or 1
                rows = [[_mib(x.bytes), f"{100 * x.bytes / total:.1f}%", f"{x.objects:,}",
                         top_mod.CLASS_NAMES[x.lifetime_class], x.name] for x in sites[:TOP_SITES]]
                sec.tables.append(f"<h3>{html.escape(path.name)} ({html.escape(note)})</h3>" + _table(
                    ["live MiB", "share", "objects", "class", "call site"], rows))
            sections.append(sec)
        if class_counts:
            say("drawing lifetimes")
            figures.lifetime_distribution(class_counts, staging / "lifetimes.png")
            sections.append(Section("Object lifetimes", "How long the program's objects live, by lifetime class "
                                    "(the LLAMA paper, Figure 2): from sampled profiles and, for simulated traces, "
                                    "from every object's own allocation and free times.",
                                    [Figure("lifetimes.png", "Lifetime distribution", "Bars: share of "
                                            "allocations per class; lines: cumulative share.")]))
        if bench_doc is not None:
            conclusions += bench_learning_costs(bench_doc)
            say("drawing bench results")
            sec = Section("Bench", f"From {Path(bench).name}: medians of {bench_doc.get('repeat', '?')} run(s) per "
                          f"allocator at scale {bench_doc.get('scale', '?')}.")
            by_workload: dict[str, list[dict]] = {}
            for r in bench_doc["results"]:
                if isinstance(r, dict) and r.get("summary"):
                    by_workload.setdefault(str(r.get("workload")), []).append(r)
            for workload, rows in by_workload.items():
                f = f"bench-{_safe(workload)}.png"
                figures.bench_memory(rows, workload, staging / f)
                sec.figures.append(Figure(f, f"{workload}: memory by allocator", "Resident set size (RSS) at its "
                                          "peak and at the end, medians over the runs."))
                trows = []
                for r in rows:
                    s = r["summary"]
                    thr = s.get("throughput")
                    trows.append([r.get("allocator"), f"{s.get('seconds') or 0:.2f}",
                                  "–" if thr is None else f"{thr:,.4g} {s.get('throughput_metric') or ''}",
                                  _mib(s.get("peak_rss_bytes")), _mib(s.get("final_rss_bytes")),
                                  _mib(s.get("peak_anon_huge_pages_bytes"))])
                sec.tables.append(f"<h3>{html.escape(workload)}</h3>" + _table(
                    ["allocator", "seconds", "throughput", "peak RSS MiB", "final RSS MiB",
                     "peak AnonHugePages MiB"], trows))
            if bench_doc.get("problems"):
                sec.intro += " Problems: " + "; ".join(map(str, bench_doc["problems"]))
            sections.append(sec)

        # The page is written beside the figures before any of them moves into the folder: a full disk then fails
        # while the folder is as it was, and the moves are renames on the same file system.
        (staging / "index.html").write_bytes(_html_page(sections, staging, conclusions).encode())
        pngs = []
        for png in sorted(staging.glob("*.png")):
            files.move_file(png, out_dir / png.name)
            pngs.append(out_dir / png.name)
        html_path = out_dir / "index.html"
        files.move_file(staging / "index.html", html_path)
        done = True
    except OSError as e:
        # A figure or the page that could not be written in the staging folder (a full disk): its name there is
        # a temporary one, so the line names the report's folder and says what became of it.
        kept = "nothing was written" if created is not None else f"{out_dir} left as it was"
        raise UserError(f"cannot write the report in {out_dir}: {e.strerror or e}; {kept}", exit_code=1) from None
    finally:
        for leftover in staging.glob("*"):
            leftover.unlink()
        staging.rmdir()
        if not done:
            _remove_created(created)
    return Report(out_dir, html_path, pngs, conclusions)


def _remove_created(created: Path | None) -> None:
    """A report that failed leaves no folder that it created."""
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)


CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1150px;
       color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: .9em; color: #555; }
table { border-collapse: collapse; margin: 1em 0; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .3em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
thead { background: #f4f4f4; }
nav a { margin-right: 1em; }
"""

# Marks the page once every embedded image has decoded, so that a headless browser test can check it.
SCRIPT = """
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length;
  document.body.setAttribute("data-images-loaded", ok + "/" + imgs.length);
});
"""


def _html_page(sections: list[Section], staging: Path, conclusions: list[str] = ()) -> str:
    nav = " ".join(f'<a href="#s{i}">{html.escape(s.title)}</a>' for i, s in enumerate(sections))
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>llamalloc report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>llamalloc report</h1>",
             *(f'<p class="conclusion"><strong>{html.escape(c)}</strong></p>' for c in conclusions),
             "<p>Memory measured as in llamalloc's design: <em>live</em> is the bytes the program asked for and has "
             "not freed; <em>footprint</em> is the bytes of pages holding at least one live byte; their ratio is "
             "the fragmentation ratio.</p>", f"<nav>{nav}</nav>"]
    for i, s in enumerate(sections):
        parts.append(f'<section id="s{i}"><h2>{html.escape(s.title)}</h2>')
        if s.intro:
            parts.append(f"<p>{html.escape(s.intro)}</p>")
        parts.extend(s.tables)
        for f in s.figures:
            data = base64.b64encode((staging / f.file).read_bytes()).decode("ascii")
            parts.append(f'<figure><img alt="{html.escape(f.title)}" src="data:image/png;base64,{data}">'
                         f"<figcaption><strong>{html.escape(f.title)}.</strong> {html.escape(f.caption)} "
                         f"({html.escape(f.file)})</figcaption></figure>")
        parts.append("</section>")
    parts.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(parts)
