"""llama-oracle-best: llama-oracle replayed under a search of the library's placement options. On a trace whose
memory the default options place badly, the search must find options that keep less, say which, and a
llama-oracle replay under those options (--option) must keep exactly that; a bad --search is a one-line
error."""
from __future__ import annotations

import json
import random

import pytest
from conftest import one_error_line, run

from llamalloc import simulate as sim

from test_sim_support import alloc, free, write_trace

MIB = 1 << 20


@pytest.fixture(scope="module")
def long_lived_trace(tmp_path_factory):
    """Eight threads each make 6,000 small objects over 20 s: half die within 50 ms, 35% live 12-90 s (class 4,
    all freed long before the trace ends at 400 s, so that the state after they died is most of the time after
    the peak) and 15% are never freed. Under the default options class 4 takes
    its blocks from the never-freed objects' pages (LLAMALLOC_LONG_CLASS=4) and the long-lived classes come from
    one shared heap (LLAMALLOC_SHARED_CLASS=3): when the class-4 objects die, those pages stay, holding the
    never-freed ones among the holes."""
    rng = random.Random(3)
    timed = []
    address = 0x10000000
    for thread in range(1, 9):
        t = 0.0
        for _ in range(6000):
            address += 0x1000
            t += 20000.0 / 6000 * rng.uniform(0.5, 1.5)
            timed.append((t, 0, alloc(t, address, rng.choice([48, 64, 128, 256, 512, 1024]), thread=thread)))
            r = rng.random()
            life = rng.uniform(1, 50) if r < 0.5 else rng.uniform(12000, 90000) if r < 0.85 else None
            if life is not None:
                timed.append((t + life, 1, free(t + life, address, thread=thread)))
    address += 0x1000
    timed.append((400000.0, 0, alloc(400000.0, address, 16, thread=1)))
    timed.sort(key=lambda e: (e[0], e[1]))
    return write_trace(tmp_path_factory.mktemp("best") / "long.trace", [e[2] for e in timed])


@pytest.fixture(scope="module")
def searched(long_lived_trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("best-out") / "best.json"
    result = sim.simulate(long_lived_trace, ["llama-oracle", "llama-oracle-best"], out, interval_ms=1000)
    return result, out


def test_the_search_keeps_less_than_the_default_options_and_says_which(searched):
    result, _ = searched
    oracle = result.policies["llama-oracle"]
    best = result.policies["llama-oracle-best"]
    search = best.search
    final = best.summary["final_footprint_bytes"]
    # Ranked by the footprint after the peak, which is the median that `simulate`'s after_peak() reads from the
    # timeline. This trace: the default options keep at least a fifth more than the best ones after the peak.
    after, base_after = search["best"]["after_peak_footprint_bytes"], search["base"]["after_peak_footprint_bytes"]
    assert base_after == sim.after_peak(oracle.timeline)["footprint_bytes"]
    assert after == sim.after_peak(best.timeline)["footprint_bytes"]
    assert 1.2 * after <= base_after
    # The base candidate is llama-oracle under the default options, replayed the same way.
    assert search["base"]["options"] == oracle.heap_options == search["defaults"]
    assert search["base"]["final_footprint_bytes"] == oracle.summary["final_footprint_bytes"]
    assert search["base"]["peak_footprint_bytes"] == oracle.summary["peak_footprint_bytes"]
    assert best.extras["base_over_best_final_footprint"] == pytest.approx(
        oracle.summary["final_footprint_bytes"] / final)
    assert best.extras["base_over_best_after_peak_footprint"] == pytest.approx(base_after / after)
    # The best run's figures are the best candidate's, its heap was built from the reported options, and the
    # settings to give the library are those options where they differ from its defaults.
    assert search["best"]["final_footprint_bytes"] == final
    assert search["best"]["peak_footprint_bytes"] == best.summary["peak_footprint_bytes"]
    assert search["best"]["options"] == best.heap_options
    assert search["settings"] == [f"LLAMALLOC_{k}={v}" for k, v in best.heap_options.items()
                                  if v != search["defaults"][k]]
    assert search["settings"]
    # Every candidate is listed with its options and figures; the grid's 32 combinations at least, none better.
    candidates = search["candidates"]
    assert len(candidates) >= 32 and best.extras["search_candidates"] == len(candidates)
    assert len({json.dumps(c["options"], sort_keys=True) for c in candidates}) == len(candidates)
    for c in candidates:
        assert set(c) >= {"options", "after_peak_footprint_bytes", "final_footprint_bytes", "peak_footprint_bytes",
                          "mean_footprint_bytes"}
        key = ("after_peak_footprint_bytes", "final_footprint_bytes", "mean_footprint_bytes")
        assert tuple(c[k] for k in key) >= tuple(search["best"][k] for k in key)
    grid = {(c["options"]["LONG_CLASS"], c["options"]["SHARED_CLASS"], c["options"]["SPAN_RECYCLING"],
             c["options"]["DENSE_FIRST"], c["options"]["DEADLINE_K"]) for c in candidates}
    assert len(grid) == 32


def test_llama_oracle_under_the_best_options_keeps_the_same(searched, long_lived_trace, tmp_path):
    result, _ = searched
    best = result.policies["llama-oracle-best"]
    options = [s.removeprefix("LLAMALLOC_") for s in best.search["settings"]]
    again = sim.simulate(long_lived_trace, ["llama-oracle"], tmp_path / "again.json", interval_ms=1000,
                         heap_options=options).policies["llama-oracle"]
    assert again.heap_options == best.heap_options
    assert again.summary["final_footprint_bytes"] == best.summary["final_footprint_bytes"]
    assert again.summary["peak_footprint_bytes"] == best.summary["peak_footprint_bytes"]
    assert list(again.timeline["footprint_bytes"]) == list(best.timeline["footprint_bytes"])


def test_the_command_prints_the_best_options_beside_the_defaults(long_lived_trace, tmp_path, capsys):
    out = tmp_path / "cmd.json"
    rc, stdout, err = run(["simulate", str(long_lived_trace), "-p", "llama-oracle", "-p", "llama-oracle-best",
                           "--interval-ms", "1000", "-o", str(out)], capsys)
    assert rc == 0, err
    best = sim.load(out).policies["llama-oracle-best"]
    line = next(l for l in stdout.splitlines() if l.startswith("llama-oracle-best: "))
    assert " ".join(best.search["settings"]) in line and "with the default options (llama-oracle)" in line
    assert f"{best.search['best']['after_peak_footprint_bytes'] / MIB:,.1f} MiB after the peak" in line
    # One progress line per candidate, on stderr.
    assert sum("llama-oracle-best: candidate " in l for l in err.splitlines()) == len(best.search["candidates"])


def test_search_sets_the_space_and_threads_do_not_change_the_result(long_lived_trace, tmp_path):
    results = []
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}.json"
        r = sim.simulate(long_lived_trace, ["llama-oracle-best"], out, interval_ms=1000, jobs=jobs,
                         search=["LONG_CLASS=4,8", "LLAMALLOC_SHARED_CLASS=3,8", "SPAN_RECYCLING=1",
                                 "DENSE_FIRST=1", "DEADLINE_K=4", "SAME_CLASS_RECYCLING=1", "SMALL_HEAP_PAGES=8"])
        results.append(r.policies["llama-oracle-best"].search)
    search = results[0]
    assert search["space"] == {"LONG_CLASS": [4, 8], "SHARED_CLASS": [3, 8], "SPAN_RECYCLING": [1],
                               "DENSE_FIRST": [1], "DEADLINE_K": [4], "SAME_CLASS_RECYCLING": [1],
                               "SMALL_HEAP_PAGES": [8]}
    tried = sorted((c["options"]["LONG_CLASS"], c["options"]["SHARED_CLASS"]) for c in search["candidates"])
    assert tried == [(4, 3), (4, 8), (8, 3), (8, 8)]
    assert search["best"]["options"]["LONG_CLASS"] == 8 and search["best"]["options"]["SHARED_CLASS"] == 8
    assert results[0] == results[1]


@pytest.mark.parametrize("spec, message", [
    ("LONG_CLAS=4,8", "--search LONG_CLAS=4,8: LLAMALLOC_LONG_CLAS is not a llamalloc option (did you mean "
                      "LLAMALLOC_LONG_CLASS?)"),
    ("LONG_CLASS=4,9", "--search LONG_CLASS=9: not an integer in [1, 8]"),
    ("DENSE_FIRST=0,yes", "--search DENSE_FIRST=yes: not an integer in [0, 1]"),
    ("LONG_CLASS=4,", "--search LONG_CLASS=4,: an empty value"),
    ("LONG_CLASS", "--search wants NAME=V1,V2,..., got 'LONG_CLASS'"),
    ("SUBRELEASE=0,50", "--search SUBRELEASE=0,50: SUBRELEASE is not a placement option"),
])
def test_a_bad_search_is_a_one_line_error_before_the_replay(tmp_path, capsys, spec, message):
    trace = write_trace(tmp_path / "g.trace", [alloc(0, 0x7F0000000000, 8)])
    out = tmp_path / "x.json"
    rc, _, err = run(["simulate", str(trace), "-p", "llama-oracle-best", "-o", str(out), "--search", spec, "-q"],
                     capsys)
    assert one_error_line(rc, err).startswith("llamalloc: error: " + message), err
    assert not out.exists()


def test_search_without_llama_oracle_best_is_refused(tmp_path, capsys):
    trace = write_trace(tmp_path / "g.trace", [alloc(0, 0x7F0000000000, 8)])
    out = tmp_path / "x.json"
    rc, _, err = run(["simulate", str(trace), "-p", "llama-oracle", "-o", str(out), "--search", "LONG_CLASS=4,8",
                      "-q"], capsys)
    assert rc == 2 and err.strip() == "llamalloc: error: --search is for --policy llama-oracle-best"
    assert not out.exists()
