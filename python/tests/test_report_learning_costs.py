"""`llamalloc report` says in words when the model or online learning keeps more after the peak than llamalloc
alone (llama-default in a replay, llamalloc in a bench result), in the words of `compare` and `bench`
(allocators.learning_cost_lines), and advises a denser profile only when its profiles did not record every
allocation."""
from __future__ import annotations

import html
import json
from pathlib import Path

from llamalloc import profile, simulate as sim
from llamalloc.cli import main
from llamalloc.report import bench_learning_costs, sim_conclusion, sim_learning_costs

DATA = Path(__file__).parent / "data"
MiB = 1 << 20
SAMPLES, PEAK_SAMPLES = 100, 20


def write_sim(path: Path, after_peak_mib: dict[str, float], extras: dict[str, dict] | None = None) -> Path:
    """A simulation result as `llamalloc simulate` writes it (JSON and its timeline CSV beside it): 100 MiB live
    for 0.2 s, then 10 MiB to the end; each policy keeps 120 MiB at the peak and its given MiB after it (the
    after-peak window is the 80 samples after the peak)."""
    csv_name = path.name.removesuffix(".json") + ".timeline.csv"
    rows, policies = ["policy,time_ns,live_bytes,footprint_bytes"], []
    for name, mib in after_peak_mib.items():
        for k in range(SAMPLES):
            live, foot = (100 * MiB, 120 * MiB) if k < PEAK_SAMPLES else (10 * MiB, int(mib * MiB))
            rows.append(f"{name},{10**9 + k * 10**7},{live},{foot}")
        policies.append({"policy": name, "extras": (extras or {}).get(name, {}), "summary": {
            "first_time_ns": 10**9, "peak_footprint_bytes": 120 * MiB, "final_footprint_bytes": int(mib * MiB),
            "final_live_bytes": 10 * MiB, "peak_live_bytes": 100 * MiB, "average_fragmentation_ratio": 1.5,
            "final_fragmentation_ratio": mib / 10, "events_per_second": 1e6, "unknown_frees": 0}})
    (path.parent / csv_name).write_text("\n".join(rows) + "\n")
    path.write_text(json.dumps({"format": "llamalloc-sim", "version": 1, "trace": "/traces/app.trace",
                                "interval_ns": 10**7, "timeline_csv": csv_name, "policies": policies}))
    return path


def run_json(steady: float, peak: float) -> dict:
    return {"ok": True, "peak_rss_bytes": peak, "metrics": {"steady_state": {"rss_bytes": steady}}}


def bench_file(path: Path, steady_mib: dict[str, list[float]]) -> Path:
    """A bench result of frag-micro with each allocator's runs (steady RSS as given, peak RSS 80 MiB)."""
    rows = [{"workload": "frag-micro", "allocator": a, "runs": [run_json(s * MiB, 80 * MiB) for s in steady],
             "summary": {"runs": len(steady), "seconds": 1.5, "throughput": None, "throughput_metric": None,
                         "peak_rss_bytes": 80 * MiB, "final_rss_bytes": steady[0] * MiB,
                         "peak_anon_huge_pages_bytes": 0, "final_anon_huge_pages_bytes": 0}}
            for a, steady in steady_mib.items()]
    path.write_text(json.dumps({"format": "llamalloc-bench", "version": 1, "scale": "small", "repeat": 3,
                                "results": rows, "problems": []}))
    return path


def test_a_model_that_keeps_more_than_llama_default_is_named_with_the_advice_not_to_deploy(tmp_path):
    result = sim.load(write_sim(tmp_path / "app.sim.json", {"llama-default": 20, "llama-model": 24,
                                                              "llama-online": 20.3}))
    lines = sim_learning_costs(result, "app.trace")
    # A replay has no spread: 20% above llama-default is beyond it; llama-online, 1.5% above, is within the 2%.
    assert lines == [
        "app.trace: llama-model: the model keeps 20% more after the peak than llamalloc alone (24.0 against 20.0 "
        "MiB): do not deploy the model for this program. Likely cause: call sites whose objects split between "
        "lifetimes (`llamalloc top PROFILE` marks them with *), or contexts the profile never saw placed on "
        "long-lived pages (LLAMALLOC_UNSEEN_TRIAL=0 turns that off); `llamalloc simulate TRACE -p llama-default "
        "-p llama-model --model MODEL` shows the placement."]


def test_online_learning_and_the_model_replayed_learning_are_named_as_such(tmp_path):
    result = sim.load(write_sim(tmp_path / "app.sim.json", {"llama-default": 20, "llama-model": 30,
                                                              "llama-online": 22},
                                extras={"llama-model": {"learn_started": 1, "learn_samples": 40}}))
    lines = sim_learning_costs(result, "app.trace")
    assert len(lines) == 2
    assert lines[0].startswith("app.trace: llama-model: the model with online learning keeps 50% more after the "
                               "peak than llamalloc alone (30.0 against 20.0 MiB): do not deploy the model with "
                               "online learning for this program. Likely cause: ")
    assert lines[1].startswith("app.trace: llama-online: online learning keeps 10% more after the peak than "
                               "llamalloc alone (22.0 against 20.0 MiB): do not deploy online learning for this "
                               "program. Likely cause: call sites whose objects split")
    # Without llama-default there is nothing to compare with; a model below it is no warning.
    assert sim_learning_costs(sim.load(write_sim(tmp_path / "b.sim.json", {"llama-model": 30})), "b") == []
    assert sim_learning_costs(sim.load(write_sim(tmp_path / "c.sim.json", {"llama-default": 20,
                                                                           "llama-model": 12})), "c") == []


def test_a_bench_result_gives_the_lines_bench_prints_over_the_spread_of_its_runs(tmp_path):
    doc = json.loads(bench_file(tmp_path / "bench.json", {"llamalloc": [60, 59, 61],
                                                          "llamalloc+model": [72, 71, 73],
                                                          "llamalloc+online": [66, 58, 68]}).read_text())
    lines = bench_learning_costs(doc)
    assert len(lines) == 2
    assert lines[0].startswith("frag-micro: llamalloc + model: the model keeps 20% more after the peak than "
                               "llamalloc alone (72.0 against 60.0 MiB): do not deploy the model for this program.")
    assert lines[1].startswith("frag-micro: llamalloc + online: online learning keeps 10% more after the peak")
    assert "within the spread of the runs" in lines[1] and "do not deploy" not in lines[1]
    # A result without its runs (medians only) gives no line.
    for r in doc["results"]:
        del r["runs"]
    assert bench_learning_costs(doc) == []


def test_a_denser_profile_is_not_advised_when_the_profile_recorded_every_allocation(tmp_path):
    # The oracle saves 75% against 2 MiB pages; the model gets less than half of that.
    result = sim.load(write_sim(tmp_path / "app.sim.json", {"pages-2m": 40, "llama-oracle": 10,
                                                              "llama-default": 20, "llama-model": 30}))
    sampled = sim_conclusion(result, "app.trace")
    assert sampled.endswith("The model keeps 30.0 MiB: it gets less than half of that gain (a denser profile, "
                            "or online learning, may help).")
    every = sim_conclusion(result, "app.trace", profile_every_allocation=True)
    assert "denser profile" not in every
    assert every.endswith("The model keeps 30.0 MiB: it gets less than half of that gain (its profile already "
                          "records every allocation, so a denser one cannot help; online learning may).")


def test_the_report_prints_and_opens_with_the_lines_and_reads_the_profiles_sampling(tmp_path, capsys):
    assert profile.load(DATA / "prof_sites.prof").sample_bytes == 1  # every allocation
    sampled = tmp_path / "sampled.prof"
    message = profile.load_proto(DATA / "prof_sites.prof")
    message.period = 4096
    profile.write(message, sampled)
    simfile = write_sim(tmp_path / "app.sim.json", {"pages-2m": 40, "llama-oracle": 10, "llama-default": 20,
                                                     "llama-model": 30})
    bench = bench_file(tmp_path / "bench.json", {"llamalloc": [60, 59, 61], "llamalloc+model": [72, 71, 73]})
    model_line = ("app.trace: llama-model: the model keeps 50% more after the peak than llamalloc alone (30.0 "
                  "against 20.0 MiB): do not deploy the model for this program. Likely cause: ")
    bench_line = ("frag-micro: llamalloc + model: the model keeps 20% more after the peak than llamalloc alone "
                  "(72.0 against 60.0 MiB): do not deploy the model for this program. Likely cause: ")
    for prof, denser in ((DATA / "prof_sites.prof", False), (sampled, True)):
        out = tmp_path / f"rep-{prof.stem}"
        rc = main(["report", "--sim", str(simfile), "--bench", str(bench), "--profile", str(prof), "-o", str(out),
                   "-q"])
        printed = capsys.readouterr()
        assert rc == 0, printed.err
        text = printed.out.splitlines()
        assert text[0].startswith("app.trace: after the peak (") and "lifetime placement can help" in text[0]
        assert ("a denser profile" in text[0]) == denser
        assert ("already records every allocation" in text[0]) == (not denser)
        assert text[1].startswith(model_line) and text[2].startswith(bench_line)
        page = (out / "index.html").read_text()
        conclusions = [c.split("</strong>")[0] for c in page.split('<p class="conclusion"><strong>')[1:]]
        assert conclusions == [html.escape(line) for line in text[:3]]
