"""Positional encoding: the fixed sinusoidal table of "Attention Is All You Need".

Shape legend used in every docstring of the package:
B batch, T sequence length (T_q queries, T_k keys), d_model model width.

Self-attention is blind to order (permuting the tokens permutes its outputs), so each position i
gets a fixed vector p_i added to its token's representation:

    p_{i, 2j}   = sin(i / 10000^(2j / d_model))
    p_{i, 2j+1} = cos(i / 10000^(2j / d_model))

Taught in notebook 05_self_attention_positional_encoding.
"""

from __future__ import annotations

import torch
from torch import nn

from .basics import check_int

__all__ = ["PositionalEncoding"]


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
