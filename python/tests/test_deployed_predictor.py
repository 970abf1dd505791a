"""The deployed predictor (docs/prediction.md, "The deployed predictor"): a model file carries a table of the
contexts training saw, keyed as the allocator keys them, and says whether a context outside it gets the LSTM's
class or the default class; `train` chooses so that what is deployed predicts held-out contexts, and a second
profile of the program, at least as well by weight as exact-match lookup with its fallback, and says so in one
line."""
import re
from dataclasses import replace

import numpy as np
import pytest
from conftest import run

from llamalloc.errors import FormatError
from llamalloc.model import modelfile, pipeline, reference
from llamalloc.model.dataset import build_contexts
from llamalloc.model.synthetic import synthetic_samples
from llamalloc.model.tokenizer import Vocabulary
from test_model_cli import write_profile


def weighted(out: str, predictor: str) -> float:
    """The weighted accuracy of `predictor` in a train or evaluate report table."""
    line = next(l for l in out.splitlines() if l.startswith(predictor))
    return float(re.findall(r"([0-9.]+)%", line[len(predictor):])[0])


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    d = tmp_path_factory.mktemp("deployed")
    return (d, write_profile(d / "a.prof", synthetic_samples(150, seed=21)),
            write_profile(d / "b.prof", synthetic_samples(150, seed=22)))


def test_the_model_file_carries_the_table_and_the_unseen_rule(profiles, tmp_path, capsys):
    _, a, _ = profiles
    path = tmp_path / "m.model"
    rc, _, err = run(["train", str(a), "-o", str(path), "--hidden", "16", "--epochs", "2", "--max-tokens", "32"],
                     capsys)
    assert rc == 0, err
    m = modelfile.read(path)
    assert m.train_token_class is not None and m.train_token_class.shape == m.train_token_contexts.shape
    # Every training context's tokens are in the table with the label training gave it (the synthetic contexts'
    # token ids are distinct, so each key is one context).
    contexts = build_contexts(pipeline.load_samples([str(a)]), label=m.metadata["label"])
    ids, lengths = Vocabulary(m.vocabulary).encode_batch(contexts.stacks, contexts.size_buckets, m.max_tokens)
    keys = modelfile.token_context_keys(ids, lengths)
    assert len(np.unique(keys)) == len(contexts)
    table = dict(zip(m.train_token_contexts.tolist(), m.train_token_class.tolist()))
    assert [table[int(k)] for k in keys] == contexts.labels.tolist()
    # The code paths: the same ids without their size token.
    assert (m.train_token_stacks == np.unique(modelfile.token_context_keys(ids[:, 1:], lengths - 1))).all()
    # The reference reads it as the allocator does.
    token_ids = [list(r[:n]) for r, n in zip(ids, lengths)]
    assert reference.table_classes(m, token_ids) == contexts.labels.tolist()
    assert m.metadata["deployed"]["unseen"] in ("lstm", "default")
    assert re.search(r"^(deployed predictor: |llamalloc: warning: the LSTM loses)", err, re.M), err
    # Round trip of both sections, and the unseen rule's choice.
    again = modelfile.from_bytes(modelfile.to_bytes(replace(m, unseen_default=True)))
    assert again.unseen_default and (again.train_token_class == m.train_token_class).all()
    assert not modelfile.from_bytes(modelfile.to_bytes(replace(m, unseen_default=False))).unseen_default


def test_a_damaged_table_is_refused(profiles, tmp_path, capsys):
    _, a, _ = profiles
    path = tmp_path / "m.model"
    assert run(["train", str(a), "-o", str(path), "--hidden", "16", "--epochs", "1", "--max-tokens", "32"],
               capsys)[0] == 0
    m = modelfile.read(path)
    out_of_range = m.train_token_class.copy()
    out_of_range[0] = 9
    with pytest.raises(FormatError, match="train.token_class"):
        modelfile.from_bytes(modelfile.to_bytes(replace(m, train_token_class=out_of_range)))
    with pytest.raises(FormatError, match="train.token_class"):
        modelfile.from_bytes(modelfile.to_bytes(replace(m, train_token_class=m.train_token_class[:-1])))
    with pytest.raises(FormatError, match="train.token_stacks"):
        modelfile.from_bytes(modelfile.to_bytes(replace(m, train_token_stacks=m.train_token_stacks[::-1])))


@pytest.mark.parametrize("holdout", ["split", "profile"])
def test_the_deployed_predictor_is_never_below_exact_match_lookup(profiles, tmp_path, capsys, holdout):
    """On held-out contexts and on a second profile, with an LSTM trained for one epoch (weak) and for several."""
    _, a, b = profiles
    for epochs in ("1", "6"):
        path = tmp_path / f"m{epochs}.model"
        extra = ["--holdout", "0.3"] if holdout == "split" else ["--holdout-profile", str(b)]
        rc, out, err = run(["train", str(a), "-o", str(path), "--hidden", "16", "--epochs", epochs,
                            "--max-tokens", "32", *extra], capsys)
        assert rc == 0, err
        m = modelfile.read(path)
        deployed = weighted(out, pipeline.deployed_name(m))
        assert deployed >= weighted(out, "exact-match lookup"), out
        if m.unseen_default:
            assert "the LSTM loses to exact-match lookup" in err


def test_an_lstm_that_loses_deploys_the_default_class_for_unseen_contexts(profiles, tmp_path, capsys):
    """An LSTM that answers the class holding the least weight for every context: train's choice replaces it by the default class for the
    contexts outside the table, and says so."""
    _, a, b = profiles
    path = tmp_path / "m.model"
    assert run(["train", str(a), "-o", str(path), "--hidden", "16", "--epochs", "2", "--max-tokens", "32"],
               capsys)[0] == 0
    m = modelfile.read(path)
    test = build_contexts(pipeline.load_samples([str(b)]), label=m.metadata["label"])
    by_class = np.bincount(test.labels, weights=test.weights, minlength=8)
    by_class[m.default_class] = np.inf
    absent = int(np.argmin(by_class))  # the class holding the least weight
    bias = np.full(8, -50.0, np.float32)
    bias[absent] = 50.0
    broken = replace(m, dense_b=bias, dense_w=np.zeros_like(m.dense_w))
    choice, figures = pipeline.choose_unseen(broken, test)
    assert choice and figures["default"] > figures["lstm"]
    assert figures["default"] >= figures["exact"]
    line = pipeline.deploy_message(replace(broken, unseen_default=True), figures)
    assert "the LSTM loses" in line and "\n" not in line
    predicted = pipeline.predict_all(replace(broken, unseen_default=True), test)
    exact = predicted["exact-match lookup"][0]
    deployed = predicted[pipeline.deployed_name(replace(broken, unseen_default=True))][0]
    w = test.weights
    assert w[deployed == test.labels].sum() >= w[exact == test.labels].sum()
