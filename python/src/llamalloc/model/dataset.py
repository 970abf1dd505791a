"""From profile samples to labelled calling contexts (the LLAMA paper, section 5.1).

A *calling context* is the symbolised stack (innermost frame first) together with the model size bucket
of the request. The size is part of the context because the allocator knows it at no cost when it predicts
(section 7 keys its cache on it too), and because one stack often allocates both short-lived small objects and
long-lived large ones (a growing buffer). Each context gets

* its per-class counts: the sum over every profile of the samples' `class_counts`,
* its weight: the number of sampled objects observed (the sum of those counts),
* its label, by the label rule (`labels_from_counts`): by default the class holding most of its objects (the
  mode); `p95` is the paper's class of the 95th percentile of its lifetimes, i.e. the smallest class whose
  cumulative count reaches 95% of the weight,
* its bytes: the sum of the samples' (unbiased) allocated bytes, to rank mispredictions by (`--list`).

The merge of any number of profiles is one DuckDB group-by over the Arrow table that `llamalloc.profile`
returns, so it scales to many large profiles without Python loops.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Sequence

import duckdb
import numpy as np
import pyarrow as pa

from ..errors import UserError
from .classes import DEFAULT_LABEL_RULE, NUM_CLASSES, model_size_bucket

#: Columns of `llamalloc.profile.samples_table` that the model uses.
REQUIRED_COLUMNS = ("profile", "program", "build_id", "stack", "request_size", "class_counts")

Warn = Callable[[str], None]


def warn_on_stderr(message: str) -> None:
    print(f"llamalloc: warning: {message}", file=sys.stderr)


@dataclass
class Contexts:
    """Labelled calling contexts, in a deterministic order (sorted by stack, then size bucket)."""

    stacks: list[tuple[str, ...]]
    size_buckets: np.ndarray  # int64 [n]
    class_counts: np.ndarray  # int64 [n, 8]
    weights: np.ndarray  # int64 [n]: observed (sampled) objects
    labels: np.ndarray  # int64 [n]: lifetime class by `label_rule`
    programs: list[str] = field(default_factory=list)
    bytes: np.ndarray | None = None  # int64 [n]: allocated bytes observed (unbiased), where known
    label_rule: str = DEFAULT_LABEL_RULE

    def __post_init__(self) -> None:
        if self.bytes is None:
            self.bytes = np.zeros(len(self.stacks), np.int64)

    def __len__(self) -> int:
        return len(self.stacks)

    def subset(self, index) -> "Contexts":
        index = np.asarray(index, dtype=np.int64)
        return Contexts([self.stacks[i] for i in index], self.size_buckets[index], self.class_counts[index],
                        self.weights[index], self.labels[index], list(self.programs), self.bytes[index],
                        self.label_rule)

    def relabelled(self, rule: str) -> "Contexts":
        """The same contexts labelled by another rule."""
        return Contexts(list(self.stacks), self.size_buckets, self.class_counts, self.weights,
                        labels_from_counts(self.class_counts, rule), list(self.programs), self.bytes,
                        parse_label_rule(rule))


#: `mode` labels: a class with at least (100 - this)% of the most common class's objects ties with it (the
#: longest tied class wins), so that a context split about evenly across a class boundary (word-count's heaviest,
#: across 1 s) gets one label in every run instead of flipping between runs as the strict mode (0) lets it
#: (docs/model.md measures how one run's labels agree with several runs merged).
MODE_TIE_PERCENT = 10


def parse_label_rule(rule: str) -> str:
    """The canonical spelling of a label rule: "mode", "shareNN" for NN in 1..100, or "pNN" for a percentile
    NN in 1..100 ("median" is "p50"). Anything else is a UserError."""
    text = str(rule).strip().lower()
    if text == "median":
        return "p50"
    if text == "mode":
        return text
    if text.startswith("share") and text[5:].isdigit() and 1 <= int(text[5:]) <= 100:
        return f"share{int(text[5:])}"
    if text.startswith("p") and text[1:].isdigit() and 1 <= int(text[1:]) <= 100:
        return f"p{int(text[1:])}"
    raise UserError(f"--label: unknown label rule {rule!r} (shareNN such as share20, mode, median, or pNN such "
                    f"as p95)")


def labels_from_counts(class_counts, rule: str = DEFAULT_LABEL_RULE) -> np.ndarray:
    """The label of each row of per-class object counts [n, 8].

    `pNN`: the first class whose cumulative count reaches NN% of the row's total (integer arithmetic, no
    rounding); p95 is the paper's rule. `mode`: the class holding the most objects, where a class holding at
    least (100 - MODE_TIE_PERCENT)% as many as the most common one counts as tied and ties go to the longest
    class: predicting too short a lifetime pins pages while too long a one only delays reuse, and two classes
    that share a context's objects about equally swap places from run to run (docs/model.md, "Labels").
    `shareNN`: the longest class holding at least NN% of the row's objects, or the mode where that is longer: a
    long-lived minority larger than NN% (which the mode labels short, and which then pins pages) gets its class,
    a slow tail under NN% does not move it."""
    counts = np.asarray(class_counts, np.int64).reshape(-1, NUM_CLASSES)
    return np.asarray(apply_rule(counts, parse_label_rule(rule), np), np.int64)


def apply_rule(scores, rule: str, xp=np):
    """`labels_from_counts` on rows [n, 8] of non-negative scores: object counts, or a distribution model's
    class probabilities (`decide`). Only comparisons of scaled sums, so the scores need not sum to 1, and `xp`
    may be numpy or jax.numpy (the training loop's accuracy). The allocator's C++ inference applies the same
    comparisons in double (`ModelFile::decide`)."""
    if rule == "mode" or rule.startswith("share"):
        tied = 100 * scores >= (100 - MODE_TIE_PERCENT) * scores.max(axis=1, keepdims=True)
        mode = NUM_CLASSES - 1 - xp.argmax(tied[:, ::-1], axis=1)
        if rule == "mode":
            return mode
        # shareNN: the longest class holding at least NN% of the objects, or the mode where that is longer.
        share = int(rule[5:])
        held = (100 * scores >= share * scores.sum(axis=1, keepdims=True)) & (scores > 0)
        longest = xp.where(held.any(axis=1), NUM_CLASSES - 1 - xp.argmax(held[:, ::-1], axis=1), 0)
        return xp.maximum(mode, longest)
    percent = int(rule[1:])
    cumulative = xp.cumsum(scores, axis=1)
    reached = 100 * cumulative >= percent * cumulative[:, -1:]
    return xp.argmax(reached, axis=1)


def class_distributions(class_counts) -> np.ndarray:
    """Each row of per-class object counts as the share of the row's objects in each class (float32 [n, 8]):
    the targets of a distribution model (`llamalloc train --target distribution`)."""
    counts = np.asarray(class_counts, np.float64).reshape(-1, NUM_CLASSES)
    return (counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)).astype(np.float32)


def decide(logits, rule: str | None) -> np.ndarray:
    """The class a model predicts from its logits [n, 8]: the largest logit for a label model (`rule` None),
    else the label rule applied to the softmax, the class distribution a distribution model predicts."""
    logits = np.asarray(logits, np.float32).reshape(-1, NUM_CLASSES)
    if rule is None:
        return logits.argmax(axis=1).astype(np.int64)
    # float32 exponentials, compared in float64, as the allocator computes them (its exponential is a polynomial
    # within an ulp or two of numpy's, and the order of the sums differs): the class differs only at a tie that
    # close, so both get the same class (the golden tests check it).
    scores = np.exp(logits - logits.max(axis=1, keepdims=True)).astype(np.float64)
    return np.asarray(apply_rule(scores, parse_label_rule(rule), np), np.int64)


def _is_unsymbolized_sql(column: str) -> str:
    return f"regexp_full_match({column}, '0x[0-9a-fA-F]+')"


def check_samples(samples: pa.Table, warn: Warn = warn_on_stderr, what: str = "the profiles",
                  profiles: Sequence[str] = ()) -> None:
    """Refuses tables the model cannot learn from, and warns about suspicious mixes.

    Errors: a missing column, no samples at all (or none from one of `profiles`), a profile whose frames are
    all unsymbolised addresses. Warnings: samples of different programs mixed together; most frames
    unsymbolised."""
    missing = [c for c in REQUIRED_COLUMNS if c not in samples.column_names]
    if missing:
        raise UserError(f"{what}: samples lack the column(s) {', '.join(missing)}")
    if samples.num_rows == 0:
        raise UserError(f"{what}: no allocation samples (empty profile)")
    con = duckdb.connect()
    con.register("samples", samples)
    if profiles:
        present = {r[0] for r in con.execute("SELECT DISTINCT profile FROM samples").fetchall()}
        empty = [str(p) for p in profiles if str(p) not in present]
        if empty:
            raise UserError(f"{', '.join(empty)}: no allocation samples (empty profile)")
    empty_stacks = con.execute("SELECT count(*) FROM samples WHERE stack IS NULL OR len(stack) = 0").fetchone()[0]
    if empty_stacks == samples.num_rows:
        raise UserError(f"{what}: no sample has a stack")
    per_profile = con.execute(f"""
        SELECT profile, count(*) FILTER (WHERE {_is_unsymbolized_sql('frame')}) AS unsymbolized, count(*) AS frames
        FROM (SELECT profile, unnest(stack) AS frame FROM samples)
        GROUP BY profile ORDER BY profile""").fetchall()
    bare = [p for p, unsym, total in per_profile if total > 0 and unsym == total]
    if bare:
        raise UserError(f"{', '.join(bare)}: no symbols (every frame is a raw address): "
                        f"run `llamalloc symbolize` on the profile first")
    unsym_frames = sum(r[1] for r in per_profile)
    all_frames = sum(r[2] for r in per_profile)
    if all_frames and unsym_frames * 2 > all_frames:
        warn(f"{what}: {100.0 * unsym_frames / all_frames:.0f}% of frames are unsymbolised addresses; "
             f"the model learns little from them (run `llamalloc symbolize`)")
    programs = con.execute("""
        SELECT program, string_agg(DISTINCT profile, ', ' ORDER BY profile) FROM samples
        GROUP BY program ORDER BY program""").fetchall()
    if len(programs) > 1:
        listing = "; ".join(f"{prog or '?'} ({profs})" for prog, profs in programs)
        warn(f"profiles of different programs are mixed: {listing}")


#: What every unsymbolised frame becomes in a context (still an address to the tokeniser: <unsymbolized>).
UNSYMBOLIZED_FRAME = "0x0"


def _canonical_stacks(stacks: pa.ChunkedArray) -> pa.ChunkedArray:
    """Stacks with every unsymbolised frame (a raw address, e.g. in a library without symbols) written as
    UNSYMBOLIZED_FRAME. Addresses move from run to run (ASLR): kept as they are, one calling context of two runs
    became two contexts, which the model cannot tell apart (both are <unsymbolized> tokens), and a held-out
    "unseen" stack could be a training stack at other addresses."""
    con = duckdb.connect()
    con.register("stacks", pa.table({"stack": stacks}))
    return con.sql(f"""
        SELECT list_transform(stack, lambda f: CASE WHEN {_is_unsymbolized_sql('f')} THEN '{UNSYMBOLIZED_FRAME}'
                                               ELSE f END) AS stack
        FROM stacks""").to_arrow_table().column("stack")


def label_sql(weight: str = "weight") -> str:
    """SQL for the 95th percentile class of columns c0..c7 whose sum is `weight`: the first class whose
    cumulative count reaches 95% of the total (integer arithmetic, no rounding)."""
    cumulative = [" + ".join(f"c{j}" for j in range(k + 1)) for k in range(NUM_CLASSES)]
    return "CASE " + " ".join(f"WHEN 100 * ({cumulative[k]}) >= 95 * {weight} THEN {k}"
                              for k in range(NUM_CLASSES - 1)) + f" ELSE {NUM_CLASSES - 1} END"


def build_contexts(samples: pa.Table, warn: Warn = warn_on_stderr, what: str = "the profiles",
                   profiles: Sequence[str] = (), label: str = DEFAULT_LABEL_RULE) -> Contexts:
    """Merges samples into labelled contexts (one SQL group-by over the Arrow table). `profiles`, when given,
    are the files the samples come from: each must contribute samples. `label` is the label rule
    (`labels_from_counts`)."""
    label = parse_label_rule(label)
    check_samples(samples, warn, what, profiles)
    sizes = samples.column("request_size").to_numpy(zero_copy_only=False)
    stacks = _canonical_stacks(samples.column("stack"))
    table = pa.table({
        "stack": stacks,
        "size_bucket": pa.array(model_size_bucket(sizes), pa.int64()),
        "class_counts": samples.column("class_counts"),
        "program": samples.column("program"),
        "alloc_bytes": (samples.column("alloc_bytes") if "alloc_bytes" in samples.column_names
                        else pa.array(np.zeros(samples.num_rows, np.int64))),
    })
    con = duckdb.connect()
    con.register("samples", table)
    sums = ", ".join(f"sum(coalesce(class_counts[{k + 1}], 0))::BIGINT AS c{k}" for k in range(NUM_CLASSES))
    cumulative = [" + ".join(f"c{j}" for j in range(k + 1)) for k in range(NUM_CLASSES)]
    result = con.sql(f"""
        WITH grouped AS (
            SELECT stack, size_bucket, {sums}, sum(coalesce(alloc_bytes, 0))::BIGINT AS bytes
            FROM samples WHERE stack IS NOT NULL AND len(stack) > 0
            GROUP BY stack, size_bucket),
        weighted AS (SELECT *, ({cumulative[-1]}) AS weight FROM grouped)
        SELECT stack, size_bucket, {', '.join(f'c{k}' for k in range(NUM_CLASSES))}, weight, bytes
        FROM weighted WHERE weight > 0
        ORDER BY stack, size_bucket""").to_arrow_table()
    if result.num_rows == 0:
        raise UserError(f"{what}: no sample has a lifetime observation (all class counts are zero)")
    programs = [r[0] for r in con.execute("SELECT DISTINCT program FROM samples ORDER BY 1").fetchall()]
    counts = np.stack([result.column(f"c{k}").to_numpy() for k in range(NUM_CLASSES)], axis=1).astype(np.int64)
    return Contexts(
        stacks=[tuple(s) for s in result.column("stack").to_pylist()],
        size_buckets=result.column("size_bucket").to_numpy().astype(np.int64),
        class_counts=counts,
        weights=result.column("weight").to_numpy().astype(np.int64),
        labels=labels_from_counts(counts, label),
        programs=[p for p in programs if p is not None],
        bytes=result.column("bytes").to_numpy().astype(np.int64),
        label_rule=label,
    )


def split_by_stack(contexts: Contexts, holdout_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices of training and held-out contexts. Whole stacks are held out (all their size buckets), so a
    held-out context is a stack the model never saw, as in the paper's generalisation experiment."""
    if not 0.0 <= holdout_fraction < 1.0:
        raise UserError(f"--holdout must be in [0, 1), got {holdout_fraction}")
    unique_stacks = sorted(set(contexts.stacks))
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(unique_stacks))
    n_held = int(round(holdout_fraction * len(unique_stacks)))
    if holdout_fraction > 0 and n_held == 0 and len(unique_stacks) > 1:
        n_held = 1
    held = {unique_stacks[i] for i in order[:n_held]}
    is_held = np.array([s in held for s in contexts.stacks], dtype=bool)
    return np.flatnonzero(~is_held), np.flatnonzero(is_held)


def folds_by_stack(contexts: Contexts, folds: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(training, held-out) context indices of each of `folds` folds: the distinct stacks are shuffled and dealt
    round-robin into the folds, so every stack is held out exactly once, with all its size buckets. Pooling
    the folds' held-out predictions scores every context as unseen, which a dataset of a hundred stacks needs
    (a 20% split of it is twenty stacks, a few of which carry most of the weight)."""
    unique_stacks = sorted(set(contexts.stacks))
    if not 2 <= folds <= len(unique_stacks):
        raise UserError(f"folds must be in [2, {len(unique_stacks)}] (the number of stacks), got {folds}")
    order = np.random.default_rng(seed).permutation(len(unique_stacks))
    fold_of = {unique_stacks[i]: k % folds for k, i in enumerate(order)}
    assignment = np.array([fold_of[s] for s in contexts.stacks], dtype=np.int64)
    return [(np.flatnonzero(assignment != k), np.flatnonzero(assignment == k)) for k in range(folds)]


def samples_from_rows(rows: Sequence[dict]) -> pa.Table:
    """An Arrow table with the schema of `llamalloc.profile.samples_table`, from plain rows (tests, tools).
    Missing figures default to what the class counts imply."""
    schema = samples_schema()
    columns: dict[str, list] = {f.name: [] for f in schema}
    for row in rows:
        counts = list(row["class_counts"])
        freed = sum(counts[:NUM_CLASSES - 1])
        size = int(row.get("request_size", 16))
        defaults = {
            "profile": "test.prof", "program": "test", "build_id": "", "request_size": size,
            "alloc_objects": sum(counts), "alloc_bytes": sum(counts) * size, "freed_objects": freed,
            "freed_bytes": freed * size, "lifetime_sum_ns": 0, "live_at_exit_objects": counts[NUM_CLASSES - 1],
            "min_lifetime_ns": 0, "max_lifetime_ns": 0,
        }
        for name in columns:
            columns[name].append(row[name] if name in row else defaults.get(name))
    return pa.table(columns, schema=schema)


def samples_schema() -> pa.Schema:
    i64 = pa.int64()
    return pa.schema([
        ("profile", pa.string()), ("program", pa.string()), ("build_id", pa.string()),
        ("stack", pa.list_(pa.string())), ("request_size", i64), ("alloc_objects", i64), ("alloc_bytes", i64),
        ("freed_objects", i64), ("freed_bytes", i64), ("lifetime_sum_ns", i64), ("live_at_exit_objects", i64),
        ("class_counts", pa.list_(i64)), ("min_lifetime_ns", i64), ("max_lifetime_ns", i64),
    ])
