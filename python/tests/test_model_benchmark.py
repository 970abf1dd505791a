"""The accuracy benchmark's folds and table (bench/model/accuracy.sh): every stack is held out exactly once,
and the printed table carries every predictor's figures."""
import numpy as np

from llamalloc.model import benchmark, lstm
from llamalloc.model.dataset import build_contexts, folds_by_stack
from llamalloc.model.synthetic import synthetic_samples

TINY = dict(hidden_dim=16, max_epochs=2, patience=2, examples_per_epoch=256, seed=3)


def test_folds_hold_every_stack_out_once_with_all_its_size_buckets():
    contexts = build_contexts(synthetic_samples(120, seed=5), warn=lambda m: None)
    folds = folds_by_stack(contexts, 5, seed=0)
    held = np.concatenate([test for _, test in folds])
    assert sorted(held.tolist()) == list(range(len(contexts)))  # every context exactly once
    for train, test in folds:
        assert set(train.tolist()) | set(test.tolist()) == set(range(len(contexts)))
        assert not {contexts.stacks[i] for i in train} & {contexts.stacks[i] for i in test}
        assert len(test) > 0
    assert folds_by_stack(contexts, 5, seed=0)[0][1].tolist() == folds[0][1].tolist()  # deterministic


def test_cross_validated_row_scores_every_context_as_unseen():
    contexts = build_contexts(synthetic_samples(60, seed=2), warn=lambda m: None)
    row = benchmark._cross_validated("synthetic r1", contexts, 3, lstm.TrainConfig(**TINY), "synthetic.prof")
    assert row["test_contexts"] == len(contexts) and row["folds"] == 3
    exact = row["exact-match lookup"]
    assert exact["found"] == 0.0  # no context is in its fold's training stacks
    assert 0.0 <= row["lstm (hidden 16)"]["weighted"] <= row["lstm (hidden 16)"]["off_by_one_weighted"] <= 1.0
    table = benchmark.markdown_table([dict(row, experiment="synthetic r1 (3 folds)")])
    lines = table.splitlines()
    assert len(lines) == 3 and lines[0].startswith("| experiment |")
    assert lines[2].startswith("| synthetic r1 (3 folds) | ") and "(0%)" in lines[2]
