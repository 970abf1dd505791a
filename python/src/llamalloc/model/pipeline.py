"""`llamalloc train` and `llamalloc evaluate` without the command line: profiles -> contexts -> tokens ->
LSTM + baselines -> report and model file."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from ..errors import UserError
from . import baselines, lstm, modelfile
from .classes import DEFAULT_WEIGHT_POWER, NUM_CLASSES
from .dataset import Contexts, Warn, build_contexts, split_by_stack, warn_on_stderr
from .metrics import Scores, format_report, score
from .tokenizer import DEFAULT_MAX_TOKENS, DEFAULT_VOCAB_WORDS, Vocabulary

#: Validation contexts (for early stopping) are carved out of training only when there are enough stacks for
#: 10% of them to be a sample worth stopping on (30 stacks). With 12 validation stacks (image-server's 119), the
#: validation accuracy wandered between 47% and 57% without a trend and the loss stopped training at epoch 5,
#: at 59% accuracy on the model's own training contexts; below the threshold the training loss decides
#: (docs/model.md).
MIN_STACKS_FOR_VALIDATION = 300
VALIDATION_FRACTION = 0.1


def load_samples(paths: Sequence[str]) -> pa.Table:
    """Samples of the given profiles, through the profile reader (which raises FormatError on bad files)."""
    try:
        from .. import profile
    except ImportError:
        raise UserError("the profile reader (llamalloc.profile) is not available in this installation") from None
    return profile.samples_table([str(p) for p in paths])


@dataclass
class Trained:
    model: modelfile.ModelFile
    vocabulary: Vocabulary
    result: lstm.TrainResult
    exact: baselines.LookupTable
    site: baselines.LookupTable


def train_contexts(train: Contexts, config: lstm.TrainConfig, vocab_words: int = DEFAULT_VOCAB_WORDS,
                   max_tokens: int = DEFAULT_MAX_TOKENS, progress: Callable[[str], None] | None = None,
                   metadata: dict | None = None) -> Trained:
    """Trains the LSTM (early-stopped on a slice of the training stacks) and builds the baselines' tables."""
    if len(train) == 0:
        raise UserError("no training contexts")
    vocab = Vocabulary.build(train.stacks, vocab_words)
    fit_idx, val_idx = np.arange(len(train)), np.zeros(0, np.int64)
    if len(set(train.stacks)) >= MIN_STACKS_FOR_VALIDATION:
        fit_idx, val_idx = split_by_stack(train, VALIDATION_FRACTION, config.seed + 1)
    ids, lengths = vocab.encode_batch(train.stacks, train.size_classes, max_tokens)
    validation = None
    if len(val_idx):
        validation = (ids[val_idx], lengths[val_idx], train.labels[val_idx], train.weights[val_idx])
    result = lstm.train(ids[fit_idx], lengths[fit_idx], train.labels[fit_idx], train.weights[fit_idx], len(vocab),
                        config, validation, progress)
    exact = baselines.exact_match_table(train)
    site = baselines.site_table(train)
    params = result.params
    folded = np.asarray(lstm.folded_table(params), np.float32)
    meta = dict(metadata or {})
    meta.update({"embedding_dim": config.embedding_dim, "hidden_dim": config.hidden_dim, "seed": config.seed,
                 "epochs_run": result.epochs_run, "best_epoch": result.best_epoch,
                 "interrupted": result.interrupted,
                 "training_seconds": round(result.seconds, 3), "training_contexts": len(train),
                 "training_weight": int(train.weights.sum()), "weight_power": config.weight_power})
    model = modelfile.ModelFile(
        vocabulary=vocab.tokens, embedding=params["embedding"], w_input=params["w_input"],
        w_hidden=params["w_hidden"], bias=params["bias"], folded=folded, dense_w=params["dense_w"],
        dense_b=params["dense_b"], max_tokens=max_tokens, default_class=exact.default_class,
        program="\n".join(train.programs), train_stacks=baselines.stack_keys(train), train_contexts=exact.keys,
        train_context_class=exact.classes, train_sites=site.keys, train_site_class=site.classes, metadata=meta)
    return Trained(model, vocab, result, exact, site)


def lstm_name(model: modelfile.ModelFile) -> str:
    return f"lstm (hidden {model.hidden_dim})"


def predict_all(model: modelfile.ModelFile, test: Contexts) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """Predictor name -> (predicted classes, found mask of a lookup table or None), for the model's LSTM and
    its two baselines."""
    vocab = Vocabulary(model.vocabulary)
    ids, lengths = vocab.encode_batch(test.stacks, test.size_classes, model.max_tokens)
    logits = lstm.predict_logits({k: np.asarray(v) for k, v in model.params().items()}, ids, lengths)
    exact = baselines.LookupTable(model.train_contexts, model.train_context_class, model.default_class)
    site = baselines.LookupTable(model.train_sites, model.train_site_class, model.default_class)
    return {
        lstm_name(model): (logits.argmax(1), None),
        "exact-match lookup": exact.lookup(baselines.context_keys(test)),
        "allocation site + size": site.lookup(baselines.site_keys(test)),
    }


def score_predictions(predictions: dict, test: Contexts) -> list[Scores]:
    return [score(name, pred, test.labels, test.weights, found) for name, (pred, found) in predictions.items()]


def score_all(model: modelfile.ModelFile, test: Contexts) -> list[Scores]:
    """Scores of the model's LSTM and of its two baselines on labelled contexts."""
    return score_predictions(predict_all(model, test), test)


def matching_stacks(model: modelfile.ModelFile, test: Contexts) -> tuple[int, int]:
    """(test stacks also seen in training, distinct test stacks): papers/000 Table 2."""
    keys = baselines.stack_keys(test)
    return int(np.isin(keys, model.train_stacks).sum()), len(keys)


def class_histogram(contexts: Contexts) -> str:
    counts = np.bincount(contexts.labels, minlength=NUM_CLASSES)
    from .classes import CLASS_NAMES
    return ", ".join(f"{CLASS_NAMES[k]} {counts[k]}" for k in range(NUM_CLASSES) if counts[k])


def check_output(output) -> None:
    """Refuses, before any training, a model path that cannot be written."""
    path = Path(output)
    if path.is_dir():
        raise UserError(f"{output}: is a directory; give the model file's path")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"{output}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UserError(f"{output}: folder {folder} is not writable")


def run_train(profiles: Sequence[str], output: str, holdout: float = 0.2, holdout_profiles: Sequence[str] = (),
              seed: int = 0, epochs: int = 100, hidden: int = 64, vocab_words: int = DEFAULT_VOCAB_WORDS,
              max_tokens: int = DEFAULT_MAX_TOKENS, out=None, warn: Warn = warn_on_stderr,
              load: Callable[[Sequence[str]], pa.Table] = load_samples,
              weight_power: float = DEFAULT_WEIGHT_POWER) -> Trained:
    """The whole of `llamalloc train`; writes the model file only when everything succeeded."""
    out = out or sys.stdout
    overlap = set(map(str, profiles)) & set(map(str, holdout_profiles))
    if overlap:
        raise UserError(f"{', '.join(sorted(overlap))}: given both for training and as --holdout-profile")
    if max_tokens < 2:
        raise UserError("--max-tokens must be at least 2")
    check_output(output)
    t0 = time.perf_counter()
    contexts = build_contexts(load(profiles), warn, ", ".join(map(str, profiles)), profiles)
    if holdout_profiles:
        train = contexts
        test = build_contexts(load(holdout_profiles), warn, ", ".join(map(str, holdout_profiles)),
                              holdout_profiles)
        held_what = f"contexts of {', '.join(map(str, holdout_profiles))}"
    else:
        train_idx, test_idx = split_by_stack(contexts, holdout, seed)
        train, test = contexts.subset(train_idx), contexts.subset(test_idx)
        held_what = f"held-out contexts ({100 * holdout:.0f}% of the stacks, never seen in training)"
    print(f"dataset: {len(contexts)} contexts ({len(set(contexts.stacks))} stacks), "
          f"{int(contexts.weights.sum())} sampled objects; labels: {class_histogram(contexts)} "
          f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    config = lstm.TrainConfig(hidden_dim=hidden, max_epochs=epochs, seed=seed, weight_power=weight_power)
    metadata = {"profiles": [str(p) for p in profiles], "holdout": holdout,
                "holdout_profiles": [str(p) for p in holdout_profiles]}
    trained = train_contexts(train, config, vocab_words, max_tokens, metadata=metadata)
    print(f"trained on {len(train)} contexts in {trained.result.seconds:.1f} s "
          f"({trained.result.epochs_run} epochs, kept epoch {trained.result.best_epoch}"
          f"{'; interrupted by Ctrl-C, the best model so far is written' if trained.result.interrupted else ''})",
          file=sys.stderr)
    if len(test):
        report = format_report(held_what, score_all(trained.model, test), len(test), test.weights.sum())
        if holdout_profiles:
            match, total = matching_stacks(trained.model, test)
            report += f"\n\nmatching stack traces (training vs test): {match} / {total} ({100 * match / total:.2f}%)"
    else:
        report = format_report("training contexts (nothing held out)", score_all(trained.model, train), len(train),
                               train.weights.sum())
    print(report, file=out)
    try:
        modelfile.write(output, trained.model)
    except OSError as e:
        raise UserError(f"{output}: cannot write the model: {e.strerror}") from None
    print(f"wrote {output}", file=sys.stderr)
    return trained


def run_evaluate(model_path: str, profiles: Sequence[str], out=None, warn: Warn = warn_on_stderr,
                 load: Callable[[Sequence[str]], pa.Table] = load_samples) -> list[Scores]:
    out = out or sys.stdout
    model = modelfile.read(model_path)
    test = build_contexts(load(profiles), warn, ", ".join(map(str, profiles)), profiles)
    trained_on = [p for p in model.program.split("\n") if p]
    if trained_on and test.programs and not set(test.programs) & set(trained_on):
        warn(f"{model_path} was trained on {', '.join(trained_on)}; the profiles are of "
             f"{', '.join(test.programs)}")
    scores = score_all(model, test)
    report = format_report(f"contexts of {', '.join(map(str, profiles))}", scores, len(test), test.weights.sum())
    match, total = matching_stacks(model, test)
    report += f"\n\nmatching stack traces (training vs test): {match} / {total} ({100 * match / total:.2f}%)"
    print(report, file=out)
    return scores
