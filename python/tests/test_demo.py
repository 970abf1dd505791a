"""`llamalloc demo`, the README's main job, end to end at small scale."""
import json
import subprocess
import sys

import pytest


def _llamalloc(*args, **kw):
    return subprocess.run([sys.executable, "-m", "llamalloc", *args], capture_output=True, text=True, **kw)


def test_demo_runs_the_whole_loop(tmp_path):
    out = tmp_path / "demo"
    r = _llamalloc("demo", "-w", "frag-micro", "--allocators", "glibc,llamalloc", "--epochs", "2", "-o", str(out),
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
    assert {x["allocator"] for x in bench["results"]} == {"glibc", "llamalloc"}
    stats = json.loads((out / "frag-micro.stats.json").read_text())
    assert stats["peak_footprint_bytes"] >= stats["peak_live_bytes"] > 0


@pytest.mark.parametrize("args, message", [
    (["-w", "no-such-workload"], "no-such-workload"),
    (["--repeat", "0"], "--repeat"),
])
def test_demo_bad_arguments_are_one_line(tmp_path, args, message):
    r = _llamalloc("demo", "-o", str(tmp_path / "d"), *args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr
