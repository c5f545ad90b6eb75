"""Beyond 2017: the pieces of today's decoder-only Transformers, on top of the 2017 model.

- **Rotary position embeddings** (RoPE, Su et al. 2021): instead of adding a positional vector to
  the input, rotate each query and key by an angle proportional to its position, pair of features
  by pair of features (the 2x2 rotations of notebook 05). The score q_m . k_n then depends on the
  offset n - m only. :func:`rotary_frequencies`, :func:`apply_rotary`, :class:`RotaryEmbedding`.
- **Grouped-query attention** (GQA, Ainslie et al. 2023; multi-query attention, Shazeer 2019):
  h query heads share g key-value heads (g divides h), so that the key-value cache holds g heads
  instead of h. g = h is multi-head attention, g = 1 multi-query attention.
  :class:`GroupedQueryAttention`, :func:`kv_cache_bytes`.
- **Online softmax** (Milakov and Gimelshein 2018; the core of FlashAttention, Dao et al. 2022):
  attention computed block by block over the keys with a running maximum and a running sum, never
  holding the T_q x T_k matrix of weights. :func:`online_softmax_update`, :func:`online_softmax_attention`, and
  :class:`TensorMemoryTracker` to measure what an algorithm holds at once.
- **A decoder-only language model** (pre-norm, causal, RoPE) with its key-value cache, and
  sampling with temperature, top-k and top-p: :class:`DecoderOnlyBlock`, :class:`DecoderOnlyLM`,
  :class:`LMState`, :func:`next_token_probs`, :func:`generate`.

Shape legend (as in :mod:`~d2lhelpers.attention`): B batch, T_q queries, T_k keys, T positions,
d_model model width, h query heads, g key-value heads, d_k per-head width, V vocabulary size.
One mask convention: valid lengths (see :mod:`~d2lhelpers.attention`). Taught in notebook
10_beyond_2017.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .attention import KVCache, check_valid_lens, masked_softmax, sequence_mask
from .basics import check_int
from .transformer import PositionwiseFFN, causal_valid_lens

__all__ = [
    "DecoderOnlyBlock",
    "DecoderOnlyLM",
    "GroupedQueryAttention",
    "LMState",
    "RotaryEmbedding",
    "TensorMemoryTracker",
    "apply_rotary",
    "generate",
    "kv_cache_bytes",
    "next_token_probs",
    "online_softmax_attention",
    "online_softmax_update",
    "rotary_frequencies",
]

# --------------------------------------------------------------------------------------------------
# Rotary position embeddings
# --------------------------------------------------------------------------------------------------


def rotary_frequencies(d_k: int, base: float = 10000.0, dtype=torch.float32,
                       device=None) -> torch.Tensor:
    """The d_k / 2 angular frequencies omega_j = base^(-2j / d_k), j = 0 .. d_k/2 - 1: shape (d_k/2,).

    Those of the sinusoidal encoding (notebook 05) for a width of d_k: pair j of features turns by
    the angle m * omega_j at position m.
    """
    check_int(d_k, "d_k")
    if d_k % 2:
        raise ValueError(f"d_k must be even (features are rotated in pairs), got d_k={d_k}")
    if not base > 1:
        raise ValueError(f"base must be a number > 1, got {base!r}")
    two_j = torch.arange(0, d_k, 2, dtype=torch.float64, device=device)
    return (base ** (-two_j / d_k)).to(dtype)


def apply_rotary(x: torch.Tensor, positions, base: float = 10000.0) -> torch.Tensor:
    """Rotate each pair of features (x_2j, x_2j+1) of ``x`` by the angle m * omega_j, m the position.

    x: (..., T, d_k), d_k even; positions: (T,) the position of each of the T rows (whole numbers,
    e.g. ``offset + torch.arange(T)``, or any others, such as the odd positions of a cache).
    Returns a tensor of x's shape and dtype:

        y_2j   = x_2j cos(m omega_j) - x_2j+1 sin(m omega_j)
        y_2j+1 = x_2j sin(m omega_j) + x_2j+1 cos(m omega_j)

    i.e. the complex number x_2j + i x_2j+1 multiplied by e^(i m omega_j). Then
    apply_rotary(q, [m]) . apply_rotary(k, [n]) depends on q, k and n - m only.
    Angles are computed in float64 for float64 inputs, in float32 otherwise.
    """
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.shape[-1] % 2:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (..., T, d_k) with d_k even, got {shape}")
    positions = torch.as_tensor(positions, device=x.device)
    if positions.shape != (x.shape[-2],):
        raise ValueError(f"positions must have shape (T,)=({x.shape[-2]},) for x of shape "
                         f"{tuple(x.shape)}, got {tuple(positions.shape)}")
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    omega = rotary_frequencies(x.shape[-1], base, dtype, x.device)  # (d_k/2,)
    angles = positions.to(dtype)[:, None] * omega  # (T, 1) * (d_k/2,) -> (T, d_k/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    pairs = x.unflatten(-1, (-1, 2))  # (..., T, d_k) -> (..., T, d_k/2, 2): the feature pairs
    even, odd = pairs[..., 0], pairs[..., 1]  # (..., T, d_k/2) each
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)  # (..., T, d_k/2, 2) -> (..., T, d_k)


class RotaryEmbedding(nn.Module):
    """RoPE for heads of width ``d_k``: ``rope(x, offset)`` rotates x (..., T, d_k) as positions
    offset .. offset + T - 1 (a decoder fed its t-th token alone passes offset=t).

    No parameters and no table: the angles are computed for the positions asked for, so there is
    no longest length.
    """

    def __init__(self, d_k: int, base: float = 10000.0) -> None:
        super().__init__()
        rotary_frequencies(d_k, base)  # checks d_k and base
        self.d_k, self.base = d_k, base

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        check_int(offset, "offset", minimum=0)
        if x.dim() < 2 or x.shape[-1] != self.d_k:
            raise ValueError(f"x must have shape (..., T, d_k={self.d_k}), got {tuple(x.shape)}")
        positions = torch.arange(offset, offset + x.shape[-2], device=x.device)
        return apply_rotary(x, positions, self.base)

    def extra_repr(self) -> str:
        return f"d_k={self.d_k}, base={self.base:g}"


# --------------------------------------------------------------------------------------------------
# Grouped-query attention
# --------------------------------------------------------------------------------------------------


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


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention: h query heads, g key-value heads, each shared by h/g query heads.

    W_q projects d_model -> h * d_k (d_k = d_model / h, as in multi-head attention); W_k and W_v
    project d_model -> g * d_k only; W_o maps the h concatenated heads back to d_model. Query head
    i reads key-value head i // (h/g) (PyTorch's convention for ``enable_gqa``).
    ``num_kv_heads == num_heads`` is multi-head attention (the same function as
    :class:`~d2lhelpers.attention.MultiHeadAttention` with the same weights), ``num_kv_heads == 1``
    multi-query attention. With ``rotary=True`` queries and keys are rotated by RoPE
    (:func:`apply_rotary`, ``rotary_base``) at their positions before the scores.

    ``forward(queries (B, T_q, d_model), keys and values (B, T_k, d_model), valid_lens)`` ->
    (B, T_q, d_model), valid_lens None, (B,) or (B, T_q); with rotary, queries sit at positions
    0 .. T_q - 1 and keys at 0 .. T_k - 1. A decoder attends in two steps, as with
    MultiHeadAttention: :meth:`project_keys_values` into a :class:`~d2lhelpers.attention.KVCache`
    of (B, g, T_k, d_k) tensors, then :meth:`attend`; :meth:`step` is causal self-attention of new
    positions after those in a cache. ``need_weights=True`` takes the readable path (key-value
    heads repeated, :func:`~d2lhelpers.attention.masked_softmax`) and keeps ``.attention_weights``
    (B, h, T_q, T_k); ``False`` (the default) PyTorch's fused attention with ``enable_gqa``.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None,
                 dropout: float = 0.0, bias: bool = False, rotary: bool = False,
                 rotary_base: float = 10000.0) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        check_int(d_model, "d_model")
        check_int(num_heads, "num_heads")
        check_int(num_kv_heads, "num_kv_heads")
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads must divide d_model and num_kv_heads must divide num_heads, got "
                f"d_model={d_model}, num_heads={num_heads}, num_kv_heads={num_kv_heads}")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k, self.group_size = d_model // num_heads, num_heads // num_kv_heads
        self.W_q = nn.Linear(d_model, num_heads * self.d_k, bias=bias)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=bias)
        self.W_o = nn.Linear(num_heads * self.d_k, d_model, bias=bias)
        self.rotary = RotaryEmbedding(self.d_k, rotary_base) if rotary else None
        self.dropout = nn.Dropout(dropout)
        self.attention_weights: torch.Tensor | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, n * d_k) -> (B, n, T, d_k), n = h for queries, g for keys and values."""
        return x.unflatten(-1, (-1, self.d_k)).transpose(1, 2)  # (B, T, n, d_k) -> (B, n, T, d_k)

    def _check_width(self, **tensors) -> None:
        for name, x in tensors.items():
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.d_model:
                shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise ValueError(f"{name} must have shape (B, T, d_model={self.d_model}), got {shape}")

    def project_keys_values(self, keys: torch.Tensor, values: torch.Tensor,
                            offset: int = 0) -> KVCache:
        """keys and values (B, T_k, d_model) -> a KVCache of (B, g, T_k, d_k) each, the keys
        rotated as positions offset .. offset + T_k - 1 when the layer uses RoPE."""
        self._check_width(keys=keys, values=values)
        if keys.shape[:2] != values.shape[:2]:
            raise ValueError(f"keys and values must have the same (B, T_k), got keys "
                             f"{tuple(keys.shape)} and values {tuple(values.shape)}")
        K, V = self.split_heads(self.W_k(keys)), self.split_heads(self.W_v(values))
        if self.rotary is not None:
            K = self.rotary(K, offset)  # the keys carry their positions; the values do not
        return KVCache(K, V)

    def attend(self, queries: torch.Tensor, cache: KVCache, valid_lens=None,
               need_weights: bool = False, offset: int = 0) -> torch.Tensor:
        """queries (B, T_q, d_model), at positions offset .. offset + T_q - 1, attend over the keys
        and values of ``cache`` (B, g, T_k, d_k); valid_lens None, (B,) or (B, T_q) (trusted:
        checked where they enter, e.g. by ``forward``). Returns (B, T_q, d_model)."""
        self._check_width(queries=queries)
        B = queries.shape[0]
        if len(cache) == 0 or cache.keys.shape[:2] != (B, self.num_kv_heads):
            held = "nothing" if len(cache) == 0 else f"keys of shape {tuple(cache.keys.shape)}"
            raise ValueError(f"the cache must hold keys (B={B}, g={self.num_kv_heads}, T_k, "
                             f"d_k={self.d_k}), it holds {held}")
        Q = self.split_heads(self.W_q(queries))  # (B, h, T_q, d_k)
        if self.rotary is not None:
            Q = self.rotary(Q, offset)
        if need_weights:  # readable: repeat each key-value head for the h/g query heads it serves
            K = cache.keys.repeat_interleave(self.group_size, dim=1)  # (B, g, ...) -> (B, h, ...)
            V = cache.values.repeat_interleave(self.group_size, dim=1)
            scores = Q @ K.transpose(-2, -1) / math.sqrt(self.d_k)  # (B, h, T_q, T_k)
            lens = None if valid_lens is None else valid_lens.repeat_interleave(self.num_heads, 0)
            weights = masked_softmax(scores.flatten(0, 1), lens).unflatten(0, (B, -1))
            self.attention_weights = weights.detach()  # (B, h, T_q, T_k)
            heads = self.dropout(weights) @ V  # (B, h, T_q, d_k)
        else:  # fast: PyTorch's fused kernel, which shares the key-value heads itself
            mask = None
            if valid_lens is not None:
                lens = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None]
                mask = sequence_mask(lens, cache.keys.shape[2])[:, None]  # (B, 1, T_q or 1, T_k)
            heads = F.scaled_dot_product_attention(
                Q, cache.keys, cache.values, attn_mask=mask,
                dropout_p=self.dropout.p if self.training else 0.0, enable_gqa=True)
            self.attention_weights = None
        return self.W_o(heads.transpose(1, 2).flatten(2))  # (B, h, T_q, d_k) -> (B, T_q, h*d_k)

    def forward(self, queries, keys, values, valid_lens=None, need_weights: bool = False):
        self._check_width(queries=queries, keys=keys, values=values)
        if queries.shape[0] != keys.shape[0]:
            raise ValueError(f"queries and keys must share the batch size B, got queries "
                             f"{tuple(queries.shape)} and keys {tuple(keys.shape)}")
        valid_lens = check_valid_lens(valid_lens, queries.shape[0], queries.shape[1], keys.shape[1])
        if valid_lens is not None:
            valid_lens = valid_lens.to(queries.device)
        return self.attend(queries, self.project_keys_values(keys, values), valid_lens,
                           need_weights)

    def step(self, X: torch.Tensor, cache: KVCache, need_weights: bool = False) -> torch.Tensor:
        """Causal self-attention of new positions X (B, T_new, d_model) that follow the
        ``len(cache)`` positions cached: their keys and values join ``cache``, then position i of X
        attends to every cached position up to itself. Returns (B, T_new, d_model). A fresh
        cache gives causal self-attention over X (training)."""
        offset = len(cache)
        new = self.project_keys_values(X, X, offset)  # (B, g, T_new, d_k) each, keys rotated
        cache.append(new.keys, new.values)
        causal = causal_valid_lens(X.shape[0], X.shape[1], offset, X.device)  # (B, T_new)
        return self.attend(X, cache, causal, need_weights, offset)

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, d_k={self.d_k}")


# --------------------------------------------------------------------------------------------------
# Online softmax
# --------------------------------------------------------------------------------------------------


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

    queries (B, [h,] T_q, d), keys (B, [h,] T_k, d), values (B, [h,] T_k, d_v); valid_lens None,
    (B,) or (B, T_q) (shared by the h heads). Returns (B, [h,] T_q, d_v), equal (up to rounding) to
    ``F.scaled_dot_product_attention`` with the same mask; a query with no valid key gets 0.
    What it holds at once grows like T_q * (block_size + d_v), not T_q * T_k.
    """
    check_int(block_size, "block_size")
    if queries.dim() not in (3, 4) or keys.dim() != queries.dim() or values.dim() != queries.dim():
        raise ValueError(f"queries, keys and values must all have shape (B, T, d) or (B, h, T, d), "
                         f"got {tuple(queries.shape)}, {tuple(keys.shape)}, {tuple(values.shape)}")
    if (queries.shape[:-2] != keys.shape[:-2] or keys.shape[:-1] != values.shape[:-1]
            or queries.shape[-1] != keys.shape[-1]):
        raise ValueError(f"queries (B, [h,] T_q, d), keys (B, [h,] T_k, d) and values "
                         f"(B, [h,] T_k, d_v) do not fit: got {tuple(queries.shape)}, "
                         f"{tuple(keys.shape)}, {tuple(values.shape)}")
    B, T_q, T_k = queries.shape[0], queries.shape[-2], keys.shape[-2]
    valid_lens = check_valid_lens(valid_lens, B, T_q, T_k)
    lens = None
    if valid_lens is not None:  # (B, [1,] T_q, 1): each query's number of valid keys
        lens = valid_lens.to(queries.device)
        lens = (lens[:, None] if lens.dim() == 1 else lens)[..., None]
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


class TensorMemoryTracker(TorchDispatchMode):
    """Measure the memory of the tensors created inside a ``with`` block, and their peak.

    >>> with TensorMemoryTracker() as tracker:
    ...     scores = queries @ keys.transpose(-2, -1)
    >>> tracker.peak_bytes   # the most bytes held at once by tensors created in the block

    Every PyTorch operation run in the block is seen (a ``TorchDispatchMode``); each new storage it
    returns counts from its creation until it is freed. Views share their base's storage and count
    once; tensors that existed before the block do not count; buffers that a kernel allocates and
    frees internally are not seen. The count depends on the algorithm, not on the machine or the
    number of threads, and works on any device.
    """

    def __init__(self) -> None:
        super().__init__()
        self.current_bytes = self.peak_bytes = 0
        self._live: dict[int, int] = {}  # data pointer -> bytes of a storage created in the block

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(result)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            pointer, size = storage.data_ptr(), storage.nbytes()
            if size == 0 or pointer in self._live or any(
                    isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == pointer
                    for a in tree_flatten((args, kwargs))[0]):
                continue  # empty, already counted, or a view or in-place result of an input
            self._live[pointer] = size
            self.current_bytes += size
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
            weakref.finalize(storage, self._freed, pointer)
        return result

    def _freed(self, pointer: int) -> None:
        size = self._live.pop(pointer, None)
        if size is not None:
            self.current_bytes -= size


# --------------------------------------------------------------------------------------------------
# A decoder-only language model
# --------------------------------------------------------------------------------------------------


class DecoderOnlyBlock(nn.Module):
    """A pre-norm decoder-only block: X + attention(LayerNorm(X)), then X + FFN(LayerNorm(X)).

    The attention is causal grouped-query self-attention with RoPE (no encoder, no cross-attention;
    positions enter through the rotations only). ``forward(X)`` (B, T, d_model) -> (B, T, d_model)
    is training (every position at once, causal); ``step(X, cache)`` feeds new positions after
    those held in ``cache`` (a KVCache that grows by T_new). The two compute the same function.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None,
                 ffn_hidden: int = 128, dropout: float = 0.0, rotary_base: float = 10000.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attention = GroupedQueryAttention(d_model, num_heads, num_kv_heads, dropout,
                                               rotary=True, rotary_base=rotary_base)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = PositionwiseFFN(d_model, ffn_hidden, dropout)
        self.dropout = nn.Dropout(dropout)

    def step(self, X: torch.Tensor, cache: KVCache, need_weights: bool = False) -> torch.Tensor:
        X = X + self.dropout(self.attention.step(self.norm1(X), cache, need_weights))
        return X + self.dropout(self.ffn(self.norm2(X)))

    def forward(self, X: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        return self.step(X, KVCache(), need_weights)


@dataclass
class LMState:
    """What a decoder-only model keeps between generation steps: one KVCache per block, each
    holding keys and values (B, g, T_seen, d_k)."""

    caches: list[KVCache]

    @property
    def num_decoded(self) -> int:
        """Positions fed to the model so far (the length of every cache)."""
        return len(self.caches[0]) if self.caches else 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the caches' keys and values."""
        return sum(t.numel() * t.element_size() for c in self.caches if len(c)
                   for t in (c.keys, c.values))

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (B_new,) of the batch, in that order, in every cache."""
        for cache in self.caches:
            cache.reorder(rows)


class DecoderOnlyLM(nn.Module):
    """A small decoder-only language model: token embedding, ``num_layers``
    :class:`DecoderOnlyBlock` s (pre-norm, causal, RoPE, g = ``num_kv_heads`` key-value heads), a
    final LayerNorm, and a linear layer to next-token scores.

    ``forward(tokens (B, T))`` -> logits (B, T, V): position t scores the token after tokens 0..t.
    Generation: ``state = init_state()``, then ``step(new_tokens (B, T_new), state)`` -> their
    logits (B, T_new, V), the caches in ``state`` growing by T_new. ``forward`` is one step from a
    fresh state. No positional table: the model accepts sequences of any length.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, num_heads: int = 4,
                 num_kv_heads: int | None = None, ffn_hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.1, rotary_base: float = 10000.0) -> None:
        super().__init__()
        check_int(vocab_size, "vocab_size")
        check_int(num_layers, "num_layers")
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            DecoderOnlyBlock(d_model, num_heads, num_kv_heads, ffn_hidden, dropout, rotary_base)
            for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model)
        self.output = nn.Linear(d_model, vocab_size)

    def init_state(self) -> LMState:
        """The state before the first token: an empty cache per block."""
        return LMState([KVCache() for _ in self.blocks])

    def step(self, tokens: torch.Tensor, state: LMState, need_weights: bool = False) -> torch.Tensor:
        """Feed new tokens (B, T_new) after the ``state.num_decoded`` already seen; return their
        logits (B, T_new, V)."""
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be indices of shape (B, T), got {shape}")
        if len(state.caches) != len(self.blocks):
            raise ValueError(f"state holds {len(state.caches)} caches for {len(self.blocks)} blocks")
        X = self.dropout(self.embedding(tokens))  # (B, T_new, d_model); no positions added
        for block, cache in zip(self.blocks, state.caches):
            X = block.step(X, cache, need_weights)
        return self.output(self.final_norm(X))

    def forward(self, tokens: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        return self.step(tokens, self.init_state(), need_weights)


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> torch.Tensor:
    """The distribution sampling draws the next token from: logits (B, V) -> probabilities (B, V).

    softmax(logits / temperature), restricted to the ``top_k`` highest logits (ties at the k-th
    value are all kept) when ``top_k`` is given, then to the nucleus when ``top_p`` is given: the
    fewest most probable tokens whose probabilities sum to at least ``top_p`` (Holtzman et al.
    2020); the others get probability 0 and the kept ones are renormalised. Temperature below 1
    sharpens the distribution, above 1 flattens it; ``temperature=0`` is greedy decoding: all the
    probability on the highest logit (the first one if several tie).
    """
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"logits must have shape (B, V), got {shape}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ValueError(f"temperature must be a number >= 0, got {temperature!r}")
    if top_k is not None:
        check_int(top_k, "top_k")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}")
    if temperature == 0:
        return F.one_hot(logits.argmax(dim=-1), logits.shape[-1]).to(logits.dtype)
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th highest logit
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of the tokens ahead
        keep_sorted = before < top_p  # the token that crosses top_p is the last one kept
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        probs = probs.masked_fill(~keep, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


@torch.no_grad()
def generate(model: DecoderOnlyLM, prompt: torch.Tensor, max_new_tokens: int,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
             eos: int | None = None, use_cache: bool = True,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue each prompt (B, T_prompt) by up to ``max_new_tokens`` tokens; return them (B, T_new).

    Each next token is drawn from :func:`next_token_probs` (``temperature=0``: greedy; ``top_k``,
    ``top_p``), with ``generator`` (on the prompt's device) for reproducible draws. After a row's ``eos`` (if given) it keeps emitting
    ``eos``; generation stops once every row has. With ``use_cache`` the prompt is fed once and
    then only the newest token, the model's state keeping the keys and values of earlier
    positions; without it, the whole sequence is fed again at every step. The two give the same
    tokens (up to the rounding of the logits).
    """
    check_int(max_new_tokens, "max_new_tokens")
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.shape[1] == 0:
        shape = tuple(prompt.shape) if isinstance(prompt, torch.Tensor) else type(prompt).__name__
        raise ValueError(f"prompt must have shape (B, T_prompt) with T_prompt >= 1, got {shape}")
    model.eval()
    state = model.init_state() if use_cache else None
    sequence, fed = prompt, prompt  # everything so far; what the next step feeds
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
    for _ in range(max_new_tokens):
        logits = model.step(fed, state) if use_cache else model(sequence)
        probs = next_token_probs(logits[:, -1], temperature, top_k, top_p)  # (B, V)
        if temperature == 0:
            token = probs.argmax(dim=-1)
        else:
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B,)
        if eos is not None:
            token = token.masked_fill(finished, eos)
            finished |= token == eos
        sequence = torch.cat([sequence, token[:, None]], dim=1)
        fed = token[:, None]
        if eos is not None and finished.all():
            break
    return sequence[:, prompt.shape[1]:]
