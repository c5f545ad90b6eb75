"""A decoder-only language model of today's kind: pre-norm blocks of causal grouped-query
self-attention with rotary position embeddings (RoPE), and its key-value cache.

The pieces come from the other modules: :class:`~d2lhelpers.attention.MultiHeadAttention` with
``num_kv_heads`` (grouped-query attention: g key-value heads shared by h query heads, so that the
cache holds g heads instead of h) and ``rotary=True`` (:class:`~d2lhelpers.positional.RotaryEmbedding`);
generation with temperature, top-k and top-p lives in :mod:`~d2lhelpers.decoding`
(:func:`~d2lhelpers.decoding.generate`).

Shape legend (as in :mod:`~d2lhelpers.attention`): B batch, T positions, d_model model width,
h query heads, g key-value heads, d_k per-head width, V vocabulary size. Built as classes in
notebook 12_decoder_only_lm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .basics import check_int, check_tokens
from .transformer import PositionwiseFFN

__all__ = ["DecoderOnlyBlock", "DecoderOnlyLM", "LMState"]


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
        self.attention = MultiHeadAttention(d_model, num_heads, dropout, num_kv_heads=num_kv_heads,
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
        check_tokens(tokens, "tokens")
        if len(state.caches) != len(self.blocks):
            raise ValueError(f"state holds {len(state.caches)} caches for {len(self.blocks)} blocks")
        X = self.dropout(self.embedding(tokens))  # (B, T_new, d_model); no positions added
        for block, cache in zip(self.blocks, state.caches):
            X = block.step(X, cache, need_weights)
        return self.output(self.final_norm(X))

    def forward(self, tokens: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        return self.step(tokens, self.init_state(), need_weights)
