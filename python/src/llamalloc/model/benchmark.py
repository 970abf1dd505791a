"""Benchmarks of the lifetime model (not tests: nothing here is asserted, figures are printed).

    python -m llamalloc.model.benchmark speed [--examples 50000]
        training time on a synthetic server: an epoch of EXAMPLES weighted examples, to early stop
    python -m llamalloc.model.benchmark accuracy NAME REV1.prof REV2.prof [--hidden 64]
        LSTM and baselines on held-out contexts of REV1 (same revision), and trained on REV1, tested on REV2
        and the other way round (across revisions), with the fraction of matching stack traces
    python -m llamalloc.model.benchmark labels RUN.prof RUN.prof... [--label p95 --label mode ...]
        label agreement: how often one run's own label of a context equals the label of all runs merged, by
        objects and by contexts, for each label rule (docs/model.md, "Labels")
    python -m llamalloc.model.benchmark workloads [--workload image-server] [--profiles DIR] [--reuse]
        records several runs of each revision of the workloads (RUN_VARIANTS), then the accuracy experiments
        above on the merged runs, and prints them as a Markdown table (bench/model/accuracy.sh)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import lstm, pipeline
from .dataset import build_contexts, folds_by_stack, split_by_stack
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
                       "found": None if s.coverage is None else round(s.coverage, 4),
                       "outliving": None if s.outliving is None else round(s.outliving, 4)}
    return row


def _label(paths) -> str:
    paths = [str(p) for p in paths]
    return paths[0] if len(paths) == 1 else f"{len(paths)} runs ({os.path.basename(paths[0])}, ...)"


def _cross_validated(name: str, contexts, folds: int, config: lstm.TrainConfig, profiles: str,
                     keep_predictions: bool = False) -> dict:
    """Same-revision generalisation with every stack held out once: `folds` models, each trained on the other
    folds' stacks; their held-out predictions pooled and scored together."""
    pooled: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    seconds, epochs, train_contexts = [], [], []
    for train_idx, test_idx in folds_by_stack(contexts, folds, config.seed):
        t0 = time.perf_counter()
        trained = pipeline.train_contexts(contexts.subset(train_idx), config, progress=_quiet)
        seconds.append(time.perf_counter() - t0)
        epochs.append(trained.result.epochs_run)
        train_contexts.append(len(train_idx))
        for predictor, (pred, found) in pipeline.predict_all(trained.model, contexts.subset(test_idx)).items():
            if predictor not in pooled:
                pooled[predictor] = (np.zeros(len(contexts), np.int64),
                                     None if found is None else np.zeros(len(contexts), bool))
            pooled[predictor][0][test_idx] = pred
            if found is not None:
                pooled[predictor][1][test_idx] = found
    n_stacks = len(set(contexts.stacks))
    row = _row(f"{name}, same revision ({folds}-fold: every stack held out once)",
               pipeline.score_predictions(pooled, contexts),
               {"kind": "same", "folds": folds, "train_contexts": round(float(np.mean(train_contexts))),
                "test_contexts": len(contexts), "train_stacks": round(n_stacks * (folds - 1) / folds),
                "test_stacks": n_stacks, "train_seconds": round(float(np.mean(seconds)), 1),
                "epochs": round(float(np.mean(epochs)), 1), "profiles": profiles})
    if keep_predictions:
        row["_pooled"] = pooled
    return row


def accuracy(name: str, rev1, rev2, hidden: int, seed: int, weight_power: float | None = None,
             holdout: float = 0.2, folds: int = 1, kinds=("same", "across")):
    """Yields one result row per experiment, as soon as it is done. `rev1` and `rev2` are a profile or a list
    of profiles (several runs of one revision, merged)."""
    from .pipeline import load_samples
    rev1 = [rev1] if isinstance(rev1, (str, Path)) else list(rev1)
    rev2 = [rev2] if isinstance(rev2, (str, Path)) else list(rev2)
    c1 = build_contexts(load_samples(rev1), warn=_quiet, what=_label(rev1), profiles=rev1)
    c2 = build_contexts(load_samples(rev2), warn=_quiet, what=_label(rev2), profiles=rev2)
    config = lstm.TrainConfig(hidden_dim=hidden, seed=seed)
    if weight_power is not None:
        config.weight_power = weight_power
    for rev, contexts, label in (("r1", c1, rev1), ("r2", c2, rev2)) if "same" in kinds else ():
        if folds > 1:
            yield _cross_validated(f"{name} {rev}", contexts, folds, config, _label(label))
            continue
        train_idx, test_idx = split_by_stack(contexts, holdout, seed)
        t0 = time.perf_counter()
        held = pipeline.train_contexts(contexts.subset(train_idx), config, progress=_quiet)
        yield (_row(f"{name} {rev}, same revision ({100 * holdout:.0f}% of stacks held out)",
                    pipeline.score_all(held.model, contexts.subset(test_idx)),
                    {"kind": "same", "train_contexts": len(train_idx), "test_contexts": len(test_idx),
                     "train_stacks": len(set(contexts.subset(train_idx).stacks)),
                     "test_stacks": len(set(contexts.subset(test_idx).stacks)),
                     "train_seconds": round(time.perf_counter() - t0, 1), "epochs": held.result.epochs_run,
                     "profiles": _label(label)}))
    across = (("r1", "r2", c1, c2, rev1, rev2), ("r2", "r1", c2, c1, rev2, rev1))
    for a, b, ca, cb, la, lb in across if "across" in kinds else ():
        t0 = time.perf_counter()
        trained = pipeline.train_contexts(ca, config, progress=_quiet)
        match, total = pipeline.matching_stacks(trained.model, cb)
        yield (_row(f"{name} trained on {a}, tested on {b}", pipeline.score_all(trained.model, cb),
                    {"kind": "across", "train_contexts": len(ca), "test_contexts": len(cb),
                     "train_stacks": len(set(ca.stacks)), "test_stacks": len(set(cb.stacks)),
                     "matching_stacks": f"{match}/{total}", "train_seconds": round(time.perf_counter() - t0, 1),
                     "epochs": trained.result.epochs_run, "profiles": f"{_label(la)} -> {_label(lb)}"}))


def label_agreement(runs, rules=("p95", "p90", "p75", "median", "mode")) -> list[dict]:
    """For each label rule: for each run, the share of its contexts (by the run's objects, and by contexts)
    whose label from that run alone equals their label from all runs merged. A label that changes from run to
    run on the same program is noise the model cannot learn."""
    import pyarrow as pa

    from .pipeline import load_samples
    runs = [str(r) for r in runs]
    tables = [load_samples([r]) for r in runs]
    merged = build_contexts(pa.concat_tables(tables), warn=_quiet, what="merged runs", label="p95")
    singles = [build_contexts(t, warn=_quiet, what=r, label="p95") for r, t in zip(runs, tables)]
    rows = []
    for rule in rules:
        m = merged.relabelled(rule)
        merged_label = {(s, int(c)): int(l) for s, c, l in zip(m.stacks, m.size_buckets, m.labels)}
        per_run = []
        for run, single in zip(runs, singles):
            own = single.relabelled(rule)
            same = np.array([merged_label[(s, int(c))] == int(l)
                             for s, c, l in zip(own.stacks, own.size_buckets, own.labels)])
            w = own.weights.astype(np.float64)
            per_run.append({"run": run, "contexts": len(own),
                            "by_objects": round(float(w[same].sum() / w.sum()), 4),
                            "by_contexts": round(float(same.mean()), 4)})
        rows.append({"label": rule, "merged_contexts": len(m),
                     "labels": np.bincount(m.labels, minlength=8).tolist(),
                     "min_by_objects": min(r["by_objects"] for r in per_run),
                     "min_by_contexts": min(r["by_contexts"] for r in per_run),
                     "mean_by_objects": round(float(np.mean([r["by_objects"] for r in per_run])), 4),
                     "mean_by_contexts": round(float(np.mean([r["by_contexts"] for r in per_run])), 4),
                     "runs": per_run})
    return rows


def heldout(name: str, runs, label: str, hidden: int, seed: int, folds: int, epochs: int,
            under_weight: float = 1.0, also_label: str | None = "p95") -> dict:
    """k-fold held-out accuracy over the merged runs with contexts labelled by `label` (and trained with
    `under_weight`); `also_label` scores the same pooled predictions against another rule's labels."""
    from .pipeline import load_samples
    runs = [str(r) for r in runs]
    contexts = build_contexts(load_samples(runs), warn=_quiet, what=_label(runs), profiles=runs, label=label)
    config = lstm.TrainConfig(hidden_dim=hidden, seed=seed, max_epochs=epochs, under_weight=under_weight)
    row = _cross_validated(f"{name} ({label}, under-weight {under_weight:g})", contexts, folds, config,
                           _label(runs), keep_predictions=also_label is not None)
    if also_label:
        other = contexts.relabelled(also_label)
        pooled = row.pop("_pooled")
        row[f"vs {also_label} labels"] = _row("", pipeline.score_predictions(pooled, other), {})
        row[f"vs {also_label} labels"].pop("experiment")
    return row


#: The runs recorded of each revision, merged into one dataset per revision: the default scale with other
#: client/worker counts, load phases or corpus seeds, so that each context is observed under several loads
#: (a label is then not one run's accident) and rarer paths are sampled. Both revisions get the same runs.
RUN_VARIANTS: dict[str, list[list[str]]] = {
    "image-server": [
        ["--scale", "default"],
        ["--scale", "default", "--clients", "4", "--workers", "6", "--requests", "1500"],
        ["--scale", "default", "--phases", "3", "--requests", "1500"],
    ],
    "word-count": [
        ["--scale", "default", "--rounds", "6"],
        ["--scale", "default", "--rounds", "6", "--threads", "16", "--seed", "7"],
        ["--scale", "default", "--rounds", "4", "--shards", "64", "--seed", "11"],
    ],
}
SAMPLE_BYTES = 8192


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "llamalloc", *args]


def record_runs(workload: str, folder: Path, runs: int, reuse: bool, log=print) -> dict[str, list[Path]]:
    """Profiles of `runs` variants of each revision of `workload` (recorded, then symbolised), by revision."""
    from .. import workloads as _workloads
    from ..errors import UserError

    profiles: dict[str, list[Path]] = {}
    variants = RUN_VARIANTS[workload][:runs]
    for revision, program in (("r1", workload), ("r2", f"{workload}-r2")):
        binary = _workloads.get(program).executable()
        profiles[revision] = []
        for i, args in enumerate(variants):
            path = folder / f"{workload}-{revision}-run{i}.prof"
            profiles[revision].append(path)
            if reuse and path.exists():
                continue
            t0 = time.perf_counter()
            done = subprocess.run(_cli("record", "--sample-bytes", str(SAMPLE_BYTES), "-o", str(path), "--",
                                       str(binary), *args), capture_output=True, text=True)
            if done.returncode != 0:
                raise UserError(f"{program} {' '.join(args)}: recording failed: {done.stderr.strip()[-300:]}")
            done = subprocess.run(_cli("symbolize", str(path)), capture_output=True, text=True)
            if done.returncode != 0:
                raise UserError(f"{path}: symbolize failed: {done.stderr.strip()[-300:]}")
            log(f"recorded {path} ({program} {' '.join(args)}) in {time.perf_counter() - t0:.0f} s")
    return profiles


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def markdown_table(rows: list[dict]) -> str:
    """The accuracy table of docs/model.md: weighted / unweighted / off-by-one weighted / off-by-one
    unweighted, and each lookup table's coverage of the test contexts."""
    lines = ["| experiment | contexts (stacks) train / test | matching stacks | LSTM | exact-match (found) | "
             "site + size (found) | train s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        cells = []
        for key, value in row.items():
            if isinstance(value, dict) and "weighted" in value:
                text = (f"{_pct(value['weighted'])} / {_pct(value['unweighted'])} / "
                        f"{_pct(value['off_by_one_weighted'])} / {_pct(value['off_by_one_unweighted'])}")
                if value["found"] is not None:
                    text += f" ({_pct(value['found'])})"
                cells.append(text)
        lines.append(f"| {row['experiment']} | {row['train_contexts']} ({row['train_stacks']}) / "
                     f"{row['test_contexts']} ({row['test_stacks']}) | {row.get('matching_stacks', '-')} | "
                     f"{' | '.join(cells)} | {row['train_seconds']} |")
    return "\n".join(lines)


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
    ac.add_argument("--weight-power", type=float, default=None)
    ho = sub.add_parser("heldout")
    ho.add_argument("name")
    ho.add_argument("runs", nargs="+")
    ho.add_argument("--label", default="mode")
    ho.add_argument("--under-weight", type=float, default=1.0)
    ho.add_argument("--hidden", type=int, default=16)
    ho.add_argument("--seed", type=int, default=0)
    ho.add_argument("--folds", type=int, default=5)
    ho.add_argument("--epochs", type=int, default=40)
    lb = sub.add_parser("labels")
    lb.add_argument("runs", nargs="+")
    lb.add_argument("--label", action="append", help="repeatable; default: p95 p90 p75 median mode")
    wl = sub.add_parser("workloads")
    wl.add_argument("--workload", action="append", choices=sorted(RUN_VARIANTS),
                    help="repeatable; default: all of them")
    wl.add_argument("--profiles", default="bench-model-profiles", help="folder for the recorded profiles")
    wl.add_argument("--runs", type=int, default=len(RUN_VARIANTS["image-server"]),
                    help="runs recorded per revision")
    wl.add_argument("--reuse", action="store_true", help="keep profiles already in the folder")
    wl.add_argument("--hidden", type=int, default=64)
    wl.add_argument("--seed", type=int, default=0)
    wl.add_argument("--weight-power", type=float, default=None)
    wl.add_argument("--folds", type=int, default=5,
                    help="same-revision rows: k-fold over stacks (1: one 20%% hold-out instead)")
    wl.add_argument("--only", choices=("same", "across"), help="only the same-revision or the cross-revision rows")
    args = parser.parse_args(argv)
    if args.what == "speed":
        print(json.dumps(speed(args.examples, args.hidden, args.seed, args.epochs)))
    elif args.what == "heldout":
        print(json.dumps(heldout(args.name, args.runs, args.label, args.hidden, args.seed, args.folds, args.epochs,
                                 args.under_weight)), flush=True)
    elif args.what == "labels":
        for row in label_agreement(args.runs, tuple(args.label) if args.label else
                                   ("p95", "p90", "p75", "median", "mode")):
            print(json.dumps(row), flush=True)
    elif args.what == "accuracy":
        for row in accuracy(args.name, args.rev1, args.rev2, args.hidden, args.seed, args.weight_power):
            print(json.dumps(row), flush=True)
    else:
        folder = Path(args.profiles)
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for workload in args.workload or sorted(RUN_VARIANTS):
            runs = record_runs(workload, folder, args.runs, args.reuse,
                               log=lambda line: print(line, file=sys.stderr, flush=True))
            for row in accuracy(workload, runs["r1"], runs["r2"], args.hidden, args.seed, args.weight_power,
                                folds=args.folds, kinds=(args.only,) if args.only else ("same", "across")):
                print(json.dumps(row), flush=True)
                rows.append(row)
        print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
