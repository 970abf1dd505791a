"""`llamalloc simulate -p llama-online`: the library's online learner replayed on a hand-made trace."""
from __future__ import annotations

from llamalloc import simulate as sim
from llamalloc.cli import main
from llamalloc.model import modelfile

from test_sim_model import LOAD, SEG_OFFSET, llamalloc, policy, runtime_frame, switch_model, write_tables
from test_sim_support import alloc, free, mapping_record, stack_record, trace_with

BASE = 0x7F0000000000
KEPT, BRIEF = 1, 2  # stacks: objects never freed, objects freed at once
SIZE = 2048


HISTORY_MS = 3000


def two_lifetimes_trace(path):
    """For 3 s, each millisecond one object that is kept and one freed at once (the kept context's samples, taken
    over its first 2 s or so, are then past 1 s: class 3, which LONG_CLASS=3 puts on the longest class's pages);
    then a burst of 4,096 short-lived objects with a kept one after every 32, the short ones freed 1 ms later;
    then a quiet second."""
    events = []
    address = BASE
    for ms in range(HISTORY_MS):
        events.append(alloc(ms, address, SIZE, stack=KEPT))
        events.append(alloc(ms + 0.0001, address + 0x1000, SIZE, stack=BRIEF))
        events.append(free(ms + 0.0002, address + 0x1000))
        address += 0x2000
    brief = []
    for i in range(4096):
        events.append(alloc(HISTORY_MS, address, SIZE, stack=BRIEF))
        brief.append(address)
        address += 0x1000
        if i % 32 == 31:
            events.append(alloc(HISTORY_MS, address, SIZE, stack=KEPT))
            address += 0x1000
    events += [free(HISTORY_MS + 1, a) for a in brief]
    for ms in range(10, 1001, 10):
        events.append(alloc(HISTORY_MS + ms, address, SIZE, stack=BRIEF))
        events.append(free(HISTORY_MS + ms + 0.001, address))
        address += 0x1000
    stacks = [stack_record(KEPT, [0x401233, 0x402000]), stack_record(BRIEF, [0x401456, 0x402000])]
    path.write_bytes(trace_with(stacks, events))
    return path


def test_llama_online_learns_both_contexts_and_keeps_the_kept_objects_apart(tmp_path, capsys):
    trace = two_lifetimes_trace(tmp_path / "two.trace")
    out = tmp_path / "two.json"
    # This trace keeps a few MiB: under the default LEARN_FROM_MIB learning never starts, as in the process.
    rc = main(["simulate", str(trace), "-p", "llama-online", "-o", str(out), "-q"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert "llama-online: online learning did not start" in stdout
    assert sim.load(out).policies["llama-online"].extras["learn_samples"] == 0
    # LONG_CLASS 3: learning alone keeps apart what goes on the longest class's pages, here from 1 s of age.
    rc = main(["simulate", str(trace), "-p", "llama-default", "-p", "llama-online", "-o", str(out), "-q",
               "--option", "LEARN_FROM_MIB=0", "--option", "LONG_CLASS=3"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert "llama-online: online learning decided 2 of 2 contexts" in stdout
    result = sim.load(out)
    online, fixed = result.policies["llama-online"], result.policies["llama-default"]
    assert online.extras["learn_samples"] > 16
    assert online.extras["learn_checks"] < online.summary["allocs"] / 8  # a check every 1 to 64 allocations
    # The burst's kept objects go to a longer class than the default's: its pages are given back once the short
    # ones are freed, while llama-default's stay pinned by them.
    assert online.extras["allocs_class_1"] < fixed.extras["allocs_class_1"]
    assert online.summary["final_footprint_bytes"] < fixed.summary["final_footprint_bytes"]


def test_simulate_help_lists_llama_online_and_learn_is_a_replayed_heap_option(tmp_path, capsys):
    assert main(["simulate", "--help"]) == 0
    assert "llama-online" in capsys.readouterr().out
    trace = two_lifetimes_trace(tmp_path / "two.trace")
    rc = main(["simulate", str(trace), "-p", "llama-online", "-o", str(tmp_path / "o.json"), "-q",
               "--option", "LEARN_MIN_SAMPLES=1000", "--option", "LEARN_FROM_MIB=0"])
    stdout, err = capsys.readouterr()
    assert rc == 0, err
    assert "does not model" not in err
    assert "decided 0 of 2 contexts" in stdout


def test_llama_model_with_learn_overrides_a_wrong_model_class(tmp_path):
    # The made-up program of test_sim_model.py, its "switch" model saying temp_buffer's objects are never freed;
    # they die within a millisecond. Re-predictions every 5 hits put the model's class back in the cache entry,
    # and the next check gives it the learned class again.
    binary = tmp_path / "app"
    binary.write_bytes(b"not really an ELF file, but the tables only look at its size and mtime" * 10)
    records = [mapping_record(LOAD, LOAD + 0x1000, SEG_OFFSET, str(binary)),
               stack_record(2, [runtime_frame("temp_buffer"), runtime_frame("main")])]
    n = 3000
    events = []
    for i in range(n):
        events.append(alloc(i, BASE + i * 0x1000, 4096, stack=2))
        events.append(free(i + 0.5, BASE + i * 0x1000))
    trace = tmp_path / "app.trace"
    trace.write_bytes(trace_with(records, events))
    m = switch_model({"temp_buffer": 7}, 0, ["keep_record", "temp_buffer", "main"])
    modelfile.write(tmp_path / "m.model", m)
    tokens = write_tables(m, binary, tmp_path / "m.tokens")
    common = ["--model", tmp_path / "m.model", "--tokens", tokens, "--option", "REPREDICT_EVERY=5",
              "--option", "REPREDICT_BACKOFF=0", "-q"]
    r = llamalloc("simulate", trace, "-p", "llama-model", "-o", tmp_path / "plain.json", *common)
    assert r.returncode == 0, r.stderr
    plain = policy(tmp_path / "plain.json", "llama-model")["extras"]
    assert plain["allocs_class_7"] == n and "learn_contexts" not in plain
    r = llamalloc("simulate", trace, "-p", "llama-model", "-o", tmp_path / "learn.json", *common,
                  "--option", "LEARN=1", "--option", "LEARN_MIN_SAMPLES=4",
                  "--option", "LEARN_OVERRIDE_SAMPLES=8")
    assert r.returncode == 0, r.stderr
    learned = policy(tmp_path / "learn.json", "llama-model")
    e = learned["extras"]
    assert e["learn_contexts"] == 1 and e["learn_decided"] == 1
    # The learned class (0, below MIN_CLASS: the default class, 1) once 8 samples are in: about 8 checks of 1 to
    # 64 allocations.
    assert e["allocs_class_1"] > n / 2 and e["allocs_class_7"] > 0
    assert e["allocs_class_1"] + e["allocs_class_7"] == n
    # Every re-prediction hands the entry the model's class again, which the next check overrides.
    assert e["learn_overrides"] > 1
    assert e["accuracy_exact"] == 0.0 and e["placed_accuracy_within_one_class"] > 0.5
    (context,) = learned["learned_contexts"]
    assert context["model_class"] == 7 and context["learned"] == 1 and context["confident"]
    assert "overrides of the model's class" in r.stdout
