"""Attention: masks, masked softmax, the scoring functions, the online softmax, multi-head
(and grouped-query) attention and its key-value cache.

Shape legend used in every docstring of the package:
B batch, T_q queries, T_k keys (= key-value pairs), d query/key width, d_v value width,
d_model model width, h heads, g key-value heads, d_k per-head width.

One mask convention throughout: ``valid_lens``. A query may look at keys ``0 .. valid_len - 1``.
``valid_lens`` is either ``None`` (every key is valid), of shape (B,) (one length per sequence, shared
by all its queries) or of shape (B, T_q) (one length per query, e.g. the causal mask of a decoder).
:func:`sequence_mask` and :func:`valid_lens_to_mask` convert it, at the edges, into the boolean
masks that PyTorch's own functions take.

Lengths are validated once, where they enter (:func:`check_valid_lens`, which reads the values once:
one host synchronisation); what the layers call further in trusts them.

Two paths compute the same attention, chosen explicitly with ``need_weights``:

- the **readable path** (``need_weights=True``, the default of the attention layers): scores,
  masked softmax, weighted sum, written out as notebooks 03 and 04 teach it. The layers keep the
  weights (before dropout, detached) in the attribute ``.attention_weights`` for plotting: the one
  thing a forward leaves on its module, overwritten by the next call;
- the **fast path** (``need_weights=False``, what the Transformer's blocks use to train and decode):
  :func:`fused_attention`, PyTorch's fused ``scaled_dot_product_attention``, which never stores the
  weights. A query with no valid key gets the output 0 on both paths. ``tests/test_attention.py``
  checks that the two agree, outputs and gradients.

:func:`online_softmax_attention` computes the same function block by block, never holding the
T_q x T_k weights (the idea behind FlashAttention), taught in notebook 11_modern_attention.

Taught in notebooks 03_attention_scoring and 04_multihead_attention.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .basics import check_int
from .positional import RotaryEmbedding

__all__ = [
    "sequence_mask",
    "check_valid_lens",
    "causal_valid_lens",
    "valid_lens_to_mask",
    "masked_softmax",
    "fused_attention",
    "online_softmax_update",
    "online_softmax_attention",
    "DotProductAttention",
    "AdditiveAttention",
    "KVCache",
    "kv_cache_bytes",
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


def check_valid_lens(valid_lens, batch_size: int, num_queries: int | None, num_keys: int, *,
                     name: str = "valid_lens", keys_name: str = "T_k", minimum: int = 0,
                     device=None) -> torch.Tensor | None:
    """Validate lengths where they enter; return them as a tensor (on ``device`` if given).

    ``valid_lens``: None, (B,) or, unless ``num_queries`` is None, (B, T_q); whole numbers in
    ``minimum .. num_keys``. ``name`` and ``keys_name`` are the caller's names for the argument
    and for the number of keys (e.g. ``"src_valid_lens"`` and ``"T_src"``), so that an error names
    what the caller passed. Raises ``ValueError`` naming the shapes or values seen.

    The range check reads the values once (one host synchronisation, which stalls a GPU): call
    this at the door, and let what is called further in trust the lengths.
    """
    if valid_lens is None:
        return None
    if not isinstance(valid_lens, torch.Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.dtype == torch.bool or valid_lens.is_complex():
        raise ValueError(f"{name} must hold whole numbers, got dtype {valid_lens.dtype}")
    shapes = [(batch_size,)] + ([] if num_queries is None else [(batch_size, num_queries)])
    if valid_lens.shape not in shapes:
        wanted = " or ".join(f"{s}" for s in ("(B,)=" + f"({batch_size},)",
                                              f"(B, T_q)=({batch_size}, {num_queries})")[:len(shapes)])
        raise ValueError(f"{name} must have shape {wanted}, got {tuple(valid_lens.shape)}")
    values = valid_lens.flatten().tolist()  # the one read of the values (a sync on a GPU)
    bad = [v for v in values if not minimum <= v <= num_keys or v != int(v)] if values else []
    if bad:  # 2.5 (or NaN) keys would silently mean 3 (or none)
        raise ValueError(f"{name} must be whole numbers in [{minimum}, {keys_name}={num_keys}], "
                         f"got {bad[0] if len(bad) == 1 else bad[:5]}")
    if device is None or valid_lens.device == torch.device(device):
        return valid_lens
    return valid_lens.to(device)


def causal_valid_lens(batch_size: int, num_queries: int, offset: int = 0, device=None) -> torch.Tensor:
    """Per-query valid lengths of a causal mask, shape (B, T_q): query i sees keys 0 .. offset + i.

    ``offset`` counts positions decoded before these queries (the length of a key-value cache).
    """
    lens = torch.arange(offset + 1, offset + num_queries + 1, device=device)
    return lens.expand(batch_size, num_queries)  # the same lengths for every sequence


def _lens_mask(valid_lens: torch.Tensor | None, num_keys: int, dim: int = 3):
    """Trusted lengths -> a boolean mask that broadcasts over scores (B, [h,] T_q, T_k): True where
    a query may attend. (B,) gives (B, [1,] 1, T_k); (B, T_q) gives (B, [1,] T_q, T_k)."""
    if valid_lens is None:
        return None
    lens = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None]  # (B, T_q) or (B, 1)
    mask = sequence_mask(lens, num_keys)  # (B, T_q or 1, T_k)
    return mask[:, None] if dim == 4 else mask  # one mask for all heads: (B, 1, T_q or 1, T_k)


def valid_lens_to_mask(valid_lens, num_queries: int, num_keys: int) -> torch.Tensor:
    """Boolean mask of shape (B, T_q, T_k): True where a query may attend to a key.

    This is the convention of ``torch.nn.functional.scaled_dot_product_attention``'s ``attn_mask``
    (``nn.MultiheadAttention``'s masks use the opposite one: True = blocked).
    ``valid_lens`` has shape (B,) or (B, T_q).
    """
    valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.dim() not in (1, 2):
        raise ValueError(f"valid_lens must have shape (B,) or (B, T_q), got {tuple(valid_lens.shape)}")
    valid_lens = check_valid_lens(valid_lens, valid_lens.shape[0], num_queries, num_keys)
    return _lens_mask(valid_lens, num_keys).expand(-1, num_queries, -1)


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis where ``mask`` (broadcast to the scores) is True; exactly 0
    elsewhere, and all zeros in a row with no True."""
    if mask is None:
        return torch.softmax(scores, dim=-1)
    # The most negative finite number, not -inf: a fully masked row then stays finite (uniform)
    # instead of 0/0 = NaN, and its gradient stays finite too. exp() of it underflows to exactly 0.
    filled = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    # The final masked_fill makes masked entries exactly 0, and all-masked rows all zeros.
    return torch.softmax(filled, dim=-1).masked_fill(~mask, 0.0)


def masked_softmax(scores: torch.Tensor, valid_lens=None) -> torch.Tensor:
    """Softmax over the last axis of ``scores`` that gives weight only to the first ``valid_len`` keys.

    scores: (B, T_q, T_k); valid_lens: None, (B,) or (B, T_q).
    Returns weights of shape (B, T_q, T_k): each row sums to 1 over its valid keys, masked entries are
    exactly 0, and a row with valid length 0 is all zeros (it attends to nothing), never NaN.
    The input is not modified; float16 and bfloat16 stay finite.
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 3:
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must have shape (B, T_q, T_k), got {shape}")
    if not scores.is_floating_point():
        raise ValueError(f"scores must be floating point, got dtype {scores.dtype}")
    valid_lens = check_valid_lens(valid_lens, *scores.shape, device=scores.device)
    return _masked_softmax(scores, _lens_mask(valid_lens, scores.shape[-1]))


def fused_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                    valid_lens: torch.Tensor | None = None, dropout: float = 0.0) -> torch.Tensor:
    """The fast path: ``F.scaled_dot_product_attention`` with the course's mask convention.

    queries (B, T_q, d) or (B, h, T_q, d); keys (B, [g,] T_k, d); values (B, [g,] T_k, d_v), with g
    key-value heads each shared by h/g query heads (g = h: multi-head attention); valid_lens None,
    (B,) or (B, T_q), shared by the heads. Returns (B, [h,] T_q, d_v), the same as the readable
    path, including a query with no valid key, whose output is 0 (PyTorch's kernels do so since
    version 2.5; they gave NaN before). ``dropout`` is the probability of dropping an attention
    weight (pass 0 in evaluation). The inputs are trusted: check them where they enter
    (:func:`check_valid_lens`).
    """
    mask = _lens_mask(valid_lens, keys.shape[-2], queries.dim())
    grouped = queries.dim() == 4 and keys.shape[1] != queries.shape[1]
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, dropout_p=dropout,
                                          **({"enable_gqa": True} if grouped else {}))


def _attention(queries, keys, values, valid_lens, dropout: nn.Dropout, need_weights: bool):
    """Scaled dot-product attention on trusted inputs, shaped as for :func:`fused_attention`;
    returns ``(outputs, weights)``: the readable path (weights (B, [h,] T_q, T_k), before dropout,
    detached) when ``need_weights``, else the fast path (weights None)."""
    if not need_weights:
        p = dropout.p if dropout.training else 0.0
        return fused_attention(queries, keys, values, valid_lens, p), None
    if queries.dim() == 4 and keys.shape[1] != queries.shape[1]:
        group = queries.shape[1] // keys.shape[1]  # each key-value head serves h/g query heads
        keys = keys.repeat_interleave(group, dim=1)  # (B, g, T_k, d_k) -> (B, h, T_k, d_k)
        values = values.repeat_interleave(group, dim=1)
    d = queries.shape[-1]
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(d)  # (..., T_q, d) @ (..., d, T_k)
    weights = _masked_softmax(scores, _lens_mask(valid_lens, keys.shape[-2], queries.dim()))
    return dropout(weights) @ values, weights.detach()  # (..., T_q, T_k) @ (..., T_k, d_v)


def _keep_weights(layer: nn.Module, weights: torch.Tensor | None) -> None:
    """Keep the weights of the last call in ``layer.attention_weights`` (None on the fast path).
    Skips a store that changes nothing: nn.Module's ``__setattr__`` costs about 10 us, which the
    fast path feels on small inputs (benchmarks/attention.py, T = 64)."""
    if weights is not None or layer.attention_weights is not None:
        layer.attention_weights = weights


def online_softmax_update(m: torch.Tensor, l: torch.Tensor, acc: torch.Tensor,
                          scores: torch.Tensor, values: torch.Tensor):
    """One block of the online softmax: fold a new block of scores and values into the running
    state of every query; return the new ``(m, l, acc)``.

    m (..., T_q, 1): the largest score seen so far (-inf before any valid key);
    l (..., T_q, 1): sum over the keys seen of exp(score - m);
    acc (..., T_q, d_v): sum over the keys seen of exp(score - m) * value;
    scores (..., T_q, b): the new block's scores, -inf where a key may not be attended to;
    values (..., b, d_v): the new block's values.

    When the maximum grows from m to m_new, what was summed under the old maximum is rescaled by
    exp(m - m_new). After the last block, acc / l is softmax(scores) @ values (0 for a query that
    saw no valid key: its l stays 0). A query that has seen no valid key yet keeps m = -inf and
    l = acc = 0.
    """
    m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
    # While m_new = -inf (no valid key yet), subtract 0 instead: exp(-inf - 0) = 0, whereas
    # exp(-inf - (-inf)) would be NaN.
    shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    p = torch.exp(scores - shift)  # (..., T_q, b), each in [0, 1]
    correction = torch.exp(m - shift)  # (..., T_q, 1): rescales the sums made under the old max
    return m_new, l * correction + p.sum(dim=-1, keepdim=True), acc * correction + p @ values


def online_softmax_attention(queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                             valid_lens=None, block_size: int = 64) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) V computed over blocks of ``block_size`` keys, never holding the
    T_q x T_k weights: each query keeps a running maximum, a running sum and a running weighted
    sum of the values (:func:`online_softmax_update`).

    queries (B, [h,] T_q, d), keys (B, [h,] T_k, d), values (B, [h,] T_k, d_v), floating point;
    valid_lens None, (B,) or (B, T_q) (shared by the h heads). Returns (B, [h,] T_q, d_v), equal (up
    to rounding) to :func:`fused_attention` with the same lengths; a query with no valid key gets 0.
    What it holds at once grows like T_q * (block_size + d_v), not T_q * T_k.
    """
    check_int(block_size, "block_size")
    tensors = {"queries": queries, "keys": keys, "values": values}
    for name, x in tensors.items():
        if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4) or x.dim() != queries.dim():
            raise ValueError(f"queries, keys and values must all have shape (B, T, d) or "
                             f"(B, h, T, d), got {name} {_shape(x)}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be floating point, got dtype {x.dtype}")
    if (queries.shape[:-2] != keys.shape[:-2] or keys.shape[:-1] != values.shape[:-1]
            or queries.shape[-1] != keys.shape[-1]):
        raise ValueError(f"queries (B, [h,] T_q, d), keys (B, [h,] T_k, d) and values "
                         f"(B, [h,] T_k, d_v) do not fit: got {tuple(queries.shape)}, "
                         f"{tuple(keys.shape)}, {tuple(values.shape)}")
    B, T_q, T_k = queries.shape[0], queries.shape[-2], keys.shape[-2]
    valid_lens = check_valid_lens(valid_lens, B, T_q, T_k, device=queries.device)
    lens = None
    if valid_lens is not None:  # (B, [1,] T_q or 1, 1): each query's number of valid keys
        lens = (valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens)[..., None]
        if queries.dim() == 4:
            lens = lens[:, None]
    scale = 1 / math.sqrt(queries.shape[-1])
    like = {"dtype": queries.dtype, "device": queries.device}
    m = torch.full(queries.shape[:-1] + (1,), -math.inf, **like)  # (B, [h,] T_q, 1)
    l = torch.zeros(queries.shape[:-1] + (1,), **like)
    acc = torch.zeros(queries.shape[:-1] + values.shape[-1:], **like)  # (B, [h,] T_q, d_v)
    for start in range(0, T_k, block_size):
        K, V = keys[..., start:start + block_size, :], values[..., start:start + block_size, :]
        scores = queries @ K.transpose(-2, -1) * scale  # (B, [h,] T_q, b): one block of scores
        if lens is not None:
            key_index = torch.arange(start, start + K.shape[-2], device=queries.device)
            scores = scores.masked_fill(key_index >= lens, -math.inf)  # invalid keys: weight 0
        m, l, acc = online_softmax_update(m, l, acc, scores, V)
    return acc / torch.where(l > 0, l, torch.ones_like(l))  # no valid key: acc = 0 stays 0


def _shape(x) -> str:
    """A tensor's shape as a tuple, or the type of what is not a tensor, for error messages."""
    return str(tuple(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__


def check_qkv_shapes(queries, keys, values) -> None:
    """Raise ValueError unless queries (B, T_q, ·), keys (B, T_k, ·), values (B, T_k, ·) are
    floating-point tensors that fit together."""
    for name, x in (("queries", queries), ("keys", keys), ("values", values)):
        if not isinstance(x, torch.Tensor) or x.dim() != 3:
            raise ValueError(f"{name} must be a 3-D tensor (B, T, width), got {_shape(x)}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be floating point, got dtype {x.dtype}")
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
        valid_lens = check_valid_lens(valid_lens, queries.shape[0], queries.shape[1],
                                      keys.shape[1], device=queries.device)
        outputs, weights = _attention(queries, keys, values, valid_lens, self.dropout, need_weights)
        _keep_weights(self, weights)
        return outputs


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: a(q, k) = w_v^T tanh(W_q q + W_k k).

    Queries and keys may have different widths.
    queries: (B, T_q, query_size), keys: (B, T_k, key_size), values: (B, T_k, d_v),
    valid_lens: None, (B,) or (B, T_q). Returns (B, T_q, d_v); weights kept in ``.attention_weights``.
    A decoder that attends over the same keys at every step projects them once and calls
    :meth:`attend`.
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
        valid_lens = check_valid_lens(valid_lens, queries.shape[0], queries.shape[1],
                                      keys.shape[1], device=queries.device)
        return self.attend(self.W_q(queries), self.W_k(keys), values, valid_lens)

    def attend(self, q, k, values, valid_lens=None):
        """The attention from projected queries q (B, T_q, num_hiddens) and keys k (B, T_k,
        num_hiddens), inputs trusted; a decoder projects its keys once and attends at every step."""
        # Broadcast every query against every key: (B, T_q, 1, H) + (B, 1, T_k, H) -> (B, T_q, T_k, H)
        features = torch.tanh(q.unsqueeze(2) + k.unsqueeze(1))
        scores = self.w_v(features).squeeze(-1)  # (B, T_q, T_k, 1) -> (B, T_q, T_k)
        weights = _masked_softmax(scores, _lens_mask(valid_lens, k.shape[1]))
        self.attention_weights = weights.detach()
        return self.dropout(weights) @ values  # (B, T_q, d_v)


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


def kv_cache_bytes(num_layers: int, num_kv_heads: int, d_k: int, num_tokens: int = 1,
                   batch_size: int = 1, bytes_per_number: int = 2) -> int:
    """Bytes of a key-value cache: keys and values (2) of ``num_kv_heads`` heads of width ``d_k``
    per layer, for every token of every sequence: 2 * layers * g * d_k * tokens * B * bytes.

    ``bytes_per_number``: 2 for float16/bfloat16 (what large models are served in), 4 for float32.
    """
    for name, value in (("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("d_k", d_k),
                        ("num_tokens", num_tokens), ("batch_size", batch_size),
                        ("bytes_per_number", bytes_per_number)):
        check_int(value, name, minimum=0 if name == "num_tokens" else 1)
    return 2 * num_layers * num_kv_heads * d_k * num_tokens * batch_size * bytes_per_number


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, and its grouped-query form.

    h = ``num_heads`` query heads of width d_k = d_model / h, each with its own slice of the
    projections W_q, W_k, W_v; the heads' outputs are concatenated and projected by W_o. With
    g = ``num_kv_heads`` < h key-value heads (grouped-query attention; g = 1 is multi-query
    attention), W_k and W_v project to g heads only and each serves h/g query heads: query head i
    reads key-value head i // (h/g), PyTorch's convention for ``enable_gqa``; the key-value cache
    then holds g heads instead of h. g = h (the default) is the same function as
    ``torch.nn.MultiheadAttention(d_model, h, bias=bias, batch_first=True)`` with the same weights
    (:meth:`to_torch`). With ``rotary=True`` queries and keys are rotated by their positions (RoPE,
    :class:`~d2lhelpers.positional.RotaryEmbedding`, base ``rotary_base``) before the scores.

    ``forward(queries (B, T_q, d_model), keys and values (B, T_k, d_model), valid_lens)`` ->
    (B, T_q, d_model); valid_lens None, (B,) or (B, T_q), shared by all heads, checked here.
    ``need_weights=True`` (the default, for teaching and plotting) takes the readable path and keeps
    ``.attention_weights``, (B, h, T_q, T_k); ``need_weights=False`` (what the Transformer's blocks
    use) the fast path.

    A decoder attends in two steps, trusting its inputs: :meth:`project_keys_values` (once, into a
    :class:`KVCache`), then :meth:`attend` (for every new query); ``forward`` is the two together.
    :meth:`step` is causal self-attention of new positions after those in a cache.
    Taught in notebooks 04_multihead_attention and 11_modern_attention (grouped queries, RoPE).
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = False,
                 num_kv_heads: int | None = None, rotary: bool = False,
                 rotary_base: float = 10000.0) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("d_model", d_model), ("num_heads", num_heads),
                            ("num_kv_heads", num_kv_heads)):
            check_int(value, name)
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads must divide d_model and num_kv_heads must divide num_heads, got "
                f"d_model={d_model}, num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        self.W_q = nn.Linear(d_model, num_heads * self.d_k, bias=bias)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.W_o = nn.Linear(num_heads * self.d_k, d_model, bias=bias)
        self.rotary = RotaryEmbedding(self.d_k, rotary_base) if rotary else None
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, n * d_k) -> (B, n, T, d_k), n = h for queries, g for keys and values: head i
        takes features i*d_k .. (i+1)*d_k - 1."""
        return x.unflatten(-1, (-1, self.d_k)).transpose(1, 2)  # (B, T, n, d_k) -> (B, n, T, d_k)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, h, T, d_k) -> (B, T, h * d_k): the inverse of :meth:`split_heads` (concatenate heads)."""
        return x.transpose(1, 2).flatten(2)  # (B, T, h, d_k) -> (B, T, h*d_k)

    def _check_width(self, **tensors) -> None:
        for name, x in tensors.items():
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must have shape (B, T, d_model={self.d_model}), got {_shape(x)}")

    def project_keys_values(self, keys: torch.Tensor, values: torch.Tensor,
                            offset: int = 0) -> KVCache:
        """keys and values (B, T_k, d_model) -> a :class:`KVCache` of (B, g, T_k, d_k) each, the
        keys rotated as positions offset .. offset + T_k - 1 when the layer uses RoPE."""
        K, V = self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))
        if self.rotary is not None:
            K = self.rotary(K, offset)  # the keys carry their positions; the values do not
        return KVCache(K, V)

    def attend(self, queries: torch.Tensor, cache: KVCache, valid_lens: torch.Tensor | None = None,
               need_weights: bool = True, offset: int = 0) -> torch.Tensor:
        """queries (B, T_q, d_model), at positions offset .. offset + T_q - 1 (for RoPE), attend
        over the keys and values held in ``cache``; returns (B, T_q, d_model).

        The inputs are trusted (``forward``, or the model that calls this, checked them):
        valid_lens None, (B,) or (B, T_q), on the queries' device.
        """
        Q = self.split_heads(self.W_q(queries))  # (B, h, T_q, d_k)
        if self.rotary is not None:
            Q = self.rotary(Q, offset)
        heads, weights = _attention(Q, cache.keys, cache.values, valid_lens, self.dropout,
                                    need_weights)
        _keep_weights(self, weights)
        return self.W_o(self.merge_heads(heads))  # (B, h, T_q, d_k) -> (B, T_q, d_model)

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool = True):
        check_qkv_shapes(queries, keys, values)
        self._check_width(queries=queries, keys=keys, values=values)
        valid_lens = check_valid_lens(valid_lens, queries.shape[0], queries.shape[1],
                                      keys.shape[1], device=queries.device)
        return self.attend(queries, self.project_keys_values(keys, values), valid_lens,
                           need_weights)

    def step(self, X: torch.Tensor, cache: KVCache, need_weights: bool = False) -> torch.Tensor:
        """Causal self-attention of new positions X (B, T_new, d_model) that follow the
        ``len(cache)`` positions cached: their keys and values join ``cache``, then position i of X
        attends to every cached position up to itself. Returns (B, T_new, d_model). A fresh
        cache gives causal self-attention over X (teacher forcing, training)."""
        offset = len(cache)
        new = self.project_keys_values(X, X, offset)  # (B, g, T_new, d_k) each
        cache.append(new.keys, new.values)
        # one new position sees every cached one, itself included: no mask to build
        causal = causal_valid_lens(X.shape[0], X.shape[1], offset, X.device) if X.shape[1] > 1 \
            else None  # (B, T_new)
        return self.attend(X, cache, causal, need_weights, offset)

    def to_torch(self) -> nn.MultiheadAttention:
        """A ``torch.nn.MultiheadAttention`` (``batch_first=True``) holding a copy of these
        weights, computing the same function (in eval mode, or with dropout 0), on the same device.
        Only for multi-head attention (g = h) without RoPE, which PyTorch's layer has no form of."""
        if self.num_kv_heads != self.num_heads or self.rotary is not None:
            raise ValueError(f"nn.MultiheadAttention has no grouped-query heads or RoPE; this layer "
                             f"has num_kv_heads={self.num_kv_heads} of num_heads={self.num_heads}, "
                             f"rotary={self.rotary is not None}")
        has_bias = self.W_q.bias is not None
        theirs = nn.MultiheadAttention(self.d_model, self.num_heads, dropout=self.dropout.p,
                                       bias=has_bias, batch_first=True,
                                       device=self.W_q.weight.device, dtype=self.W_q.weight.dtype)
        with torch.no_grad():
            # PyTorch stacks the three input projections into one (3*d_model, d_model) matrix
            theirs.in_proj_weight.copy_(torch.cat([self.W_q.weight, self.W_k.weight,
                                                   self.W_v.weight]))
            theirs.out_proj.weight.copy_(self.W_o.weight)
            if has_bias:
                theirs.in_proj_bias.copy_(torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias]))
                theirs.out_proj.bias.copy_(self.W_o.bias)
        return theirs.train(self.training)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, d_k={self.d_k}")
