"""The LLAMA paper's lifetime model: a one-layer LSTM over the tokens of a calling context, its final state through a
dense layer, softmax over the 8 lifetime classes (section 5.2), written directly in JAX.

Gates are laid out [input, forget, cell, output], each `hidden` wide. The input side of every step is read from
the *folded* table `embedding @ w_input + bias` ([vocab, 4*hidden]), the partial evaluation of section 10: the
allocator's inference uses exactly this table, and training through it keeps both sides computing the same sums.
A padded step (past the context's length) leaves the state unchanged.
"""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .classes import DEFAULT_WEIGHT_POWER, NUM_CLASSES
from .dataset import apply_rule, decide

Params = dict  # name -> jnp.ndarray (float32)


def enable_compilation_cache() -> str | None:
    """Keeps XLA's compiled training and prediction steps on disk (LLAMALLOC_CACHE_DIR, default
    ~/.cache/llamalloc, under jax/), so that only the first run on a machine pays the compilation: it was most
    of a cold training run (docs/model.md). LLAMALLOC_JAX_CACHE=0 turns it off; a cache directory the user set
    through JAX itself is left alone. Returns the directory in use, or None."""
    if os.environ.get("LLAMALLOC_JAX_CACHE", "1") == "0":
        return None
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    base = os.environ.get("LLAMALLOC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "llamalloc")
    folder = os.path.join(base, "jax")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return None  # an unwritable cache only costs time
    jax.config.update("jax_compilation_cache_dir", folder)
    # Every step function is worth keeping: the small ones still take a second or more to compile here.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


enable_compilation_cache()
PARAM_NAMES = ("embedding", "w_input", "w_hidden", "bias", "dense_w", "dense_b")


@dataclass
class TrainConfig:
    embedding_dim: int = 32
    hidden_dim: int = 64
    learning_rate: float = 1e-3
    clip_norm: float = 5.0
    batch_size: int = 32
    max_epochs: int = 100
    #: stop when the validation loss has not improved for this many epochs; the best epoch's weights are kept
    patience: int = 10
    #: weight of a context in the loss is count**weight_power. 1.0 is pure count weighting; it lets a handful of
    #: hot contexts drown the rest, which the model then memorises instead of learning what the tokens mean
    #: (docs/model.md has the measurements). 0.5 keeps hot contexts more important and every context heard.
    weight_power: float = DEFAULT_WEIGHT_POWER
    #: under-prediction (probability on a class shorter than the label) costs this many times what the plain
    #: cross-entropy charges: the loss adds (under_weight - 1) * -log P(class >= label). 1 is the plain loss.
    #: Predicting too short a lifetime puts a long-lived object among short-lived ones and pins their pages;
    #: too long a one only delays reuse (docs/model.md).
    under_weight: float = 1.0
    #: None: the model learns each context's label (its class by the label rule). A label rule ("mode", "p95",
    #: "share20"): the model learns each context's class distribution (the share of its sampled objects in each
    #: class; soft cross-entropy) and predicts by applying that rule to the softmax (`dataset.decide`), so a
    #: context whose objects split 56% / 44% is predicted as such instead of as its majority (docs/model.md).
    decision: str | None = None
    #: frequent contexts are repeated up to this many times per epoch (the paper samples copies of them)
    max_copies: int = 16
    #: an epoch holds about this many examples (copies included), and at least one of every context
    examples_per_epoch: int = 2048
    seed: int = 0


@dataclass
class TrainResult:
    params: Params
    epochs_run: int
    best_epoch: int
    seconds: float
    history: list = field(default_factory=list)
    #: Ctrl-C stopped training after a finished epoch: params are the best epoch's so far
    interrupted: bool = False


def init_params(key, vocab_size: int, embedding_dim: int, hidden_dim: int) -> Params:
    k_emb, k_in, k_hid, k_out = jax.random.split(key, 4)

    def glorot(k, shape):
        limit = math.sqrt(6.0 / (shape[0] + shape[1]))
        return jax.random.uniform(k, shape, jnp.float32, -limit, limit)

    bias = jnp.zeros(4 * hidden_dim, jnp.float32).at[hidden_dim:2 * hidden_dim].set(1.0)  # remember by default
    return {
        "embedding": 0.1 * jax.random.normal(k_emb, (vocab_size, embedding_dim), jnp.float32),
        "w_input": glorot(k_in, (embedding_dim, 4 * hidden_dim)),
        "w_hidden": glorot(k_hid, (hidden_dim, 4 * hidden_dim)),
        "bias": bias,
        "dense_w": glorot(k_out, (hidden_dim, NUM_CLASSES)),
        "dense_b": jnp.zeros(NUM_CLASSES, jnp.float32),
    }


def folded_table(params: Params) -> jnp.ndarray:
    """Per-token gate pre-activations from the input side: embedding @ w_input + bias, [vocab, 4*hidden]."""
    return params["embedding"] @ params["w_input"] + params["bias"]


def logits_fn(params: Params, ids: jnp.ndarray, lengths: jnp.ndarray) -> jnp.ndarray:
    """Class logits [batch, 8] for right-padded token ids [batch, steps] with the given lengths."""
    hidden = params["w_hidden"].shape[0]
    x = folded_table(params)[ids]  # [batch, steps, 4h]
    steps = ids.shape[1]
    live = jnp.arange(steps)[None, :] < lengths[:, None]  # [batch, steps]

    def step(carry, inputs):
        h, c = carry
        x_t, live_t = inputs
        z = x_t + h @ params["w_hidden"]
        i = jax.nn.sigmoid(z[:, :hidden])
        f = jax.nn.sigmoid(z[:, hidden:2 * hidden])
        g = jnp.tanh(z[:, 2 * hidden:3 * hidden])
        o = jax.nn.sigmoid(z[:, 3 * hidden:])
        c_new = f * c + i * g
        h_new = o * jnp.tanh(c_new)
        keep = live_t[:, None]
        return (jnp.where(keep, h_new, h), jnp.where(keep, c_new, c)), None

    batch = ids.shape[0]
    zeros = jnp.zeros((batch, hidden), jnp.float32)
    (h, _), _ = jax.lax.scan(step, (zeros, zeros), (jnp.swapaxes(x, 0, 1), jnp.swapaxes(live, 0, 1)))
    return h @ params["dense_w"] + params["dense_b"]


def asymmetric_ce(logits, labels, under_weight: float = 1.0):
    """Per-example loss: softmax cross-entropy plus (under_weight - 1) * -log P(class >= label), the extra cost
    of putting probability on classes shorter than the label (under-prediction). Equal to the cross-entropy
    when under_weight is 1; for label 0 the extra term is 0."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    if under_weight == 1.0:
        return ce
    at_least = jnp.arange(logits.shape[-1])[None, :] >= labels[:, None]
    log_all = jax.nn.logsumexp(logits, axis=-1)
    log_at_least = jax.nn.logsumexp(jnp.where(at_least, logits, -jnp.inf), axis=-1)
    return ce + (under_weight - 1.0) * (log_all - log_at_least)


def example_loss(logits, labels, dists, under_weight: float = 1.0, decision: str | None = None):
    """Per-example loss: against the label (`asymmetric_ce`) for a label model, against the context's class
    distribution (soft cross-entropy) for a distribution model."""
    if decision is None:
        return asymmetric_ce(logits, labels, under_weight)
    return optax.softmax_cross_entropy(logits, dists)


def predicted_classes(logits, decision: str | None = None):
    """`dataset.decide` inside a jitted step (jax.numpy): the largest logit, or the decision rule on the softmax."""
    if decision is None:
        return jnp.argmax(logits, axis=-1)
    return apply_rule(jnp.exp(logits - logits.max(axis=-1, keepdims=True)), decision, jnp)


def _loss(params, ids, lengths, labels, dists, weights, under_weight: float = 1.0, decision: str | None = None):
    logits = logits_fn(params, ids, lengths)
    ce = example_loss(logits, labels, dists, under_weight, decision)
    total = jnp.maximum(jnp.sum(weights), 1e-12)
    correct = (predicted_classes(logits, decision) == labels).astype(jnp.float32)
    return jnp.sum(weights * ce) / total, (jnp.sum(weights * correct), total)


_predict_jit = jax.jit(logits_fn)


def _bucket_lengths(max_tokens: int) -> list[int]:
    """Padded lengths the batches are cut to, so that short stacks do not pay for 128 steps (each one jit)."""
    buckets, n = [], 16
    while n < max_tokens:
        buckets.append(n)
        n *= 2
    return buckets + [max_tokens]


def _batches(index: np.ndarray, lengths: np.ndarray, batch_size: int, buckets: list[int],
             rng: np.random.Generator | None) -> list[tuple[int, np.ndarray]]:
    """(bucket length, example indices) batches; each batch holds examples of one length bucket."""
    bucket_of = np.searchsorted(np.asarray(buckets), lengths[index])
    out = []
    for b, length in enumerate(buckets):
        members = index[bucket_of == b]
        if rng is not None:
            members = members[rng.permutation(len(members))]
        for start in range(0, len(members), batch_size):
            out.append((length, members[start:start + batch_size]))
    if rng is not None:
        out = [out[i] for i in rng.permutation(len(out))]
    return out


def _padded(ids, lengths, members, length, batch_size, *extra):
    """Arrays of one batch padded to batch_size rows (padding rows have length 0 and weight 0), so that each
    bucket compiles once."""
    n = len(members)
    pad = batch_size - n
    rows = np.concatenate([members, np.zeros(pad, dtype=members.dtype)]) if pad else members
    out = [ids[rows, :length], np.where(np.arange(batch_size) < n, lengths[rows], 0).astype(np.int32)]
    for arr in extra:
        a = arr[rows].copy()
        if pad:
            a[n:] = 0
        out.append(a)
    return out


def predict_logits(params: Params, ids: np.ndarray, lengths: np.ndarray, batch_size: int = 512) -> np.ndarray:
    """Logits [n, 8] for encoded contexts, batched by length bucket."""
    n = len(lengths)
    result = np.zeros((n, NUM_CLASSES), np.float32)
    if n == 0:
        return result
    buckets = _bucket_lengths(ids.shape[1])
    for length, members in _batches(np.arange(n), lengths, batch_size, buckets, None):
        b_ids, b_len = _padded(ids, lengths, members, length, batch_size)
        logits = np.asarray(_predict_jit(params, jnp.asarray(b_ids), jnp.asarray(b_len)))
        result[members] = logits[:len(members)]
    return result


def _example_copies(weights: np.ndarray, config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """How many copies of each context an epoch holds, and the loss weight of each copy, such that a context's
    total weight is count**weight_power (normalised to a mean of 1 per example)."""
    effective = np.power(weights.astype(np.float64), config.weight_power)
    target = max(len(weights), config.examples_per_epoch)
    copies = np.clip(np.rint(effective * target / effective.sum()), 1, config.max_copies).astype(np.int64)
    per_copy = effective / copies
    per_copy *= copies.sum() / effective.sum()
    return copies, per_copy.astype(np.float32)


def train(ids: np.ndarray, lengths: np.ndarray, labels: np.ndarray, weights: np.ndarray, vocab_size: int,
          config: TrainConfig, validation: tuple | None = None,
          progress: Callable[[str], None] | None = None, dists: np.ndarray | None = None) -> TrainResult:
    """Trains on encoded contexts. `validation` is (ids, lengths, labels, weights[, dists]) of contexts kept
    out of training, used only to stop early; without it the training loss decides the plateau. `dists`
    (float32 [n, 8], `dataset.class_distributions`) are the targets of a distribution model
    (`config.decision`); accuracy is always against `labels`."""
    if config.decision is not None and dists is None:
        raise ValueError("a distribution model needs the contexts' class distributions")
    if dists is None:
        dists = np.zeros((len(lengths), NUM_CLASSES), np.float32)
    bar = None
    if progress is None:
        # On a terminal: a bar with a time estimate (to --epochs; early stopping usually ends sooner), the epoch
        # lines printed above it. Elsewhere (a log, a pipe): the lines alone.
        from tqdm import tqdm

        bar = tqdm(total=config.max_epochs, unit="epoch", desc="train", file=sys.stderr, leave=False,
                   disable=not sys.stderr.isatty(), dynamic_ncols=True)

        def progress(line: str) -> None:
            if bar.disable:
                print(line, file=sys.stderr, flush=True)
            else:
                bar.write(line, file=sys.stderr)
    t0 = time.perf_counter()
    key = jax.random.PRNGKey(config.seed)
    params = init_params(key, vocab_size, config.embedding_dim, config.hidden_dim)
    optimiser = optax.chain(optax.clip_by_global_norm(config.clip_norm), optax.adam(config.learning_rate))
    opt_state = optimiser.init(params)

    @jax.jit
    def train_step(params, opt_state, b_ids, b_len, b_labels, b_dists, b_weights):
        (loss, (correct, total)), grads = jax.value_and_grad(_loss, has_aux=True)(
            params, b_ids, b_len, b_labels, b_dists, b_weights, config.under_weight, config.decision)
        updates, opt_state = optimiser.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss * total, correct, total

    rng = np.random.default_rng(config.seed)
    buckets = _bucket_lengths(ids.shape[1])
    copies, per_copy = _example_copies(weights, config)
    # Small datasets are passed over several times per epoch, so that an epoch is worth a validation check.
    passes = max(1, int(round(config.examples_per_epoch / copies.sum())))
    copies = copies * passes
    examples = np.repeat(np.arange(len(lengths)), copies)
    ex_weights = np.repeat(per_copy, copies)
    ex_labels = labels.astype(np.int32)[examples]
    ex_dists = np.asarray(dists, np.float32)[examples]
    ex_ids, ex_lengths = ids[examples], lengths[examples]

    def evaluate(v_ids, v_len, v_labels, v_weights, v_dists=None):
        logits = predict_logits(params, v_ids, v_len)
        if v_dists is None:
            v_dists = np.zeros((len(v_len), NUM_CLASSES), np.float32)
        ce = np.asarray(example_loss(jnp.asarray(logits), jnp.asarray(v_labels.astype(np.int32)),
                                     jnp.asarray(v_dists, jnp.float32), config.under_weight, config.decision))
        w = np.power(v_weights.astype(np.float64), config.weight_power)
        acc = float(np.sum(w * (decide(logits, config.decision) == v_labels)) / w.sum())
        return float(np.sum(w * ce) / w.sum()), acc

    use_validation = validation is not None and len(validation[1]) > 0
    best = (math.inf, params, 0)  # (loss, params, epoch)
    history = []
    stale = 0
    epoch = 0
    interrupted = False
    # The first epoch compiles the training step (XLA); nothing else is printed meanwhile.
    progress("compiling the training step (up to about 20 s the first time on a machine; cached on disk after)")
    try:
        for epoch in range(1, config.max_epochs + 1):
            sums = []  # device scalars, read once per epoch so that steps are dispatched without waiting
            for length, members in _batches(np.arange(len(examples)), ex_lengths, config.batch_size, buckets, rng):
                b_ids, b_len, b_labels, b_dists, b_weights = _padded(ex_ids, ex_lengths, members, length,
                                                                     config.batch_size, ex_labels, ex_dists,
                                                                     ex_weights)
                params, opt_state, loss, correct, total = train_step(params, opt_state, b_ids, b_len, b_labels,
                                                                     b_dists, b_weights)
                sums.append((loss, correct, total))
            loss_sum, correct_sum, weight_sum = (float(x) for x in np.asarray(sums, np.float64).sum(axis=0))
            train_loss, train_acc = loss_sum / weight_sum, correct_sum / weight_sum
            if use_validation:
                val_loss, val_acc = evaluate(*validation)
                line = (f"epoch {epoch:3d}/{config.max_epochs}  loss {train_loss:.4f}  accuracy {train_acc:.3f}  "
                        f"validation loss {val_loss:.4f}  accuracy {val_acc:.3f}")
            else:
                val_loss, val_acc = train_loss, train_acc
                line = f"epoch {epoch:3d}/{config.max_epochs}  loss {train_loss:.4f}  accuracy {train_acc:.3f}"
            history.append((epoch, train_loss, train_acc, val_loss, val_acc))
            progress(f"{line}  ({time.perf_counter() - t0:.1f} s)")
            if val_loss < best[0] - 1e-4:
                best = (val_loss, params, epoch)
                stale = 0
            else:
                stale += 1
                if stale >= config.patience:
                    progress(f"stopping: no improvement for {config.patience} epochs; keeping epoch {best[2]}")
                    break
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        # Ctrl-C: the epochs already finished are not thrown away; the best of them is the result.
        if best[2] == 0:
            raise
        interrupted = True
        progress(f"interrupted: keeping epoch {best[2]}, the best of the {len(history)} finished")
    finally:
        if bar is not None:
            bar.close()
    params = {k: np.asarray(v) for k, v in best[1].items()}
    return TrainResult(params, len(history), best[2], time.perf_counter() - t0, history, interrupted)
