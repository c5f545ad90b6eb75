"""Attention: masked softmax, the scoring functions, multi-head attention and its key-value cache.

Shape legend used in every docstring of the package:
B batch, T_q queries, T_k keys (= key-value pairs), d query/key width, d_v value width,
d_model model width, h heads, d_k per-head width.

One mask convention throughout: ``valid_lens``. A query may look at keys ``0 .. valid_len - 1``.
``valid_lens`` is either ``None`` (every key is valid), of shape (B,) (one length per sequence, shared
by all its queries) or of shape (B, T_q) (one length per query, e.g. the causal mask of a decoder).
:func:`sequence_mask` and :func:`valid_lens_to_mask` convert it, at the edges, into the boolean
masks that PyTorch's own functions take.

Two paths compute the same attention, chosen explicitly with ``need_weights``:

- the **readable path** (``need_weights=True``, the default of the attention layers): scores,
  :func:`masked_softmax`, weighted sum, written out as notebooks 03 and 04 teach it; it keeps the
  weights in ``.attention_weights`` for plotting;
- the **fast path** (``need_weights=False``, what the Transformer's blocks use to train and decode):
  :func:`fused_attention`, PyTorch's fused ``scaled_dot_product_attention``, which never stores the
  weights. A query with no valid key gets the output 0 on both paths. ``tests/test_attention.py``
  checks that the two agree, outputs and gradients.

Taught in notebooks 03_attention_scoring and 04_multihead_attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = [
    "sequence_mask",
    "check_valid_lens",
    "valid_lens_to_mask",
    "masked_softmax",
    "fused_attention",
    "DotProductAttention",
    "AdditiveAttention",
    "KVCache",
    "MultiHeadAttention",
]


def sequence_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """True at the first ``length`` of ``max_len`` positions: shape ``(*lengths.shape, max_len)``.

    >>> sequence_mask(torch.tensor([1, 3]), 4)
    tensor([[ True, False, False, False],
            [ True,  True,  True, False]])

    The one place the course builds a padding mask; PyTorch's ``key_padding_mask`` is its negation.
    """
    positions = torch.arange(max_len, device=lengths.device)
    return positions < lengths[..., None]  # (max_len,) < (..., 1) broadcasts to (..., max_len)


def check_valid_lens(valid_lens, batch_size: int, num_queries: int, num_keys: int) -> torch.Tensor | None:
    """Validate ``valid_lens`` against a (B, T_q, T_k) score tensor; return it as a tensor.

    Raises ``ValueError`` naming the shapes or values seen when it does not fit. The range check
    reads the values (a device synchronisation on a GPU): layers call this once, where the lengths
    enter, and trust them further in.
    """
    if valid_lens is None:
        return None
    if not isinstance(valid_lens, torch.Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"valid_lens must hold numbers, got dtype {valid_lens.dtype}")
    if valid_lens.shape != (batch_size,) and valid_lens.shape != (batch_size, num_queries):
        raise ValueError(
            f"valid_lens must have shape (B,)=({batch_size},) or (B, T_q)=({batch_size}, {num_queries}) "
            f"for scores of shape (B, T_q, T_k)=({batch_size}, {num_queries}, {num_keys}), "
            f"got {tuple(valid_lens.shape)}"
        )
    # A length is a whole number of keys: 2.5 (or NaN) would silently mean "3 keys" (or "none").
    if valid_lens.is_floating_point() and not torch.equal(valid_lens, valid_lens.round()):
        raise ValueError(f"valid_lens must hold whole numbers of keys, got {valid_lens.tolist()}")
    if valid_lens.numel():
        low, high = (x.item() for x in torch.aminmax(valid_lens))  # one pass over the values
        if low < 0 or high > num_keys:
            raise ValueError(
                f"valid_lens must lie in [0, T_k={num_keys}], got values from {low} to {high}")
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
    return sequence_mask(valid_lens, num_keys)  # (B, T_q) lengths -> (B, T_q, T_k)


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


def fused_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    valid_lens: torch.Tensor | None = None, dropout: float = 0.0) -> torch.Tensor:
    """The fast path: ``F.scaled_dot_product_attention`` with the course's mask convention.

    queries (B, T_q, d) or (B, h, T_q, d); keys (B, [h,] T_k, d); values (B, [h,] T_k, d_v);
    valid_lens None, (B,) or (B, T_q), shared by the h heads. Returns (B, [h,] T_q, d_v), the same
    as the readable path (:class:`DotProductAttention` with ``need_weights=True``), including a
    query with no valid key, whose output is 0 (PyTorch's kernels do so since version 2.5; they
    gave NaN before). ``dropout`` is the probability of dropping an attention weight (pass 0 in
    evaluation). The inputs are trusted: check them where they enter (:func:`check_valid_lens`).
    """
    mask = None
    if valid_lens is not None:
        lens = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None]  # (B, T_q) or (B, 1)
        mask = sequence_mask(lens, keys.shape[-2])  # (B, T_q or 1, T_k): True = may attend
        if queries.dim() == 4:
            mask = mask[:, None]  # one mask for all heads: (B, 1, T_q or 1, T_k)
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, dropout_p=dropout)


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: softmax(Q K^T / sqrt(d)) V.

    queries: (B, T_q, d), keys: (B, T_k, d), values: (B, T_k, d_v), valid_lens: None, (B,) or (B, T_q).
    Returns (B, T_q, d_v). Dropout is applied to the attention weights.

    ``need_weights=True`` (the default) takes the readable path: the weights (before dropout,
    detached) are kept in ``.attention_weights`` (B, T_q, T_k) for plotting. ``need_weights=False``
    takes the fast path, :func:`fused_attention`, and keeps no weights.
    """

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool = True):
        check_qkv_shapes(queries, keys, values)
        if queries.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"queries and keys must have the same width d for a dot product, got queries "
                f"{tuple(queries.shape)} and keys {tuple(keys.shape)}"
            )
        valid_lens = check_valid_lens(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1])
        if not need_weights:
            self.attention_weights = None
            lens = None if valid_lens is None else valid_lens.to(queries.device)
            return fused_attention(queries, keys, values, lens,
                                   self.dropout.p if self.training else 0.0)
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

    keys, values: (B, h, T_cached, d_k), or None while empty. A decoder's self-attention appends the
    keys and values of each new position (:meth:`append`); its encoder-decoder attention holds the
    projected encoder outputs, filled once (:meth:`MultiHeadAttention.project_keys_values`). Beam
    search keeps the caches of the surviving beams with :meth:`reorder`.
    """

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def append(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add the keys and values (B, h, T_new, d_k) of new positions after the cached ones."""
        if self.keys is None:
            self.keys, self.values = keys, values
        else:  # (B, h, T_cached, d_k) + (B, h, T_new, d_k) -> (B, h, T_cached + T_new, d_k)
            self.keys = torch.cat([self.keys, keys], dim=2)
            self.values = torch.cat([self.values, values], dim=2)

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (B_new,) of the batch, in that order: row r becomes old row
        ``rows[r]`` (beam search copies each surviving beam's cache from its parent)."""
        if self.keys is not None:
            self.keys, self.values = self.keys[rows], self.values[rows]


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention.

    Each of the h heads attends with its own slice of the projections W_q, W_k, W_v (d_model ->
    d_model, i.e. h heads of width d_k = d_model / h); the heads' outputs are concatenated and
    projected by W_o. Same function as ``torch.nn.MultiheadAttention(d_model, h, bias=bias,
    batch_first=True)`` with the same weights.

    queries: (B, T_q, d_model), keys and values: (B, T_k, d_model),
    valid_lens: None, (B,) or (B, T_q), shared by all heads. Returns (B, T_q, d_model).
    ``need_weights=True`` (the default, for teaching and plotting) takes the readable path, with the
    heads folded into the batch axis as notebook 04 builds it, and keeps ``.attention_weights``,
    (B, h, T_q, T_k); ``need_weights=False`` (what the Transformer's blocks use) the fast path.

    A decoder attends in two steps: :meth:`project_keys_values` (once, into a :class:`KVCache`),
    then :meth:`attend` (for every new query). ``forward`` is the two together.
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
        """(B, T, d_model) -> (B, h, T, d_k): head i takes features i*d_k .. (i+1)*d_k - 1."""
        B, T, _ = x.shape
        return x.reshape(B, T, self.num_heads, self.d_k).transpose(1, 2)  # heads next to the batch

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, h, T, d_k) -> (B, T, d_model): the inverse of :meth:`split_heads` (concatenate heads)."""
        B, _, T, _ = x.shape
        return x.transpose(1, 2).reshape(B, T, self.d_model)  # (B, T, h, d_k) -> (B, T, h*d_k)

    def _check_width(self, **tensors) -> None:
        for name, x in tensors.items():
            if x.dim() != 3 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have shape (B, T, d_model={self.d_model}), got {tuple(x.shape)}")

    def project_keys_values(self, keys: torch.Tensor, values: torch.Tensor) -> KVCache:
        """Project and split keys and values (B, T_k, d_model) into a cache of (B, h, T_k, d_k)."""
        self._check_width(keys=keys, values=values)
        return KVCache(self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values)))

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool = True):
        check_qkv_shapes(queries, keys, values)
        self._check_width(queries=queries, keys=keys, values=values)
        valid_lens = check_valid_lens(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1])
        if valid_lens is not None:
            valid_lens = valid_lens.to(queries.device)
        return self.attend(queries, self.project_keys_values(keys, values), valid_lens,
                           need_weights)

    def attend(self, queries: torch.Tensor, cache: KVCache, valid_lens: torch.Tensor | None = None,
               need_weights: bool = True) -> torch.Tensor:
        """queries (B, T_q, d_model) attend over the keys and values held in ``cache``.

        The inputs are trusted (``forward``, or the model that calls this, checked them):
        valid_lens None, (B,) or (B, T_q), on the queries' device. Returns (B, T_q, d_model).
        """
        self._check_width(queries=queries)
        B, T_q, _ = queries.shape
        if len(cache) == 0 or cache.keys.shape[0] != B:
            held = "nothing" if len(cache) == 0 else f"a batch of {cache.keys.shape[0]}"
            raise ValueError(f"queries have batch size {B} but the cache holds {held}")
        Q = self.split_heads(self.W_q(queries))  # (B, h, T_q, d_k)
        if need_weights:
            # Fold the heads into the batch axis, (B, h, ...) -> (B*h, ...), as notebook 04 does;
            # every head of sequence b uses b's lengths, in the same order.
            lens = None if valid_lens is None else valid_lens.repeat_interleave(self.num_heads, dim=0)
            heads = self.attention(Q.flatten(0, 1), cache.keys.flatten(0, 1),
                                   cache.values.flatten(0, 1), lens).unflatten(0, (B, -1))
            # (B*h, T_q, T_k) -> (B, h, T_q, T_k)
            self.attention_weights = self.attention.attention_weights.unflatten(0, (B, -1))
        else:
            heads = fused_attention(Q, cache.keys, cache.values, valid_lens,
                                    self.attention.dropout.p if self.training else 0.0)
            self.attention_weights = None
        return self.W_o(self.merge_heads(heads))  # (B, h, T_q, d_k) -> (B, T_q, d_model)
