"""`llamalloc train` and `llamalloc evaluate` without the command line: profiles -> contexts -> tokens ->
LSTM + baselines -> report and model file."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from .. import files
from ..errors import UserError
from . import baselines, lstm, modelfile
from .classes import CLASS_NAMES, DEFAULT_LABEL_RULE, DEFAULT_TARGET, DEFAULT_WEIGHT_POWER, NUM_CLASSES, TARGETS
from .dataset import (Contexts, Warn, build_contexts, class_distributions, decide, labels_from_counts,
                      parse_label_rule, split_by_stack, warn_on_stderr)
from .metrics import Scores, format_mispredictions, format_report, mispredictions, score
from .tokenizer import DEFAULT_MAX_TOKENS, DEFAULT_VOCAB_WORDS, Vocabulary

#: Validation contexts (for early stopping) are carved out of training only when there are enough stacks for
#: 10% of them to be a sample worth stopping on (30 stacks): the accuracy of fewer wanders from epoch to epoch by
#: more than the model improves, and would stop training early at random; below the threshold the training loss
#: decides (docs/model.md).
MIN_STACKS_FOR_VALIDATION = 300
VALIDATION_FRACTION = 0.1

#: A held-out set smaller than this many contexts gets a warning: the unweighted accuracy of n contexts has a
#: standard error of up to 0.5 / sqrt(n), 9 points at 30 (a 95% interval of +-18 points).
MIN_HELDOUT_CONTEXTS = 30
#: ... or whose weight is concentrated on fewer than this many contexts' worth (Kish's effective sample size,
#: (sum w)^2 / sum w^2): word-count's heaviest context holds 98% of the objects, so any held-out set holding it
#: counts as about one context and its weighted accuracy is 0% or 100% on that one answer (docs/model.md).
MIN_HELDOUT_EFFECTIVE_CONTEXTS = 10
#: ... or that carries less than this share of all the objects (what the weighted accuracy speaks for).
MIN_HELDOUT_OBJECT_SHARE = 0.01


def load_samples(paths: Sequence[str], programs: Sequence[str] = (), builds: Sequence[str] = ()) -> pa.Table:
    """Samples of the given profiles and corpora, through the profile reader (which raises FormatError on bad
    files) and the corpus reader (a corpus folder from `llamalloc aggregate`: one row per context, its counts
    summed over the fleet's profiles; `programs` and `builds` select its partitions)."""
    try:
        from .. import profile
        from ..fleet import corpus
    except ImportError:
        raise UserError("the profile reader (llamalloc.profile) is not available in this installation") from None
    corpora = [str(p) for p in paths if corpus.is_corpus(p)]
    files = [str(p) for p in paths if not corpus.is_corpus(p)]
    for p in files:
        if Path(p).is_dir():
            raise UserError(f"{p}: a folder that is not a corpus (no corpus.json; make one with "
                            f"`llamalloc aggregate {p} -o CORPUS`)")
    tables = [profile.samples_table(files)] if files else []
    for folder in corpora:
        tables.append(corpus.training_samples(folder, programs, builds))
    if len(tables) == 1:
        return tables[0]
    schema = tables[0].schema
    return pa.concat_tables([t.select(schema.names).cast(schema) for t in tables])


@dataclass
class Trained:
    model: modelfile.ModelFile
    vocabulary: Vocabulary
    result: lstm.TrainResult
    exact: baselines.LookupTable
    site: baselines.LookupTable


def train_contexts(train: Contexts, config: lstm.TrainConfig, vocab_words: int = DEFAULT_VOCAB_WORDS,
                   max_tokens: int = DEFAULT_MAX_TOKENS, progress: Callable[[str], None] | None = None,
                   metadata: dict | None = None, validate: bool = True) -> Trained:
    """Trains the LSTM (early-stopped on a slice of the training stacks unless `validate` is False: then every
    context trains and the training loss decides) and builds the baselines' tables."""
    if len(train) == 0:
        raise UserError("no training contexts")
    vocab = Vocabulary.build(train.stacks, vocab_words)
    fit_idx, val_idx = np.arange(len(train)), np.zeros(0, np.int64)
    if validate and len(set(train.stacks)) >= MIN_STACKS_FOR_VALIDATION:
        fit_idx, val_idx = split_by_stack(train, VALIDATION_FRACTION, config.seed + 1)
    ids, lengths = vocab.encode_batch(train.stacks, train.size_buckets, max_tokens)
    dists = class_distributions(train.class_counts)
    validation = None
    if len(val_idx):
        validation = (ids[val_idx], lengths[val_idx], train.labels[val_idx], train.weights[val_idx],
                      dists[val_idx])
    result = lstm.train(ids[fit_idx], lengths[fit_idx], train.labels[fit_idx], train.weights[fit_idx], len(vocab),
                        config, validation, progress, dists=dists[fit_idx])
    exact = baselines.exact_match_table(train)
    site = baselines.site_table(train)
    params = result.params
    folded = np.asarray(lstm.folded_table(params), np.float32)
    meta = dict(metadata or {})
    meta.update({"embedding_dim": config.embedding_dim, "hidden_dim": config.hidden_dim, "seed": config.seed,
                 "epochs_run": result.epochs_run, "best_epoch": result.best_epoch,
                 "interrupted": result.interrupted,
                 "training_seconds": round(result.seconds, 3), "training_contexts": len(train),
                 "training_weight": int(train.weights.sum()), "weight_power": config.weight_power,
                 "training_stacks": len(set(train.stacks)), "label": train.label_rule,
                 "under_weight": config.under_weight,
                 "target": "label" if config.decision is None else "distribution"})
    token_keys, token_class = token_class_table(train, ids, lengths)
    model = modelfile.ModelFile(
        vocabulary=vocab.tokens, embedding=params["embedding"], w_input=params["w_input"],
        w_hidden=params["w_hidden"], bias=params["bias"], folded=folded, dense_w=params["dense_w"],
        dense_b=params["dense_b"], max_tokens=max_tokens, default_class=exact.default_class,
        program="\n".join(train.programs), train_stacks=baselines.stack_keys(train), train_contexts=exact.keys,
        train_context_class=exact.classes, train_sites=site.keys, train_site_class=site.classes, metadata=meta,
        decision=config.decision, train_token_contexts=token_keys, train_token_class=token_class,
        train_token_stacks=token_stack_keys(ids, lengths))
    return Trained(model, vocab, result, exact, site)


def token_stack_keys(ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Sorted distinct keys of the training contexts' token ids without their first, the size token: the code
    paths training saw, keyed as the allocator keys them (ModelFile::knows_code_path)."""
    ids = np.asarray(ids)
    lengths = np.asarray(lengths, np.int64)
    return np.unique(modelfile.token_context_keys(ids[:, 1:], np.maximum(lengths - 1, 0)))


def token_class_table(contexts: Contexts, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct token-context keys, the class of each): the deployed predictor's table of the contexts
    training saw, keyed as the allocator keys them. Contexts whose token ids coincide (stacks cut at max_tokens,
    words outside the vocabulary) get the label of their merged counts, by the contexts' label rule."""
    keys = modelfile.token_context_keys(ids, lengths)
    unique, inverse = np.unique(keys, return_inverse=True)
    merged = np.zeros((len(unique), NUM_CLASSES), np.int64)
    np.add.at(merged, inverse, np.asarray(contexts.class_counts, np.int64))
    return unique, labels_from_counts(merged, contexts.label_rule).astype(np.uint8)


def lstm_name(model: modelfile.ModelFile) -> str:
    return f"lstm (hidden {model.hidden_dim})"


def deployed_name(model: modelfile.ModelFile) -> str:
    if model.train_token_class is None:
        return f"deployed: {lstm_name(model)}"
    return "deployed: table + " + ("default" if model.unseen_default else "lstm")


def deployed_classes(model: modelfile.ModelFile, ids: np.ndarray, lengths: np.ndarray,
                     lstm_classes: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """What the allocator predicts (docs/prediction.md, "The deployed predictor"): a context in the model's
    table of training contexts gets its class there; any other the LSTM's class, or the default class where the
    model says so. Returns (classes, found in the table) (found None for a model without a table)."""
    if model.train_token_class is None:
        return lstm_classes, None
    table = baselines.LookupTable(model.train_token_contexts, model.train_token_class, model.default_class)
    classes, found = table.lookup(modelfile.token_context_keys(ids, lengths))
    unseen = np.full(len(lengths), model.default_class, np.int64) if model.unseen_default else lstm_classes
    return np.where(found, classes, unseen), found


def lstm_predictions(model: modelfile.ModelFile, test: Contexts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token ids, lengths, the LSTM's classes) of the contexts: what predict_all and choose_unseen both need, so
    that `train` runs the LSTM over the held-out contexts once."""
    vocab = Vocabulary(model.vocabulary)
    ids, lengths = vocab.encode_batch(test.stacks, test.size_buckets, model.max_tokens)
    logits = lstm.predict_logits({k: np.asarray(v) for k, v in model.params().items()}, ids, lengths)
    return ids, lengths, np.asarray(decide(logits, model.decision), np.int64)


def predict_all(model: modelfile.ModelFile, test: Contexts,
                lstm_run: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                ) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Predictor name -> (predicted classes, found mask of a lookup table or None), for what the allocator
    deploys, the model's LSTM alone and its two baselines. `lstm_run`: lstm_predictions(model, test), if made."""
    ids, lengths, lstm_classes = lstm_run if lstm_run is not None else lstm_predictions(model, test)
    exact = baselines.LookupTable(model.train_contexts, model.train_context_class, model.default_class)
    site = baselines.LookupTable(model.train_sites, model.train_site_class, model.default_class)
    return {
        deployed_name(model): deployed_classes(model, ids, lengths, lstm_classes),
        lstm_name(model): (lstm_classes, None),
        "exact-match lookup": exact.lookup(baselines.context_keys(test)),
        "allocation site + size": site.lookup(baselines.site_keys(test)),
    }


def deploy_message(model: modelfile.ModelFile, figures: dict[str, float]) -> str:
    """The one line `train` prints on what the model file deploys, from choose_unseen's figures."""
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    if model.unseen_default:
        return (f"llamalloc: warning: the LSTM loses to exact-match lookup on contexts it never saw "
                f"({pct(figures['lstm'])} against {pct(figures['default'])} by weight with the lookup's fallback): "
                f"the model predicts contexts outside its training table with the default class "
                f"({CLASS_NAMES[model.default_class]}), as the lookup does")
    return (f"deployed predictor: the training table for the contexts it saw, the LSTM for others "
            f"({pct(figures['lstm'])} of the held-out objects by weight; exact-match lookup "
            f"{pct(figures['exact'])}, the LSTM alone {pct(figures['lstm alone'])})")


def choose_unseen(model: modelfile.ModelFile, test: Contexts,
                  lstm_run: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[bool, dict[str, float]]:
    """Whether contexts outside the model's table should get the default class rather than the LSTM's: True
    when that predicts `test` (contexts the model was not trained on) better by weight. Returns the choice and
    the weighted accuracies it compared ("lstm", "default", and "exact" for exact-match lookup). `lstm_run`:
    lstm_predictions(model, test), if made."""
    ids, lengths, lstm_classes = lstm_run if lstm_run is not None else lstm_predictions(model, test)
    w = test.weights.astype(np.float64)
    total = w.sum() or 1.0
    accuracy = lambda predicted: float(w[predicted == test.labels].sum() / total)  # noqa: E731
    figures = {}
    for name, default in (("lstm", False), ("default", True)):
        candidate = replace(model, unseen_default=default)
        figures[name] = accuracy(deployed_classes(candidate, ids, lengths, lstm_classes)[0])
    exact = baselines.LookupTable(model.train_contexts, model.train_context_class, model.default_class)
    figures["exact"] = accuracy(exact.lookup(baselines.context_keys(test))[0])
    figures["lstm alone"] = accuracy(lstm_classes)
    return figures["default"] > figures["lstm"], figures


def score_predictions(predictions: dict, test: Contexts) -> list[Scores]:
    return [score(name, pred, test.labels, test.weights, found, test.class_counts)
            for name, (pred, found) in predictions.items()]


def heldout_warning(test: Contexts, total_weight: float | None = None) -> str | None:
    """A warning when a held-out set is too small for its accuracy to mean much (the thresholds above), else
    None. `total_weight` is the weight of all contexts (training and held out), for the held-out share."""
    n = len(test)
    w = test.weights.astype(np.float64)
    effective = float(w.sum() ** 2 / np.square(w).sum()) if n and np.square(w).sum() > 0 else 0.0
    share = float(w.sum() / total_weight) if total_weight else 1.0
    reasons = []
    if n < MIN_HELDOUT_CONTEXTS:
        reasons.append(f"fewer than {MIN_HELDOUT_CONTEXTS} contexts")
    if effective < MIN_HELDOUT_EFFECTIVE_CONTEXTS:
        reasons.append(f"its objects are concentrated on about {effective:.1f} contexts' worth of weight")
    if share < MIN_HELDOUT_OBJECT_SHARE:
        reasons.append(f"less than {100 * MIN_HELDOUT_OBJECT_SHARE:g}% of the objects")
    if not reasons:
        return None
    return (f"the held-out set is too small for its accuracy to mean much: {n} contexts "
            f"({len(set(test.stacks))} stacks), {100 * share:.1f}% of the objects; {'; '.join(reasons)}. "
            f"Record more runs (more code paths exercised), raise --holdout, or report on other runs with "
            f"--holdout-profile")


def print_mispredictions(model: modelfile.ModelFile, test: Contexts, n: int, out,
                         predictions: dict | None = None) -> list[dict]:
    """`--list N`: the N heaviest contexts the model's LSTM gets wrong."""
    predicted = (predictions or predict_all(model, test))[lstm_name(model)][0]
    rows = mispredictions(predicted, test, n)
    print("\n" + format_mispredictions(lstm_name(model), rows, int(np.sum(predicted != test.labels)), len(test)),
          file=out)
    return rows


def score_all(model: modelfile.ModelFile, test: Contexts) -> list[Scores]:
    """Scores of the model's LSTM and of its two baselines on labelled contexts."""
    return score_predictions(predict_all(model, test), test)


def matching_stacks(model: modelfile.ModelFile, test: Contexts) -> tuple[int, int]:
    """(test stacks also seen in training, distinct test stacks): the LLAMA paper's Table 2."""
    keys = baselines.stack_keys(test)
    return int(np.isin(keys, model.train_stacks).sum()), len(keys)


def class_histogram(contexts: Contexts) -> str:
    counts = np.bincount(contexts.labels, minlength=NUM_CLASSES)
    return ", ".join(f"{CLASS_NAMES[k]} {counts[k]}" for k in range(NUM_CLASSES) if counts[k])


def check_output(output) -> None:
    """Refuses, before any training, a model path that cannot be written (files.check_output_file tries to write
    in its folder: os.access says yes to root)."""
    files.check_output_file(output, "model")


def _sampled_allocations(paths: Sequence[str]) -> int | None:
    """The allocations the profiler sampled over the profile files (what the estimated counts stand on), or None
    when a file does not say (a corpus, or a profile from before the comment)."""
    from .. import profile
    from ..fleet import corpus
    total = 0
    for p in paths:
        if corpus.is_corpus(p):
            return None
        n = profile.sampled_allocations(p)
        if n is None:
            return None
        total += n
    return total


def partial_path(output) -> Path:
    """Where an interrupted `train` writes its model: OUTPUT.partial, a name that no deployment takes for OUTPUT."""
    output = Path(output)
    return output.with_name(output.name + ".partial")


def _write_partial(output, trained: "Trained", what: str):
    """Ctrl-C: the model so far goes to OUTPUT.partial (OUTPUT is left as it was), and the command ends as an
    interrupted one (status 130), so that `train && deploy` stops."""
    path = partial_path(output)
    try:
        modelfile.write(path, trained.model)
    except OSError as e:
        raise UserError(f"{path}: cannot write the model: {e.strerror}") from None
    raise UserError(f"interrupted: {what}, written to {path}; {output} not written (rename the partial model to use "
                    f"it)", exit_code=130)


def run_train(profiles: Sequence[str], output: str, holdout: float = 0.2, holdout_profiles: Sequence[str] = (),
              seed: int = 0, epochs: int = 100, hidden: int = 64, vocab_words: int = DEFAULT_VOCAB_WORDS,
              max_tokens: int = DEFAULT_MAX_TOKENS, out=None, warn: Warn = warn_on_stderr,
              load: Callable[[Sequence[str]], pa.Table] = load_samples,
              weight_power: float = DEFAULT_WEIGHT_POWER, refit: bool = True, list_n: int = 0,
              label: str = DEFAULT_LABEL_RULE, under_weight: float = 1.0, target: str = DEFAULT_TARGET) -> Trained:
    """The whole of `llamalloc train`; writes the model file only when everything succeeded.

    With `--holdout F`, the model trained on the other stacks is scored on the held-out ones; then, unless
    `refit` is False, a model is trained on every context for the epochs the split run kept, and that one is
    written (what is deployed should have seen every context). Returns what was written."""
    out = out or sys.stdout
    label = parse_label_rule(label)
    overlap = set(map(str, profiles)) & set(map(str, holdout_profiles))
    if overlap:
        raise UserError(f"{', '.join(sorted(overlap))}: given both for training and as --holdout-profile")
    if max_tokens < 2:
        raise UserError("--max-tokens must be at least 2")
    if under_weight < 1.0:
        raise UserError(f"--under-weight must be at least 1, got {under_weight}")
    if target not in TARGETS:
        raise UserError(f"--target: unknown target {target!r} (one of {', '.join(TARGETS)})")
    if target == "distribution" and under_weight != 1.0:
        raise UserError("--under-weight applies to --target label only: a distribution model is charged for "
                        "each class by the share of the context's objects in it")
    check_output(output)
    t0 = time.perf_counter()
    samples = load(profiles)
    # The builds of the programs profiled (the GNU build ids of their executables): `run --model` and `prepare`
    # tell a user whose binary is another build (prepare.trained_on_other_build).
    build_ids = (sorted({b for b in samples.column("build_id").to_pylist() if b})
                 if "build_id" in samples.column_names else [])
    contexts = build_contexts(samples, warn, ", ".join(map(str, profiles)), profiles, label=label)
    if holdout_profiles:
        train = contexts
        test = build_contexts(load(holdout_profiles), warn, ", ".join(map(str, holdout_profiles)),
                              holdout_profiles, label=label)
        held_what = f"contexts of {', '.join(map(str, holdout_profiles))}"
        total_weight = None
    else:
        train_idx, test_idx = split_by_stack(contexts, holdout, seed)
        train, test = contexts.subset(train_idx), contexts.subset(test_idx)
        held_what = f"held-out contexts ({100 * holdout:.0f}% of the stacks, never seen in training)"
        total_weight = float(contexts.weights.sum())
    learns = "each context's class distribution" if target == "distribution" else "the labels"
    sampled = _sampled_allocations(profiles)
    from_what = f"{sampled:,} sampled allocations" if sampled is not None else "the samples"
    print(f"dataset: {len(contexts)} contexts ({len(set(contexts.stacks))} stacks), "
          f"{int(contexts.weights.sum()):,} objects (estimated from {from_what}); labels ({label}): {class_histogram(contexts)}; the model "
          f"learns {learns} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    problem = heldout_warning(test, total_weight) if len(test) else None
    if problem:
        warn(problem)
    config = lstm.TrainConfig(hidden_dim=hidden, max_epochs=epochs, seed=seed, weight_power=weight_power,
                              under_weight=under_weight, decision=label if target == "distribution" else None)
    metadata = {"profiles": [str(p) for p in profiles], "holdout": holdout,
                "holdout_profiles": [str(p) for p in holdout_profiles], "build_ids": build_ids,
                "trained_at": int(time.time())}
    trained = train_contexts(train, config, vocab_words, max_tokens, metadata=metadata)
    print(f"trained on {len(train)} contexts in {trained.result.seconds:.1f} s "
          f"({trained.result.epochs_run} epochs, kept epoch {trained.result.best_epoch}"
          f"{'; interrupted by Ctrl-C' if trained.result.interrupted else ''})", file=sys.stderr)
    scored, scored_what = (test, held_what) if len(test) else (train, "training contexts (nothing held out)")
    deploy_line, lstm_run = None, None
    if len(test):
        # Contexts outside the table get the LSTM's class only where it beats exact-match lookup's fallback on
        # contexts training never saw: the deployed predictor is then never below the lookup table there.
        lstm_run = lstm_predictions(trained.model, test)
        trained.model.unseen_default, figures = choose_unseen(trained.model, test, lstm_run)
        trained.model.metadata["deployed"] = {
            "unseen": "default" if trained.model.unseen_default else "lstm",
            "heldout_weighted_accuracy": {k: round(v, 6) for k, v in figures.items()}}
        deploy_line = deploy_message(trained.model, figures)
    predictions = predict_all(trained.model, scored, lstm_run)
    scores = score_predictions(predictions, scored)
    by_name = {s.name: s for s in scores}
    report = format_report(scored_what, scores, len(scored), scored.weights.sum())
    if holdout_profiles:
        match, total = matching_stacks(trained.model, test)
        report += f"\n\nmatching stack traces (training vs test): {match} / {total} ({100 * match / total:.2f}%)"
    print(report, file=out)
    if problem:  # again beside the table it qualifies (the first one scrolled away with the epochs)
        print(f"warning: {problem}", file=out)
    if list_n > 0:
        print_mispredictions(trained.model, scored, list_n, out, predictions)
    deployed = trained
    will_refit = refit and not holdout_profiles and len(test) > 0 and not trained.result.interrupted
    if will_refit:
        # The split model's epochs (the one early stopping kept) on every context, no validation slice: the
        # held-out report above says how well this recipe generalises; the written model has seen everything.
        refit_epochs = max(trained.result.best_epoch, 1)
        split = {"contexts": len(train), "stacks": len(set(train.stacks)), "heldout_contexts": len(test),
                 "heldout_stacks": len(set(test.stacks)), "epochs": refit_epochs,
                 "heldout_weighted_accuracy": round(by_name[lstm_name(trained.model)].weighted_accuracy, 6),
                 "heldout_unweighted_accuracy": round(by_name[lstm_name(trained.model)].unweighted_accuracy, 6),
                 "heldout_deployed_weighted_accuracy":
                     round(by_name[deployed_name(trained.model)].weighted_accuracy, 6)}
        try:
            deployed = train_contexts(contexts, replace(config, max_epochs=refit_epochs), vocab_words, max_tokens,
                                      metadata={**metadata, "refit": True, "split": split}, validate=False)
        except KeyboardInterrupt:  # (before its first epoch finished: while the refit compiles)
            deployed = None
        if deployed is None or deployed.result.interrupted:
            trained.model.metadata["refit"] = False
            return _write_partial(output, trained, "the refit was interrupted: the split model, which never saw "
                                                   "the held-out stacks")
        deployed.model.unseen_default = trained.model.unseen_default
        if "deployed" in trained.model.metadata:
            deployed.model.metadata["deployed"] = trained.model.metadata["deployed"]
        print(f"deployed model: retrained on all {len(contexts)} contexts ({len(set(contexts.stacks))} stacks): "
              f"ran {deployed.result.epochs_run} of at most {refit_epochs} epochs (the split run's kept epoch), "
              f"kept epoch {deployed.result.best_epoch}, in {deployed.result.seconds:.1f} s; the accuracy above is "
              f"the split model's on contexts it never saw (--no-refit writes that model)", file=sys.stderr)
    else:
        trained.model.metadata["refit"] = False
    if trained.result.interrupted:
        return _write_partial(output, trained, f"training was interrupted: the best of the "
                                               f"{trained.result.epochs_run} finished epochs "
                                               f"(epoch {trained.result.best_epoch})")
    if deploy_line:
        print(deploy_line, file=sys.stderr)
    try:
        modelfile.write(output, deployed.model)
    except OSError as e:
        raise UserError(f"{output}: cannot write the model: {e.strerror}") from None
    print(f"wrote {output}", file=sys.stderr)
    return deployed


def run_evaluate(model_path: str, profiles: Sequence[str], out=None, warn: Warn = warn_on_stderr,
                 load: Callable[[Sequence[str]], pa.Table] = load_samples, list_n: int = 0,
                 label: str | None = None) -> list[Scores]:
    """`llamalloc evaluate`. The profiles' contexts are labelled by `label`, by default the rule the model was
    trained with (its metadata; p95 for models written before the rule was recorded)."""
    out = out or sys.stdout
    model = modelfile.read(model_path)
    rule = parse_label_rule(label or model.metadata.get("label", "p95"))
    test = build_contexts(load(profiles), warn, ", ".join(map(str, profiles)), profiles, label=rule)
    trained_on = [p for p in model.program.split("\n") if p]
    if trained_on and test.programs and not set(test.programs) & set(trained_on):
        warn(f"{model_path} was trained on {', '.join(trained_on)}; the profiles are of "
             f"{', '.join(test.programs)}")
    problem = heldout_warning(test)
    if problem:
        warn(problem.replace("held-out set", "test set").replace(
            ", raise --holdout, or report on other runs with --holdout-profile", " and evaluate on all of them"))
    predictions = predict_all(model, test)
    scores = score_predictions(predictions, test)
    report = format_report(f"contexts of {', '.join(map(str, profiles))} (labels: {rule})", scores, len(test),
                           test.weights.sum())
    match, total = matching_stacks(model, test)
    report += f"\n\nmatching stack traces (training vs test): {match} / {total} ({100 * match / total:.2f}%)"
    print(report, file=out)
    if problem:  # again beside the table it qualifies (the first one scrolled away with the epochs)
        print(f"warning: {problem}", file=out)
    if list_n > 0:
        print_mispredictions(model, test, list_n, out, predictions)
    return scores
