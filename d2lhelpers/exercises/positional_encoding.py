"""The checks of notebook 05_self_attention_positional_encoding's coding exercises."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..positional import PositionalEncoding
from .cases import seeded_generator, random_sizes, case_label
from .runner import run_check

__all__ = ['check_sinusoidal_table', 'check_shift_matrix']


def check_sinusoidal_table(fn: Callable, seed: int = 0) -> None:
    """fn(max_len, d) -> the sinusoidal table P (max_len, d), for any width d (odd included):
    P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))."""

    generator = seeded_generator(seed)
    fixed = [("the notebook's sizes", 60, 32), ("a single position", 1, 4),
             ("an odd width", 10, 7), ("d = 1", 5, 1), ("one column pair", 3, 2)]
    random = [("", s["max_len"], s["d"]) for s in random_sizes(generator, 2, max_len=(1, 80), d=(1, 40))]
    cases = [(case_label(what, f"max_len={max_len}, d={d}"), (max_len, d))
             for what, max_len, d in fixed + random]
    run_check("sinusoidal_table", fn, cases,
              reference=lambda max_len, d: PositionalEncoding(d, max_len=max_len).P[0],
              hint="column 2j holds sin(i * omega_j) and column 2j+1 cos(i * omega_j), with "
                   "omega_j = 1 / 10000^(2j / d): the exponent uses 2j, the column index of the "
                   "sine. Interleave them (P[:, 0::2], P[:, 1::2]); with an odd d the last sine "
                   "has no cosine partner.")


def _shift_matrix(delta: int, d: int) -> torch.Tensor:
    """M_delta (d, d), float64: block j rotates by delta * omega_j, so that p_{i+delta} = M p_i."""
    omega = 1 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    cos, sin = torch.cos(delta * omega), torch.sin(delta * omega)
    rows = (torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1))  # (d/2, 2) each
    blocks = torch.stack(rows, -2)  # (d/2, 2, 2): row 0 of block j, then row 1
    return torch.block_diag(*blocks)


def check_shift_matrix(fn: Callable, seed: int = 0) -> None:
    """fn(delta, d) -> M_delta (d, d) for an even width d: the block-diagonal matrix of the 2x2
    rotations by delta * omega_j that maps every row p_i of the sinusoidal table to p_{i+delta}."""
    generator = seeded_generator(seed)
    fixed = [("", 1, 4), ("delta = 0: the identity", 0, 6), ("a negative offset", -3, 8),
             ("the notebook's width", 25, 32), ("one column pair", 2, 2)]
    random = [("", s["delta"], 2 * s["half_d"])
              for s in random_sizes(generator, 2, delta=(-20, 20), half_d=(1, 12))]
    cases = [(case_label(what, f"delta={delta}, d={d}"), (delta, d))
             for what, delta, d in fixed + random]
    # float32 reference: a float32 answer is as right as a float64 one
    run_check("shift_matrix", fn, cases, reference=lambda delta, d: _shift_matrix(delta, d).float(),
              hint="block j is [[cos(delta w_j), sin(delta w_j)], [-sin(delta w_j), "
                   "cos(delta w_j)]] with w_j = 1 / 10000^(2j / d), placed on the diagonal "
                   "(torch.block_diag); "
                   "check that M @ p_i equals p_(i+delta) on the table of section 3.")
