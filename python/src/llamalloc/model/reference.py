"""Reference inference: the lifetime class of calling contexts, computed in plain numpy from an exported model
file alone (no training state). The allocator's C++ inference is golden-tested against `predict`.

It computes exactly what the allocator computes (docs/formats/model.md): tokens of the context, then per token
    z = folded[token] + h @ w_hidden         (folded = embedding @ w_input + bias, precomputed in the file)
    i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)
    c = f * c + i * g;  h = o * tanh(c)
from h = c = 0, then logits = h @ dense_w + dense_b and the class is the first index of the largest logit, or,
for a distribution model (section `decision`), its label rule applied to exp(logits - max logits)
(`dataset.decide`). All arithmetic is float32.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import modelfile
from .classes import model_size_bucket
from .dataset import decide
from .tokenizer import Vocabulary


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (np.float32(1.0) / (np.float32(1.0) + np.exp(-x))).astype(np.float32)


def logits_of_tokens(model: modelfile.ModelFile, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """Logits [n, 8] of token-id sequences (each at most max_tokens long)."""
    n = len(token_ids)
    hidden = model.hidden_dim
    h = np.zeros((n, hidden), np.float32)
    c = np.zeros((n, hidden), np.float32)
    longest = max((len(t) for t in token_ids), default=0)
    ids = np.zeros((n, longest), np.int64)
    live = np.zeros((n, longest), bool)
    for row, seq in enumerate(token_ids):
        ids[row, :len(seq)] = seq
        live[row, :len(seq)] = True
    for t in range(longest):
        z = model.folded[ids[:, t]] + h @ model.w_hidden
        i = _sigmoid(z[:, :hidden])
        f = _sigmoid(z[:, hidden:2 * hidden])
        g = np.tanh(z[:, 2 * hidden:3 * hidden])
        o = _sigmoid(z[:, 3 * hidden:])
        c_new = f * c + i * g
        h_new = o * np.tanh(c_new)
        keep = live[:, t:t + 1]
        h = np.where(keep, h_new, h)
        c = np.where(keep, c_new, c)
    return (h @ model.dense_w + model.dense_b).astype(np.float32)


def tokens(model: modelfile.ModelFile, stacks: Sequence[Sequence[str]], request_sizes: Sequence[int]
           ) -> list[list[int]]:
    """Token ids of each (stack, request size), as the model file's vocabulary gives them."""
    vocab = Vocabulary(model.vocabulary)
    classes = model_size_bucket(np.asarray(request_sizes, dtype=np.int64))
    return [vocab.encode(stack, sc, model.max_tokens) for stack, sc in zip(stacks, classes)]


def predict(model_path, stacks: Sequence[Sequence[str]], request_sizes: Sequence[int]
            ) -> tuple[np.ndarray, np.ndarray]:
    """(classes int64 [n], logits float32 [n, 8]) for symbolised stacks (innermost frame first) and the
    request size of each allocation, reading only the model file at `model_path`."""
    if len(stacks) != len(request_sizes):
        raise ValueError("one request size per stack")
    model = modelfile.read(model_path)
    logits = logits_of_tokens(model, tokens(model, stacks, request_sizes))
    return decide(logits, model.decision), logits


def table_classes(model: modelfile.ModelFile, token_ids: Sequence[Sequence[int]]) -> list[int | None]:
    """The deployed predictor's answer before the LSTM (docs/formats/model.md, `train.token_class` and
    `deploy.unseen`): for each token sequence, its class in the model's table of training contexts, else the
    default class where the model deploys it for unseen contexts, else None (the LSTM decides)."""
    out: list[int | None] = []
    for seq in token_ids:
        found = None
        if model.train_token_class is not None:
            key = modelfile.token_context_keys(np.asarray([list(seq) or [0]], np.uint64),
                                               np.asarray([len(seq)], np.int64))[0]
            i = int(np.searchsorted(model.train_token_contexts, key))
            if i < len(model.train_token_contexts) and model.train_token_contexts[i] == key:
                found = int(model.train_token_class[i])
            elif model.unseen_default:
                found = int(model.default_class)
        out.append(found)
    return out
