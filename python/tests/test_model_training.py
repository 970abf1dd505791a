"""Training reaches known labels, is deterministic under a seed, and the exported file's reference inference
agrees with the trained model (the LLAMA paper, sections 5.2 and 9.2)."""
import numpy as np

from float32_bounds import assert_logits_agree, decided_rows, logit_error_bound
import pytest

from llamalloc.errors import FormatError
from llamalloc.model import lstm, modelfile, pipeline, reference
from llamalloc.model.dataset import build_contexts, split_by_stack
from llamalloc.model.synthetic import synthetic_samples, true_class

# The paper's small variant (hidden 16); epochs are short so that early stopping has room to work.
SMALL = dict(embedding_dim=32, hidden_dim=16, max_epochs=40, patience=8, batch_size=64, examples_per_epoch=2048)
MAX_TOKENS = 32


def request_size_of(size_bucket: int) -> int:
    return 1 << int(size_bucket)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    contexts = build_contexts(synthetic_samples(400, seed=7), warn=lambda m: None)
    train_idx, test_idx = split_by_stack(contexts, 0.25, seed=0)
    train, test = contexts.subset(train_idx), contexts.subset(test_idx)
    result = pipeline.train_contexts(train, lstm.TrainConfig(seed=1, **SMALL), max_tokens=MAX_TOKENS,
                                     progress=lambda line: None)
    path = tmp_path_factory.mktemp("model") / "synthetic.model"
    modelfile.write(path, result.model)
    return result, train, test, path


def test_labels_are_the_known_lifetimes_of_the_synthetic_server(trained):
    _, train, test, _ = trained
    for c in (train, test):
        assert all(true_class(s) == label for s, label in zip(c.stacks, c.labels))


def test_lstm_predicts_unseen_contexts_where_lookups_cannot(trained):
    result, _, test, _ = trained
    deployed, lstm_scores, exact, site = pipeline.score_all(result.model, test)
    # Held-out stacks are new combinations of callers: the exact-match table never has them, and the allocation
    # site (a shared string/vector helper) does not decide the lifetime; the subsystem frames above it do.
    assert exact.coverage == 0.0
    assert site.unweighted_accuracy < 0.5
    # 100 held-out contexts with Zipf-distributed weights: one heavy miss costs several points of weighted
    # accuracy, hence the same bar for both.
    # (Unweighted: 0.85. With jax 0.10.2, which a fresh set-up now installs, this fixture's seed gives 0.88, and
    # other seeds 0.88-0.9+; an exact-match table gets 0 and the allocation site under 0.5.)
    assert lstm_scores.weighted_accuracy >= 0.9
    assert lstm_scores.unweighted_accuracy >= 0.85
    assert lstm_scores.unweighted_off_by_one >= lstm_scores.unweighted_accuracy
    assert lstm_scores.confusion.sum() == len(test)
    # What the allocator runs on these contexts: none is in the table, so the LSTM (or the default class where
    # the LSTM lost) answers them.
    assert deployed.coverage == 0.0 and deployed.weighted_accuracy >= exact.weighted_accuracy


def test_exact_match_baseline_knows_its_training_contexts(trained):
    result, train, _, _ = trained
    deployed, _, exact, _ = pipeline.score_all(result.model, train)
    assert exact.coverage == 1.0 and exact.unweighted_accuracy == 1.0
    # The deployed predictor's table holds every training context with its label.
    assert deployed.coverage == 1.0 and deployed.unweighted_accuracy == 1.0


def test_reference_inference_from_the_file_equals_the_trained_model(trained):
    result, train, test, path = trained
    for contexts in (train, test):
        ids, lengths = result.vocabulary.encode_batch(contexts.stacks, contexts.size_buckets, MAX_TOKENS)
        jax_logits = lstm.predict_logits(result.result.params, ids, lengths)
        sizes = [request_size_of(sc) for sc in contexts.size_buckets]
        classes, logits = reference.predict(path, contexts.stacks, sizes)
        # Within what float32 arithmetic in another order allows (float32_bounds.py), and the same class
        # wherever the race between the two largest logits is not closer than that.
        model = modelfile.read(path)
        bound = logit_error_bound(model, reference.tokens(model, contexts.stacks, sizes))
        assert_logits_agree(logits, jax_logits, bound)
        decided = decided_rows(np.asarray(jax_logits), bound)
        # (The bound is a worst case carried through 32 recurrent steps, about a thousand times the differences
        # seen; still, most rows' races are clearer than it.)
        assert decided.mean() > 0.5
        np.testing.assert_array_equal(classes[decided], np.asarray(jax_logits).argmax(1)[decided])


def test_reference_handles_contexts_never_seen(trained):
    _, _, _, path = trained
    classes, logits = reference.predict(path, [["never::Seen(int)", "0x1234", "main"], []], [100, 8])
    assert classes.shape == (2,) and logits.shape == (2, 8) and np.all(np.isfinite(logits))


def test_model_file_round_trip_keeps_everything(trained):
    result, _, _, path = trained
    back = modelfile.read(path)
    m = result.model
    assert back.vocabulary == m.vocabulary and back.max_tokens == MAX_TOKENS
    for name in ("embedding", "w_input", "w_hidden", "bias", "folded", "dense_w", "dense_b", "train_stacks",
                 "train_contexts", "train_context_class", "train_sites", "train_site_class"):
        np.testing.assert_array_equal(getattr(back, name), getattr(m, name), err_msg=name)
    np.testing.assert_allclose(back.folded, back.embedding @ back.w_input + back.bias, atol=1e-5)
    assert back.program == "synthetic-server" and back.metadata["hidden_dim"] == 16


def test_arrays_are_64_byte_aligned_for_mapping(trained):
    _, _, _, path = trained
    data = path.read_bytes()
    count = int.from_bytes(data[28:32], "little")
    for i in range(count):
        entry = data[128 + 64 * i:128 + 64 * (i + 1)]
        assert int.from_bytes(entry[48:56], "little") % 64 == 0


@pytest.mark.parametrize("damage, problem", [
    (lambda d: d[:100], "truncated"),
    (lambda d: d[:len(d) // 2], "truncated"),
    (lambda d: b"GARBAGE!" + d[8:], "bad magic"),
    (lambda d: d[:8] + (2).to_bytes(4, "little") + d[12:], "version 2"),
    (lambda d: d[:-10] + bytes([d[-10] ^ 0xFF]) + d[-9:], "checksum"),
    (lambda d: b"", "bad magic"),
])
def test_damaged_model_files_are_refused_naming_the_file(trained, tmp_path, damage, problem):
    _, _, _, path = trained
    bad = tmp_path / "bad.model"
    bad.write_bytes(damage(path.read_bytes()))
    with pytest.raises(FormatError, match=problem) as e:
        modelfile.read(bad)
    assert str(bad) in str(e.value)


def test_training_is_deterministic_under_a_seed():
    contexts = build_contexts(synthetic_samples(60, seed=3), warn=lambda m: None)
    config = dict(SMALL, max_epochs=2)

    def weights(seed):
        r = pipeline.train_contexts(contexts, lstm.TrainConfig(seed=seed, **config), max_tokens=MAX_TOKENS,
                                    progress=lambda line: None)
        return np.concatenate([np.ravel(r.model.params()[k]) for k in lstm.PARAM_NAMES])

    first = weights(5)
    np.testing.assert_array_equal(first, weights(5))
    assert not np.array_equal(first, weights(6))


@pytest.mark.parametrize("power", [0.5, 1.0])
def test_a_context_weighs_its_count_to_the_power_in_the_loss(power):
    counts = np.array([1, 3, 100, 10_000, 7], np.int64)
    config = lstm.TrainConfig(weight_power=power, examples_per_epoch=64, max_copies=16)
    copies, per_copy = lstm._example_copies(counts, config)
    assert np.all(copies >= 1) and np.all(copies <= 16)
    assert copies[3] == 16 and copies[0] == 1  # frequent contexts are repeated, every context is seen
    total = copies * per_copy.astype(np.float64)  # each context's whole weight in an epoch's loss
    np.testing.assert_allclose(total / total[0], counts.astype(np.float64) ** power, rtol=1e-5)


def test_compiled_steps_are_kept_in_the_cache_folder(tmp_path):
    import os
    import subprocess
    import sys
    script = ("import numpy as np\n"
              "from llamalloc.model import lstm\n"
              "import jax\n"
              "p = lstm.init_params(jax.random.PRNGKey(0), 60, 4, 4)\n"
              "lstm.predict_logits(p, np.zeros((3, 16), np.int32), np.ones(3, np.int32), batch_size=4)\n"
              "print(lstm.enable_compilation_cache())\n")
    env = {**os.environ, "LLAMALLOC_CACHE_DIR": str(tmp_path)}
    env.pop("LLAMALLOC_JAX_CACHE", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / "jax")
    assert any(p.name.startswith("jit_logits_fn") for p in (tmp_path / "jax").iterdir())
    env["LLAMALLOC_JAX_CACHE"] = "0"
    off = tmp_path / "off"
    env["LLAMALLOC_CACHE_DIR"] = str(off)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None" and not off.exists()
