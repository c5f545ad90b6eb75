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
        "W transposed": (lambda q, k, W: q @ W.T @ k.transpose(1, 2), "raised RuntimeError"),
        "scaled like dot-product attention": (
            lambda q, k, W: q @ W @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), "values differ"),
        "keys not transposed": (lambda q, k, W: q @ W @ k, "raised RuntimeError"),
        "computed in float32": (
            lambda q, k, W: q.float() @ W.float() @ k.float().transpose(1, 2),
            "expected dtype float64"),
    }),
    "check_causal_lens": (causal_lens, {
        "lengths 0 .. T-1": (lambda B, T: torch.arange(T).expand(B, -1), "values differ"),
        "one row, not one per sequence": (lambda B, T: torch.arange(1, T + 1), "raised ValueError"),
        "every key": (lambda B, T: torch.full((B, T), T), "values differ"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_attention_scoring
