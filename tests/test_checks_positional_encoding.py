"""The checks of notebook 05_self_attention_positional_encoding
(d2lhelpers/exercises/checks_positional_encoding.py): right and plausible wrong answers (see
checks_common.py), and the checks' references against their definitions."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh
from checks_common import CheckTests, attention_weights
from d2lhelpers import exercises
from d2lhelpers.exercises import ExerciseCheckFailed, checks_positional_encoding
from d2lhelpers.exercises.checks_positional_encoding import (_offset_attention,
                                                             _ReferenceRelativeAttention,
                                                             _relative_self_attention,
                                                             _shift_matrix)


def sinusoidal_table(max_len, d, exponent=2, layout="interleave", first=torch.sin,
                     second=torch.cos, start=0, degrees=False):
    i = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]
    j = torch.arange((d + 1) // 2, dtype=torch.float64)
    angles = i / 10000 ** (exponent * j / d)  # (max_len, ceil(d/2))
    if degrees:
        angles = torch.deg2rad(angles)
    if layout == "halves":  # sines in the first half, cosines in the second
        return torch.cat([first(angles), second(angles)], dim=1)[:, :d]
    P = torch.empty(max_len, d, dtype=torch.float64)
    P[:, 0::2] = first(angles)
    P[:, 1::2] = second(angles[:, : d // 2])
    return P


def table_by_columns(max_len, d, exponent_of):
    """The table column by column, as a learner may write it: column k uses exponent_of(k)."""
    P = torch.zeros(max_len, d, dtype=torch.float64)
    i = torch.arange(max_len, dtype=torch.float64)
    for k in range(d):
        angle = i / 10000 ** (exponent_of(k) / d)
        P[:, k] = torch.sin(angle) if k % 2 == 0 else torch.cos(angle)
    return P


def whole_pairs_table(max_len, d):
    """A sine and a cosine for every frequency, also the last one of an odd width."""
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] / 10000 ** (
        torch.arange(0, d, 2, dtype=torch.float64) / d)
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(1)


def even_only_table(max_len, d):  # the notebook's section 3 code, which needs an even d
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    P = torch.zeros(max_len, d)
    P[:, 0::2], P[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return P


def offset_attention(P, delta, beta, turn=1, rotate="keys", scale="beta", dim=-1, mask=False):
    """Notebook 05's head that attends by offset, right by default; each argument names a
    mistake. Each pair (p_2j, p_2j+1) = (sin, cos) of the angle (position * omega_j) is the complex
    number exp(i * angle), and a shift by delta multiplies it by exp(i * delta * omega_j)."""
    T, d = P.shape
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.complex(P[:, 1::2], P[:, 0::2])  # (T, d/2): cos + i sin
    turned = z * torch.exp(1j * turn * delta * omega)  # one position later for each unit of delta
    turned = torch.stack([turned.imag, turned.real], dim=-1).flatten(1)  # back to (T, d)
    queries, keys = {"keys": (P, turned), "queries": (turned, P), "both": (turned, turned),
                     "none": (P, P)}[rotate]
    factor = {"beta": beta, "sqrt": beta / math.sqrt(d), "none": 1.0}[scale]
    scores = factor * queries @ keys.T
    if mask:
        scores = scores + torch.full((T, T), -math.inf, dtype=scores.dtype).triu(1)
    return torch.softmax(scores, dim=dim)


def encodings(positions, d):
    """The sinusoidal encodings of ``positions`` (any integers), float64, by the formula."""
    angle = positions[:, None].double() / 10000 ** (torch.arange(0, d, 2).double() / d)
    P = torch.zeros(len(positions), d, dtype=torch.float64)
    P[:, 0::2], P[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return P


def keys_then_weights(keys_of):
    """The head with keys keys_of(P, delta) instead of the rotated rows."""
    def weights(P, delta, beta):
        return torch.softmax(beta * P @ keys_of(P, delta).T, dim=-1)
    return weights


def turned_pairs(angle_of):
    """The head with pair j of every key turned by angle_of(delta, omega_j), pair by pair."""
    def weights(P, delta, beta):
        T, d = P.shape
        keys = torch.empty_like(P)
        for j in range(d // 2):
            a = torch.tensor(angle_of(delta, 1 / 10000 ** (2 * j / d)), dtype=torch.float64)
            s, c = P[:, 2 * j], P[:, 2 * j + 1]  # sin and cos of the angle of each row
            keys[:, 2 * j] = s * torch.cos(a) + c * torch.sin(a)
            keys[:, 2 * j + 1] = c * torch.cos(a) - s * torch.sin(a)
        return torch.softmax(beta * P @ keys.T, dim=-1)
    return weights


def relative_self_attention(sign=1, clip=True, bias_at="scores", scale_bias=False, mask=True,
                            fill="package", shift=True, scale=True, softmax_dim=-1,
                            keep_transposed=False, far_bias=True, distance=False, keep=None):
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
            far = offsets.abs() > self.max_distance
            if distance:  # how far, not in which direction
                offsets = offsets.abs()
            if clip == "one short":
                offsets = offsets.clamp(-self.max_distance + 1, self.max_distance - 1)
            elif clip:
                offsets = offsets.clamp(-self.max_distance, self.max_distance)
            bias = self.relative_bias[offsets + self.max_distance if shift else offsets]  # (T, T)
            if not far_bias:  # keys beyond max_distance get no bias
                bias = bias.masked_fill(far, 0.0)
            scores = self.W_q(X) @ self.W_k(X).transpose(1, 2)
            root = {True: math.sqrt(d), False: 1.0, "T": math.sqrt(T), "d": d}[scale]
            if bias_at == "scores":
                scores = (scores + bias) / root if scale_bias else scores / root + bias
            else:
                scores = scores / root
            if keep is not None and valid_lens is not None:  # keep(key index, valid length)
                lengths = (valid_lens[:, None, None] if valid_lens.dim() == 1
                           else valid_lens[..., None])
                weights = torch.softmax(scores.masked_fill(~keep(positions, lengths), -math.inf),
                                        dim=-1)
            elif fill == "after" and valid_lens is not None:  # zeroed after the softmax
                weights = torch.softmax(scores, -1) * d2lh.valid_lens_to_mask(valid_lens, T, T)
            elif softmax_dim == -1:
                weights = attention_weights(scores, valid_lens if mask else None,
                                            "package" if fill == "after" else fill)
            else:
                allowed = (torch.ones_like(scores, dtype=torch.bool) if valid_lens is None
                           else d2lh.valid_lens_to_mask(valid_lens, T, T))
                weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=softmax_dim)
            if bias_at == "weights":
                weights = weights + bias
            self.attention_weights = weights.transpose(1, 2) if keep_transposed else weights
            return weights @ self.W_v(X)

    return RelativeSelfAttention


CHECKS = {
    "check_sinusoidal_table": (sinusoidal_table, {
        "exponent j/d instead of 2j/d": (
            lambda n, d: sinusoidal_table(n, d, exponent=1), "differ", "exponent j/d"),
        "exponent 4j/d": (lambda n, d: table_by_columns(n, d, lambda k: 2 * (k - k % 2)), "differ",
                          "exponent 4j/d"),
        "positions multiplied": (lambda n, d: sinusoidal_table(n, d, exponent=-2), "differ",
                                 "multiplied by 10000"),
        "sines then cosines": (
            lambda n, d: sinusoidal_table(n, d, layout="halves"), "differ", "all the sines first"),
        "cosines first": (lambda n, d: sinusoidal_table(n, d, first=torch.cos, second=torch.sin),
                          "differ", "cosines in the even columns"),
        "each column its own exponent": (lambda n, d: table_by_columns(n, d, lambda k: k),
                                         "differ", "their own index"),
        "positions from 1": (lambda n, d: sinusoidal_table(n, d, start=1), "differ", "start at 1"),
        "the last column of an odd width left 0": (
            lambda n, d: sinusoidal_table(n, d) * (torch.arange(d) < d - d % 2),
            "an odd width", "is 0"),
        "even widths only": (even_only_table, "an odd width", "even widths only"),
        "transposed": (lambda n, d: sinusoidal_table(n, d).T, "expected shape", "transposed"),
        "angles in degrees": (lambda n, d: sinusoidal_table(n, d, degrees=True), "differ",
                              "not at the frequencies"),
        "an odd width rounded up to whole pairs": (whole_pairs_table, "an odd width",
                                                   "d + 1 columns"),
    }),
    "check_offset_attention": (offset_attention, {
        "rotated back": (lambda P, dl, b: offset_attention(P, dl, b, turn=-1), "differ",
                         "looks delta positions ahead"),
        "the queries rotated": (lambda P, dl, b: offset_attention(P, dl, b, rotate="queries"),
                                "differ", "looks delta positions ahead"),
        "both rotated": (lambda P, dl, b: offset_attention(P, dl, b, rotate="both"), "differ",
                         "looks at its own position"),
        "no rotation at all": (lambda P, dl, b: offset_attention(P, dl, b, rotate="none"),
                               "differ", "looks at its own position"),
        "rows rolled": (keys_then_weights(lambda P, dl: P.roll(-dl, dims=0)), "differ",
                        "rows of P moved"),
        "rows shifted, zeros past the end": (
            keys_then_weights(lambda P, dl: nn.functional.pad(P, (0, 0, 0, max(dl, 0)))[dl:]
                              if dl >= 0 else nn.functional.pad(P, (0, 0, -dl, 0))[:dl]),
            "differ", "rows of P moved"),
        "the table at j + delta from 0": (
            keys_then_weights(lambda P, dl: encodings(torch.arange(P.shape[0]) + dl, P.shape[1])),
            "positions not from 0", "counted from 0"),
        "exponent j/d": (turned_pairs(lambda dl, w: dl * w ** 0.5), "differ", "another frequency"),
        "delta forgotten": (turned_pairs(lambda dl, w: w), "differ", "whatever delta"),
        "omega forgotten": (turned_pairs(lambda dl, w: dl), "differ", "every pair by delta"),
        "scaled by sqrt(d)": (lambda P, dl, b: offset_attention(P, dl, b, scale="sqrt"), "differ",
                              "divided by sqrt(d)"),
        "beta forgotten": (lambda P, dl, b: offset_attention(P, dl, b, scale="none"), "differ",
                           "ignore beta"),
        "softmax over the queries": (lambda P, dl, b: offset_attention(P, dl, b, dim=0),
                                     "differ", "over the queries"),
        "a causal mask": (lambda P, dl, b: offset_attention(P, dl, b, mask=True), "differ",
                          "causal mask"),
        "the weights transposed": (lambda P, dl, b: offset_attention(P, dl, b).T, "differ",
                                   "~last two axes swapped"),
        "exp of the scores, not normalised": (
            lambda P, dl, b: torch.exp(b * P @ P.T - b * P.shape[1] / 2), "differ", None),
    }),
    # The learner's class is the answer: the check builds it and copies seeded weights into it.
    "check_relative_self_attention": (relative_self_attention(), {
        "offset i - j instead of j - i": (relative_self_attention(sign=-1), "differ", "i - j"),
        "offsets not clipped": (relative_self_attention(clip=False), "raised IndexError",
                                "not clipped"),
        "offsets clipped one short": (relative_self_attention(clip="one short"), "differ",
                                      "clipped one short"),
        "offsets not shifted": (relative_self_attention(shift=False), "differ",
                                "without the shift"),
        "bias added to the weights": (
            relative_self_attention(bias_at="weights"), "offsets beyond max_distance",
            "added to the weights"),
        "bias forgotten": (relative_self_attention(bias_at="none"), "differ", "no relative bias"),
        "bias divided by sqrt(d) too": (relative_self_attention(scale_bias=True), "differ",
                                        "with the scores"),
        "not scaled": (relative_self_attention(scale=False), "differ", "not scaled"),
        "scaled by d": (relative_self_attention(scale="d"), "differ", "d_model itself"),
        "the padding zeroed after the softmax": (relative_self_attention(fill="after"),
                                                 "valid_lens (B,)", "zeroed on the padding"),
        "scaled by the number of tokens": (relative_self_attention(scale="T"), "differ",
                                           "number of tokens"),
        "mask forgotten": (relative_self_attention(mask=False), "valid_lens (B,)",
                           "ignore valid_lens"),
        "-inf fill, NaN in an empty row": (relative_self_attention(fill="-inf"),
                                           "the result holds NaN", "hold NaN"),
        "softmax over the queries": (relative_self_attention(softmax_dim=1), "differ",
                                     "over the queries"),
        "-1e9 fill: an empty row uniform": (relative_self_attention(fill="-1e9"),
                                            "a sequence with valid length 0", "finite fill"),
        "weights kept transposed": (relative_self_attention(keep_transposed=True),
                                    "result 1 of the tuple", "attention_weights are transposed"),
        "keys beyond max_distance get no bias": (relative_self_attention(far_bias=False),
                                                 "offsets beyond max_distance", "not clipped"),
        "the distance |j - i| instead of the offset": (relative_self_attention(distance=True),
                                                       "differ", "direction of the offset"),
        "the mask inverted": (relative_self_attention(keep=lambda key, length: key >= length),
                              "valid_lens (B,)", "mask is inverted"),
        "the mask one key too long": (
            relative_self_attention(keep=lambda key, length: key <= length), "valid_lens (B,)",
            "off by one"),
        "the offsets clipped but the bias forgotten and the weights over the queries": (
            relative_self_attention(bias_at="none", softmax_dim=1), "differ", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_positional_encoding


def test_float32_answers_pass_where_float32_is_enough(capsys):
    exercises.check_sinusoidal_table(lambda max_len, d: sinusoidal_table(max_len, d).float())
    assert capsys.readouterr().out.count("Correct: ") == 1


def test_offset_attention_wants_float64_like_its_input():
    with pytest.raises(ExerciseCheckFailed, match="float64"):
        exercises.check_offset_attention(lambda P, dl, b: offset_attention(P, dl, b).float())


def test_reference_of_the_offset_head_is_the_definition():
    # the shift matrix maps every row of the package's table to the row delta further, and the
    # head's key of position j is the encoding of position j + delta, also past the table
    P = d2lh.PositionalEncoding(16, max_len=40).P[0].double()
    for delta in (-3, 0, 5):
        M = _shift_matrix(delta, 16)
        rows = range(max(0, -delta), 40 - max(0, delta))
        torch.testing.assert_close(P[list(rows)] @ M.T, P[[i + delta for i in rows]], atol=1e-6,
                                   rtol=0)
        start = 100
        P_far = encodings(torch.arange(start, start + 12), 16)
        keys = encodings(torch.arange(start + delta, start + 12 + delta), 16)
        torch.testing.assert_close(_offset_attention(P_far, delta, 2.0),
                                   torch.softmax(2.0 * P_far @ keys.T, dim=-1))


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
