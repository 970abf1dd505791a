"""`train` deploys a model refit on every context, warns about a held-out set too small to mean anything, lists the
heaviest mispredicted contexts (`--list`), labels contexts by a rule robust to machine load (`--label`, default
mode, fitted as each context's class distribution: `--target`) and can weigh under-prediction above
over-prediction (`--under-weight`)."""
from __future__ import annotations


import jax.numpy as jnp
import numpy as np
import pytest
from conftest import run

from llamalloc.errors import UserError
from llamalloc.model import dataset, lstm, modelfile, pipeline
from llamalloc.model.classes import DEFAULT_LABEL_RULE
from llamalloc.model.dataset import Contexts, build_contexts, labels_from_counts, samples_from_rows
from llamalloc.model.metrics import frame_summary, mispredictions, outliving_fraction
from llamalloc.model.synthetic import synthetic_samples

from test_model_cli import write_profile

TINY = ["--hidden", "16", "--max-tokens", "32", "--seed", "3"]


# --- labels ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("counts, p95, mode, median", [
    # a request-scoped context: most objects die within 10 ms, its slowest 5% (large requests) take seconds
    ([80, 5, 15, 0, 0, 0, 0, 0], 2, 0, 0),
    ([40, 0, 60, 0, 0, 0, 0, 0], 2, 2, 2),
    ([50, 0, 0, 50, 0, 0, 0, 0], 3, 3, 0),       # a tie: mode takes the longer class (under-prediction pins)
    ([52, 0, 0, 48, 0, 0, 0, 0], 3, 3, 0),       # within 10% of the most common class is a tie too
    ([60, 0, 0, 40, 0, 0, 0, 0], 3, 0, 0),       # not within 10%: the most common class
    ([10, 30, 25, 35, 0, 0, 0, 0], 3, 3, 2),
    ([90, 0, 0, 0, 0, 0, 0, 10], 7, 0, 0),
    ([0, 0, 0, 0, 0, 0, 0, 7], 7, 7, 7),
])
def test_label_rules_on_hand_made_distributions(counts, p95, mode, median):
    assert labels_from_counts([counts], "p95").tolist() == [p95]
    assert labels_from_counts([counts], "mode").tolist() == [mode]
    assert labels_from_counts([counts], "median").tolist() == [median]
    rows = [{"stack": ["app::Handler::Serve()", "main"], "class_counts": counts}]
    default = labels_from_counts([counts], DEFAULT_LABEL_RULE).tolist()
    assert build_contexts(samples_from_rows(rows), warn=lambda m: None).labels.tolist() == default


@pytest.mark.parametrize("counts, share20", [
    ([80, 5, 15, 0, 0, 0, 0, 0], 0),            # a slow tail under 20%: as the mode
    ([60, 0, 0, 40, 0, 0, 0, 0], 3),            # a long-lived minority of 40%: the mode says 0 and it pins pages
    ([1555, 0, 0, 0, 1216, 0, 0, 0], 4),        # image-server's std::string context, default scale (demo profile)
    ([90, 0, 0, 0, 0, 0, 0, 10], 0),            # 10% never freed: under the share
    ([15, 15, 14, 14, 14, 14, 14, 0], 6),       # no class holds 20%: the mode (within 10%: ties, the longest)
    ([0, 0, 0, 0, 0, 0, 0, 7], 7),
])
def test_share_labels_take_the_longest_class_holding_a_fifth_of_the_objects(counts, share20):
    assert labels_from_counts([counts], "share20").tolist() == [share20]
    assert labels_from_counts([counts], "SHARE20").tolist() == [share20]
    assert labels_from_counts([counts], "share10").tolist()[0] >= share20
    with pytest.raises(UserError):
        labels_from_counts([counts], "share0")


def test_the_default_label_is_the_mode_and_a_slow_tail_moves_neither_it_nor_share20():
    assert DEFAULT_LABEL_RULE == "mode"
    # word-count's task-local hash nodes (a run at default scale): 68% under 1 s, 31% under 10 s.
    # share20 says "< 10 s", the class of the job-log lines that outlive the peak, and a thread that makes the
    # nodes fast then puts those lines in its own spans, one or two per span (275 MiB of steady footprint for
    # 19 MiB live); the mode says "< 1 s" (41 MiB). docs/model.md, "The mode again".
    nodes = [33140, 816417, 46851353, 21213521, 0, 0, 0, 0]
    assert labels_from_counts([nodes], DEFAULT_LABEL_RULE).tolist() == [2]
    assert labels_from_counts([nodes], "share20").tolist() == [3]
    # Two runs of one request-scoped context: a loaded run's slow tail moves p95 by two classes, not the mode.
    quiet, loaded = [96, 4, 0, 0, 0, 0, 0, 0], [88, 4, 8, 0, 0, 0, 0, 0]
    assert labels_from_counts([quiet, loaded], "p95").tolist() == [0, 2]
    assert labels_from_counts([quiet, loaded], "mode").tolist() == [0, 0]
    assert labels_from_counts([quiet, loaded], "share20").tolist() == [0, 0]
    # word-count's heaviest context (default scale, three runs): about half its objects on each side of 1 s.
    # The strict mode of the merge would be "<1 s" (39.6 M against 39.0 M) while two of the three runs say
    # "<10 s"; within 10% is a tie, and the tie goes to the longer class, as in those two runs.
    runs = [[1908, 17761, 5396598, 28972530, 0, 0, 0, 0], [26715, 1777875, 32714993, 0, 0, 0, 0, 0],
            [0, 4550, 1480780, 10002164, 0, 0, 0, 0]]
    merged = np.sum(runs, axis=0)
    assert labels_from_counts(runs + [merged], "mode").tolist() == [3, 2, 3, 3]


def test_bad_label_rule_is_a_usage_error(tmp_path, capsys):
    prof = write_profile(tmp_path / "a.prof", synthetic_samples(20, seed=1))
    rc, _, err = run(["train", str(prof), "-o", str(tmp_path / "m.model"), "--label", "p200"], capsys)
    assert rc == 2 and "unknown label rule" in err
    assert not (tmp_path / "m.model").exists()


# --- asymmetric loss ---------------------------------------------------------------------------------------

def test_under_weight_charges_probability_on_shorter_classes_only():
    logits = jnp.array([[0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]] * 2)
    labels = jnp.array([2, 3])
    plain = np.asarray(lstm.asymmetric_ce(logits, labels, 1.0))
    heavy = np.asarray(lstm.asymmetric_ce(logits, labels, 3.0))
    assert heavy[0] > plain[0] and heavy[1] > plain[1]
    # label 3 has more mass below it (classes 0..2) than label 2 (classes 0..1): it is charged more
    assert heavy[1] - plain[1] > heavy[0] - plain[0]
    assert np.allclose(np.asarray(lstm.asymmetric_ce(logits, jnp.array([0, 0]), 3.0)),
                       np.asarray(lstm.asymmetric_ce(logits, jnp.array([0, 0]), 1.0)))


def test_under_weight_shifts_a_borderline_prediction_to_the_longer_class():
    # Two contexts the model cannot tell apart (the same tokens), one labelled "<1 s", one "<10 s", equal
    # weight: the plain loss splits the difference; weighing under-prediction picks the longer class.
    ids = np.tile(np.array([[5, 6, 7, 8]], np.int32), (2, 1))
    lengths = np.array([4, 4], np.int32)
    labels = np.array([2, 3])
    weights = np.array([100, 100])
    gaps = {}
    for under in (1.0, 3.0):
        config = lstm.TrainConfig(hidden_dim=8, embedding_dim=8, max_epochs=4, examples_per_epoch=1024,
                                  learning_rate=1e-2, under_weight=under, seed=0)
        result = lstm.train(ids, lengths, labels, weights, 16, config, None, lambda line: None)
        logits = lstm.predict_logits(result.params, ids, lengths)[0]
        gaps[under] = float(logits[3] - logits[2])
    assert abs(gaps[1.0]) < 0.3
    # the optimum of the weighted loss here is P(<10 s) = 3 P(<1 s): a gap of log 3 = 1.1
    assert gaps[3.0] > 0.5 and gaps[3.0] > gaps[1.0] + 0.5


def test_under_weight_reaches_the_model_metadata(tmp_path, capsys):
    prof = write_profile(tmp_path / "a.prof", synthetic_samples(40, seed=2))
    model = tmp_path / "m.model"
    rc, _, err = run(["train", str(prof), "-o", str(model), "--epochs", "1", "--target", "label",
                      "--under-weight", "2", "--label",
                      "p95", *TINY], capsys)
    assert rc == 0, err
    meta = modelfile.read(model).metadata
    assert meta["under_weight"] == 2.0 and meta["label"] == "p95"


# --- distribution targets ------------------------------------------------------------------------------

def test_a_distribution_model_learns_a_contexts_split_and_places_its_long_lived_minority():
    # One context whose objects split 60% "<10 ms" / 40% "<100 s" (image-server's std::string context is
    # 56 / 44), and a plain short-lived one. A label model trained on the mode learns "<10 ms" for the first, so
    # its long-lived 40% pin the pages of short-lived objects; a distribution model learns the split, and its
    # rule (share20, p95) places the context by its long-lived minority, while the mode still says "<10 ms".
    ids = np.array([[5, 6, 7, 8], [5, 9, 10, 11]], np.int32)
    lengths = np.array([4, 4], np.int32)
    counts = np.array([[60, 0, 0, 0, 40, 0, 0, 0], [100, 0, 0, 0, 0, 0, 0, 0]])
    dists = dataset.class_distributions(counts)
    labels = labels_from_counts(counts, "share20")
    assert labels.tolist() == [4, 0]
    config = lstm.TrainConfig(hidden_dim=8, embedding_dim=8, max_epochs=6, examples_per_epoch=1024,
                              learning_rate=1e-2, decision="share20", seed=0)
    result = lstm.train(ids, lengths, labels, np.array([100, 100]), 16, config, None, lambda line: None,
                        dists=dists)
    logits = lstm.predict_logits(result.params, ids, lengths)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert abs(probs[0, 0] - 0.6) < 0.1 and abs(probs[0, 4] - 0.4) < 0.1
    assert dataset.decide(logits, "share20").tolist() == [4, 0]
    assert dataset.decide(logits, "p95").tolist() == [4, 0]
    assert dataset.decide(logits, "mode").tolist() == [0, 0]
    assert dataset.decide(logits, None).tolist() == [0, 0]


def test_train_target_distribution_writes_the_rule_into_the_model(tmp_path, capsys):
    prof = write_profile(tmp_path / "a.prof", synthetic_samples(40, seed=2))
    model = tmp_path / "m.model"
    rc, out, err = run(["train", str(prof), "-o", str(model), "--epochs", "1", "--target", "distribution",
                        "--label", "share20", *TINY], capsys)
    assert rc == 0, err
    m = modelfile.read(model)
    assert m.decision == "share20" and m.metadata["target"] == "distribution"
    assert "learns each context's class distribution" in err
    rc, _, err = run(["train", str(prof), "-o", str(tmp_path / "u.model"), "--target", "distribution",
                      "--under-weight", "2", *TINY], capsys)
    assert rc == 2 and "--under-weight applies to --target label only" in err
    assert not (tmp_path / "u.model").exists()
    # a label model has no decision section and is read as one
    rc, _, err = run(["train", str(prof), "-o", str(tmp_path / "l.model"), "--epochs", "1", "--target", "label",
                      *TINY], capsys)
    assert rc == 0 and modelfile.read(tmp_path / "l.model").decision is None
    # and without --target, train fits a distribution model (the default)
    rc, _, err = run(["train", str(prof), "-o", str(tmp_path / "d.model"), "--epochs", "1", *TINY], capsys)
    assert rc == 0 and modelfile.read(tmp_path / "d.model").decision == "mode"


# --- refit -------------------------------------------------------------------------------------------------

def test_the_written_model_is_refit_on_every_context(tmp_path, capsys):
    prof = write_profile(tmp_path / "a.prof", synthetic_samples(120, seed=5))
    refit, split = tmp_path / "refit.model", tmp_path / "split.model"
    rc, out, err = run(["train", str(prof), "-o", str(refit), "--epochs", "2", "--holdout", "0.25", *TINY],
                       capsys)
    assert rc == 0, err
    assert "deployed model: retrained on all 120 contexts" in err
    rc, out2, err2 = run(["train", str(prof), "-o", str(split), "--epochs", "2", "--holdout", "0.25",
                          "--no-refit", *TINY], capsys)
    assert rc == 0, err2
    assert "deployed model" not in err2
    assert out == out2  # the report is the split model's either way
    m_refit, m_split = modelfile.read(refit), modelfile.read(split)
    assert m_refit.metadata["refit"] is True and m_split.metadata["refit"] is False
    assert m_refit.metadata["training_contexts"] == 120
    assert m_split.metadata["training_contexts"] == m_refit.metadata["split"]["contexts"] < 120
    assert m_refit.metadata["split"]["heldout_contexts"] == 120 - m_split.metadata["training_contexts"]
    # The held-out stacks are in the refit model's exact-match table and not in the split model's.
    assert len(m_refit.train_contexts) == 120 > len(m_split.train_contexts)
    assert len(m_refit.train_stacks) > len(m_split.train_stacks)


def test_the_refit_model_knows_a_context_only_the_heldout_set_had(tmp_path, capsys):
    # Eight subsystems, each in one context whose words are its own: held out, a context is all <unk> to the
    # split model; the refit model has seen it. Labels are the subsystem's class.
    rows = []
    for k in range(8):
        counts = [0] * 8
        counts[k] = 50
        rows.append({"stack": [f"svc{k}::Op{k}(int)", f"svc{k}::Loop{k}()", "main"], "request_size": 64,
                     "class_counts": counts})
    prof = write_profile(tmp_path / "a.prof", samples_from_rows(rows))
    model = tmp_path / "m.model"
    rc, out, err = run(["train", str(prof), "-o", str(model), "--epochs", "60", "--holdout", "0.25", *TINY],
                       capsys)
    assert rc == 0, err
    m = modelfile.read(model)
    contexts = build_contexts(samples_from_rows(rows), warn=lambda s: None)
    lstm_pred = pipeline.predict_all(m, contexts)[pipeline.lstm_name(m)][0]
    assert lstm_pred.tolist() == contexts.labels.tolist()  # held-out ones too
    assert m.metadata["split"]["heldout_contexts"] == 2


def test_holdout_profile_and_holdout_zero_do_not_refit(tmp_path, capsys):
    a = write_profile(tmp_path / "a.prof", synthetic_samples(40, seed=1))
    b = write_profile(tmp_path / "b.prof", synthetic_samples(40, seed=2))
    for extra in (["--holdout-profile", str(b)], ["--holdout", "0"]):
        model = tmp_path / "m.model"
        rc, _, err = run(["train", str(a), "-o", str(model), "--epochs", "1", *extra, *TINY], capsys)
        assert rc == 0, err
        assert "deployed model" not in err and modelfile.read(model).metadata["refit"] is False


# --- small held-out set ------------------------------------------------------------------------------------

def _contexts(weights):
    n = len(weights)
    counts = np.zeros((n, 8), np.int64)
    counts[:, 0] = weights
    return Contexts([(f"f{i}()", "main") for i in range(n)], np.full(n, 4), counts, np.asarray(weights, np.int64),
                    np.zeros(n, np.int64))


def test_small_heldout_warning_threshold():
    assert pipeline.MIN_HELDOUT_CONTEXTS == 30
    assert pipeline.heldout_warning(_contexts([10] * 30), 1000) is None
    message = pipeline.heldout_warning(_contexts([10] * 29), 1000)
    assert message and "29 contexts" in message and "--holdout-profile" in message and "more runs" in message
    # 40 contexts, but one holds nearly all the objects: it counts as about one
    message = pipeline.heldout_warning(_contexts([10_000] + [1] * 39), 20_000)
    assert message and "concentrated on about 1.0 contexts" in message
    # 40 even contexts holding 0.4% of all the objects
    message = pipeline.heldout_warning(_contexts([1] * 40), 10_000)
    assert message and "0.4% of the objects" in message and "less than 1% of the objects" in message


def test_train_warns_when_the_heldout_set_is_small_and_not_when_it_is_not(tmp_path, capsys):
    rows = [{"stack": [f"app::F{i}(int)", "main"], "request_size": 16, "class_counts": [5] + [0] * 7}
            for i in range(100)]
    prof = write_profile(tmp_path / "a.prof", samples_from_rows(rows))
    model = tmp_path / "m.model"
    rc, _, err = run(["train", str(prof), "-o", str(model), "--epochs", "1", "--holdout", "0.2", "--no-refit",
                      *TINY], capsys)
    assert rc == 0 and "llamalloc: warning: the held-out set is too small" in err and "20 contexts" in err
    rc, _, err = run(["train", str(prof), "-o", str(model), "--epochs", "1", "--holdout", "0.3", "--no-refit",
                      *TINY], capsys)
    assert rc == 0 and "held-out set is too small" not in err


# --- --list ------------------------------------------------------------------------------------------------

def test_frame_summary_skips_allocation_plumbing():
    stack = ("operator new(unsigned long)", "std::vector<int, std::allocator<int> >::_M_realloc_insert(int&&)",
             "void std::vector<std::string, std::allocator<std::string> >::_M_realloc_insert<std::string>(int)",
             "imaging::Resizer::scale(imaging::Image const&, int)", "imaging::Handler::serve(Request const&)",
             "server::Worker::run()", "main")
    assert frame_summary(stack) == "imaging::Resizer::scale < imaging::Handler::serve < server::Worker::run"
    lam = ("wordcount::stages::tokenize[abi:cxx11](std::string_view)",
           "wordcount::run(Options const&)::{lambda(std::vector<std::unique_ptr<Job> > const&)#2}::operator()"
           "(std::vector<std::unique_ptr<Job> > const&) const", "start_thread")
    assert frame_summary(lam) == ("wordcount::stages::tokenize[abi:cxx11] < "
                                  "wordcount::run()::{lambda()#2}::operator() < start_thread")


def test_mispredictions_are_sorted_by_bytes_with_direction():
    counts = np.zeros((4, 8), np.int64)
    c = Contexts([("a()",), ("b()",), ("c()",), ("d()",)], np.array([4, 10, 6, 4]), counts,
                 np.array([100, 5, 50, 7]), np.array([3, 0, 7, 2]), bytes=np.array([1600, 5120, 3200, 112]))
    rows = mispredictions(np.array([0, 2, 7, 1]), c, 5)
    assert [r["context"] for r in rows] == ["b", "a", "d"]  # c() is right; by bytes, heaviest first
    assert [(r["true"], r["predicted"], r["error"]) for r in rows] == [
        ("<10 ms", "<1 s", "over"), ("<10 s", "<10 ms", "under"), ("<1 s", "<100 ms", "under")]
    assert rows[0]["bytes"] == 5120 and rows[0]["objects"] == 5 and rows[0]["size"] == "<=1 KiB"
    assert len(mispredictions(np.array([0, 2, 7, 1]), c, 1)) == 1


def test_outliving_fraction_counts_objects_longer_than_predicted():
    counts = np.array([[80, 0, 20, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 100]])
    assert outliving_fraction([0, 7], counts) == pytest.approx(20 / 200)
    assert outliving_fraction([2, 0], counts) == pytest.approx(100 / 200)


def _list_profile(tmp_path):
    # Three subsystems the model learns, and two heldout-only contexts it cannot know: a big never-freed
    # buffer and a small short-lived one, with bytes far apart.
    rows = []
    for i in range(60):
        k = i % 3
        counts = [0] * 8
        counts[k] = 20
        rows.append({"stack": ["std::vector<int>::push_back(int)", f"sub{k}::Step{i}(int)", f"sub{k}::Run()",
                               "main"], "request_size": 32, "class_counts": counts})
    rows.append({"stack": ["operator new(unsigned long)", "vault::Keep(int)", "vault::Main()", "main"],
                 "request_size": 1 << 20, "class_counts": [0, 0, 0, 0, 0, 0, 0, 30]})
    rows.append({"stack": ["operator new(unsigned long)", "scratch::Tmp(int)", "scratch::Main()", "main"],
                 "request_size": 64, "class_counts": [0, 0, 0, 0, 0, 0, 9, 0]})
    return write_profile(tmp_path / "list.prof", samples_from_rows(rows))


def test_evaluate_list_names_the_heaviest_mispredicted_context(tmp_path, capsys):
    prof = _list_profile(tmp_path)
    model = tmp_path / "m.model"
    # trained on the three subsystems only: vault and scratch are unknown to it
    rows = [r for r in build_rows_without(prof, ("vault::", "scratch::"))]
    train_prof = write_profile(tmp_path / "train.prof", samples_from_rows(rows))
    rc, _, err = run(["train", str(train_prof), "-o", str(model), "--epochs", "30", "--holdout", "0", *TINY],
                     capsys)
    assert rc == 0, err
    rc, out, err = run(["evaluate", str(model), str(prof), "--list", "2"], capsys)
    assert rc == 0, err
    lines = out.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("mispredicted contexts of lstm"))
    body = [l for l in lines[start + 3:] if l.strip()]
    assert "vault::Keep < vault::Main < main" in body[0] and "never freed" in body[0]
    assert "30.0 MiB" in body[0] and " 30 " in body[0] and "<=1 MiB" in body[0] and " under " in body[0]
    if len(body) > 1:  # the second heaviest: scratch (9 x 64 bytes), if the model got it wrong too
        assert "scratch::Tmp" in body[1] and ">=1000 s" in body[1]
    assert "2 of" in lines[start] or "1 of" in lines[start]


def build_rows_without(prof, prefixes):
    from llamalloc import profile as _profile
    rows = _profile.samples_table([prof]).to_pylist()
    return [{"stack": r["stack"], "request_size": r["request_size"], "class_counts": r["class_counts"]}
            for r in rows if not any(f.startswith(prefixes) for f in r["stack"])]


def test_train_list_prints_heldout_mispredictions(tmp_path, capsys):
    prof = _list_profile(tmp_path)
    model = tmp_path / "m.model"
    rc, out, err = run(["train", str(prof), "-o", str(model), "--epochs", "2", "--holdout", "0.5", "--list", "3",
                        "--no-refit", *TINY], capsys)
    assert rc == 0, err
    assert "mispredicted contexts of lstm (hidden 16), heaviest by bytes first" in out
    listing = out.split("mispredicted contexts of lstm")[1].splitlines()[3:]
    assert 1 <= len([l for l in listing if l.strip()]) <= 3
    sizes = []
    for line in listing:
        if line.strip():
            amount, unit = line.split()[:2]
            sizes.append(float(amount) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[unit])
    assert sizes == sorted(sizes, reverse=True)
