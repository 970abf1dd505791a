"""Shared helpers of the prediction tests (test_predict_*.py): tiny model files and the C++ tool."""
from __future__ import annotations

import subprocess

import numpy as np

from llamalloc.model import modelfile
from llamalloc.model.tokenizer import SPECIAL_TOKENS
from llamalloc.paths import native_binary

WORDS = ["main", "run_sites", "site_short", "site_long", "std", "vector", "allocate", "Handler", "Cache", "Insert",
         "Parse", "Build", "_start", "__libc_start_call_main", "__libc_start_main_impl", "start_thread", "clone3"]


def random_model(hidden: int = 16, embedding: int = 8, max_tokens: int = 128, seed: int = 0, scale: float = 1.0,
                 words=WORDS) -> modelfile.ModelFile:
    """A model with random weights (large enough that classes vary from context to context)."""
    rng = np.random.default_rng(seed)
    vocab = SPECIAL_TOKENS + list(words)
    v = len(vocab)
    f32 = lambda *shape: (scale * rng.standard_normal(shape)).astype(np.float32)  # noqa: E731
    emb, w_in, b = f32(v, embedding), f32(embedding, 4 * hidden), f32(4 * hidden)
    return modelfile.ModelFile(
        vocabulary=vocab, embedding=emb, w_input=w_in, w_hidden=f32(hidden, 4 * hidden) / np.sqrt(hidden),
        bias=b, folded=(emb @ w_in + b).astype(np.float32), dense_w=f32(hidden, 8), dense_b=f32(8),
        max_tokens=max_tokens, default_class=0, program="test")


def model_tool() -> str:
    return str(native_binary("src/model/llamalloc-model-tool"))


def cpp_infer(model_path, token_ids) -> tuple[np.ndarray, np.ndarray]:
    """(classes, logits) from the C++ inference of the allocator."""
    stdin = "".join(" ".join(str(t) for t in seq) + "\n" for seq in token_ids)
    r = subprocess.run([model_tool(), "infer", str(model_path)], input=stdin, capture_output=True, text=True,
                       check=True)
    rows = [line.split() for line in r.stdout.splitlines()]
    assert len(rows) == len(token_ids)
    return np.array([int(r[0]) for r in rows]), np.array([[float(x) for x in r[1:]] for r in rows], np.float32)
