"""The encoder-decoder Transformer, built bottom-up: feed-forward network -> add & norm ->
encoder block -> encoder -> decoder block (with its key-value cache) -> decoder -> Transformer.

Shapes: B batch, T_src source length, T_tgt target length, d_model width, h heads, V vocabulary size.
One mask convention (see ``attention``): valid lengths; the decoder's causal mask is the per-query
length 1, 2, ..., T_tgt. Taught in notebook 06_transformer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .positional import PositionalEncoding

__all__ = [
    "PositionwiseFFN",
    "AddNorm",
    "EncoderBlock",
    "TransformerEncoder",
    "DecoderBlock",
    "DecoderState",
    "TransformerDecoder",
    "Transformer",
    "causal_valid_lens",
    "copy_to_torch_layer",
]


class PositionwiseFFN(nn.Module):
    """The same two-layer MLP applied at every position: (B, T, d_model) -> (B, T, d_model)."""

    def __init__(self, d_model: int, ffn_hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, ffn_hidden)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ffn_hidden, d_model)

    def forward(self, X):
        return self.linear2(self.dropout(torch.relu(self.linear1(X))))


class AddNorm(nn.Module):
    """Residual connection and layer normalisation around a sublayer.

    post-norm (the paper, ``norm_first=False``): LayerNorm(X + Dropout(sublayer(X)))
    pre-norm (``norm_first=True``):              X + Dropout(sublayer(LayerNorm(X)))
    """

    def __init__(self, d_model: int, dropout: float = 0.0, norm_first: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, X, sublayer):
        if self.norm_first:
            return X + self.dropout(sublayer(self.norm(X)))
        return self.norm(X + self.dropout(sublayer(X)))


def causal_valid_lens(batch_size: int, num_queries: int, offset: int = 0, device=None) -> torch.Tensor:
    """Per-query valid lengths of a causal mask, shape (B, T_q): query i sees keys 0 .. offset + i.

    ``offset`` counts positions decoded before these queries (the length of a key-value cache).
    """
    lens = torch.arange(offset + 1, offset + num_queries + 1, device=device)
    return lens.expand(batch_size, num_queries)  # the same lengths for every sequence


class EncoderBlock(nn.Module):
    """Multi-head self-attention, then the FFN, each wrapped in add & norm.

    X: (B, T_src, d_model), valid_lens: None or (B,) source lengths. Returns (B, T_src, d_model).
    """

    def __init__(self, d_model, num_heads, ffn_hidden, dropout=0.0, norm_first=False) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionwiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)

    def forward(self, X, valid_lens=None):
        X = self.add_norm1(X, lambda x: self.self_attention(x, x, x, valid_lens))
        return self.add_norm2(X, self.ffn)


class _Embedding(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus the sinusoidal positional encoding."""

    def __init__(self, vocab_size, d_model, dropout, max_len) -> None:
        super().__init__()
        self.d_model = d_model
        self.embedding = nn.Embedding(vocab_size, d_model)
        # Entries start with standard deviation 1/sqrt(d_model); the sqrt(d_model) scaling in
        # forward() brings them to unit scale, on a par with the positional encoding's [-1, 1].
        nn.init.normal_(self.embedding.weight, std=d_model ** -0.5)
        self.positional_encoding = PositionalEncoding(d_model, dropout, max_len)

    def forward(self, tokens, offset=0):
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape (B, T), got {tuple(tokens.shape)}")
        return self.positional_encoding(self.embedding(tokens) * math.sqrt(self.d_model), offset)


class TransformerEncoder(nn.Module):
    """Embedding + positional encoding, then ``num_layers`` encoder blocks.

    tokens: (B, T_src) indices, valid_lens: None or (B,). Returns (B, T_src, d_model).
    ``.attention_weights``: one (B, h, T_src, T_src) tensor per block, from the last call.
    """

    def __init__(self, vocab_size, d_model, num_heads, ffn_hidden, num_layers, dropout=0.0,
                 norm_first=False, max_len=1000) -> None:
        super().__init__()
        self.embed = _Embedding(vocab_size, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, ffn_hidden, dropout, norm_first) for _ in range(num_layers))
        # pre-norm leaves the last block's output unnormalised: normalise it once at the end
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, tokens, valid_lens=None):
        X = self.embed(tokens)
        for block in self.blocks:
            X = block(X, valid_lens)
        return self.final_norm(X)

    @property
    def attention_weights(self) -> list[torch.Tensor]:
        return [block.self_attention.attention_weights for block in self.blocks]


class DecoderBlock(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN, each in add & norm.

    X: (B, T_tgt, d_model) target positions; enc_outputs: (B, T_src, d_model); enc_valid_lens: None
    or (B,). Training: call without caches; position i attends to positions 0..i only. Decoding:
    pass this block's two caches; X then holds only the new positions, whose keys and values are
    appended to ``self_cache``, and the encoder outputs are projected once into ``cross_cache``.
    Returns (B, T_tgt, d_model).
    """

    def __init__(self, d_model, num_heads, ffn_hidden, dropout=0.0, norm_first=False) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionwiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm3 = AddNorm(d_model, dropout, norm_first)

    def forward(self, X, enc_outputs, enc_valid_lens=None, self_cache: KVCache | None = None,
                cross_cache: KVCache | None = None):
        B, T, _ = X.shape
        offset = len(self_cache) if self_cache is not None else 0
        causal = causal_valid_lens(B, T, offset, X.device)  # (B, T_tgt)
        X = self.add_norm1(X, lambda x: self.self_attention(x, x, x, causal, cache=self_cache))
        if cross_cache is None:
            def cross(x):
                return self.cross_attention(x, enc_outputs, enc_outputs, enc_valid_lens)
        else:
            if len(cross_cache) == 0:  # first step: project the encoder outputs once
                filled = self.cross_attention.project_keys_values(enc_outputs, enc_outputs)
                cross_cache.keys, cross_cache.values = filled.keys, filled.values

            def cross(x):
                return self.cross_attention(x, None, None, enc_valid_lens, cache=cross_cache)
        X = self.add_norm2(X, cross)
        return self.add_norm3(X, self.ffn)


@dataclass
class DecoderState:
    """What a decoder keeps between decoding steps: the encoder outputs and, per block, the
    key-value caches of its self-attention and its encoder-decoder attention."""

    enc_outputs: torch.Tensor
    enc_valid_lens: torch.Tensor | None
    self_caches: list[KVCache] = field(default_factory=list)
    cross_caches: list[KVCache] = field(default_factory=list)

    @property
    def num_decoded(self) -> int:
        """Positions fed to the decoder so far (the length of every self-attention cache)."""
        return len(self.self_caches[0]) if self.self_caches else 0


class TransformerDecoder(nn.Module):
    """Embedding + positional encoding, ``num_layers`` decoder blocks, then a linear layer to
    vocabulary scores.

    tokens: (B, T_tgt) target indices (shifted right: <bos> first). Returns logits (B, T_tgt, V).
    ``.attention_weights``: per block, a pair (self-attention (B, h, T_tgt, T_tgt_seen),
    encoder-decoder attention (B, h, T_tgt, T_src)) from the last call.
    """

    def __init__(self, vocab_size, d_model, num_heads, ffn_hidden, num_layers, dropout=0.0,
                 norm_first=False, max_len=1000) -> None:
        super().__init__()
        self.embed = _Embedding(vocab_size, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, num_heads, ffn_hidden, dropout, norm_first) for _ in range(num_layers))
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output = nn.Linear(d_model, vocab_size)

    def init_state(self, enc_outputs, enc_valid_lens=None) -> DecoderState:
        """An empty cache for decoding step by step after the encoder has run."""
        n = len(self.blocks)
        return DecoderState(enc_outputs, enc_valid_lens, [KVCache() for _ in range(n)],
                            [KVCache() for _ in range(n)])

    def forward(self, tokens, enc_outputs, enc_valid_lens=None, state: DecoderState | None = None):
        """Without ``state``: every target position at once (teacher forcing).
        With ``state``: only the new positions; the caches in ``state`` grow by ``T_tgt``."""
        offset = state.num_decoded if state is not None else 0
        X = self.embed(tokens, offset)
        for i, block in enumerate(self.blocks):
            caches = (state.self_caches[i], state.cross_caches[i]) if state is not None else (None, None)
            X = block(X, enc_outputs, enc_valid_lens, *caches)
        return self.output(self.final_norm(X))

    @property
    def attention_weights(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(b.self_attention.attention_weights, b.cross_attention.attention_weights)
                for b in self.blocks]


class Transformer(nn.Module):
    """The encoder-decoder Transformer for sequence-to-sequence tasks such as translation.

    forward(src (B, T_src), src_valid_lens (B,), tgt_input (B, T_tgt)) -> logits (B, T_tgt, V_tgt).
    ``norm_first=False`` is the paper's post-norm; ``True`` gives pre-norm.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 64,
                 num_heads: int = 4, ffn_hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.1, norm_first: bool = False, max_len: int = 1000) -> None:
        super().__init__()
        self.encoder = TransformerEncoder(src_vocab_size, d_model, num_heads, ffn_hidden,
                                          num_layers, dropout, norm_first, max_len)
        self.decoder = TransformerDecoder(tgt_vocab_size, d_model, num_heads, ffn_hidden,
                                          num_layers, dropout, norm_first, max_len)

    def forward(self, src, src_valid_lens, tgt_input):
        enc_outputs = self.encoder(src, src_valid_lens)
        return self.decoder(tgt_input, enc_outputs, src_valid_lens)


def _copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    if not (ours.d_model == theirs.embed_dim and ours.num_heads == theirs.num_heads
            and theirs._qkv_same_embed_dim and theirs.batch_first):
        raise ValueError(
            f"theirs must be nn.MultiheadAttention(embed_dim={ours.d_model}, "
            f"num_heads={ours.num_heads}, batch_first=True) without kdim/vdim, got embed_dim="
            f"{theirs.embed_dim}, num_heads={theirs.num_heads}, batch_first={theirs.batch_first}"
        )
    has_bias = ours.W_q.bias is not None
    if has_bias != (theirs.in_proj_bias is not None):
        raise ValueError(f"bias mismatch: ours bias={has_bias}, theirs "
                         f"bias={theirs.in_proj_bias is not None}")
    with torch.no_grad():
        # PyTorch stacks the three input projections into one (3*d_model, d_model) matrix
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        if has_bias:
            theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
            theirs.out_proj.bias.copy_(ours.W_o.bias)


def _copy_block(ours, theirs, attentions, add_norms, norms) -> None:
    norm_first = add_norms[0].norm_first
    if theirs.norm_first != norm_first:
        raise ValueError(f"norm_first mismatch: ours {norm_first}, theirs {theirs.norm_first}")
    if theirs.activation is not torch.nn.functional.relu:
        raise ValueError(f"theirs must use the ReLU activation, got {theirs.activation}")
    ours_ffn = (ours.ffn.linear1.in_features, ours.ffn.linear1.out_features)
    theirs_ffn = (theirs.linear1.in_features, theirs.linear1.out_features)
    if ours_ffn != theirs_ffn:
        raise ValueError(
            f"FFN sizes (d_model, ffn_hidden) differ: ours {ours_ffn}, theirs {theirs_ffn}")
    for our_attention, their_attention in attentions:
        _copy_attention(our_attention, their_attention)
    theirs.linear1.load_state_dict(ours.ffn.linear1.state_dict())
    theirs.linear2.load_state_dict(ours.ffn.linear2.state_dict())
    for add_norm, their_norm in zip(add_norms, norms):
        if add_norm.norm.eps != their_norm.eps:
            raise ValueError(
                f"LayerNorm eps differ: ours {add_norm.norm.eps}, theirs {their_norm.eps}")
        their_norm.load_state_dict(add_norm.norm.state_dict())


def copy_to_torch_layer(ours: nn.Module, theirs: nn.Module) -> nn.Module:
    """Copy a course layer's weights into PyTorch's counterpart, which then computes the same
    function (in eval mode, or with dropout 0); return ``theirs``.

    Pairs (PyTorch's built with ``batch_first=True`` and the same sizes):

    - :class:`~d2lhelpers.attention.MultiHeadAttention` -> ``nn.MultiheadAttention`` (same
      ``bias``);
    - :class:`EncoderBlock` -> ``nn.TransformerEncoderLayer`` (same ``norm_first``);
    - :class:`DecoderBlock` -> ``nn.TransformerDecoderLayer`` (same ``norm_first``);
    - a pre-norm :class:`Transformer` -> ``nn.Transformer(norm_first=True)``: every block and the
      final LayerNorm of each stack. Embeddings, positional encoding and the output layer are ours
      alone (``nn.Transformer`` has none). A post-norm Transformer has no PyTorch twin:
      ``nn.Transformer`` always ends both stacks with a LayerNorm, which the paper's post-norm
      stacks do not have.

    Raises ``ValueError`` naming what differs (sizes, ``norm_first``, bias, activation).
    """
    if isinstance(ours, MultiHeadAttention) and isinstance(theirs, nn.MultiheadAttention):
        _copy_attention(ours, theirs)
    elif isinstance(ours, EncoderBlock) and isinstance(theirs, nn.TransformerEncoderLayer):
        _copy_block(ours, theirs, [(ours.self_attention, theirs.self_attn)],
                    [ours.add_norm1, ours.add_norm2], [theirs.norm1, theirs.norm2])
    elif isinstance(ours, DecoderBlock) and isinstance(theirs, nn.TransformerDecoderLayer):
        _copy_block(ours, theirs, [(ours.self_attention, theirs.self_attn),
                                   (ours.cross_attention, theirs.multihead_attn)],
                    [ours.add_norm1, ours.add_norm2, ours.add_norm3],
                    [theirs.norm1, theirs.norm2, theirs.norm3])
    elif isinstance(ours, Transformer) and isinstance(theirs, nn.Transformer):
        if not isinstance(ours.encoder.final_norm, nn.LayerNorm):
            raise ValueError("ours is post-norm (norm_first=False): nn.Transformer ends each stack "
                             "with a LayerNorm that the paper's post-norm stacks do not have")
        ours_layers = (len(ours.encoder.blocks), len(ours.decoder.blocks))
        theirs_layers = (len(theirs.encoder.layers), len(theirs.decoder.layers))
        if ours_layers != theirs_layers:
            raise ValueError(f"numbers of (encoder, decoder) layers differ: ours {ours_layers}, "
                             f"theirs {theirs_layers}")
        for block, layer in zip(ours.encoder.blocks, theirs.encoder.layers):
            copy_to_torch_layer(block, layer)
        for block, layer in zip(ours.decoder.blocks, theirs.decoder.layers):
            copy_to_torch_layer(block, layer)
        theirs.encoder.norm.load_state_dict(ours.encoder.final_norm.state_dict())
        theirs.decoder.norm.load_state_dict(ours.decoder.final_norm.state_dict())
    else:
        raise ValueError(f"no PyTorch counterpart known for the pair ({type(ours).__name__}, "
                         f"{type(theirs).__name__})")
    return theirs
