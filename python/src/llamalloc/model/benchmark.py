"""Benchmarks of the lifetime model (not tests: nothing here is asserted, figures are printed).

    python -m llamalloc.model.benchmark speed [--examples 50000]
        training time on a synthetic server: an epoch of EXAMPLES weighted examples, to early stop
    python -m llamalloc.model.benchmark accuracy NAME REV1.prof REV2.prof [--hidden 64]
        LSTM and baselines on held-out contexts of REV1 (same revision), and trained on REV1, tested on REV2
        and the other way round (across revisions), with the fraction of matching stack traces
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from . import lstm, pipeline
from .dataset import build_contexts, split_by_stack
from .synthetic import synthetic_samples


def _quiet(_line: str) -> None:
    pass


def speed(examples: int, hidden: int, seed: int, epochs: int) -> dict:
    n_contexts = examples // 4
    contexts = build_contexts(synthetic_samples(n_contexts, seed=seed), warn=_quiet)
    train_idx, test_idx = split_by_stack(contexts, 0.1, seed)
    train, test = contexts.subset(train_idx), contexts.subset(test_idx)
    config = lstm.TrainConfig(hidden_dim=hidden, seed=seed, examples_per_epoch=examples, max_epochs=epochs)
    t0 = time.perf_counter()
    trained = pipeline.train_contexts(train, config, progress=lambda line: print(line, file=sys.stderr))
    seconds = time.perf_counter() - t0
    scores = pipeline.score_all(trained.model, test)[0]
    return {"benchmark": "speed", "contexts": len(train), "examples_per_epoch": examples, "hidden": hidden,
            "epochs": trained.result.epochs_run, "seconds": round(seconds, 1),
            "seconds_per_epoch": round(seconds / trained.result.epochs_run, 2),
            "heldout_weighted_accuracy": round(scores.weighted_accuracy, 4),
            "heldout_unweighted_accuracy": round(scores.unweighted_accuracy, 4)}


def _row(name: str, scores, extra: dict) -> dict:
    row = {"experiment": name, **extra}
    for s in scores:
        row[s.name] = {"weighted": round(s.weighted_accuracy, 4), "unweighted": round(s.unweighted_accuracy, 4),
                       "off_by_one_weighted": round(s.weighted_off_by_one, 4),
                       "off_by_one_unweighted": round(s.unweighted_off_by_one, 4),
                       "found": None if s.coverage is None else round(s.coverage, 4)}
    return row


def accuracy(name: str, rev1: str, rev2: str, hidden: int, seed: int):
    """Yields one result row per experiment, as soon as it is done."""
    from .pipeline import load_samples
    c1 = build_contexts(load_samples([rev1]), what=rev1, profiles=[rev1])
    c2 = build_contexts(load_samples([rev2]), what=rev2, profiles=[rev2])
    config = lstm.TrainConfig(hidden_dim=hidden, seed=seed)
    train_idx, test_idx = split_by_stack(c1, 0.2, seed)
    t0 = time.perf_counter()
    held = pipeline.train_contexts(c1.subset(train_idx), config, progress=_quiet)
    yield (_row(f"{name} same revision (20% of stacks held out)",
                     pipeline.score_all(held.model, c1.subset(test_idx)),
                     {"train_contexts": len(train_idx), "test_contexts": len(test_idx),
                      "train_seconds": round(time.perf_counter() - t0, 1)}))
    for a, b, ca, cb in ((rev1, rev2, c1, c2), (rev2, rev1, c2, c1)):
        t0 = time.perf_counter()
        trained = pipeline.train_contexts(ca, config, progress=_quiet)
        match, total = pipeline.matching_stacks(trained.model, cb)
        yield (_row(f"{name} trained on {a}, tested on {b}", pipeline.score_all(trained.model, cb),
                         {"train_contexts": len(ca), "test_contexts": len(cb),
                          "matching_stacks": f"{match}/{total}", "train_seconds": round(time.perf_counter() - t0, 1)}))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llamalloc.model.benchmark")
    sub = parser.add_subparsers(dest="what", required=True)
    sp = sub.add_parser("speed")
    sp.add_argument("--examples", type=int, default=50_000)
    sp.add_argument("--hidden", type=int, default=64)
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--epochs", type=int, default=40)
    ac = sub.add_parser("accuracy")
    ac.add_argument("name")
    ac.add_argument("rev1")
    ac.add_argument("rev2")
    ac.add_argument("--hidden", type=int, default=64)
    ac.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.what == "speed":
        print(json.dumps(speed(args.examples, args.hidden, args.seed, args.epochs)))
    else:
        for row in accuracy(args.name, args.rev1, args.rev2, args.hidden, args.seed):
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
