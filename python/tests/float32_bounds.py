"""Tolerances that follow from float32 arithmetic, not from one machine's run. Two float32 evaluations of the same
model (JAX, numpy's reference, the allocator's C++) differ in summation order, fused multiply-adds and the
rounding of exp and tanh, whatever BLAS kernel a machine picks. Each is within a running forward-error bound of
the exact result, computed here in float64 alongside the model (Higham, "Accuracy and Stability of Numerical
Algorithms", chapter 3: a dot product of n terms is within gamma_n * sum |a_i b_i| of the exact one, with
gamma_n = n u / (1 - n u) and u = 2^-24), carried through the recurrence to first order with each activation's
derivative where it is evaluated, so two of them differ by at most twice that bound. (With the worst-case
derivatives instead, the bound grows by about 2.5x per step and says nothing after 32 tokens.)"""
from __future__ import annotations

from typing import Sequence

import numpy as np

U = 2.0 ** -24  # float32's unit roundoff
# exp and tanh as numpy, XLA and libm compute them in float32: within a few ulps of the exact value.
FUNCTION_ULPS = 4


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def logit_error_bound(model, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """[n, classes]: a bound on |computed - exact| for the logits of each token sequence, for any float32
    evaluation of `model` (a modelfile.ModelFile) that sums its dot products in any order."""
    hidden = model.hidden_dim
    folded = model.folded.astype(np.float64)
    w_hidden = model.w_hidden.astype(np.float64)
    dense_w = model.dense_w.astype(np.float64)
    dense_b = model.dense_b.astype(np.float64)
    n = len(token_ids)
    h = np.zeros((n, hidden))
    c = np.zeros((n, hidden))
    eh = np.zeros((n, hidden))  # error bounds of h and c
    ec = np.zeros((n, hidden))
    fn = FUNCTION_ULPS * U
    longest = max((len(t) for t in token_ids), default=0)
    for t in range(longest):
        live = np.array([len(s) > t for s in token_ids])[:, None]
        ids = np.array([s[t] if len(s) > t else 0 for s in token_ids])
        # z = folded[token] + h @ w_hidden: the error carried in h, and the rounding of a dot product of
        # hidden + 1 terms (the stored folded row being one of them).
        z = folded[ids] + h @ w_hidden
        ez = eh @ np.abs(w_hidden) + gamma(hidden + 1) * (np.abs(folded[ids]) + np.abs(h) @ np.abs(w_hidden))
        zi, zf, zg, zo = (z[:, k * hidden:(k + 1) * hidden] for k in range(4))
        ei, ef, eg, eo = (ez[:, k * hidden:(k + 1) * hidden] for k in range(4))
        sig = lambda x: 1 / (1 + np.exp(-x))
        i, f, g, o = sig(zi), sig(zf), np.tanh(zg), sig(zo)
        # To first order (the errors are many orders below the values), an error e in x moves sigmoid(x) by
        # s(1 - s) e and tanh(x) by (1 - tanh^2) e; plus the functions' own rounding (exp, one add, one divide).
        ei, ef, eo = (i * (1 - i) * ei + (fn + 2 * U) * i, f * (1 - f) * ef + (fn + 2 * U) * f,
                      o * (1 - o) * eo + (fn + 2 * U) * o)
        eg = (1 - g * g) * eg + fn * np.abs(g)
        c_new = f * c + i * g
        ec_new = (np.abs(f) * ec + np.abs(c) * ef + np.abs(i) * eg + np.abs(g) * ei
                  + gamma(3) * (np.abs(f * c) + np.abs(i * g)))
        tc = np.tanh(c_new)
        h_new = o * tc
        eh_new = np.abs(o) * ((1 - tc * tc) * ec_new + fn * np.abs(tc)) + np.abs(tc) * eo + U * np.abs(h_new)
        h, c = np.where(live, h_new, h), np.where(live, c_new, c)
        eh, ec = np.where(live, eh_new, eh), np.where(live, ec_new, ec)
    return eh @ np.abs(dense_w) + gamma(hidden + 1) * (np.abs(h) @ np.abs(dense_w) + np.abs(dense_b))


def assert_logits_agree(got: np.ndarray, want: np.ndarray, bound: np.ndarray) -> None:
    """Two float32 evaluations differ by at most twice the bound of each (elementwise)."""
    diff = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    worst = np.unravel_index(np.argmax(diff - 2 * bound), diff.shape)
    assert np.all(diff <= 2 * bound), (
        f"logits differ by {diff[worst]:.3g} at {worst}, beyond the float32 bound {2 * bound[worst]:.3g}")


def decided_rows(logits: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """Rows whose largest logit leads the next by more than the two evaluations may differ: there both must
    pick the same class (in a closer race either may win)."""
    top2 = np.sort(logits, axis=1)[:, -2:]
    return (top2[:, 1] - top2[:, 0]) > 4 * bound.max(axis=1)
