"""The checks of notebook 01_queries_keys_values
(d2lhelpers/exercises/checks_queries_keys_values.py): right and plausible wrong answers, in NumPy
as the exercises ask (see checks_common.py)."""

from __future__ import annotations

import numpy as np

from checks_common import CheckTests
from d2lhelpers.exercises import checks_queries_keys_values


def numpy_softmax_rows(S):
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def self_attention(X, W_q, W_k, W_v, scale_by=None, axis=1):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    S = Q @ K.T / np.sqrt(Q.shape[1] if scale_by is None else scale_by(X, Q))
    E = np.exp(S - S.max(axis=axis, keepdims=True))
    A = E / E.sum(axis=axis, keepdims=True)
    return A @ V, A


def max_weights(Q, K, c):
    return numpy_softmax_rows(c * Q @ K.T / np.sqrt(Q.shape[1])).max(axis=1)


def scaled_scores(Q, K, c):
    return c * Q @ K.T / np.sqrt(Q.shape[1])


CHECKS = {
    "check_self_attention": (self_attention, {
        "no scaling": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: 1), "values differ"),
        "scaled by the input width": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: X.shape[1]), "values differ"),
        "softmax over the wrong axis": (lambda *a: self_attention(*a, axis=0), "values differ"),
        "(A, Z) instead of (Z, A)": (lambda *a: self_attention(*a)[::-1], "result 0 of the tuple"),
    }),
    "check_max_weights": (max_weights, {
        "no scaling": (
            lambda Q, K, c: numpy_softmax_rows(c * Q @ K.T).max(axis=1), "values differ"),
        "max over the queries": (
            lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c)).max(axis=0),
            "expected shape"),
        "c after the softmax": (
            lambda Q, K, c: c * numpy_softmax_rows(scaled_scores(Q, K, 1)).max(axis=1),
            "on input c = 0"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_queries_keys_values
