"""`llamalloc demo`, the README's main job, end to end at small scale."""
import json
from functools import partial

import pytest
from conftest import llamalloc


# `llamalloc ARGS`, its exit status left to the test.
_llamalloc = partial(llamalloc, check_rc=None)


def test_demo_runs_the_whole_loop(tmp_path):
    out = tmp_path / "demo"
    r = _llamalloc("demo", "-w", "frag-micro", "--scale", "small", "--allocators", "glibc,llamalloc", "--epochs", "2",
                   "--sample-bytes", "2048", "-o", str(out),
                   timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    for name in ("frag-micro.prof", "frag-micro.model", "frag-micro.trace", "frag-micro.sim.json",
                 "frag-micro.stats.json", "bench/bench.json", "report/index.html"):
        assert (out / name).is_file(), name
    # Every step announced its command, and the closing tables name both allocators and the oracle policy.
    for step in ("llamalloc record", "llamalloc symbolize", "llamalloc train", "llamalloc run", "llamalloc trace",
                 "llamalloc simulate", "llamalloc bench", "llamalloc report"):
        assert step in r.stderr
    table = r.stdout
    assert "glibc" in table and "llamalloc" in table and "llama-oracle" in table
    assert "llama-model" in table  # the replay with the model the demo trained
    bench = json.loads((out / "bench" / "bench.json").read_text())
    # llamalloc + model and llamalloc learning online ran in the bench beside the others, and their rows in the
    # closing table are the bench's
    assert {x["allocator"] for x in bench["results"]} == {"glibc", "llamalloc", "llamalloc+online", "llamalloc+model"}
    assert any(line.startswith("llamalloc + online") for line in table.splitlines())
    from llamalloc import profile
    assert profile.load(out / "frag-micro.prof").sample_bytes == 2048  # the profile was recorded as asked
    stats = json.loads((out / "frag-micro.stats.json").read_text())
    assert stats["peak_footprint_bytes"] >= stats["peak_live_bytes"] > 0
    # The closing table has the steady state (the quiet phase after the load) of every allocator and of
    # llamalloc + model, and one line of conclusion.
    assert "steady RSS MiB" in table and "llamalloc + model" in table
    model_row = next(line for line in table.splitlines() if line.startswith("llamalloc + model"))
    assert model_row.split()[6] != "-", model_row  # its steady RSS
    assert "In steady state the model" in table


def _bench(rows):
    return {"results": [{"workload": "w", "allocator": a, "summary": {"seconds": 1.0, "steady_rss_bytes": rss}}
                        for a, rss in rows]}


def test_demo_conclusion_compares_model_no_model_and_the_best_peer():
    from llamalloc.demo import conclusion, steady_rows
    MiB = 2**20
    bench = _bench([("glibc", 30 * MiB), ("jemalloc", 20 * MiB), ("llamalloc", 25 * MiB)])
    better = steady_rows(bench, "w", {"seconds": 1.0, "steady_state": {"rss_bytes": 10 * MiB}}, {"rss_bytes": 1})
    line = conclusion(better)
    assert line.startswith("In steady state the model lowers llamalloc's resident memory: 10.0 MiB with it, 25.0 MiB")
    assert line.endswith("with it llamalloc keeps 2.0x less than the best other allocator, jemalloc (20.0 MiB)."), line
    worse = steady_rows(bench, "w", {"steady_state": {"rss_bytes": 40 * MiB}}, {})
    line = conclusion(worse)
    assert "raises" in line and "+60%" in line
    assert line.endswith("with it llamalloc keeps 2.00x as much as the best other allocator, jemalloc (20.0 MiB)."), line
    assert "nothing to conclude" in conclusion(steady_rows(bench, "w", {}, {}))
    same = steady_rows(bench, "w", {"steady_state": {"rss_bytes": 26 * MiB}}, {})
    assert "leaves llamalloc's resident memory about the same" in conclusion(same) and "+4%" in conclusion(same)


def test_demo_conclusion_takes_the_model_from_the_bench_and_reports_huge_pages():
    from llamalloc.demo import conclusion, steady_rows
    MiB = 2**20
    rows = [("llamalloc", 9.3 * MiB, 58 * MiB), ("llamalloc+model", 9.7 * MiB, 42 * MiB), ("mimalloc", 87.6 * MiB, None)]
    bench = {"results": [{"workload": "w", "allocator": a, "summary": {
        "seconds": 1.0, "steady_rss_bytes": rss, **({"steady_footprint_bytes": fp} if fp else {})}}
        for a, rss, fp in rows]}
    # the bench's row wins over the separate `run --model` (which would say 40 MiB here)
    table = steady_rows(bench, "w", {"steady_state": {"rss_bytes": 40 * MiB}}, {"rss_bytes": 1})
    assert [r[0] for r in table] == ["llamalloc", "llamalloc + model", "mimalloc"]
    line = conclusion(table)
    assert "leaves llamalloc's resident memory about the same" in line
    assert "9.7 MiB with it, 9.3 MiB without (+4%)" in line
    assert "it holds 28% fewer huge pages (42.0 MiB of them with it, 58.0 MiB without)" in line, line
    assert line.endswith("mimalloc (87.6 MiB)."), line


def test_demo_conclusion_calls_overlapping_runs_the_same():
    from llamalloc.demo import conclusion, steady_rows, steady_spread
    MiB = 2**20

    def bench(with_model, without):
        return {"results": [{"workload": "w", "allocator": a,
                             "summary": {"seconds": 1.0, "steady_rss_bytes": sorted(v)[1] * MiB},
                             "runs": [{"ok": True, "metrics": {"steady_state": {"rss_bytes": x * MiB}}} for x in v]}
                            for a, v in (("llamalloc", without), ("llamalloc+model", with_model))]}
    # runs as the demo's at default scale: medians 5% apart, but the runs with and without the model overlap
    b = bench([10.0, 10.5, 8.8], [9.5, 9.6, 9.2])
    line = conclusion(steady_rows(b, "w", {}, {}), steady_spread(b, "w"))
    assert "leaves llamalloc's resident memory about the same" in line
    assert "(+5%; runs 8.8-10.5 and 9.2-9.6)" in line, line
    b = bench([8.0, 8.2, 8.1], [9.5, 9.6, 9.2])
    assert "model lowers" in conclusion(steady_rows(b, "w", {}, {}), steady_spread(b, "w"))
    b = bench([10.0, 10.2, 10.1], [9.5, 9.6, 9.2])
    assert "model raises" in conclusion(steady_rows(b, "w", {}, {}), steady_spread(b, "w"))


@pytest.mark.parametrize("args, message", [
    (["-w", "no-such-workload"], "no-such-workload"),
    (["--repeat", "0"], "--repeat"),
    (["--sample-bytes", "0"], "--sample-bytes"),
])
def test_demo_bad_arguments_are_one_line(tmp_path, args, message):
    r = _llamalloc("demo", "-o", str(tmp_path / "d"), *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
