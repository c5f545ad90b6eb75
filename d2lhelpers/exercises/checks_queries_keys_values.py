"""The checks of notebook 01_queries_keys_values's coding exercises: self-attention in NumPy, and
the largest weight of each query under a factor on the scores."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
import torch

from ..attention import DotProductAttention, masked_softmax
from .cases import randn, random_floats, random_sizes, seeded_generator
from .runner import Symptom, run_check

__all__ = ['check_self_attention', 'check_max_weights']


# The classic mistakes, each as the function that makes it ----------------------------------------

def _softmax(scores: torch.Tensor, axis) -> torch.Tensor:
    """Softmax over ``axis`` (None: over the whole matrix)."""
    if axis is None:
        return torch.softmax(scores.flatten(), dim=0).reshape(scores.shape)
    return torch.softmax(scores, dim=axis)


def _weights(Q, K, scale="d", axis=1, normalise="softmax", transpose=False):
    """Attention weights of queries Q (n, d) over keys K (m, d), right by default; every other
    value of an argument is a classic mistake. scale: what the scores are divided by."""
    n, d = Q.shape
    scores = K @ Q.T if transpose else Q @ K.T  # (n, m); transposed: (m, n)
    divisor = {"d": math.sqrt(d), "none": 1.0, "d itself": d, "times": 1 / math.sqrt(d),
               "tokens": math.sqrt(n), "keys": math.sqrt(K.shape[0])}.get(scale, scale)
    scores = scores / divisor
    if normalise == "softmax":
        return _softmax(scores, axis)
    if normalise == "exp":
        return torch.exp(scores)
    if normalise == "sigmoid":
        return torch.sigmoid(scores)
    return scores  # no normalisation at all


def _wrong_self_attention(X, W_q, W_k, W_v, swap=False, project_values=True, keys_with="W_k",
                          queries_with="W_q", transpose_weights=False, values_with="W_v",
                          **weights):
    X, W_q, W_k, W_v = (torch.from_numpy(a) for a in (X, W_q, W_k, W_v))
    named = {"W_q": W_q, "W_k": W_k, "W_v": W_v}
    Q, K = X @ named[queries_with], X @ named[keys_with]
    if weights.get("scale") == "input width":
        weights["scale"] = math.sqrt(X.shape[1])
    elif weights.get("scale") == "values width":
        weights["scale"] = math.sqrt(W_v.shape[1])
    A = _weights(Q, K, **weights)
    V = X @ named[values_with] if project_values else X
    Z = (A.T if transpose_weights else A) @ V
    return (A, Z) if swap else (Z, A)


def _scaled_otherwise(weights, Q, K) -> bool:
    """Whether ``weights`` are the softmax over the keys of the scores Q K^T times some factor
    other than 1/sqrt(d) (d = Q's width), the same for every query."""
    A, scores = torch.as_tensor(weights).double(), torch.as_tensor(Q @ K.T).double()
    if A.shape != scores.shape or A.shape[1] < 2 or not bool((A > 0).all()):
        return False
    spread = scores - scores.mean(dim=1, keepdim=True)  # log A = factor * scores + a row's constant
    logs = A.log() - A.log().mean(dim=1, keepdim=True)
    if float((spread ** 2).sum()) < 1e-12:
        return False
    factor = float((logs * spread).sum() / (spread ** 2).sum())
    right = 1 / math.sqrt(Q.shape[1])
    return (not math.isclose(factor, right, rel_tol=1e-3)
            and torch.allclose(A, torch.softmax(factor * scores, dim=1), atol=1e-6, rtol=1e-4))


def _columns_sum_to_one(weights) -> bool:
    """Whether each column of a square matrix of weights sums to 1 while its rows do not."""
    A = torch.as_tensor(weights).double()
    ones = torch.ones(A.shape[0], dtype=A.dtype)
    return (A.dim() == 2 and A.shape[0] == A.shape[1] > 1 and torch.allclose(A.sum(0), ones)
            and not torch.allclose(A.sum(1), ones))


_SELF_ATTENTION_MISTAKES = {
    "Your scores are not scaled: by what does scaled dot-product attention divide them before "
    "the softmax?": partial(_wrong_self_attention, scale="none"),
    "Your scores are divided by the square root of the input width d_in; the scale is the width "
    "d of the queries and keys.": partial(_wrong_self_attention, scale="input width"),
    "Your scores are divided by the square root of the values' width d_v; the scale is the "
    "width d of the queries and keys.": partial(_wrong_self_attention, scale="values width"),
    "Your scores are divided by d itself, not by its square root.":
        partial(_wrong_self_attention, scale="d itself"),
    "Your scores are multiplied by sqrt(d) where they should be divided by it.":
        partial(_wrong_self_attention, scale="times"),
    "Your scores are divided by the square root of the number of tokens n; the scale is the width "
    "d of the queries and keys.": partial(_wrong_self_attention, scale="tokens"),
    "Each column of your weights sums to 1, over the queries: each query's row must sum to 1 over "
    "the keys. Which axis does your softmax normalise?": (
        partial(_wrong_self_attention, axis=0),
        Symptom(lambda result, *args: _columns_sum_to_one(result[1]))),
    "Your weights sum to 1 over the whole matrix; each query's row must sum to 1 on its own.":
        partial(_wrong_self_attention, axis=None),
    "Your weights are the raw scores: the softmax that turns each row into weights summing to 1 "
    "is missing.": partial(_wrong_self_attention, normalise="none"),
    "Your weights are exponentiated scores that do not sum to 1: the softmax also divides each "
    "row by its sum.": partial(_wrong_self_attention, normalise="exp"),
    "Your weights come from a sigmoid, which does not make each row sum to 1: attention uses a "
    "softmax.": partial(_wrong_self_attention, normalise="sigmoid"),
    "Your scores are transposed (keys times queries): row i must hold query i's scores against "
    "every key.": partial(_wrong_self_attention, transpose=True),
    "Your outputs use the transposed weights: output i mixes the values with query i's row of "
    "weights.": partial(_wrong_self_attention, transpose_weights=True),
    "Your outputs mix the inputs X, not the values: are the values projected with W_v?":
        partial(_wrong_self_attention, project_values=False),
    "Your values are projected with W_k (or W_q): the values use W_v.": (
        partial(_wrong_self_attention, values_with="W_k"),
        partial(_wrong_self_attention, values_with="W_q")),
    "Your scores are divided by another number than sqrt(d), the square root of the width of the "
    "queries and keys.": Symptom(lambda result, X, W_q, W_k, W_v: _scaled_otherwise(
        result[1], X @ W_q, X @ W_k)),
    "Your queries and keys come from the same projection: the queries use W_q, the keys W_k.": (
        partial(_wrong_self_attention, keys_with="W_q"),
        partial(_wrong_self_attention, queries_with="W_k")),
    "You return (A, Z): the exercise asks for the outputs first, then the weights, (Z, A).":
        partial(_wrong_self_attention, swap=True),
}


def check_self_attention(fn: Callable, seed: int = 0, hint: int = 1, *,
                         verbose: bool = False) -> None:
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

    run_check("self_attention", fn, cases, reference, mistakes=_SELF_ATTENTION_MISTAKES,
              verbose=verbose,
              hints=("Two things decide the result: the width the scores are divided by, and the "
                     "axis along which each row of weights sums to 1. Check both, and the order "
                     "of what you return.",
                     "Q, K, V = X @ W_q, X @ W_k, X @ W_v; divide Q @ K.T by sqrt(d), d being the "
                     "width of the queries (W_q.shape[1], not X's); take the softmax of each row "
                     "(axis=1); return (Z, A) in that order."),
              hint=hint)


def _wrong_max_weights(Q, K, c, factor="before", over="keys", take="max", **weights):
    Q, K = torch.from_numpy(Q), torch.from_numpy(K)
    if weights.get("scale") == "queries":
        weights["scale"] = math.sqrt(Q.shape[0])
    if factor == "before":
        Q = c * Q
    elif factor == "divides":
        Q = Q / c
    A = _weights(Q, K, **weights)  # (n, m)
    if factor == "after":
        A = c * A
    dim = 0 if over == "queries" else 1
    return A.max(dim=dim).values if take == "max" else A.argmax(dim=dim)


_MAX_WEIGHTS_MISTAKES = {
    "Your scores are not scaled: by what does scaled dot-product attention divide them before "
    "the softmax?": partial(_wrong_max_weights, scale="none"),
    "Your scores are divided by d itself, not by its square root.":
        partial(_wrong_max_weights, scale="d itself"),
    "Your scores are divided by the square root of a number of vectors (of keys, or of "
    "queries); the scale is the width d of the queries and keys.": (
        partial(_wrong_max_weights, scale="keys"), partial(_wrong_max_weights, scale="queries")),
    "Your c is not used: it multiplies the scores before the softmax.":
        partial(_wrong_max_weights, factor="ignored"),
    "Your c multiplies the weights after the softmax: it must multiply the scores before it (with "
    "c = 0 every weight is then 1/m).": partial(_wrong_max_weights, factor="after"),
    "Your scores are divided by c: c multiplies them.": partial(_wrong_max_weights,
                                                               factor="divides"),
    "You take the largest weight of each key, over the queries: the result has one number per "
    "query, the largest weight in its row.": partial(_wrong_max_weights, over="queries"),
    "Each column of your weights sums to 1, over the queries: each query's row must sum to 1 over "
    "the keys. Which axis does your softmax normalise?": partial(_wrong_max_weights, axis=0),
    "Your weights sum to 1 over the whole matrix; each query's row must sum to 1 on its own.":
        partial(_wrong_max_weights, axis=None),
    "You return one number: the result holds one number per query, the largest weight in its "
    "row.": Symptom(lambda result, Q, K, c: np.ndim(result) == 0),
    "You return where the largest weight is (its index), not the weight itself.":
        partial(_wrong_max_weights, take="argmax"),
    "You return the largest score, not the largest weight: the softmax is missing.": (
        partial(_wrong_max_weights, normalise="none"), partial(_wrong_max_weights,
                                                               normalise="exp")),
}


def check_max_weights(fn: Callable, seed: int = 0, hint: int = 1, *,
                      verbose: bool = False) -> None:
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

    run_check("max_weights", fn, cases, reference, mistakes=_MAX_WEIGHTS_MISTAKES, verbose=verbose,
              hints=("Where does the factor c enter: before the softmax or after it? The result "
                     "has one number per query.",
                     "multiply the scores Q @ K.T / sqrt(d) by c before the softmax, take the "
                     "softmax of each row, then the largest weight of each row (one per query)."),
              hint=hint)


MISTAKES = {"check_self_attention": _SELF_ATTENTION_MISTAKES,
            "check_max_weights": _MAX_WEIGHTS_MISTAKES}  # the catalogues, for the tests
