"""The checks of notebook 05_self_attention_positional_encoding
(d2lhelpers/exercises/checks_positional_encoding.py): right and plausible wrong answers (see
checks_common.py), and the checks' references against their definitions."""

from __future__ import annotations

import math

import torch
from torch import nn

import d2lhelpers as d2lh
from checks_common import CheckTests, attention_weights
from d2lhelpers import exercises
from d2lhelpers.exercises import checks_positional_encoding
from d2lhelpers.exercises.checks_positional_encoding import (_ReferenceRelativeAttention,
                                                             _relative_self_attention)
from d2lhelpers.exercises.checks_positional_encoding import _shift_matrix as shift_matrix_reference


def sinusoidal_table(max_len, d, exponent=2, layout="interleave"):
    i = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange((d + 1) // 2, dtype=torch.float64)
    angles = i / 10000 ** (exponent * j / d)  # (max_len, ceil(d/2))
    if layout == "halves":  # sines in the first half, cosines in the second
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)[:, :d]
    P = torch.empty(max_len, d, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : d // 2])
    return P


def even_only_table(max_len, d):  # the notebook's section 3 code, which needs an even d
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    P = torch.zeros(max_len, d)
    P[:, 0::2], P[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return P


def shift_matrix(delta, d, sign=1, exponent=2):
    M = torch.zeros(d, d, dtype=torch.float64)
    for j in range(d // 2):
        angle = torch.tensor(delta / 10000 ** (exponent * j / d), dtype=torch.float64)
        c, s = torch.cos(angle), sign * torch.sin(angle)
        block = torch.stack([torch.stack([c, s]), torch.stack([-s, c])])  # (2, 2)
        M[2 * j: 2 * j + 2, 2 * j: 2 * j + 2] = block
    return M


def relative_self_attention(sign=1, clip=True, bias_at="scores", scale_bias=False, mask=True,
                            fill="package"):
    """Notebook 05's RelativeSelfAttention, right by default; each argument names a mistake."""

    class RelativeSelfAttention(nn.Module):
        def __init__(self, d_model, max_distance):
            super().__init__()
            self.max_distance = max_distance
            self.W_q = nn.Linear(d_model, d_model, bias=False)
            self.W_k = nn.Linear(d_model, d_model, bias=False)
            self.W_v = nn.Linear(d_model, d_model, bias=False)
            self.relative_bias = nn.Parameter(torch.zeros(2 * max_distance + 1))

        def forward(self, X, valid_lens=None):
            T, d = X.shape[1], X.shape[2]
            positions = torch.arange(T)
            offsets = sign * (positions[None, :] - positions[:, None])  # right: key minus query
            if clip:
                offsets = offsets.clamp(-self.max_distance, self.max_distance)
            bias = self.relative_bias[offsets + self.max_distance]  # (T, T)
            scores = self.W_q(X) @ self.W_k(X).transpose(1, 2)
            if bias_at == "scores":
                scores = (scores + bias) / math.sqrt(d) if scale_bias else scores / math.sqrt(d) + bias
            else:
                scores = scores / math.sqrt(d)
            weights = attention_weights(scores, valid_lens if mask else None, fill)
            if bias_at == "weights":
                weights = weights + bias
            self.attention_weights = weights
            return weights @ self.W_v(X)

    return RelativeSelfAttention


CHECKS = {
    "check_sinusoidal_table": (sinusoidal_table, {
        "exponent j/d instead of 2j/d": (
            lambda n, d: sinusoidal_table(n, d, exponent=1), "values differ"),
        "sines then cosines": (
            lambda n, d: sinusoidal_table(n, d, layout="halves"), "values differ"),
        "even widths only": (even_only_table, "an odd width"),
    }),
    "check_shift_matrix": (shift_matrix, {
        "rotation transposed (shifts back)": (
            lambda delta, d: shift_matrix(delta, d, sign=-1), "values differ"),
        "frequency exponent j/d": (
            lambda delta, d: shift_matrix(delta, d, exponent=1), "values differ"),
    }),
    # The learner's class is the answer: the check builds it and copies seeded weights into it.
    "check_relative_self_attention": (relative_self_attention(), {
        "offset i - j instead of j - i": (relative_self_attention(sign=-1), "values differ"),
        "offsets not clipped": (relative_self_attention(clip=False), "raised IndexError"),
        "bias added to the weights": (
            relative_self_attention(bias_at="weights"), "offsets beyond max_distance"),
        "bias forgotten": (relative_self_attention(bias_at="none"), "values differ"),
        "bias divided by sqrt(d) too": (relative_self_attention(scale_bias=True), "values differ"),
        "mask forgotten": (relative_self_attention(mask=False), "valid_lens (B,)"),
        "-inf fill, NaN in an empty row": (relative_self_attention(fill="-inf"),
                                           "the result holds NaN"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_positional_encoding


def test_float32_answers_pass_where_float32_is_enough(capsys):
    exercises.check_shift_matrix(lambda delta, d: shift_matrix(delta, d).float())
    exercises.check_sinusoidal_table(lambda max_len, d: sinusoidal_table(max_len, d).float())
    assert capsys.readouterr().out.count("Correct: ") == 2


def test_reference_of_the_shift_matrix_agrees_with_the_package():
    # the shift matrix maps every row of the package's table to the row delta further
    P = d2lh.PositionalEncoding(16, max_len=40).P[0].double()
    for delta in (-3, 0, 5):
        M = shift_matrix_reference(delta, 16)
        rows = range(max(0, -delta), 40 - max(0, delta))
        shifted = P[[i + delta for i in rows]]
        torch.testing.assert_close(P[list(rows)] @ M.T, shifted, atol=1e-6, rtol=0)


def test_reference_of_the_relative_bias_is_the_definition():
    # entry by entry: score[i, j] = q_i . k_j / sqrt(d) + bias[clip(j - i) + max_distance]
    torch.manual_seed(0)
    module = _ReferenceRelativeAttention(4, max_distance=2)
    with torch.no_grad():
        module.relative_bias.copy_(torch.arange(5.0))
    X = torch.randn(1, 6, 4)
    with torch.no_grad():
        _, weights = _relative_self_attention(module, X, None)
        q, k = module.W_q(X)[0], module.W_k(X)[0]
    scores = torch.tensor([[q[i] @ k[j] / 2 + min(max(j - i, -2), 2) + 2 for j in range(6)]
                           for i in range(6)])
    torch.testing.assert_close(weights[0], torch.softmax(scores, dim=-1))
