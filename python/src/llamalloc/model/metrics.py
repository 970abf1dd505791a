"""Accuracy figures of a predictor on labelled contexts, and the printed report."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..profile import functions_only
from .classes import CLASS_NAMES, LIFETIME_NAMES, NUM_CLASSES


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
    #: fraction of the observed objects that lived in a longer class than their context's prediction (they pin
    #: the pages of shorter-lived neighbours); independent of the label rule. None without class counts.
    outliving: float | None = None

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("confusion", "weighted_confusion")}
        d["confusion"] = self.confusion.tolist()
        return d


def outliving_fraction(predicted, class_counts) -> float:
    """Share of the observed objects whose own lifetime class is longer than their context's prediction."""
    counts = np.asarray(class_counts, np.float64).reshape(-1, NUM_CLASSES)
    predicted = np.asarray(predicted, np.int64)
    longer = np.arange(NUM_CLASSES)[None, :] > predicted[:, None]
    total = counts.sum()
    return float((counts * longer).sum() / total) if total else 0.0


def score(name: str, predicted, labels, weights, found=None, class_counts=None) -> Scores:
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
    if class_counts is not None:
        s.outliving = outliving_fraction(predicted, class_counts)
    return s


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_report(title: str, scores: list[Scores], n_contexts: int, total_weight: float) -> str:
    lines = [f"{title}: {n_contexts} contexts, {int(total_weight):,} objects (estimated from the samples)", ""]
    header = f"{'predictor':<28}{'weighted':>10}{'unweighted':>12}{'off-by-1 w':>12}{'off-by-1 u':>12}" \
             f"{'found w':>10}{'found u':>10}"
    lines += [header, "-" * len(header)]
    for s in scores:
        lines.append(f"{s.name:<28}{_pct(s.weighted_accuracy):>10}{_pct(s.unweighted_accuracy):>12}"
                     f"{_pct(s.weighted_off_by_one):>12}{_pct(s.unweighted_off_by_one):>12}"
                     f"{_pct(s.weighted_coverage):>10}{_pct(s.coverage):>10}")
    if any(s.outliving is not None for s in scores):
        lines += ["", "objects that outlived their prediction (longer class than predicted: they pin pages): " +
                  ", ".join(f"{s.name} {_pct(s.outliving)}" for s in scores)]
    for s in scores:
        lines += ["", f"confusion matrix of {s.name} (contexts; rows: true class, columns: predicted class)"]
        lines.append(f"{'':>8}" + "".join(f"{n:>8}" for n in CLASS_NAMES))
        for k in range(NUM_CLASSES):
            if s.confusion[k].sum() == 0 and s.confusion[:, k].sum() == 0:
                continue
            lines.append(f"{CLASS_NAMES[k]:>8}" + "".join(f"{v:>8d}" for v in s.confusion[k]))
    return "\n".join(lines)


def _function_name(frame: str) -> str:
    """A frame's qualified function name: without its parameter list (the text from the last top-level '(' on)
    and without a leading return type ("void std::vector<...>::_M_realloc_insert<...>(...)" names
    std::vector<...>::_M_realloc_insert<...>)."""
    depth, cut = 0, len(frame)
    for i in range(len(frame) - 1, -1, -1):
        ch = frame[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    name = _collapse_parentheses((frame[:cut] if cut > 0 else frame).strip())
    op = name.find("operator")
    end = op if op >= 0 else len(name)  # "operator new", "Foo::operator()": keep the words from there on
    depth, start = 0, 0
    for i, ch in enumerate(name[:end]):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == " " and depth == 0:
            start = i + 1
    return name[start:]


def _collapse_parentheses(text: str) -> str:
    """Every parenthesised group inside a name emptied: lambdas and local classes name their enclosing
    function with its parameters ("run(std::vector<int> const&)::{lambda(int)#2}" -> "run()::{lambda()#2}")."""
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            if depth == 0:
                out.append(ch)
            depth += 1
        elif ch == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(ch)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def _short_function(frame: str, width: int = 72) -> str:
    name = _function_name(frame)
    return name if len(name) <= width else name[:width - 3] + "..."


#: Frames of the allocation plumbing, skipped by `frame_summary` to reach the application's own functions.
_PLUMBING_PREFIXES = ("std::", "__gnu_cxx::", "operator new", "operator delete", "malloc", "calloc", "realloc",
                      "aligned_alloc", "posix_memalign", "memalign", "valloc", "free", "__libc_", "__GI_",
                      "llamalloc::", "_Zn", "0x", "__cxa_", "__cxx_", "_dl_", "absl::", "proto2::Arena")


def frame_summary(stack, frames: int = 3) -> str:
    """The first `frames` application frames of a stack (innermost first, allocation plumbing such as
    operator new or std::vector skipped, parameter lists dropped), joined by " < " (callee < caller)."""
    stack = functions_only(stack)  # without the call-site words
    own = [f for f in stack if not _function_name(f).startswith(_PLUMBING_PREFIXES)] or list(stack)
    return " < ".join(_short_function(f) for f in own[:frames])


def _size_range(size_bucket: int) -> str:
    if size_bucket <= 0:
        return "<=1 B"
    top = 1 << int(size_bucket)
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if top >= scale:
            return f"<={top // scale} {unit}"
    return f"<={top} B"


def _human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def mispredictions(predicted, contexts, n: int) -> list[dict]:
    """The `n` mispredicted contexts that weigh most (by bytes, then objects), heaviest first: one dict each
    with the frame summary, size bucket, true and predicted class, objects, bytes and the error's direction
    ("under": predicted shorter than the label, the object pins pages; "over": predicted longer)."""
    predicted = np.asarray(predicted, np.int64)
    wrong = np.flatnonzero(predicted != contexts.labels)
    order = sorted(wrong, key=lambda i: (-int(contexts.bytes[i]), -int(contexts.weights[i]), contexts.stacks[i],
                                          int(contexts.size_buckets[i])))
    total_bytes = max(int(np.sum(contexts.bytes)), 1)
    total_objects = max(int(np.sum(contexts.weights)), 1)
    rows = []
    for i in order[:max(n, 0)]:
        true, pred = int(contexts.labels[i]), int(predicted[i])
        rows.append({
            "context": frame_summary(contexts.stacks[i]), "stack": list(contexts.stacks[i]),
            "size_bucket": int(contexts.size_buckets[i]), "size": _size_range(int(contexts.size_buckets[i])),
            "true_class": true, "true": LIFETIME_NAMES[true], "predicted_class": pred,
            "predicted": LIFETIME_NAMES[pred], "error": "under" if pred < true else "over",
            "objects": int(contexts.weights[i]), "bytes": int(contexts.bytes[i]),
            "objects_share": int(contexts.weights[i]) / total_objects,
            "bytes_share": int(contexts.bytes[i]) / total_bytes,
        })
    return rows


def format_mispredictions(name: str, rows: list[dict], n_wrong: int, n_contexts: int) -> str:
    """pprof -list style: the heaviest mispredicted contexts, one line each."""
    lines = [f"mispredicted contexts of {name}, heaviest by bytes first ({len(rows)} of {n_wrong} mispredicted, "
             f"{n_contexts} contexts); under = predicted shorter than observed (pins pages), "
             f"over = predicted longer (delays reuse)"]
    if not rows:
        return lines[0]
    header = f"{'bytes':>10} {'objects':>10}  {'size':<9} {'true':<11} {'predicted':<11} {'error':<5}  context"
    lines += [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{_human_bytes(r['bytes']):>10} {r['objects']:>10}  {r['size']:<9} {r['true']:<11} "
                     f"{r['predicted']:<11} {r['error']:<5}  {r['context']}")
    return "\n".join(lines)
