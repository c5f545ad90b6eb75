"""Attention: masked softmax and the scoring functions.

Shape legend used in every docstring of the package:
B batch, T_q queries, T_k keys (= key-value pairs), d query/key width, d_v value width,
d_model model width, h heads, d_k per-head width.

One mask convention throughout: ``valid_lens``. A query may look at keys ``0 .. valid_len - 1``.
``valid_lens`` is either ``None`` (every key is valid), of shape (B,) (one length per sequence, shared
by all its queries) or of shape (B, T_q) (one length per query, e.g. the causal mask of a decoder).
:func:`valid_lens_to_mask` converts it, at the edges, into the boolean mask PyTorch's own functions take.

Taught in notebook 03_attention_scoring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = [
    "check_valid_lens",
    "valid_lens_to_mask",
    "masked_softmax",
    "DotProductAttention",
    "AdditiveAttention",
    "KVCache",
    "MultiHeadAttention",
]


def check_valid_lens(valid_lens, batch_size: int, num_queries: int, num_keys: int) -> torch.Tensor | None:
    """Validate ``valid_lens`` against a (B, T_q, T_k) score tensor; return it as a tensor.

    Raises ``ValueError`` naming the shapes or values seen when it does not fit.
    """
    if valid_lens is None:
        return None
    valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"valid_lens must hold numbers, got dtype {valid_lens.dtype}")
    if valid_lens.shape not in ((batch_size,), (batch_size, num_queries)):
        raise ValueError(
            f"valid_lens must have shape (B,)=({batch_size},) or (B, T_q)=({batch_size}, {num_queries}) "
            f"for scores of shape (B, T_q, T_k)=({batch_size}, {num_queries}, {num_keys}), "
            f"got {tuple(valid_lens.shape)}"
        )
    # A length is a whole number of keys: 2.5 (or NaN) would silently mean "3 keys" (or "none").
    if valid_lens.is_floating_point() and not torch.equal(valid_lens, valid_lens.round()):
        raise ValueError(f"valid_lens must hold whole numbers of keys, got {valid_lens.tolist()}")
    if valid_lens.numel() and (valid_lens.min() < 0 or valid_lens.max() > num_keys):
        raise ValueError(
            f"valid_lens must lie in [0, T_k={num_keys}], got values from {valid_lens.min().item()} "
            f"to {valid_lens.max().item()}"
        )
    return valid_lens


def valid_lens_to_mask(valid_lens, num_queries: int, num_keys: int) -> torch.Tensor:
    """Boolean mask of shape (B, T_q, T_k): True where a query may attend to a key.

    This is the convention of ``torch.nn.functional.scaled_dot_product_attention``'s ``attn_mask``.
    ``valid_lens`` has shape (B,) or (B, T_q).
    """
    valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.dim() not in (1, 2):
        raise ValueError(f"valid_lens must have shape (B,) or (B, T_q), got {tuple(valid_lens.shape)}")
    check_valid_lens(valid_lens, valid_lens.shape[0], num_queries, num_keys)
    if valid_lens.dim() == 1:  # one length per sequence -> the same length for each of its queries
        valid_lens = valid_lens[:, None].expand(-1, num_queries)
    positions = torch.arange(num_keys, device=valid_lens.device)
    return positions[None, None, :] < valid_lens[:, :, None]  # (B, T_q, T_k)


def masked_softmax(scores: torch.Tensor, valid_lens=None) -> torch.Tensor:
    """Softmax over the last axis of ``scores`` that gives weight only to the first ``valid_len`` keys.

    scores: (B, T_q, T_k); valid_lens: None, (B,) or (B, T_q).
    Returns weights of shape (B, T_q, T_k): each row sums to 1 over its valid keys, masked entries are
    exactly 0, and a row with valid length 0 is all zeros (it attends to nothing), never NaN.
    The input is not modified; float16 and bfloat16 stay finite.
    """
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape (B, T_q, T_k), got {tuple(scores.shape)}")
    valid_lens = check_valid_lens(valid_lens, *scores.shape)
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    mask = valid_lens_to_mask(valid_lens.to(scores.device), scores.shape[1], scores.shape[2])
    # The most negative finite number, not -inf: a fully masked row then stays finite (uniform)
    # instead of 0/0 = NaN, and its gradient stays finite too. exp() of it underflows to exactly 0.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # The final masked_fill makes masked entries exactly 0, and all-masked rows all zeros.
    return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: softmax(Q K^T / sqrt(d)) V.

    queries: (B, T_q, d), keys: (B, T_k, d), values: (B, T_k, d_v), valid_lens: None, (B,) or (B, T_q).
    Returns (B, T_q, d_v). Dropout is applied to the attention weights; the weights themselves
    (before dropout, detached) are kept in ``.attention_weights`` (B, T_q, T_k) for plotting.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None):
        check_qkv_shapes(queries, keys, values)
        if queries.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"queries and keys must have the same width d for a dot product, got queries "
                f"{tuple(queries.shape)} and keys {tuple(keys.shape)}"
            )
        d = queries.shape[-1]
        scores = queries @ keys.transpose(1, 2) / math.sqrt(d)  # (B, T_q, d) @ (B, d, T_k) -> (B, T_q, T_k)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights.detach()
        return self.dropout(weights) @ values  # (B, T_q, T_k) @ (B, T_k, d_v) -> (B, T_q, d_v)


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: a(q, k) = w_v^T tanh(W_q q + W_k k).

    Queries and keys may have different widths.
    queries: (B, T_q, query_size), keys: (B, T_k, key_size), values: (B, T_k, d_v),
    valid_lens: None, (B,) or (B, T_q). Returns (B, T_q, d_v); weights kept in ``.attention_weights``.
    """

    def __init__(self, query_size: int, key_size: int, num_hiddens: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None):
        check_qkv_shapes(queries, keys, values)
        for name, x, layer in (("queries", queries, self.W_q), ("keys", keys, self.W_k)):
            if x.shape[-1] != layer.in_features:
                raise ValueError(
                    f"{name} must have width {layer.in_features}, got shape {tuple(x.shape)}"
                )
        q, k = self.W_q(queries), self.W_k(keys)  # (B, T_q, num_hiddens), (B, T_k, num_hiddens)
        # Broadcast every query against every key: (B, T_q, 1, H) + (B, 1, T_k, H) -> (B, T_q, T_k, H)
        features = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)  # (B, T_q, T_k, 1) -> (B, T_q, T_k)
        weights = masked_softmax(scores, valid_lens)
        self.attention_weights = weights.detach()
        return self.dropout(weights) @ values  # (B, T_q, d_v)


def check_qkv_shapes(queries, keys, values) -> None:
    """Raise ValueError unless queries (B, T_q, ·), keys (B, T_k, ·), values (B, T_k, ·) fit together."""
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a 3-D tensor (B, T, width), got {shape}")
    if not queries.shape[0] == keys.shape[0] == values.shape[0]:
        raise ValueError(
            f"queries, keys and values must share the batch size B, got {tuple(queries.shape)}, "
            f"{tuple(keys.shape)} and {tuple(values.shape)}"
        )
    if keys.shape[1] != values.shape[1]:
        raise ValueError(
            f"keys and values must have the same number of pairs T_k, got keys {tuple(keys.shape)} "
            f"and values {tuple(values.shape)}"
        )


@dataclass
class KVCache:
    """Keys and values already projected and split into heads, kept between decoding steps.

    keys, values: (B*h, T_cached, d_k), or None while empty. Used by :class:`MultiHeadAttention`:
    decoder self-attention appends one position per step; encoder-decoder attention projects the
    encoder outputs once (:meth:`MultiHeadAttention.project_keys_values`) and reuses them.
    """

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[1]


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, heads folded into the batch axis.

    Each of the h heads attends with its own slice of the projections W_q, W_k, W_v (d_model ->
    d_model, i.e. h heads of width d_k = d_model / h); the heads' outputs are concatenated and
    projected by W_o. Same function as ``torch.nn.MultiheadAttention(d_model, h, bias=bias,
    batch_first=True)`` with the same weights.

    queries: (B, T_q, d_model), keys and values: (B, T_k, d_model),
    valid_lens: None, (B,) or (B, T_q), shared by all heads. Returns (B, T_q, d_model).
    ``.attention_weights``: (B, h, T_q, T_k), for plotting.
    Taught in notebook 04_multihead_attention.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = False) -> None:
        super().__init__()
        if d_model <= 0 or num_heads <= 0 or d_model % num_heads:
            raise ValueError(
                f"d_model must be a positive multiple of num_heads, got d_model={d_model}, "
                f"num_heads={num_heads}"
            )
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.attention = DotProductAttention(dropout)
        self.attention_weights: torch.Tensor | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) -> (B*h, T, d_k): head i takes features i*d_k .. (i+1)*d_k - 1."""
        B, T, _ = x.shape
        x = x.reshape(B, T, self.num_heads, self.d_k)  # split the features into h groups
        x = x.transpose(1, 2)  # (B, h, T, d_k): heads next to the batch axis
        return x.reshape(B * self.num_heads, T, self.d_k)  # fold heads into the batch

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B*h, T, d_k) -> (B, T, d_model): the inverse of :meth:`split_heads` (concatenate heads)."""
        _, T, _ = x.shape
        x = x.reshape(-1, self.num_heads, T, self.d_k)  # unfold: (B, h, T, d_k)
        x = x.transpose(1, 2)  # (B, T, h, d_k)
        return x.reshape(x.shape[0], T, self.d_model)  # concatenate the heads' features

    def project_keys_values(self, keys: torch.Tensor, values: torch.Tensor) -> KVCache:
        """Project and split keys and values once, e.g. the encoder outputs a decoder attends to."""
        self._check_width(keys=keys, values=values)
        return KVCache(self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values)))

    def forward(self, queries, keys, values, valid_lens=None, cache: KVCache | None = None):
        """Attend; with ``cache``, decode step by step.

        cache: a :class:`KVCache`. If keys and values are given, their projections are appended
        to it and the queries attend over every cached position (decoder self-attention). If keys
        and values are None, the queries attend over the cache as it is (encoder-decoder attention
        with :meth:`project_keys_values`).
        """
        if keys is None or values is None:
            if keys is not None or values is not None or cache is None or len(cache) == 0:
                raise ValueError("keys and values may be None only together, with a filled cache")
            self._check_width(queries=queries)
            K, V = cache.keys, cache.values
        else:
            check_qkv_shapes(queries, keys, values)
            self._check_width(queries=queries, keys=keys, values=values)
            K, V = self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))
            if cache is not None:
                if len(cache):
                    K = torch.cat([cache.keys, K], dim=1)  # (B*h, T_cached + T_k, d_k)
                    V = torch.cat([cache.values, V], dim=1)
                cache.keys, cache.values = K, V
        B, T_q, _ = queries.shape
        if K.shape[0] != B * self.num_heads:
            raise ValueError(
                f"queries have batch size {B} but the cached keys hold {K.shape[0] // self.num_heads}"
            )
        valid_lens = check_valid_lens(valid_lens, B, T_q, K.shape[1])
        if valid_lens is not None:
            # every head of sequence b uses b's lengths: (B, ...) -> (B*h, ...), in split_heads' order
            valid_lens = torch.repeat_interleave(valid_lens, self.num_heads, dim=0)
        Q = self.split_heads(self.W_q(queries))  # (B*h, T_q, d_k)
        heads = self.attention(Q, K, V, valid_lens)  # (B*h, T_q, d_k)
        # (B*h, T_q, T_k) -> (B, h, T_q, T_k)
        self.attention_weights = self.attention.attention_weights.reshape(B, self.num_heads, T_q, -1)
        return self.W_o(self.merge_heads(heads))

    def _check_width(self, **tensors) -> None:
        for name, x in tensors.items():
            if x.dim() != 3 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have shape (B, T, d_model={self.d_model}), got {tuple(x.shape)}"
                )
