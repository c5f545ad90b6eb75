"""The checks of notebook 05_self_attention_positional_encoding's coding exercises: the sinusoidal
table for any width, the shift matrix M_delta, and self-attention with learned relative biases."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ..attention import masked_softmax
from ..positional import PositionalEncoding
from .cases import (MASK_KINDS, case_label, labelled, randn, random_choice, random_sizes,
                    seeded_generator, size_text, valid_lens_case)
from .runner import run_check

__all__ = ['check_sinusoidal_table', 'check_shift_matrix', 'check_relative_self_attention']


def check_sinusoidal_table(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(max_len, d) -> the sinusoidal table P (max_len, d), for any width d (odd included):
    P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))."""

    generator = seeded_generator(seed)
    fixed = [("the notebook's sizes", (60, 32)), ("a single position", (1, 4)),
             ("an odd width", (10, 7)), ("d = 1", (5, 1)), ("one column pair", (3, 2))]
    random = [("", (s["max_len"], s["d"]))
              for s in random_sizes(generator, 2, max_len=(1, 80), d=(1, 40))]
    cases = labelled(fixed + random, lambda max_len, d: f"max_len={max_len}, d={d}")
    run_check("sinusoidal_table", fn, cases,
              reference=lambda max_len, d: PositionalEncoding(d, max_len=max_len).P[0],
              hints=("Compare your table with the formula column by column: which columns hold "
                     "sines, which cosines, and which exponent does each pair use? Try an odd "
                     "width too.",
                     "column 2j holds sin(i * omega_j) and column 2j+1 cos(i * omega_j), with "
                     "omega_j = 1 / 10000^(2j / d): the exponent uses 2j, the column index of the "
                     "sine. Interleave them (P[:, 0::2], P[:, 1::2]); with an odd d the last sine "
                     "has no cosine partner."),
              hint=hint)


def _shift_matrix(delta: int, d: int) -> torch.Tensor:
    """M_delta (d, d), float64: block j rotates by delta * omega_j, so that p_{i+delta} = M p_i."""
    omega = 1 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    cos, sin = torch.cos(delta * omega), torch.sin(delta * omega)
    rows = (torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1))  # (d/2, 2) each
    blocks = torch.stack(rows, -2)  # (d/2, 2, 2): row 0 of block j, then row 1
    return torch.block_diag(*blocks)


def check_shift_matrix(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(delta, d) -> M_delta (d, d) for an even width d: the block-diagonal matrix of the 2x2
    rotations by delta * omega_j that maps every row p_i of the sinusoidal table to p_{i+delta}."""
    generator = seeded_generator(seed)
    fixed = [("", (1, 4)), ("delta = 0: the identity", (0, 6)), ("a negative offset", (-3, 8)),
             ("the notebook's width", (25, 32)), ("one column pair", (2, 2))]
    random = [("", (s["delta"], 2 * s["half_d"]))
              for s in random_sizes(generator, 2, delta=(-20, 20), half_d=(1, 12))]
    cases = labelled(fixed + random, lambda delta, d: f"delta={delta}, d={d}")
    # float32 reference: a float32 answer is as right as a float64 one
    run_check("shift_matrix", fn, cases, reference=lambda delta, d: _shift_matrix(delta, d).float(),
              hints=("M_delta is block diagonal: one 2x2 rotation per pair of columns, each by "
                     "its own angle. Check the angles and the signs of the sines.",
                     "block j is [[cos(delta w_j), sin(delta w_j)], [-sin(delta w_j), cos(delta "
                     "w_j)]] with w_j = 1 / 10000^(2j / d), placed on the diagonal "
                     "(torch.block_diag); check that M @ p_i equals p_(i+delta) on the table of "
                     "section 3."),
              hint=hint)


class _ReferenceRelativeAttention(nn.Module):
    """The parameters of the exercise's module, for the reference computation."""

    def __init__(self, d_model: int, max_distance: int) -> None:
        super().__init__()
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.relative_bias = nn.Parameter(torch.zeros(2 * max_distance + 1))


def _relative_self_attention(module: nn.Module, X: torch.Tensor, valid_lens) -> tuple:
    """The reference: one head, scores Q K^T / sqrt(d) plus the bias of each offset j - i
    (clipped to +-max_distance), masked softmax, weighted values."""
    d, T = X.shape[-1], X.shape[1]
    max_distance = (module.relative_bias.numel() - 1) // 2
    positions = torch.arange(T)
    offsets = positions[None, :] - positions[:, None]  # (T_q, T_k): key j minus query i
    bias = module.relative_bias[offsets.clamp(-max_distance, max_distance) + max_distance]
    scores = module.W_q(X) @ module.W_k(X).transpose(1, 2) / math.sqrt(d) + bias  # (B, T, T)
    weights = masked_softmax(scores, valid_lens)
    return weights @ module.W_v(X), weights


def check_relative_self_attention(cls: type, seed: int = 0, hint: int = 1) -> None:
    """cls(d_model, max_distance): one head of self-attention with a learned bias for each
    relative offset: score[i, j] = q_i . k_j / sqrt(d_model) + relative_bias[max_distance + delta],
    delta = j - i clipped to [-max_distance, max_distance]. It holds ``W_q``, ``W_k``, ``W_v``
    (nn.Linear(d_model, d_model, bias=False)) and ``relative_bias`` (2 * max_distance + 1,);
    ``forward(X, valid_lens)`` with X (B, T, d_model) and valid_lens None, (B,) or (B, T) returns
    (B, T, d_model) and keeps the weights in ``.attention_weights`` (B, T, T)."""
    generator = seeded_generator(seed)
    fixed = [("offsets beyond max_distance", dict(d_model=8, max_distance=2, B=2, T=6), None),
             ("", dict(d_model=4, max_distance=1, B=2, T=5), "per sequence"),
             ("max_distance beyond the sequence", dict(d_model=6, max_distance=8, B=2, T=3), None),
             ("a single token", dict(d_model=4, max_distance=2, B=1, T=1), None),
             ("a causal mask", dict(d_model=8, max_distance=3, B=2, T=5), "causal"),
             ("", dict(d_model=4, max_distance=2, B=2, T=3), "zero")]
    random = [("", s, random_choice(generator, MASK_KINDS)) for s in
              random_sizes(generator, 2, d_model=(1, 8), max_distance=(0, 4), B=(1, 3), T=(1, 8))]
    cases = []
    for what, s, kind in fixed + random:
        parameters = {name: randn(generator, s["d_model"], s["d_model"]) / math.sqrt(s["d_model"])
                      for name in ("W_q", "W_k", "W_v")}
        parameters["relative_bias"] = 2 * randn(generator, 2 * s["max_distance"] + 1)
        X = randn(generator, s["B"], s["T"], s["d_model"])
        valid_lens, mask = valid_lens_case(generator, kind, s["B"], s["T"])
        cases.append((case_label(what, f"{size_text(s)}, {mask}"),
                      (s["d_model"], s["max_distance"], parameters, X, valid_lens)))

    def build(module_class, d_model, max_distance, parameters):
        module = module_class(d_model, max_distance)
        with torch.no_grad():
            for name, value in parameters.items():
                have = getattr(module, name, None)
                have = getattr(have, "weight", have)  # a Linear's weight, or the bias itself
                if not isinstance(have, torch.Tensor) or have.shape != value.shape:
                    raise TypeError(f"the module needs {name} of shape {tuple(value.shape)} "
                                    f"(see the exercise), got {have!r}")
                have.copy_(value)
        return module.eval()

    def learner(d_model, max_distance, parameters, X, valid_lens):
        module = build(cls, d_model, max_distance, parameters)
        with torch.no_grad():
            output = module(X, valid_lens)
        return output, getattr(module, "attention_weights", None)

    def reference(d_model, max_distance, parameters, X, valid_lens):
        module = build(_ReferenceRelativeAttention, d_model, max_distance, parameters)
        with torch.no_grad():
            return _relative_self_attention(module, X, valid_lens)

    run_check("RelativeSelfAttention", learner, cases, reference,
              hints=("Result 0 is forward's output, result 1 its attention_weights. For one query "
                     "i and one key j, which entry of relative_bias belongs to them, also when "
                     "they are further apart than max_distance, and where in the computation is "
                     "it added?",
                     "build the (T, T) table of offsets j - i (key minus query), clip it to "
                     "[-max_distance, max_distance], shift it by max_distance to index "
                     "relative_bias, and add that bias to the scaled scores before "
                     "d2lh.masked_softmax."),
              hint=hint)
