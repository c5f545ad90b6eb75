"""Positions: the fixed sinusoidal table of "Attention Is All You Need", added to the inputs,
and rotary position embeddings (RoPE), which rotate queries and keys instead.

Shape legend used in every docstring of the package:
B batch, T sequence length (T_q queries, T_k keys), d_model model width.

Self-attention is blind to order (permuting the tokens permutes its outputs), so each position i
gets a fixed vector p_i added to its token's representation:

    p_{i, 2j}   = sin(i / 10000^(2j / d_model))
    p_{i, 2j+1} = cos(i / 10000^(2j / d_model))

RoPE (Su et al. 2021) rotates each pair of features (x_2j, x_2j+1) of a query or key at
position m by the angle m * omega_j, with the frequencies omega_j of the table above (the 2x2
rotations of notebook 05), so that the score q_m . k_n depends on the offset n - m only.

Taught in notebooks 05_self_attention_positional_encoding and 11_modern_attention (RoPE).
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from .basics import check_int

__all__ = ["PositionalEncoding", "rotary_frequencies", "apply_rotary", "RotaryEmbedding"]


def _sinusoid_table(max_len: int, d_model: int) -> torch.Tensor:
    """The table P of shape (max_len, d_model), computed in float64 and returned as float32."""
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_j = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2j = 0, 2, 4, ...
    # (max_len, 1) / (ceil(d_model/2),) broadcasts to (max_len, ceil(d_model/2)): i / 10000^(2j/d_model)
    angles = positions / 10000 ** (two_j / d_model)
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)  # even columns 2j
    # Odd columns 2j+1 share the frequency of column 2j. With an odd d_model the last even
    # column has no cosine partner, hence the slice to d_model // 2 frequencies.
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


class PositionalEncoding(nn.Module):
    """Add the sinusoidal positional encoding to a batch of sequences, then apply dropout.

    d_model: the width of the representations (odd widths work: the last column is then a sine
    without its cosine partner). max_len: the longest position + 1 the table covers; the table is a
    function of the position, so a larger ``max_len`` extends it without changing its first rows.

    The table is the buffer ``P`` of shape (1, max_len, d_model): it moves with ``.to()`` and
    follows the module's dtype, but it is not saved in ``state_dict`` (it is a constant that
    the constructor recomputes, so checkpoints stay small and do not depend on ``max_len``).
    """

    def __init__(self, d_model: int, dropout: float = 0.0, max_len: int = 1000) -> None:
        super().__init__()
        check_int(d_model, "d_model")
        check_int(max_len, "max_len")
        self.d_model, self.max_len = d_model, max_len
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("P", _sinusoid_table(max_len, d_model)[None], persistent=False)

    def forward(self, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """X: (B, T, d_model) -> dropout(X + P[:, offset : offset + T]), of shape (B, T, d_model).

        offset: the position of X's first token, e.g. t when a decoder is fed its t-th token
        alone (positions count from 0).
        """
        if not isinstance(X, torch.Tensor) or X.dim() != 3 or X.shape[-1] != self.d_model:
            shape = tuple(X.shape) if isinstance(X, torch.Tensor) else type(X).__name__
            raise ValueError(f"X must have shape (B, T, d_model={self.d_model}), got {shape}")
        check_int(offset, "offset", minimum=0)
        T = X.shape[1]
        if offset + T > self.max_len:
            raise ValueError(
                f"positions offset={offset} .. offset+T-1={offset + T - 1} (T={T}) lie beyond the "
                f"table: max_len={self.max_len}; build PositionalEncoding with a larger max_len"
            )
        # (1, T, d_model) broadcast over the batch; cast so that e.g. float16 inputs stay float16
        return self.dropout(X + self.P[:, offset : offset + T].to(X.dtype))


def rotary_frequencies(d_k: int, base: float = 10000.0, dtype=torch.float32,
                       device=None) -> torch.Tensor:
    """The d_k / 2 angular frequencies omega_j = base^(-2j / d_k), j = 0 .. d_k/2 - 1: shape (d_k/2,).

    Those of the sinusoidal encoding for a width of d_k: pair j of features turns by the angle
    m * omega_j at position m.
    """
    check_int(d_k, "d_k")
    if d_k % 2:
        raise ValueError(f"d_k must be even (features are rotated in pairs), got d_k={d_k}")
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    two_j = torch.arange(0, d_k, 2, dtype=torch.float64, device=device)
    return (base ** (-two_j / d_k)).to(dtype)


def apply_rotary(x: torch.Tensor, positions, base: float = 10000.0) -> torch.Tensor:
    """Rotate each pair of features (x_2j, x_2j+1) of ``x`` by the angle m * omega_j, m the position.

    x: (..., T, d_k), floating point, d_k even; positions: (T,) the position of each of the T rows
    (whole numbers, e.g. ``offset + torch.arange(T)``, or any others, such as the odd positions of
    a cache). Returns a tensor of x's shape and dtype:

        y_2j   = x_2j cos(m omega_j) - x_2j+1 sin(m omega_j)
        y_2j+1 = x_2j sin(m omega_j) + x_2j+1 cos(m omega_j)

    i.e. the complex number x_2j + i x_2j+1 multiplied by e^(i m omega_j). Then
    apply_rotary(q, [m]) . apply_rotary(k, [n]) depends on q, k and n - m only.
    Angles are computed in float64 for float64 inputs, in float32 otherwise.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] % 2:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (..., T, d_k) with d_k even, got {shape}")
    if not x.is_floating_point():  # cos and sin cast to integers would be silently wrong
        raise ValueError(f"x must be floating point, got dtype {x.dtype}")
    positions = torch.as_tensor(positions, device=x.device)
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"positions must have shape (T,)=({x.shape[-2]},) for x of shape "
                         f"{tuple(x.shape)}, got {tuple(positions.shape)}")
    return _rotate(x, *_cos_sin(positions, x.shape[-1], base, x.dtype))


def _cos_sin(positions: torch.Tensor, d_k: int, base: float, dtype: torch.dtype):
    """cos and sin of the angles m * omega_j, laid out for :func:`_rotate`: (T,) positions -> two
    (T, d_k) tensors of ``dtype``, each pair's cosine twice, and its sine with a minus for the first
    feature of the pair (cos_j, cos_j, ...; -sin_j, sin_j, ...); the angles computed in float64 for
    float64, in float32 otherwise."""
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    omega = rotary_frequencies(d_k, base, angle_dtype, positions.device)  # (d_k/2,)
    angles = positions.to(angle_dtype)[:, None] * omega  # (T, 1) * (d_k/2,) -> (T, d_k/2)
    cos, sin = torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)
    return cos.repeat_interleave(2, dim=-1), torch.stack([-sin, sin], dim=-1).flatten(-2)


@functools.lru_cache(maxsize=32)
def _cos_sin_from(offset: int, length: int, d_k: int, base: float, dtype: torch.dtype,
                  device: torch.device):
    """:func:`_cos_sin` of the positions offset .. offset + length - 1, kept: a decoder's layers,
    and its queries and keys, all rotate the same positions at each step (constants, no gradient)."""
    return _cos_sin(torch.arange(offset, offset + length, device=device), d_k, base, dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Each feature pair of x (..., T, d_k) turned by the angles of :func:`_cos_sin` (T, d_k):
    x_2j cos - x_2j+1 sin and x_2j+1 cos + x_2j sin, as x times the cosines plus x with each pair
    swapped times the signed sines. The same products and sums as pair by pair, so the same
    numbers, from contiguous tensors (strided pairs would make every product slow on a CPU)."""
    swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)  # (x_2j+1, x_2j) in each pair
    return x * cos + swapped * sin


class RotaryEmbedding(nn.Module):
    """RoPE for heads of width ``d_k``: ``rope(x, offset)`` rotates x (..., T, d_k) as positions
    offset .. offset + T - 1 (a decoder fed its t-th token alone passes offset=t).

    No parameters and no table: the angles are computed for the positions asked for, so there is
    no longest length (the cos and sin of the last few position ranges are kept, since every layer
    of a decoder, its queries and its keys rotate the same positions at each step).
    """

    def __init__(self, d_k: int, base: float = 10000.0) -> None:
        super().__init__()
        rotary_frequencies(d_k, base)  # checks d_k and base
        self.d_k, self.base = d_k, base

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        check_int(offset, "offset", minimum=0)
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] != self.d_k:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must have shape (..., T, d_k={self.d_k}), got {shape}")
        if not x.is_floating_point():
            raise ValueError(f"x must be floating point, got dtype {x.dtype}")
        return _rotate(x, *_cos_sin_from(offset, x.shape[-2], self.d_k, self.base, x.dtype,
                                         x.device))

    def extra_repr(self) -> str:
        return f"d_k={self.d_k}, base={self.base:g}"
