"""Online lifetime learning in the process (LLAMALLOC_LEARN; docs/prediction.md, "Online learning"): contexts
learned from the lifetimes of their sampled objects' frees, and from aging alone; a model's class overridden by
the evidence; threads, fork and the statistics. The learner's own rules (window, phases, sampling rate) are
unit-tested in tests/model/online_learner_test.cc."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from llamalloc import paths

from test_predict_e2e import llamalloc, program, record_and_train

ROUNDS, PAUSE_MS = 30, 30


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cache = tmp_path_factory.mktemp("token-cache")
    e = dict(os.environ, LLAMALLOC_CACHE_DIR=str(cache))
    for k in ("LLAMALLOC_MODEL", "LLAMALLOC_TOKENS", "LLAMALLOC_LEARN"):
        e.pop(k, None)
    # These programs keep a few MiB: learning from the start, not from LEARN_FROM_MIB's footprint.
    e["LLAMALLOC_LEARN_FROM_MIB"] = "0"
    return e


def run(tmp: Path, env, name: str, *args, learn: bool | None = True, model=None) -> dict:
    """learn: True --learn, False --no-learn, None neither (the library's default)."""
    stats = tmp / f"{name}.json"
    flags = {True: ["--learn"], False: ["--no-learn"], None: []}[learn]
    model_args = (["--model", model] if model else []) + flags
    r = llamalloc("run", *model_args, "--stats", stats, "--", program(), *args, env=env)
    assert r.stdout.startswith("ok "), r.stdout + r.stderr
    return json.loads(stats.read_text())


def function_of(site: str) -> str:
    """The function of the program holding a statistics site, "PATH+0xOFFSET" (addr2line)."""
    path, _, offset = site.rpartition("+")
    r = subprocess.run(["addr2line", "-f", "-e", path, offset], capture_output=True, text=True, check=True)
    return r.stdout.splitlines()[0]


def contexts_by_function(stats: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    prog = str(program())
    for c in stats["online"]["most_sampled"]:
        if c["site"].startswith(prog + "+"):
            out.setdefault(function_of(c["site"]), []).append(c)
    return out


def test_a_context_is_learned_from_frees_and_one_from_aging_alone(tmp_path, env):
    """`learn`: each round's buffers (temp_buffer) die 30 ms after they are made, its records (keep_record) never.
    The buffers' context is decided from the lifetimes of its sampled objects' frees, < 100 ms; the records',
    whose objects are never freed, from the ages its sampled objects reach while live. Learning alone keeps apart
    what goes on the longest class's pages, from LLAMALLOC_LONG_CLASS (here 3: past 1 s; a younger object is
    placed as without learning). Twice the rounds of the other tests, so that the first rounds' records, the
    ones sampled, are well past 1 s at the end."""
    stats = run(tmp_path, dict(env, LLAMALLOC_LONG_CLASS="3"), "learn", "learn", 2 * ROUNDS, PAUSE_MS)
    by_fn = contexts_by_function(stats)
    buffers, records = by_fn["temp_buffer"][0], by_fn["keep_record"][0]
    assert buffers["class"] == 1 and buffers["confident"], buffers
    assert sum(buffers["freed"]) >= 8 and sum(buffers["freed"][2:]) == 0, buffers
    assert records["class"] is not None and records["class"] >= 3, records
    assert sum(records["freed"]) == 0 and sum(records["live"][3:]) >= 8, records
    assert buffers["model_class"] is None and records["model_class"] is None  # no model
    c = stats["counters"]
    assert c["online_decided"] >= 2 and c["online_samples"] > c["online_sampled_frees"] > 0, c
    assert c["online_overrides"] == 0, c


def test_learning_is_on_by_default_without_a_model_and_off_when_asked(tmp_path, env):
    """LLAMALLOC_LEARN unset: the library learns (here from the first allocation, LEARN_FROM_MIB=0); --no-learn
    (LEARN=0): no samples, no prediction cache, the fast path as without a model."""
    stats = run(tmp_path, env, "default", "learn", 3, 1, learn=None)
    assert stats["counters"]["online_samples"] > 0 and "online" in stats, stats["counters"]
    stats = run(tmp_path, env, "off", "learn", 3, 1, learn=False)
    assert "online" not in stats and stats["counters"]["online_samples"] == 0
    assert stats["counters"]["prediction_cache_misses"] == 0  # no cache either: the fast path as without a model


@pytest.mark.parametrize("from_mib", [2, 4096])
def test_learning_alone_starts_once_the_footprint_reaches_learn_from_mib(tmp_path, env, from_mib):
    # 2 MiB: the first huge page reaches it, and the first page pass starts learning; 4 GiB: never reached, and
    # the process runs as without learning: no samples, no prediction cache.
    stats = run(tmp_path, dict(env, LLAMALLOC_LEARN_FROM_MIB=str(from_mib)), "gate", "learn", ROUNDS, PAUSE_MS)
    c = stats["counters"]
    if from_mib == 2:
        assert c["online_samples"] > 0 and c["prediction_cache_misses"] > 0, c
    else:
        assert c["online_samples"] == 0 and c["prediction_cache_misses"] == 0, c


@pytest.fixture(scope="module")
def footprint_model(tmp_path_factory, env):
    """A model of `footprint`, whose records are never freed: it places keep_record's objects long-lived."""
    return record_and_train(tmp_path_factory.mktemp("online-model"), env, "footprint")[2]


def test_a_models_class_is_overridden_by_the_contexts_evidence(tmp_path, env, footprint_model):
    """The model learned that keep_record's objects are never freed; under `learn-freed` they die with their
    round's buffers. With LEARN the model's class stands until the context's evidence is confident, then the
    learned class replaces it; without LEARN it stays."""
    stats = run(tmp_path, env, "override", "learn-freed", ROUNDS, PAUSE_MS, model=footprint_model)
    records = contexts_by_function(stats)["keep_record"][0]
    assert records["model_class"] is not None and records["model_class"] >= 4, records
    assert records["confident"] and records["class"] <= 2, records
    assert records["overrides"] >= 1 and stats["counters"]["online_overrides"] >= 1, (records, stats["counters"])


def test_a_model_learns_beside_it_only_when_asked(tmp_path, env, footprint_model):
    """With a model and LLAMALLOC_LEARN unset the model places alone (learning beside it is LEARN=1, --learn)."""
    stats = run(tmp_path, env, "model-alone", "learn-freed", 3, 1, model=footprint_model, learn=None)
    assert stats["counters"]["online_samples"] == 0 and "online" not in stats, stats["counters"]
    assert stats["counters"]["prediction_cache_misses"] > 0  # the model's cache


def test_contexts_are_shared_by_threads_and_survive_fork(tmp_path, env):
    """Many threads learn into one table (the same call path in every thread is one context), and a child of
    fork() learns on with the parent's tables."""
    stats = run(tmp_path, env, "threads", "threads", 8)
    assert stats["counters"]["online_samples"] > 0
    prog = str(program()) + "+"
    own = [(c["site"], c["size_bucket"]) for c in stats["online"]["most_sampled"] if c["site"].startswith(prog)]
    # temp_buffer's five sizes and request_scratch's four model size buckets: one context each, not one per thread.
    assert 5 <= len(own) <= 12 and len(own) == len(set(own)), own
    run(tmp_path, env, "fork", "fork")


def test_the_allocators_bench_and_compare_name(tmp_path):
    from llamalloc import allocators

    parsed = allocators.parse_allocators("llamalloc,llamalloc+online,llamalloc+model+online")
    assert [p[0] for p in parsed] == ["llamalloc", "llamalloc+online", "llamalloc+model+online"]
    online = allocators.Allocator("llamalloc+online", parsed[1][1])
    both = allocators.Allocator("llamalloc+model+online", parsed[2][1])
    plain = allocators.Allocator("llamalloc", parsed[0][1])
    model_env = {"LLAMALLOC_MODEL": "m", "LLAMALLOC_TOKENS": "t"}
    e = allocators.allocator_env(online, None, model_env)
    assert e["LLAMALLOC_LEARN"] == "1" and "LLAMALLOC_MODEL" not in e
    e = allocators.allocator_env(both, None, model_env)
    assert e["LLAMALLOC_LEARN"] == "1" and e["LLAMALLOC_MODEL"] == "m"
    e = allocators.allocator_env(plain, None, model_env)
    # Learning is on by default: llamalloc alone turns it off.
    assert e["LLAMALLOC_LEARN"] == "0" and "LLAMALLOC_MODEL" not in e
    e = allocators.allocator_env(allocators.Allocator("llamalloc+model", parsed[0][1]), None, model_env)
    assert e["LLAMALLOC_LEARN"] == "0" and e["LLAMALLOC_MODEL"] == "m"
    assert allocators.display_name("llamalloc+model+online") == "llamalloc + model + online"
