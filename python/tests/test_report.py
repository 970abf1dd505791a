"""`llamalloc report`: the files it writes, the page opened in headless Chromium, and bad input."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from llamalloc import profile, simulate as sim
from llamalloc.cli import main
from llamalloc.report import profile_class_counts

from test_sim_support import alloc, free, write_trace

DATA = Path(__file__).parent / "data"
BASE = 0x7F0000000000
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sim_result(tmp_path_factory):
    """A trace with a growing and shrinking heap of short-lived objects and a few long-lived ones among them,
    simulated under every policy, with heap snapshots."""
    d = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(3)
    events, live, t = [], [], 0.0
    for step in range(3000):
        t += 0.3
        if step % 1000 < 600 or not live:
            a = BASE + 4096 * step
            events.append(alloc(t, a, int(rng.integers(16, 3000))))
            if step % 97 == 0:
                continue  # long-lived: never freed
            live.append(a)
        else:
            events.append(free(t, live.pop(int(rng.integers(len(live))))))
    trace = write_trace(d / "grow.trace", events)
    return sim.simulate(trace, ["pages-4k", "pages-2m", "mesh", "tcmalloc-lifetime", "llama-oracle"],
                        d / "grow.sim.json", interval_ms=20, snapshot_ms=[200, 500])


def bench_file(path: Path) -> Path:
    rows = [{"workload": "frag-micro", "allocator": a, "summary": {
        "runs": 1, "seconds": 1.5, "throughput": None, "throughput_metric": None, "peak_rss_bytes": peak,
        "final_rss_bytes": final, "peak_anon_huge_pages_bytes": 0, "final_anon_huge_pages_bytes": 0}}
        for a, peak, final in (("glibc", 90 << 20, 80 << 20), ("llamalloc", 70 << 20, 20 << 20))]
    path.write_text(json.dumps({"format": "llamalloc-bench", "version": 1, "scale": "small", "repeat": 1,
                                "results": rows, "problems": []}))
    return path


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "headless Chromium is needed (Debian package chromium; scripts/setup.sh installs it)"
    return exe


def test_report_files_and_page_open_in_headless_chromium(sim_result, tmp_path, capsys):
    out = tmp_path / "rep"
    bench = bench_file(tmp_path / "bench.json")
    rc = main(["report", "--sim", str(sim_result.path), "--bench", str(bench),
               "--profile", str(DATA / "prof_sites.prof"), "-o", str(out), "-q"])
    assert rc == 0, capsys.readouterr().err
    names = sorted(p.name for p in out.iterdir())
    for expected in ("footprint-grow.png", "fragmentation-grow.png", "meshing-grow.png", "lifetimes.png",
                     "bench-frag-micro.png", "index.html"):
        assert expected in names
    heap_maps = [n for n in names if n.startswith("heap-map-grow-")]
    assert len(heap_maps) == 3  # the two requested snapshots and the final one
    pngs = [out / n for n in names if n.endswith(".png")]
    for p in pngs:
        assert p.read_bytes()[:8] == PNG_MAGIC and p.stat().st_size > 5000
    page = (out / "index.html").read_text()
    # Self-contained: every figure embedded, nothing fetched from elsewhere.
    assert page.count('src="data:image/png;base64,') == len(pngs)
    assert not re.search(r'(src|href)="(https?:|file:|//)', page)
    for text in ("Footprint over time", "Meshing comparison", "Heap map", "Object lifetimes", "frag-micro",
                 "What stays live, by call site"):
        assert text in page
    # It opens with its conclusion, computed from the figures: the oracle's footprint after the peak against 2 MiB
    # pages (the window of docs/bench.md, "After the peak", as `simulate` prints it), and whether lifetime
    # placement could help.
    first = page.index('<p class="conclusion">')
    assert first < page.index("<section")
    o = sim_result.policies["llama-oracle"].after_peak()["footprint_bytes"]
    b = sim_result.policies["pages-2m"].after_peak()["footprint_bytes"]
    helps = (b - o) / b >= 0.1
    sentence = re.search(r'<p class="conclusion"><strong>(.*?)</strong>', page).group(1)
    assert f"{o / 2**20:,.1f} MiB" in sentence and f"{b / 2**20:,.1f} MiB" in sentence, sentence
    assert ("lifetime placement can help" in sentence) == helps
    assert ("lifetime placement would not help" in sentence) == (not helps)
    # The summary table carries the simulated figures.
    oracle = sim_result.policies["llama-oracle"].summary
    assert f"{oracle['peak_footprint_bytes'] / 2**20:,.1f}" in page

    proc = subprocess.run([chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
                           "--v=0", "--dump-dom", (out / "index.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [l for l in proc.stderr.splitlines() if ":CONSOLE" in l]
    assert console == []
    # The page's own check: every embedded image decoded.
    assert f'data-images-loaded="{len(pngs)}/{len(pngs)}"' in proc.stdout
    assert "Simulation of grow.trace" in proc.stdout


def test_lifetime_panel_sums_the_profiles_class_counts(tmp_path):
    counts = profile_class_counts([DATA / "prof_sites.prof"])
    table = profile.samples_table([DATA / "prof_sites.prof"])
    expected = np.sum(np.array(table.column("class_counts").to_pylist()), axis=0)
    assert list(counts.values())[0].tolist() == expected.tolist()
    assert main(["report", "--profile", str(DATA / "prof_sites.prof"), "-o", str(tmp_path / "r"), "-q"]) == 0
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["index.html", "lifetimes.png"]


def test_bad_inputs_are_one_line_errors_and_write_nothing(sim_result, tmp_path, capsys):
    out = tmp_path / "rep"
    not_sim = tmp_path / "x.json"
    not_sim.write_text('{"hello": 1}')
    rc = main(["report", "--sim", str(sim_result.path), "--sim", str(not_sim), "-o", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not a llamalloc simulation result" in err[0] and str(not_sim) in err[0]
    assert not out.exists() or not any(out.iterdir())
    rc = main(["report", "--bench", str(sim_result.path), "-o", str(out)])
    assert rc == 2 and "not a llamalloc bench result" in capsys.readouterr().err
    rc = main(["report", "-o", str(out)])
    assert rc == 2 and "nothing to report" in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("where", ["under a file", "in /proc"])
def test_an_output_folder_that_cannot_be_made_is_one_line_before_any_input_is_read(tmp_path, capsys, monkeypatch,
                                                                                    where):
    import llamalloc.report as report_mod

    a_file = tmp_path / "file"
    a_file.write_text("x")
    # /proc takes no new file, whatever the permission bits say to root.
    out = a_file / "rep" if where == "under a file" else Path("/proc/llamalloc-report")
    monkeypatch.setattr(report_mod, "profile_class_counts",
                        lambda *_: pytest.fail("the inputs were read before the output folder was checked"))
    rc = main(["report", "--profile", str(DATA / "prof_sites.prof"), "-o", str(out), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"llamalloc: error: {out}: "), err
    assert not out.exists()


@pytest.mark.parametrize("existed", [False, True])
def test_a_full_disk_is_one_line_naming_the_folder_and_keeps_what_was_there(tmp_path, capsys, full_disk_figures,
                                                                            existed):
    from conftest import former_output

    out = tmp_path / "rep"
    former_output(out, existed, "index.html", "the former report")
    rc = main(["report", "--profile", str(DATA / "prof_sites.prof"), "-o", str(out), "-q"])
    err = capsys.readouterr().err
    kept = f"{out} left as it was" if existed else "nothing was written"
    assert rc == 1 and err == f"llamalloc: error: cannot write the report in {out}: No space left on device; {kept}\n"
    if existed:
        assert [(p.name, p.read_text()) for p in out.iterdir()] == [("index.html", "the former report")]
    else:
        assert not out.exists()
