"""The checks of notebook 01_queries_keys_values's coding exercises: self-attention in NumPy, and
the largest weight of each query under a factor on the scores."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ..attention import DotProductAttention, masked_softmax
from .cases import randn, random_floats, random_sizes, seeded_generator
from .runner import run_check

__all__ = ['check_self_attention', 'check_max_weights']


def check_self_attention(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(X, W_q, W_k, W_v) -> (Z, A), NumPy arrays: X (n, d_in), W_q and W_k (d_in, d),
    W_v (d_in, d_v); A = softmax(Q K^T / sqrt(d)) of shape (n, n), Z = A V of shape (n, d_v)."""

    generator = seeded_generator(seed)
    sizes = ([dict(n=4, d_in=3, d=2, d_v=2), dict(n=1, d_in=5, d=3, d_v=4)]
             + random_sizes(generator, 3, n=(2, 7), d_in=(1, 6), d=(1, 8), d_v=(1, 5)))
    cases = []
    for s in sizes:
        n, d_in, d, d_v = s["n"], s["d_in"], s["d"], s["d_v"]
        shapes = [(n, d_in), (d_in, d), (d_in, d), (d_in, d_v)]  # X, W_q, W_k, W_v
        arrays = tuple(randn(generator, *shape, dtype=torch.float64).numpy() for shape in shapes)
        note = " (a single token)" if n == 1 else ""
        cases.append((f"X {shapes[0]}, W_q and W_k {shapes[1]}, W_v {shapes[3]}{note}", arrays))

    def reference(X, W_q, W_k, W_v):
        layer = DotProductAttention()
        Q, K, V = (torch.from_numpy(X @ W)[None] for W in (W_q, W_k, W_v))  # (1, n, ·)
        Z = layer(Q, K, V)[0]
        return Z.numpy(), layer.attention_weights[0].numpy()

    run_check("self_attention", fn, cases, reference,
              hints=("Two things decide the result: the width the scores are divided by, and the "
                     "axis along which each row of weights sums to 1. Check both, and the order "
                     "of what you return.",
                     "Q, K, V = X @ W_q, X @ W_k, X @ W_v; divide Q @ K.T by sqrt(d), d being the "
                     "width of the queries (W_q.shape[1], not X's); take the softmax of each row "
                     "(axis=1); return (Z, A) in that order."),
              hint=hint)


def check_max_weights(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(Q, K, c) -> (n,) NumPy array: for each query (row of Q (n, d)), its largest attention
    weight in softmax(c Q K^T / sqrt(d)), the keys K being (m, d)."""

    generator = seeded_generator(seed)
    fixed = [("c = 0", 4, 4, 2, 0.0), ("a single key", 3, 1, 2, 1.0),
             ("a single query", 1, 5, 3, 2.0), ("c = 10", 4, 6, 2, 10.0)]
    factors = random_floats(generator, 3, scale=4)
    random = [(f"c = {c:.2f}", s["n"], s["m"], s["d"], c)
              for s, c in zip(random_sizes(generator, 3, n=(1, 6), m=(1, 6), d=(1, 5)), factors)]
    cases = []
    for what, n, m, d, c in fixed + random:
        Q, K = (randn(generator, rows, d, dtype=torch.float64).numpy() for rows in (n, m))
        cases.append((f"{what}, Q {(n, d)}, K {(m, d)}", (Q, K, c)))

    def reference(Q, K, c):
        scores = torch.from_numpy(c * Q @ K.T / math.sqrt(Q.shape[1]))[None]  # (1, n, m)
        return masked_softmax(scores)[0].max(dim=1).values.numpy()

    run_check("max_weights", fn, cases, reference,
              hints=("Where does the factor c enter: before the softmax or after it? The result "
                     "has one number per query.",
                     "multiply the scores Q @ K.T / sqrt(d) by c before the softmax, take the "
                     "softmax of each row, then the largest weight of each row (one per query)."),
              hint=hint)
