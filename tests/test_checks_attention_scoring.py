"""The checks of notebook 03_attention_scoring (d2lhelpers/exercises/checks_attention_scoring.py):
right and plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import math

import torch

from checks_common import CheckTests
from d2lhelpers.exercises import checks_attention_scoring


def multiplicative_scores(queries, keys, W):
    return torch.bmm(queries @ W, keys.transpose(1, 2))


def causal_lens(batch_size, num_queries):
    return torch.arange(1, num_queries + 1).expand(batch_size, -1)


CHECKS = {
    "check_multiplicative_scores": (multiplicative_scores, {
        "W transposed": (lambda q, k, W: q @ W.T @ k.transpose(1, 2), "raised RuntimeError",
                         "W is transposed"),
        "scaled like dot-product attention": (
            lambda q, k, W: q @ W @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), "differ",
            "scaled by a width"),
        "keys not transposed": (lambda q, k, W: q @ W @ k, "raised RuntimeError", None),
        "computed in float32": (
            lambda q, k, W: q.float() @ W.float() @ k.float().transpose(1, 2),
            "expected dtype float64", None),
        "keys times W times queries": (
            lambda q, k, W: torch.einsum("bjq,pq,bip->bji", k, W, q), "expected shape",
            "scores are transposed"),
        "divided by the key width": (lambda q, k, W: q @ W @ k.mT / k.shape[-1], "differ",
                                     "scaled by a width"),
        "a tanh, as in additive attention": (lambda q, k, W: torch.tanh(q @ W @ k.mT), "differ",
                                             "tanh"),
        "the batch flattened": (
            lambda q, k, W: q.flatten(0, 1) @ W @ k.flatten(0, 1).T, "expected shape",
            "mix the sequences of the batch"),
        "the weights": (lambda q, k, W: torch.softmax(q @ W @ k.mT, dim=-1), "differ",
                        "attention weights"),
    }),
    "check_causal_lens": (causal_lens, {
        "lengths 0 .. T-1": (lambda B, T: torch.arange(T).expand(B, -1), "differ", "one short"),
        "lengths 2 .. T+1": (lambda B, T: torch.arange(2, T + 2).repeat(B, 1), "raised ValueError",
                             "one too long"),
        "one row, not one per sequence": (lambda B, T: torch.arange(1, T + 1), "raised ValueError",
                                          "one row of lengths"),
        "every key": (lambda B, T: torch.full((B, T), T), "differ", "see all the keys"),
        "key 0 only": (lambda B, T: torch.ones(B, T, dtype=torch.int32), "differ", "key 0 only"),
        "backwards": (lambda B, T: torch.arange(T, 0, -1).repeat(B, 1), "differ", "backwards"),
        "lengths 1 .. B down the batch": (lambda B, T: torch.arange(1, B + 1)[:, None].repeat(1, T),
                                          "differ", "along the batch"),
        "(T, B)": (lambda B, T: torch.arange(1, T + 1)[:, None].repeat(1, B), "raised ValueError",
                   "shape (T_q, B)"),
        "one length per sequence": (lambda B, T: torch.full((B,), T), "on input",
                                    "one length per sequence"),
        "the mask itself": (lambda B, T: torch.ones(B, T, T).tril().bool(), "on input",
                            "a mask of the keys"),
        "lengths i + 1 for the first sequence, T for the others": (
            lambda B, T: torch.cat([torch.arange(1, T + 1)[None], torch.full((B - 1, T), T)]),
            "differ", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_attention_scoring
