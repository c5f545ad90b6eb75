"""The checks of notebook 01_queries_keys_values
(d2lhelpers/exercises/checks_queries_keys_values.py): right and plausible wrong answers (see
checks_common.py)."""

from __future__ import annotations

import math

import torch
from torch import nn

from checks_common import CheckTests
from d2lhelpers import exercises
from d2lhelpers.exercises import checks_queries_keys_values


def lookup(queries, keys, values, temperature, hard="share", scale=True, axis=-1):
    """The lookup as a learner writes it; ``hard``: what temperature 0 gives ("share": the keys
    of the largest score share the weight; "first": one-hot at the first; "count": 1 on each;
    "divide": the formula, dividing by 0)."""
    scores = torch.bmm(queries, keys.transpose(1, 2))
    if scale:
        scores = scores / math.sqrt(queries.shape[-1])
    if temperature == 0 and hard != "divide":
        best = scores.max(dim=-1, keepdim=True).values
        if hard == "first":
            weights = torch.zeros_like(scores).scatter_(-1, scores.argmax(-1, keepdim=True), 1.0)
        else:
            weights = (scores == best).to(scores.dtype)
            if hard == "share":
                weights = weights / weights.sum(-1, keepdim=True)
    else:
        weights = torch.softmax(scores / temperature, dim=axis)
    return torch.bmm(weights, values), weights


def lookup_by_loop(queries, keys, values, temperature):
    """A row at a time, the limit as a mask of the maxima."""
    B, T_q, d = queries.shape
    weights = torch.zeros(B, T_q, keys.shape[1], dtype=queries.dtype)
    for b in range(B):
        for i in range(T_q):
            s = keys[b] @ queries[b, i] / math.sqrt(d)
            if temperature == 0:
                top = s == s.max()
                weights[b, i] = top / top.sum()
            else:
                weights[b, i] = torch.softmax(s / temperature, dim=0)
    return weights @ values, weights


def lookup_by_reciprocal(queries, keys, values, temperature):
    sharpness = 1 / temperature  # ZeroDivisionError at temperature 0
    return lookup(queries * sharpness, keys, values, 1.0)


def lookup_times_temperature(queries, keys, values, temperature):
    scores = queries @ keys.mT * temperature / math.sqrt(queries.shape[-1])
    weights = scores.softmax(-1)
    return weights @ values, weights


def make_cross_attention(scale="d", keys_from="context", values="W_v", order="outputs first",
                         axis=-1, queries_from="queries"):
    class CrossAttention(nn.Module):
        def __init__(self, query_size, context_size, d, d_v):
            super().__init__()
            self.W_q = nn.Linear(query_size, d, bias=False)
            self.W_k = nn.Linear(context_size, d, bias=False)
            self.W_v = nn.Linear(context_size, d_v, bias=False)

        def forward(self, queries, context):
            source = context if keys_from == "context" else queries
            Q = self.W_q(queries if queries_from == "queries" else context)
            K = self.W_k(source)
            V = {"W_v": self.W_v, "W_k": self.W_k, "none": lambda x: x}[values](source)
            width = {"d": Q.shape[-1], "query width": queries.shape[-1],
                     "d_v": self.W_v.out_features, "none": 1}[scale]
            A = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(width), dim=axis)
            return (A @ V, A) if order == "outputs first" else (A, A @ V)

    return CrossAttention


class CrossAttentionByEinsum(nn.Module):
    def __init__(self, query_size, context_size, d, d_v):
        super().__init__()
        self.W_q = nn.Linear(query_size, d, bias=False)
        self.W_k = nn.Linear(context_size, d, bias=False)
        self.W_v = nn.Linear(context_size, d_v, bias=False)

    def forward(self, queries, context):
        scores = torch.einsum("bid,bjd->bij", self.W_q(queries), self.W_k(context))
        weights = (scores / self.W_q.out_features ** 0.5).softmax(-1)
        return torch.einsum("bij,bjv->biv", weights, self.W_v(context)), weights


class CrossAttentionTransposedMix(make_cross_attention()):
    def forward(self, queries, context):
        _, A = super().forward(queries, context)
        return A.transpose(1, 2) @ self.W_v(context), A


CHECKS = {
    "check_lookup": (lookup, {
        "temperature 0 divided by": (lambda *a: lookup(*a, hard="divide"), "on input",
                                     "divides by 0"),
        "1 / temperature in Python": (lookup_by_reciprocal, "ZeroDivisionError", "divides by 0"),
        "the first key of the largest score": (lambda *a: lookup(*a, hard="first"), "differ",
                                               "a single key"),
        "1 on each key of the largest score": (lambda *a: lookup(*a, hard="count"), "differ",
                                               "each key of the largest score"),
        "the temperature multiplies": (lookup_times_temperature, "on input",
                                       "multiplies the scores"),
        "the temperature ignored": (lambda q, k, v, t: lookup(q, k, v, 1.0), "differ",
                                    "ignores the temperature"),
        "sqrt(temperature d)": (
            lambda q, k, v, t: lookup(q, k, v, math.sqrt(t) if t else 0), "differ",
            "sqrt(temperature * d)"),
        "no sqrt(d)": (lambda *a: lookup(*a, scale=False), "differ", "not divided by sqrt(d)"),
        "softmax over the queries": (lambda *a: lookup(*a, axis=1), "differ",
                                     "Each column of your weights"),
        "(weights, outputs)": (lambda *a: lookup(*a)[::-1], "result 0", "You return (weights"),
        "the last query's weights for every query": (
            lambda *a: (lambda Z, A: (Z[:, -1:].expand_as(Z), A[:, -1:].expand_as(A)))(
                *lookup(*a)), "on input", None),
    }),
    "check_cross_attention": (make_cross_attention(), {
        "no scaling": (make_cross_attention(scale="none"), "differ", "not scaled"),
        "scaled by the query width": (make_cross_attention(scale="query width"), "differ",
                                      "an input's width"),
        "scaled by d_v": (make_cross_attention(scale="d_v"), "differ", "values' width d_v"),
        "softmax over the queries": (make_cross_attention(axis=1), "differ",
                                     "Each column of your weights"),
        "self-attention": (make_cross_attention(keys_from="queries"), "raised",
                           "come from the queries' sequence"),
        "queries from the context": (make_cross_attention(queries_from="context"), "raised",
                                     "queries come from the context"),
        "values not projected": (make_cross_attention(values="none"), "on input",
                                 "not its values"),
        "values projected with W_k": (make_cross_attention(values="W_k"), "on input",
                                      "projected with W_k"),
        "weights transposed when mixing": (CrossAttentionTransposedMix, "on input",
                                           "transposed weights"),
        "(weights, outputs)": (make_cross_attention(order="weights first"), "result 0",
                               "You return (weights"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_queries_keys_values


def test_other_right_answers_pass(capsys):
    exercises.check_lookup(lookup_by_loop)
    exercises.check_cross_attention(CrossAttentionByEinsum)
    assert capsys.readouterr().out.count("Correct") == 2


def test_the_hard_lookup_case_has_a_tie_at_the_top_for_every_seed():
    for seed in range(5):
        cases = checks_queries_keys_values._lookup_cases(exercises.cases.seeded_generator(seed))
        queries, keys, _, temperature = next(args for what, args in cases if "ties" in what)
        scores = queries[:, 0:1] @ keys.transpose(1, 2)  # query 0 of each sequence
        assert temperature == 0
        assert ((scores == scores.amax(-1, keepdim=True)).sum(-1) >= 2).all()
