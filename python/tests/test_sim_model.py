"""llama-model: the simulated heap fed by a learned model through the process's prediction cache (docs/simulator.md).

Hand-made pieces with known answers: a "switch" LSTM whose class is decided by one word of the stack (built by
hand, checked against the reference inference), token tables of a made-up binary, and a trace whose stacks fall
in that binary's mapping. Then a real program: its trace replayed with token tables prepared on the fly from its
binaries, and again after its binary was deleted (a warning, the replay goes on)."""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import llamalloc as run_llamalloc

from llamalloc import paths, profile
from llamalloc import simulate as sim
from llamalloc import trace as tracefile
from llamalloc import prepare as prep
from llamalloc.model import modelfile, reference
from llamalloc.model.tokenizer import SPECIAL_TOKENS, Vocabulary
from test_sim_support import alloc, free, mapping_record, stack_record, trace_with

# The made-up program: one executable segment at file offset 0x1000, ELF vaddr 0x401000, mapped at LOAD.
LOAD, SEG_OFFSET, SEG_VADDR = 0x5555_0000_1000, 0x1000, 0x401000
SITES = {"keep_record": 0x401010, "temp_buffer": 0x401020, "main": 0x401030}  # return addresses (ELF vaddr)
GONE = 0x7F00_0000_1000  # a library of the trace that is not on this machine


def runtime_frame(site: str) -> int:
    """The trace's address of a frame: the run-time return address - 1."""
    return SITES[site] - SEG_VADDR + LOAD - 1


def switch_model(switch: dict[str, int], default_class: int, words: list[str]) -> modelfile.ModelFile:
    """An LSTM whose class is switch[w] if word w is in the context, else default_class: one cell per switch word
    that latches (input and cell gates open only for its word, forget gate always open), a dense layer reading
    the latched cells."""
    vocab = SPECIAL_TOKENS + words
    v, keys = len(vocab), list(switch)
    hidden = len(keys)
    big = 20.0
    embedding = np.zeros((v, hidden), np.float32)
    w_input = np.zeros((hidden, 4 * hidden), np.float32)
    bias = np.zeros(4 * hidden, np.float32)
    for j, word in enumerate(keys):
        embedding[vocab.index(word), j] = 1.0
        w_input[j, j] = 2 * big              # input gate: open for this word only
        w_input[j, 2 * hidden + j] = big     # cell candidate: +1
    bias[:hidden] = -big
    bias[hidden:2 * hidden] = big            # forget gate: keep what was latched
    bias[3 * hidden:] = big                  # output gate: open
    dense_w = np.zeros((hidden, 8), np.float32)
    dense_b = np.full(8, -10.0, np.float32)
    dense_b[default_class] = 3.0
    for j, word in enumerate(keys):
        dense_w[j, switch[word]] = 10.0      # a latched cell gives h = tanh(1) = 0.76: 7.6 > 3
        dense_b[switch[word]] = 0.0
    return modelfile.ModelFile(vocabulary=vocab, embedding=embedding, w_input=w_input,
                               w_hidden=np.zeros((hidden, 4 * hidden), np.float32), bias=bias,
                               folded=(embedding @ w_input + bias).astype(np.float32), dense_w=dense_w,
                               dense_b=dense_b, max_tokens=128, default_class=default_class, program="test")


def write_tables(model: modelfile.ModelFile, binary: Path, out: Path) -> Path:
    """Token tables of the made-up binary, as `llamalloc prepare` lays them out."""
    vocab = Vocabulary(model.vocabulary)
    st = binary.stat()
    sites = [(addr, vocab.frame_ids(name), False) for name, addr in sorted(SITES.items(), key=lambda kv: kv[1])]
    table = prep.BinaryTable(str(binary.resolve()), st.st_size, st.st_mtime_ns, "", [(SEG_OFFSET, SEG_VADDR, 0x1000)],
                             sites, [])
    root = prep.BinaryTable(prep.THREAD_ROOT_PATH, 0, 0, "", [], [], [(0, 1, vocab.frame_ids("start_thread"), False)])
    out.write_bytes(prep.encode_tables([table, root], prep.vocab_crc(model), len(vocab)))
    return out


def written_model(folder: Path, binary: Path, name: str, switch: dict[str, int], default_class: int,
                  words: list[str]) -> tuple[modelfile.ModelFile, Path]:
    """A switch_model written to folder/NAME.model, with the binary's token tables for it in folder/NAME.tokens."""
    m = switch_model(switch, default_class, words)
    modelfile.write(folder / f"{name}.model", m)
    return m, write_tables(m, binary, folder / f"{name}.tokens")


N_KEEP, N_TEMP, N_GONE, N_OTHER_THREAD = 40, 40, 40, 7


def hand_made_trace(path: Path, binary: Path) -> Path:
    """Thread 1 keeps N_KEEP records (never freed: class 7) and allocates short buffers from two contexts, one in
    a library that is gone (freed within 1 ms: class 0); thread 2 allocates a few short buffers."""
    main = runtime_frame("main")
    records = [mapping_record(LOAD, LOAD + 0x1000, SEG_OFFSET, str(binary)),
               mapping_record(GONE, GONE + 0x1000, 0, "/nonexistent/libgone.so.1"),
               stack_record(1, [runtime_frame("keep_record"), main]),
               stack_record(2, [runtime_frame("temp_buffer"), main]),
               stack_record(3, [GONE + 0x100, main])]
    events = []
    for i in range(N_KEEP):
        t = 2.0 * i
        events.append(alloc(t, 0x10_0000 + i * 0x1000, 256, stack=1))
        events.append(alloc(t + 0.1, 0x20_0000 + i * 0x1000, 4096, stack=2))
        events.append(alloc(t + 0.2, 0x30_0000 + i * 0x1000, 100, stack=3))
        events.append(free(t + 0.5, 0x20_0000 + i * 0x1000))
        events.append(free(t + 0.6, 0x30_0000 + i * 0x1000))
    for i in range(N_OTHER_THREAD):
        events.append(alloc(100.0 + i, 0x40_0000 + i * 0x1000, 4096, stack=2, thread=2))
        events.append(free(100.3 + i, 0x40_0000 + i * 0x1000, thread=2))
    path.write_bytes(trace_with(records, sorted(events, key=lambda e: int.from_bytes(e[:8], "little"))))
    return path


# The callers look at the exit status themselves.
llamalloc = functools.partial(run_llamalloc, check_rc=None)


@pytest.fixture()
def made_up(tmp_path):
    binary = tmp_path / "app"
    binary.write_bytes(b"not really an ELF file, but the tables only look at its size and mtime" * 10)
    trace = hand_made_trace(tmp_path / "app.trace", binary)
    return tmp_path, binary, trace


def policy(result_path: Path, name: str) -> dict:
    return next(p for p in json.loads(result_path.read_text())["policies"] if p["policy"] == name)


def test_switch_model_gives_the_classes_it_was_built_for(tmp_path):
    m = switch_model({"keep_record": 7}, 0, ["keep_record", "temp_buffer", "main"])
    path = tmp_path / "m.model"
    modelfile.write(path, m)
    classes, _ = reference.predict(path, [["keep_record", "main"], ["temp_buffer", "main"], ["0x1234", "main"]],
                                   [256, 4096, 100])
    assert list(classes) == [7, 0, 0]


def test_model_places_objects_in_predicted_classes_and_counts_the_cache(made_up):
    d, binary, trace = made_up
    _, tokens = written_model(d, binary, "m", {"keep_record": 7}, 0, ["keep_record", "temp_buffer", "main"])
    out = d / "r.sim.json"
    # MIN_CLASS=0: the model's class 0 as it is, so that the model can do exactly what the oracle does.
    r = llamalloc("simulate", trace, "-p", "llama-model", "-p", "llama-oracle", "--model", d / "m.model",
                  "--tokens", tokens, "--option", "REPREDICT_EVERY=5", "--option", "REPREDICT_BACKOFF=0",
                  "--thread-idle-ms", 0, "--option", "MIN_CLASS=0", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    # The library that is gone: one warning line naming it; the replay goes on.
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "/nonexistent/libgone.so.1 (not on this machine)" in warnings[0], r.stderr
    assert str(binary) not in warnings[0]
    model, oracle = policy(out, "llama-model"), policy(out, "llama-oracle")
    e = model["extras"]
    # Every record in class 7, every buffer (the gone library's too: <unsymbolized> -> default) in class 0.
    assert e["allocs_class_7"] == N_KEEP
    assert e["allocs_class_0"] == N_TEMP + N_GONE + N_OTHER_THREAD
    # The model is right about every object, so the heap does exactly what it does with the true classes.
    assert e["accuracy_exact"] == 1.0 and e["accuracy_within_one_class"] == 1.0
    assert model["class_confusion"][7][7] == N_KEEP and model["class_confusion"][0][0] == N_TEMP + N_GONE + N_OTHER_THREAD
    for k in ("final_footprint_bytes", "peak_footprint_bytes", "average_fragmentation_ratio"):
        assert model["summary"][k] == oracle["summary"][k]
    result = sim.load(out)
    assert np.array_equal(result.policies["llama-model"].timeline["footprint_bytes"],
                          result.policies["llama-oracle"].timeline["footprint_bytes"])
    assert np.nanmax(result.policies["llama-model"].timeline["hp_class_7"]) >= 1
    final = model["snapshots"][-1]["pages"]
    assert any(p["class"] == 7 and int(p["live"], 16) != 0 for p in final)
    # The cache: thread 1 has three contexts, thread 2 one; each context's first allocation misses.
    allocs = N_KEEP + N_TEMP + N_GONE + N_OTHER_THREAD
    assert e["prediction_cache_misses"] == 4 and e["prediction_cache_hits"] == allocs - 4
    # Every 5th hit of an entry runs the model again (39 hits per thread-1 context, 6 for thread 2's).
    repredictions = 3 * (39 // 5) + 6 // 5
    assert e["repredictions"] == repredictions and e["model_runs"] == 4 + repredictions
    assert e["model_inferences"] == 3 and e["prediction_caches"] == 2
    assert "prediction cache hit rate" in r.stdout and "100.0% exact" in r.stdout
    # With the library's back-off (a re-prediction that keeps the class doubles the entry's period): re-predicted
    # at hits 5, 15 and 35 of a thread-1 context, at hit 5 of thread 2's.
    r = llamalloc("simulate", trace, "-p", "llama-model", "--model", d / "m.model", "--tokens", tokens,
                  "--option", "REPREDICT_EVERY=5", "--option", "REPREDICT_BACKOFF=10", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    e = policy(out, "llama-model")["extras"]
    assert e["repredictions"] == 3 * 3 + 1 and e["model_runs"] == 4 + 10 and e["prediction_cache_misses"] == 4
    # And with the library's LLAMALLOC_MIN_CLASS (3): the model's class-0 objects are placed as without a model,
    # in the default class, 1.
    assert e["allocs_class_0"] == 0 and e["allocs_class_1"] == N_TEMP + N_GONE + N_OTHER_THREAD
    assert e["allocs_class_7"] == N_KEEP


def test_a_context_the_model_was_not_trained_on_starts_never_freed_then_gets_the_models_class(made_up):
    """A model file that lists its training contexts (train.token_contexts): the replay, like the process, gives
    a context outside the list "never freed" until its cache entry has had UNSEEN_TRIAL hits, then the model's
    class. Here the gone library's context (<unsymbolized>) is left out of the list."""
    d, binary, trace = made_up
    m, tokens = written_model(d, binary, "m", {"keep_record": 7}, 0, ["keep_record", "temp_buffer", "main"])
    log = d / "contexts.log"
    out = d / "u.sim.json"
    common = ["-p", "llama-model", "--tokens", tokens, "--option", "REPREDICT_EVERY=1000",
              "--option", "REPREDICT_BACKOFF=0", "--option", "MIN_CLASS=0", "-o", out, "-q"]
    r = llamalloc("simulate", trace, "--model", d / "m.model", "--predict-log", log, *common)
    assert r.returncode == 0, r.stderr
    contexts = [[int(t) for t in line.partition(":")[2].split()] for line in log.read_text().splitlines()]
    trained = [c for c in contexts if 3 not in c]  # token 3: <unsymbolized>
    assert len(contexts) == 3 and len(trained) == 2
    m.train_token_contexts = np.unique(modelfile.token_context_keys(
        np.array([c + [0] * (8 - len(c)) for c in trained]), np.array([len(c) for c in trained])))
    modelfile.write(d / "listed.model", m)
    trial = 8
    r = llamalloc("simulate", trace, "--model", d / "listed.model", "--option", f"UNSEEN_TRIAL={trial}", *common)
    assert r.returncode == 0, r.stderr
    e = policy(out, "llama-model")["extras"]
    assert e["unseen_contexts"] == 1 and e["unseen_trial"] == trial
    # The first allocation (the miss) and the next trial - 1 hits in "never freed"; the trial-th hit re-predicts.
    assert e["allocs_class_7"] == N_KEEP + trial
    assert e["allocs_class_0"] == N_TEMP + (N_GONE - trial) + N_OTHER_THREAD
    # A model that keeps no trained-on context apart from the default class (1) gives its trials that class: they
    # would be the only objects of class 7, and a class's first huge page is 2 MiB resident.
    m1, _ = written_model(d, binary, "m1", {"keep_record": 1}, 0, ["keep_record", "temp_buffer", "main"])
    m1.train_token_contexts = m.train_token_contexts
    modelfile.write(d / "listed1.model", m1)
    r = llamalloc("simulate", trace, "--model", d / "listed1.model", "--option", f"UNSEEN_TRIAL={trial}",
                  "-p", "llama-model", "--tokens", d / "m1.tokens", *common[4:])
    assert r.returncode == 0, r.stderr
    e = policy(out, "llama-model")["extras"]
    assert e["unseen_contexts"] == 1
    assert e["allocs_class_7"] == 0 and e["allocs_class_1"] == N_KEEP + trial
    r = llamalloc("simulate", trace, "--model", d / "listed.model", "--option", "UNSEEN_TRIAL=0", *common)
    assert r.returncode == 0, r.stderr
    e = policy(out, "llama-model")["extras"]
    assert e["unseen_contexts"] == 0 and e["allocs_class_7"] == N_KEEP
    # With the code paths training saw (train.token_stacks: the ids without the size token), the rule asks for
    # the path, whatever the size: the gone library's path listed there is known although its context is not in
    # train.token_contexts, and nothing starts "never freed".
    m.train_token_stacks = np.unique(modelfile.token_context_keys(
        np.array([c[1:] + [0] * (9 - len(c)) for c in contexts]), np.array([len(c) - 1 for c in contexts])))
    modelfile.write(d / "paths.model", m)
    r = llamalloc("simulate", trace, "--model", d / "paths.model", "--option", f"UNSEEN_TRIAL={trial}", *common)
    assert r.returncode == 0, r.stderr
    e = policy(out, "llama-model")["extras"]
    assert e["unseen_contexts"] == 0 and e["allocs_class_7"] == N_KEEP


def test_a_model_of_another_program_still_replays_and_its_accuracy_is_counted(made_up):
    d, binary, trace = made_up
    # Another program's words: nothing of the trace is in its vocabulary, every context gets its default class 1.
    _, tokens = written_model(d, binary, "other", {"Handler": 7}, 1, ["Handler", "Cache", "Insert"])
    out = d / "o.sim.json"
    r = llamalloc("simulate", trace, "-p", "llama-model", "--model", d / "other.model", "--tokens", tokens,
                  "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    e = policy(out, "llama-model")["extras"]
    total = N_KEEP + N_TEMP + N_GONE + N_OTHER_THREAD
    assert e["allocs_class_1"] == total
    short = N_TEMP + N_GONE + N_OTHER_THREAD  # true class 0, predicted 1: over, but within one class
    assert e["accuracy_exact"] == 0.0
    assert e["accuracy_within_one_class"] == pytest.approx(short / total, rel=1e-5)
    assert e["over_predicted_fraction"] == pytest.approx(short / total, rel=1e-5)
    assert e["under_predicted_fraction"] == pytest.approx(N_KEEP / total, rel=1e-5)


@pytest.mark.parametrize("kind", ["missing", "corrupt"])
def test_a_bad_model_file_is_one_line_exit_2_and_nothing_written(made_up, kind):
    d, binary, trace = made_up
    bad = d / "bad.model"
    if kind == "corrupt":
        bad.write_bytes(b"LLAMODEL" + b"\x01" * 300)
    out = d / "bad.sim.json"
    r = llamalloc("simulate", trace, "-p", "llama-model", "-p", "pages-4k", "--model", bad, "-o", out)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr
    assert not out.exists()
    # The engine itself refuses it too (non-zero, one line naming the file).
    r = subprocess.run([str(sim.binary()), str(trace), "--policy", "llama-model", "--model", str(bad),
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and str(bad) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_llama_model_needs_a_model_and_the_model_needs_the_policy(made_up):
    d, _, trace = made_up
    r = llamalloc("simulate", trace, "-p", "llama-model", "-o", d / "x.json")
    assert r.returncode == 2 and "--model" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = llamalloc("simulate", trace, "-p", "pages-4k", "--model", d / "x.model", "-o", d / "x.json")
    assert r.returncode == 2 and "llama-model" in r.stderr


# A real program: token tables prepared from its binaries (objdump, eu-addr2line), its PIE mapped wherever ASLR put
# it. keep_record() is its only context with that word: the switch model puts exactly its objects in class 7.
ROUNDS = 20


def program() -> Path:
    p = paths.build_dir() / "tests" / "model" / "predict-contexts"
    assert p.exists(), f"{p} is not built: build the project before the tests"
    return p


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim-model-real")
    env = dict(os.environ, LLAMALLOC_CACHE_DIR=str(d / "cache"))
    m = switch_model({"keep_record": 7}, 0, ["keep_record", "temp_buffer", "handle_request", "store_records",
                                             "footprint", "main"])
    modelfile.write(d / "switch.model", m)
    trace = d / "app.trace"
    r = llamalloc("trace", "-o", trace, "--", program(), "footprint", ROUNDS, env=env)
    assert r.returncode == 0, r.stderr
    return d, env, trace, kept_records(trace, env)


def kept_records(trace: Path, env) -> int:
    """Allocations of the trace made by keep_record() (frame 0), counted on a symbolized copy."""
    copy = trace.with_name("symbolized-" + trace.name)
    shutil.copy(trace, copy)
    assert llamalloc("symbolize", copy, env=env).returncode == 0
    t = tracefile.load(copy)
    allocs = t.events[(t.events["kind"] & 0xFF) == 1]
    names = {sid: (t.symbols.get(frames[0]) or [("?",)])[0][0] if frames else "?" for sid, frames in t.stacks.items()}
    n = sum(1 for sid in allocs["stack_id"] if names.get(int(sid)) == "keep_record")
    assert n > 0
    return n


def test_real_trace_tokens_come_from_its_binaries_and_are_cached(real):
    d, env, trace, kept = real
    out, log = d / "real.sim.json", d / "predict.log"
    r = llamalloc("simulate", trace, "-p", "llama-model", "--model", d / "switch.model", "-o", out,
                  "--predict-log", log, env=env)
    assert r.returncode == 0, r.stderr
    assert "preparing tokens of" in r.stderr and "warning" not in r.stderr
    e = policy(out, "llama-model")["extras"]
    assert e["allocs_class_7"] == kept
    assert e["prediction_cache_hits"] > 10 * e["prediction_cache_misses"]
    # The tokens of the program's own contexts are those training gives the same contexts in a symbolized
    # profile of the same program.
    runs = {}
    for line in log.read_text().splitlines():
        cls, _, ids = line.partition(":")
        runs[tuple(int(t) for t in ids.split())] = int(cls)
    assert len(runs) == e["model_inferences"]
    prof = d / "real.prof"
    assert llamalloc("record", "--sample-bytes", "1", "-o", prof, "--", program(), "footprint", ROUNDS,
                     env=env).returncode == 0
    assert llamalloc("symbolize", prof, env=env).returncode == 0
    samples = profile.samples_table([prof])
    own = [(s, z) for s, z in zip(samples.column("stack").to_pylist(), samples.column("request_size").to_pylist())
           if profile.functions_only(s)[0] in ("keep_record", "temp_buffer")]
    assert len(own) == 2
    m = modelfile.read(d / "switch.model")
    for (stack, _), tokens in zip(own, reference.tokens(m, [s for s, _ in own], [z for _, z in own])):
        assert tuple(tokens) in runs, f"{stack}: {tokens} not among the replay's contexts {sorted(runs)}"
        # temp_buffer's class 0 is below LLAMALLOC_MIN_CLASS's default: the default class, 1, as in the process.
        assert runs[tuple(tokens)] == (7 if stack[0] == "keep_record" else 1)
    # Second time: the tables come from the cache.
    r = llamalloc("simulate", trace, "-p", "llama-model", "--model", d / "switch.model", "-o", out, env=env)
    assert r.returncode == 0 and "preparing tokens of" not in r.stderr, r.stderr
    assert policy(out, "llama-model")["extras"]["allocs_class_7"] == kept


def test_the_replay_predicts_the_real_runs_footprint(real):
    """`simulate -p llama-model` is what a user asks before deploying a model: the replay of the program's trace
    must give the footprint the real run with that model has, at its peak and when the program exits (the
    statistics written before the teardown), within 10%, and so must the replay without a model. Both without the
    sweeper thread a single-threaded heap of this size gets (SWEEPER_FROM_MIB): the program exits right after its
    frees, and whether the thread's next pass comes before the exit is a race between two clocks, the program's
    and the trace's, that no replay decides; the slow paths' own passes come with the frees on both."""
    d, env, trace, _ = real
    env = dict(env, LLAMALLOC_SWEEPER_FROM_MIB="0")
    out = d / "replay-vs-real.sim.json"
    r = llamalloc("simulate", trace, "-p", "llama-default", "-p", "llama-model", "--model", d / "switch.model",
                  "--option", "SWEEPER_FROM_MIB=0", "-o", out, env=env)
    assert r.returncode == 0, r.stderr
    for name, model_args in (("llama-default", []), ("llama-model", ["--model", d / "switch.model"])):
        stats = d / f"real-{name}.json"
        r = llamalloc("run", *model_args, "--stats", stats, "--", program(), "footprint", ROUNDS, env=env)
        assert r.returncode == 0 and r.stdout.startswith("ok "), r.stderr
        real_run = json.loads(stats.with_name(f"real-{name}.before-exit.json").read_text())
        replay = policy(out, name)["summary"]
        for replay_key, real_key in (("peak_footprint_bytes", "peak_footprint_bytes"),
                                     ("final_footprint_bytes", "footprint_bytes")):
            assert abs(replay[replay_key] - real_run[real_key]) <= 0.1 * real_run[real_key], \
                (name, replay_key, replay[replay_key], real_run[real_key])
    # The model's figure is the one that matters: the records on pages of their own.
    assert policy(out, "llama-model")["summary"]["final_footprint_bytes"] < \
        0.5 * policy(out, "llama-default")["summary"]["final_footprint_bytes"]


def test_a_binary_missing_on_disk_is_one_warning_and_the_replay_goes_on(real):
    d, env, _, _ = real
    copy = d / "gone" / "predict-contexts-copy"
    copy.parent.mkdir()
    shutil.copy2(program(), copy)
    trace = d / "gone.trace"
    r = llamalloc("trace", "-o", trace, "--", copy, "footprint", ROUNDS, env=env)
    assert r.returncode == 0, r.stderr
    copy.unlink()
    out = d / "gone.sim.json"
    r = llamalloc("simulate", trace, "-p", "llama-model", "-p", "llama-oracle", "--model", d / "switch.model",
                  "-o", out, "-q", env=env)
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and str(copy) in warnings[0] and "not on this machine" in warnings[0], r.stderr
    model = policy(out, "llama-model")
    assert model["extras"]["allocs_class_7"] == 0  # keep_record's frames are <unsymbolized> now
    assert model["summary"]["events"] == policy(out, "llama-oracle")["summary"]["events"]


def test_a_trace_without_mappings_replays_with_a_warning(tmp_path):
    from test_sim_support import write_trace
    trace = write_trace(tmp_path / "bare.trace", [alloc(0, 0x1000, 64), free(1, 0x1000)])
    m = switch_model({"keep_record": 7}, 3, ["keep_record"])
    modelfile.write(tmp_path / "m.model", m)
    out = tmp_path / "bare.sim.json"
    r = llamalloc("simulate", trace, "-p", "llama-model", "--model", tmp_path / "m.model", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "no executable mapping" in warnings[0], r.stderr
    assert policy(out, "llama-model")["extras"]["allocs_class_3"] == 1
