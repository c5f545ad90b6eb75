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


def softmax_all(S):
    E = np.exp(S - S.max())
    return E / E.sum()


def attention_with(X, W_q, W_k, W_v, weigh):
    """Z and A with the weights A = weigh(Q, K) of a learner's own making."""
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    A = weigh(Q, K)
    return A @ V, A


CHECKS = {
    "check_self_attention": (self_attention, {
        "no scaling": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: 1), "differ", "not scaled"),
        "scaled by the input width": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: X.shape[1]), "differ",
            "input width d_in"),
        "scaled by the values' width": (
            lambda X, W_q, W_k, W_v: self_attention(X, W_q, W_k, W_v,
                                                    scale_by=lambda X, Q: W_v.shape[1]),
            "differ", "values' width d_v"),
        "divided by d": (lambda *a: self_attention(*a, scale_by=lambda X, Q: Q.shape[1] ** 2),
                         "differ", "divided by d itself"),
        "multiplied by sqrt(d)": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: 1 / Q.shape[1]), "differ",
            "multiplied by sqrt(d)"),
        "scaled by the number of tokens": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: X.shape[0]), "differ",
            "number of tokens n"),
        "softmax over the wrong axis": (lambda *a: self_attention(*a, axis=0), "differ",
                                        "Each column of your weights sums to 1"),
        "softmax over the wrong axis and no scaling": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: 1, axis=0), "differ",
            "Each column of your weights sums to 1"),
        "softmax over the whole matrix": (
            lambda X, W_q, W_k, W_v: attention_with(
                X, W_q, W_k, W_v, lambda Q, K: softmax_all(Q @ K.T / np.sqrt(Q.shape[1]))),
            "differ", "over the whole matrix"),
        "no softmax": (
            lambda X, W_q, W_k, W_v: attention_with(
                X, W_q, W_k, W_v, lambda Q, K: Q @ K.T / np.sqrt(Q.shape[1])),
            "differ", "the raw scores"),
        "exp without the division": (
            lambda X, W_q, W_k, W_v: attention_with(
                X, W_q, W_k, W_v, lambda Q, K: np.exp(Q @ K.T / np.sqrt(Q.shape[1]))),
            "differ", "exponentiated scores"),
        "sigmoid": (
            lambda X, W_q, W_k, W_v: attention_with(
                X, W_q, W_k, W_v, lambda Q, K: 1 / (1 + np.exp(-Q @ K.T / np.sqrt(Q.shape[1])))),
            "differ", "sigmoid"),
        "K Q^T": (
            lambda X, W_q, W_k, W_v: attention_with(
                X, W_q, W_k, W_v, lambda Q, K: numpy_softmax_rows(K @ Q.T / np.sqrt(Q.shape[1]))),
            "differ", "Your scores are transposed"),
        "A^T V": (lambda *a: (lambda Z, A: (A.T @ (a[0] @ a[3]), A))(*self_attention(*a)),
                  "differ", "transposed weights"),
        "values not projected": (lambda X, W_q, W_k, W_v: (self_attention(X, W_q, W_k, W_v)[1] @ X,
                                                            self_attention(X, W_q, W_k, W_v)[1]),
                                 "on input", "not the values"),
        "values projected with W_k": (
            lambda X, W_q, W_k, W_v: attention_with(
                X, W_q, W_k, W_k, lambda Q, K: numpy_softmax_rows(Q @ K.T / np.sqrt(Q.shape[1]))),
            "differ", "values are projected with W_k"),
        "scaled by 3": (lambda *a: self_attention(*a, scale_by=lambda X, Q: 9.0), "differ",
                        "another number than sqrt(d)"),
        "keys projected with W_q": (lambda X, W_q, W_k, W_v: self_attention(X, W_q, W_q, W_v),
                                    "differ", "same projection"),
        "(A, Z) instead of (Z, A)": (lambda *a: self_attention(*a)[::-1], "result 0 of the tuple",
                                     "You return (A, Z)"),
    }),
    "check_max_weights": (max_weights, {
        "no scaling": (
            lambda Q, K, c: numpy_softmax_rows(c * Q @ K.T).max(axis=1), "differ",
            "not scaled"),
        "divided by d": (
            lambda Q, K, c: numpy_softmax_rows(c * Q @ K.T / Q.shape[1]).max(axis=1),
            "differ", "divided by d itself"),
        "scaled by the number of keys": (
            lambda Q, K, c: numpy_softmax_rows(c * Q @ K.T / np.sqrt(len(K))).max(axis=1),
            "differ", "number of vectors"),
        "max over the queries": (
            lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c)).max(axis=0),
            "expected shape", "largest weight of each key"),
        "softmax over the queries": (
            lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c).T).T.max(axis=1),
            "differ", "Each column of your weights sums to 1"),
        "softmax over the whole matrix": (
            lambda Q, K, c: softmax_all(scaled_scores(Q, K, c)).max(axis=1), "differ",
            "whole matrix"),
        "c after the softmax": (
            lambda Q, K, c: c * numpy_softmax_rows(scaled_scores(Q, K, 1)).max(axis=1),
            "on input c = 0", "after the softmax"),
        "scores divided by c": (
            lambda Q, K, c: numpy_softmax_rows(Q @ K.T / np.sqrt(Q.shape[1]) / c).max(axis=1),
            "on input c = 0", "divided by c"),
        "the largest weight of all": (
            lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c)).max(), "expected shape",
            "You return one number"),
        "c forgotten": (lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, 1)).max(axis=1),
                        "differ", "c is not used"),
        "argmax": (lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c)).argmax(axis=1),
                   "differ", "its index"),
        "the largest score": (lambda Q, K, c: scaled_scores(Q, K, c).max(axis=1), "differ",
                              "largest score"),
        "a softmax over the keys written with a loop, the largest weight of the last query only": (
            lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c))[-1:].max(axis=1),
            "expected shape", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_queries_keys_values
