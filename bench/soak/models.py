#!/usr/bin/env python3
"""Writes the two models the soak runs with: OUT/constant.model (every context: class 3) and OUT/random.model
(random weights over the stress programs' function names, so that classes vary from context to context).

  bench/soak/models.py OUT_DIR
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from llamalloc.model import modelfile
from llamalloc.model.tokenizer import SPECIAL_TOKENS

WORDS = ["main", "anonymous", "namespace", "make", "worker", "churn", "child", "child_thread", "lane_thread",
         "producer", "new_obj", "stress_plugin_make", "plugin_init", "Table", "start_thread", "__clone3", "operator",
         "new", "std", "thread", "vector", "basic_string", "allocate"]


def model(words: list[str], hidden: int, embedding: int, rng, scale: float, lifetime_class: int | None):
    vocab = SPECIAL_TOKENS + words
    v = len(vocab)

    def f32(*shape):
        if lifetime_class is not None:
            return np.zeros(shape, np.float32)
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    emb, w_in, b = f32(v, embedding), f32(embedding, 4 * hidden), f32(4 * hidden)
    dense_b = f32(8)
    if lifetime_class is not None:
        dense_b = np.full(8, -10.0, np.float32)
        dense_b[lifetime_class] = 10.0
    return modelfile.ModelFile(
        vocabulary=vocab, embedding=emb, w_input=w_in, w_hidden=f32(hidden, 4 * hidden) / np.sqrt(hidden),
        bias=b, folded=(emb @ w_in + b).astype(np.float32), dense_w=f32(hidden, 8), dense_b=dense_b,
        max_tokens=128, default_class=lifetime_class or 0,
        program="\n".join(f"stress-{p}" for p in ("random", "fork", "threads", "dlopen", "exit-handoff")))


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    modelfile.write(out / "constant.model", model(["main"], 1, 1, rng, 0.0, 3))
    modelfile.write(out / "random.model", model(WORDS, 16, 8, rng, 2.0, None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
