"""Contexts, weights and 95th-percentile labels from profile samples (the LLAMA paper, section 5.1)."""
import numpy as np
import pytest

from llamalloc.errors import UserError
from llamalloc.model.classes import model_size_bucket
from llamalloc.model.dataset import build_contexts, samples_from_rows, split_by_stack

STACK = ["std::vector<int>::_M_realloc_insert(int const&)", "app::Table::Add(int)", "main"]


def contexts_of(rows, **kw):
    kw.setdefault("label", "p95")  # the rule these tests were written for; test_train_labels_and_refit.py tests "mode"
    warnings = []
    c = build_contexts(samples_from_rows(rows), warn=warnings.append, **kw)
    return c, warnings


def only_label(counts):
    c, _ = contexts_of([{"stack": STACK, "class_counts": counts}])
    assert len(c) == 1
    return int(c.labels[0])


@pytest.mark.parametrize("counts, label", [
    ([100, 0, 0, 0, 0, 0, 0, 0], 0),
    ([95, 5, 0, 0, 0, 0, 0, 0], 0),          # exactly 95% below 10 ms
    ([94, 6, 0, 0, 0, 0, 0, 0], 1),          # 94% is not enough: the 95th percentile is in class 1
    ([50, 45, 0, 0, 0, 4, 0, 1], 1),         # 50 + 45 = 95 of 100 objects within 100 ms
    ([0, 0, 0, 0, 0, 0, 0, 7], 7),           # never freed
    ([90, 0, 0, 0, 0, 0, 0, 10], 7),         # 10% never freed pushes the percentile to "never"
    ([0, 0, 0, 0, 0, 0, 3, 0], 6),           # freed, after 1000 s
    ([1, 1, 1, 1, 1, 1, 1, 93], 7),
])
def test_p95_label_of_hand_made_distributions(counts, label):
    assert only_label(counts) == label


def test_profiles_merge_by_stack_and_size_bucket_and_weight_is_observed_count():
    rows = [
        {"profile": "a.prof", "stack": STACK, "request_size": 24, "class_counts": [60, 0, 0, 0, 0, 0, 0, 0]},
        {"profile": "b.prof", "stack": STACK, "request_size": 32, "class_counts": [0, 40, 0, 0, 0, 0, 0, 0]},
        {"profile": "b.prof", "stack": STACK, "request_size": 4096, "class_counts": [0, 0, 0, 0, 0, 0, 0, 5]},
        {"profile": "a.prof", "stack": ["g()", "main"], "request_size": 8, "class_counts": [3, 0, 0, 0, 0, 0, 0, 0]},
    ]
    c, warnings = contexts_of(rows)
    assert warnings == []
    by_key = {(s, int(sc)): i for i, (s, sc) in enumerate(zip(c.stacks, c.size_buckets))}
    assert len(c) == 3
    merged = by_key[(tuple(STACK), 5)]  # 24 and 32 bytes share size bucket 5 (17..32 bytes)
    assert c.weights[merged] == 100
    assert c.class_counts[merged].tolist() == [60, 40, 0, 0, 0, 0, 0, 0]
    assert c.labels[merged] == 1  # 60% < 95% within 10 ms, 100% within 100 ms
    big = by_key[(tuple(STACK), 12)]
    assert (c.weights[big], c.labels[big]) == (5, 7)
    assert c.weights[by_key[(("g()", "main"), 4)]] == 3  # 8 bytes: class 4, as every size up to 16


def test_model_size_buckets_are_powers_of_two_from_16_bytes():
    """A profile records requests of up to 16 bytes as 16 (the profiler's sample sizes are bucket bounds), while
    the process and a trace see the exact size: every size up to 16 is class 4, so all three agree."""
    sizes = [0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 4096, 4097, 1 << 40, (1 << 40) + 1, 1 << 62]
    assert model_size_bucket(sizes).tolist() == [4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 12, 13, 40, 41, 47]


def test_samples_without_observations_are_dropped():
    c, _ = contexts_of([{"stack": STACK, "class_counts": [0] * 8},
                        {"stack": ["f()"], "class_counts": [1, 0, 0, 0, 0, 0, 0, 0]}])
    assert c.stacks == [("f()",)]


def test_empty_samples_are_an_error():
    with pytest.raises(UserError, match="no allocation samples"):
        build_contexts(samples_from_rows([]), warn=lambda m: None)


def test_a_profile_without_samples_is_named():
    rows = [{"profile": "a.prof", "stack": STACK, "class_counts": [1, 0, 0, 0, 0, 0, 0, 0]}]
    with pytest.raises(UserError, match=r"^b\.prof: no allocation samples"):
        build_contexts(samples_from_rows(rows), warn=lambda m: None, profiles=["a.prof", "b.prof"])


def test_unsymbolized_profile_asks_for_symbolize():
    rows = [{"profile": "raw.prof", "stack": ["0x401a2b", "0x7f00aa"], "class_counts": [1, 0, 0, 0, 0, 0, 0, 0]},
            {"profile": "raw.prof", "stack": ["0x401a2c"], "class_counts": [1, 0, 0, 0, 0, 0, 0, 0]}]
    with pytest.raises(UserError, match=r"raw\.prof: no symbols.*llamalloc symbolize"):
        build_contexts(samples_from_rows(rows), warn=lambda m: None)


def test_mostly_unsymbolized_frames_warn():
    rows = [{"stack": ["0x401a2b", "0x7f00aa", "main"], "class_counts": [1, 0, 0, 0, 0, 0, 0, 0]}]
    c, warnings = contexts_of(rows)
    assert len(c) == 1 and len(warnings) == 1 and "unsymbolised" in warnings[0]


def test_mixed_programs_warn_naming_them():
    rows = [{"profile": "a.prof", "program": "image-server", "stack": STACK, "class_counts": [1] + [0] * 7},
            {"profile": "b.prof", "program": "word-count", "stack": STACK, "class_counts": [1] + [0] * 7}]
    c, warnings = contexts_of(rows)
    assert len(warnings) == 1
    assert "image-server" in warnings[0] and "word-count" in warnings[0] and "b.prof" in warnings[0]
    assert c.programs == ["image-server", "word-count"]


def test_holdout_splits_whole_stacks():
    rows = [{"stack": [f"f{i}()", "main"], "request_size": size, "class_counts": [1] + [0] * 7}
            for i in range(50) for size in (8, 4096)]
    c, _ = contexts_of(rows)
    train, held = split_by_stack(c, 0.2, seed=3)
    assert len(held) == 20 and len(train) == 80
    assert not {c.stacks[i] for i in train} & {c.stacks[i] for i in held}
    assert np.array_equal(split_by_stack(c, 0.2, seed=3)[1], held)
    with pytest.raises(UserError):
        split_by_stack(c, 1.0, seed=0)


def test_unsymbolized_frames_at_other_addresses_are_one_context():
    # The same calling context in two runs: a library without symbols sits at other addresses (ASLR). Kept
    # apart, a held-out "unseen" stack could be a training stack at other addresses.
    run_a = ["operator new(unsigned long)", "0x7f12a4c3e2f0", "app::Cache::Put(int)", "0x7f12a4b01a00", "main"]
    run_b = ["operator new(unsigned long)", "0x7fe0013e22f0", "app::Cache::Put(int)", "0x7fe000e01a00", "main"]
    rows = [
        {"profile": "a.prof", "stack": run_a, "class_counts": [0, 0, 0, 10, 0, 0, 0, 0]},
        {"profile": "b.prof", "stack": run_b, "class_counts": [0, 0, 0, 0, 10, 0, 0, 0]},
        {"profile": "b.prof", "stack": ["0x1234", "main"], "class_counts": [4, 0, 0, 0, 0, 0, 0, 0]},
    ]
    c, _ = contexts_of(rows)
    assert len(c) == 2
    merged = c.stacks.index(("operator new(unsigned long)", "0x0", "app::Cache::Put(int)", "0x0", "main"))
    assert c.weights[merged] == 20
    assert c.labels[merged] == 4  # the two runs' counts merged: 50% within 10 s is not 95%
    assert ("0x0", "main") in c.stacks
