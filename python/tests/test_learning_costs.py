"""`compare` and `bench` say in words when the model or online learning keeps more memory than llamalloc alone
(allocators.learning_cost_lines): beyond the spread of the runs, not to deploy it, with the likely cause."""
from llamalloc import allocators, compare

MiB = 1 << 20


def test_a_variant_beyond_the_spread_is_named_with_its_cause():
    lines = allocators.learning_cost_lines({"llamalloc": (60 * MiB, 58 * MiB, 61 * MiB),
                                            "llamalloc+model": (72 * MiB, 70 * MiB, 75 * MiB)}, "after the peak")
    assert len(lines) == 1
    assert lines[0].startswith("llamalloc + model: the model keeps 20% more after the peak than llamalloc alone "
                               "(72.0 against 60.0 MiB): do not deploy the model for this program.")
    assert "Likely cause:" in lines[0] and "llamalloc top" in lines[0]


def test_within_the_spread_it_asks_for_more_runs_and_within_two_percent_it_says_nothing():
    figures = {"llamalloc": (60 * MiB, 50 * MiB, 70 * MiB), "llamalloc+online": (66 * MiB, 62 * MiB, 68 * MiB),
               "llamalloc+model": (61 * MiB, 60 * MiB, 62 * MiB)}
    lines = allocators.learning_cost_lines(figures, "at the peak")
    assert len(lines) == 1 and lines[0].startswith("llamalloc + online: online learning keeps 10% more at the peak")
    assert "within the spread of the runs" in lines[0] and "do not deploy" not in lines[0]
    assert allocators.learning_cost_lines({"llamalloc+model": (1.0, 1.0, 1.0)}, "at the peak") == []


def test_compare_verdict_carries_the_warning(monkeypatch):
    def summary(name, steady, low, high):
        return compare.Summary(name, runs=3, tried=3, median={"steady_rss_bytes": steady, "peak_rss_bytes": 80 * MiB},
                               low={"steady_rss_bytes": low, "peak_rss_bytes": 80 * MiB},
                               high={"steady_rss_bytes": high, "peak_rss_bytes": 80 * MiB})
    monkeypatch.setattr(compare, "summarize", lambda runs: [
        summary("llamalloc", 60 * MiB, 59 * MiB, 61 * MiB), summary("llamalloc+online", 72 * MiB, 71 * MiB, 73 * MiB)])
    text = compare.verdict([], ["./server"])
    assert "llamalloc + online: online learning keeps 20% more after the peak than llamalloc alone" in text
    assert "do not deploy online learning for this program" in text


def test_bench_prints_the_warning_per_workload():
    from llamalloc import bench

    def run(allocator, steady_mib, peak_mib):
        return bench.Run("w", allocator, 0, True, metrics={"steady_state": {"rss_bytes": steady_mib * MiB}},
                         samples=[(0.0, peak_mib * MiB, 0)])
    result = bench.BenchResult("small", 3, [allocators.Allocator("llamalloc", None),
                                            allocators.Allocator("llamalloc+model", None)], ["w"])
    result.runs = [run("llamalloc", s, 50) for s in (10, 10.2, 10.4)] + [run("llamalloc+model", s, 50)
                                                                         for s in (13, 13.1, 13.3)]
    lines = bench.learning_costs(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith("w: llamalloc + model: the model keeps 28% more after the peak than llamalloc alone "
                               "(13.1 against 10.2 MiB): do not deploy the model for this program.")
