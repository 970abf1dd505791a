"""Accuracy figures of a predictor on labelled contexts, and the printed report."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .classes import CLASS_NAMES, NUM_CLASSES


@dataclass
class Scores:
    name: str
    weighted_accuracy: float
    unweighted_accuracy: float
    weighted_off_by_one: float
    unweighted_off_by_one: float
    confusion: np.ndarray  # int64 [8, 8] of contexts: rows the true class, columns the predicted one
    weighted_confusion: np.ndarray  # float [8, 8]: the same, counting observed objects
    coverage: float | None = None  # lookup tables: fraction of contexts found (unweighted)
    weighted_coverage: float | None = None

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("confusion", "weighted_confusion")}
        d["confusion"] = self.confusion.tolist()
        return d


def score(name: str, predicted, labels, weights, found=None) -> Scores:
    predicted = np.asarray(predicted, np.int64)
    labels = np.asarray(labels, np.int64)
    w = np.asarray(weights, np.float64)
    exact = predicted == labels
    near = np.abs(predicted - labels) <= 1
    confusion = np.zeros((NUM_CLASSES, NUM_CLASSES), np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    weighted_confusion = np.zeros((NUM_CLASSES, NUM_CLASSES), np.float64)
    np.add.at(weighted_confusion, (labels, predicted), w)
    total = w.sum() if len(w) else 1.0
    n = max(len(labels), 1)
    s = Scores(name, float(w[exact].sum() / total), float(exact.sum() / n), float(w[near].sum() / total),
               float(near.sum() / n), confusion, weighted_confusion)
    if found is not None:
        found = np.asarray(found, bool)
        s.coverage = float(found.sum() / n)
        s.weighted_coverage = float(w[found].sum() / total)
    return s


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_report(title: str, scores: list[Scores], n_contexts: int, total_weight: float) -> str:
    lines = [f"{title}: {n_contexts} contexts, {int(total_weight)} sampled objects", ""]
    header = f"{'predictor':<28}{'weighted':>10}{'unweighted':>12}{'off-by-1 w':>12}{'off-by-1 u':>12}" \
             f"{'found w':>10}{'found u':>10}"
    lines += [header, "-" * len(header)]
    for s in scores:
        lines.append(f"{s.name:<28}{_pct(s.weighted_accuracy):>10}{_pct(s.unweighted_accuracy):>12}"
                     f"{_pct(s.weighted_off_by_one):>12}{_pct(s.unweighted_off_by_one):>12}"
                     f"{_pct(s.weighted_coverage):>10}{_pct(s.coverage):>10}")
    for s in scores:
        lines += ["", f"confusion matrix of {s.name} (contexts; rows: true class, columns: predicted class)"]
        lines.append(f"{'':>8}" + "".join(f"{n:>8}" for n in CLASS_NAMES))
        for k in range(NUM_CLASSES):
            if s.confusion[k].sum() == 0 and s.confusion[:, k].sum() == 0:
                continue
            lines.append(f"{CLASS_NAMES[k]:>8}" + "".join(f"{v:>8d}" for v in s.confusion[k]))
    return "\n".join(lines)
