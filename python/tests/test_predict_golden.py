"""Golden test of the allocator's model inference (src/model): the C++ LSTM on the folded table gives the same
classes as the Python reference inference `llamalloc.model.reference`, with logits within the float32 bound of float32_bounds.py, for random models
of both hidden sizes (a trained model: test_predict_e2e.py, which trains one on a recorded profile anyway);
damaged model files are refused with one line naming them."""
import subprocess

import numpy as np
import pytest

from float32_bounds import assert_logits_agree, logit_error_bound
from llamalloc.model import modelfile, reference
from llamalloc.model.dataset import decide
from predict_support import cpp_infer, model_tool, random_model


def compare(path, token_ids):
    model = modelfile.read(path)
    want_logits = reference.logits_of_tokens(model, token_ids)
    got_classes, got_logits = cpp_infer(path, token_ids)
    assert_logits_agree(got_logits, want_logits, logit_error_bound(model, token_ids))
    assert (got_classes == decide(want_logits, model.decision)).all()
    return got_classes


@pytest.mark.parametrize("hidden", [16, 64])
def test_random_models_agree_on_random_sequences(tmp_path, hidden):
    path = tmp_path / f"random{hidden}.model"
    m = random_model(hidden=hidden, embedding=32, max_tokens=128, seed=hidden)
    modelfile.write(path, m)
    rng = np.random.default_rng(hidden)
    token_ids = [rng.integers(0, len(m.vocabulary), size=int(n)).tolist() for n in rng.integers(1, 129, size=300)]
    token_ids.append([4])  # the size token alone: an unknown stack
    classes = compare(path, token_ids)
    assert len(set(classes.tolist())) >= 3


@pytest.mark.parametrize("rule", ["p95", "p50", "mode", "share20"])
def test_distribution_models_apply_their_label_rule_to_the_predicted_distribution(tmp_path, rule):
    """A distribution model's class is its label rule on the softmax, in C++ as in the reference; the rules
    pick longer classes than the largest logit where a minority is long-lived (p95, share20)."""
    m = random_model(hidden=16, embedding=32, max_tokens=64, seed=7, scale=0.3)
    m.decision = rule
    path = tmp_path / f"{rule}.model"
    modelfile.write(path, m)
    assert modelfile.read(path).decision == rule
    rng = np.random.default_rng(3)
    token_ids = [rng.integers(0, len(m.vocabulary), size=int(n)).tolist() for n in rng.integers(1, 65, size=300)]
    classes = compare(path, token_ids)
    logits = reference.logits_of_tokens(m, token_ids)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    if rule == "p95":  # the first class whose cumulative share reaches 95%
        want = np.argmax(np.cumsum(probs, axis=1) >= 0.95 - 1e-6, axis=1)
        close = np.abs(np.cumsum(probs, axis=1)[np.arange(len(want)), want] - 0.95) < 1e-4
        assert (classes[~close] == want[~close]).all()
        assert (classes > logits.argmax(axis=1)).mean() > 0.2
    if rule == "share20":
        assert (classes >= decide(logits, "mode")).all()
        assert (classes > logits.argmax(axis=1)).any()


def test_an_unknown_decision_rule_is_refused(tmp_path):
    m = random_model()
    m.decision = "p95"
    data = bytearray(modelfile.to_bytes(m))
    at = data.index(np.asarray([1, 95, 0], "<u4").tobytes())
    data[at:at + 4] = (9).to_bytes(4, "little")
    import zlib
    data[24:28] = zlib.crc32(bytes(data[128:])).to_bytes(4, "little")
    bad = tmp_path / "rule.model"
    bad.write_bytes(bytes(data))
    r = subprocess.run([model_tool(), "infer", str(bad)], input="4 5 6\n", capture_output=True, text=True)
    assert r.returncode == 2 and str(bad) in r.stderr and "decision rule" in r.stderr
    with pytest.raises(Exception, match="decision rule"):
        modelfile.read(bad)


def test_sequences_longer_than_max_tokens_are_cut_as_training_cuts(tmp_path):
    path = tmp_path / "short.model"
    m = random_model(max_tokens=8, seed=5)
    modelfile.write(path, m)
    long_seq = list(range(4, 4 + 20))
    got, got_logits = cpp_infer(path, [long_seq, long_seq[:8]])
    np.testing.assert_array_equal(got_logits[0], got_logits[1])


@pytest.mark.parametrize("damage, problem", [
    (lambda d: d[:100], "truncated"),
    (lambda d: d[:-64], "truncated"),
    (lambda d: b"NOTMODEL" + d[8:], "bad magic"),
    (lambda d: d[:200] + bytes([d[200] ^ 0xFF]) + d[201:], "checksum"),
    (lambda d: d[:8] + (2).to_bytes(4, "little") + d[12:], "version 2"),
    (lambda d: b"", "truncated"),
])
def test_damaged_model_files_are_refused_naming_the_file(tmp_path, damage, problem):
    good = modelfile.to_bytes(random_model())
    bad = tmp_path / "bad.model"
    bad.write_bytes(damage(good))
    r = subprocess.run([model_tool(), "infer", str(bad)], input="4 5 6\n", capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and problem in lines[0]


def test_missing_model_file(tmp_path):
    r = subprocess.run([model_tool(), "infer", str(tmp_path / "none.model")], input="", capture_output=True,
                       text=True)
    assert r.returncode == 2 and "no such file" in r.stderr
