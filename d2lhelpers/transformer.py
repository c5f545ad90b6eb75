"""The encoder-decoder Transformer, built bottom-up: feed-forward network -> add & norm ->
encoder block -> encoder -> decoder block (with its key-value cache) -> decoder -> Transformer.

Shapes: B batch, T_src source length, T_tgt target length, d_model width, h heads, V vocabulary size.
One mask convention (see ``attention``): valid lengths; the decoder's causal mask is the per-query
length 1, 2, ..., T_tgt. Taught in notebook 06_transformer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention, check_valid_lens
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
    ``need_weights=True`` keeps the attention weights (readable path) in
    ``.self_attention.attention_weights``; by default the fast path runs.
    """

    def __init__(self, d_model, num_heads, ffn_hidden, dropout=0.0, norm_first=False) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionwiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)

    def forward(self, X, valid_lens=None, need_weights: bool = False):
        valid_lens = _check_lengths("valid_lens", valid_lens, X.shape[0], X.shape[1], X.device,
                                    check_range=False)
        attention = self.self_attention

        def self_attend(x):  # queries, keys and values: the same positions
            return attention.attend(x, attention.project_keys_values(x, x), valid_lens, need_weights)

        X = self.add_norm1(X, self_attend)
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


def _check_lengths(name: str, valid_lens, batch_size: int, max_len: int, device,
                   check_range: bool = True):
    """Source lengths (B,) as a tensor on ``device``, checked where they enter: their shape always,
    their range (which reads the values: a device synchronisation on a GPU) only at a stack's
    door. A block trusts the range, so that a stack of N blocks checks once, not N + 1 times."""
    if valid_lens is None:
        return None
    valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.shape != (batch_size,) or valid_lens.is_floating_point() or valid_lens.dtype == torch.bool:
        raise ValueError(f"{name} must be whole numbers of shape (B,)=({batch_size},), got "
                         f"{valid_lens.dtype} of shape {tuple(valid_lens.shape)}")
    if check_range:
        check_valid_lens(valid_lens, batch_size, 1, max_len)
    return valid_lens.to(device)


class TransformerEncoder(nn.Module):
    """Embedding + positional encoding, then ``num_layers`` encoder blocks.

    tokens: (B, T_src) indices, valid_lens: None or (B,). Returns (B, T_src, d_model).
    With ``need_weights=True``, ``.attention_weights`` holds one (B, h, T_src, T_src) tensor per
    block, from that call.
    """

    def __init__(self, vocab_size, d_model, num_heads, ffn_hidden, num_layers, dropout=0.0,
                 norm_first=False, max_len=1000) -> None:
        super().__init__()
        self.embed = _Embedding(vocab_size, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, ffn_hidden, dropout, norm_first) for _ in range(num_layers))
        # pre-norm leaves the last block's output unnormalised: normalise it once at the end
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, tokens, valid_lens=None, need_weights: bool = False):
        X = self.embed(tokens)
        valid_lens = _check_lengths("valid_lens", valid_lens, *tokens.shape, X.device)
        for block in self.blocks:
            X = block(X, valid_lens, need_weights)
        return self.final_norm(X)

    @property
    def attention_weights(self) -> list[torch.Tensor | None]:
        return [block.self_attention.attention_weights for block in self.blocks]


class DecoderBlock(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN, each in add & norm.

    Training (teacher forcing), ``forward``: X (B, T_tgt, d_model) holds every target position;
    position i attends to positions 0..i only. enc_outputs: (B, T_src, d_model); enc_valid_lens:
    None or (B,). Returns (B, T_tgt, d_model).

    Decoding, ``step``: X holds only the new positions. Their keys and values are appended to
    ``self_cache``, and they attend to every cached position; ``cross_cache`` holds the encoder
    outputs projected once (:meth:`MultiHeadAttention.project_keys_values`). Training is one step
    from an empty ``self_cache``, so the two compute the same function.
    """

    def __init__(self, d_model, num_heads, ffn_hidden, dropout=0.0, norm_first=False) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionwiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm3 = AddNorm(d_model, dropout, norm_first)

    def forward(self, X, enc_outputs, enc_valid_lens=None, need_weights: bool = False):
        enc_valid_lens = _check_lengths("enc_valid_lens", enc_valid_lens, *enc_outputs.shape[:2],
                                        X.device, check_range=False)
        cross_cache = self.cross_attention.project_keys_values(enc_outputs, enc_outputs)
        return self.step(X, KVCache(), cross_cache, enc_valid_lens, need_weights)

    def step(self, X, self_cache: KVCache, cross_cache: KVCache, enc_valid_lens=None,
             need_weights: bool = False):
        B, T, _ = X.shape
        causal = causal_valid_lens(B, T, len(self_cache), X.device)  # (B, T): 1 + offset .. T + offset

        def masked_self_attend(x):  # the new positions join the cache, then attend to all of it
            new = self.self_attention.project_keys_values(x, x)  # (B, h, T_new, d_k) each
            self_cache.append(new.keys, new.values)
            return self.self_attention.attend(x, self_cache, causal, need_weights)

        def cross_attend(x):  # queries from the decoder, keys and values from the encoder
            return self.cross_attention.attend(x, cross_cache, enc_valid_lens, need_weights)

        X = self.add_norm1(X, masked_self_attend)
        X = self.add_norm2(X, cross_attend)
        return self.add_norm3(X, self.ffn)


@dataclass
class DecoderState:
    """What a Transformer decoder keeps between decoding steps: the source lengths and, per block,
    the key-value caches of its self-attention (growing by each new position) and of its
    encoder-decoder attention (the projected encoder outputs, filled once by
    :meth:`TransformerDecoder.init_state`)."""

    enc_valid_lens: torch.Tensor | None
    self_caches: list[KVCache]
    cross_caches: list[KVCache]

    @property
    def num_decoded(self) -> int:
        """Positions fed to the decoder so far (the length of every self-attention cache)."""
        return len(self.self_caches[0]) if self.self_caches else 0

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (B_new,) of the batch, in that order, in every cache: row r
        becomes old row ``rows[r]``. Beam search uses it to give each beam its parent's caches
        (and, at the start, to repeat each sentence's state for its k beams)."""
        for cache in self.self_caches + self.cross_caches:
            cache.reorder(rows)
        if self.enc_valid_lens is not None:
            self.enc_valid_lens = self.enc_valid_lens[rows]


class TransformerDecoder(nn.Module):
    """Embedding + positional encoding, ``num_layers`` decoder blocks, then a linear layer to
    vocabulary scores.

    ``forward(tokens, enc_outputs, enc_valid_lens)``, teacher forcing: tokens (B, T_tgt) target
    indices (shifted right: <bos> first) -> logits (B, T_tgt, V).
    Decoding: ``state = init_state(enc_outputs, enc_valid_lens)``, then ``step(tokens, state)`` for
    each batch of new positions (B, T_new) -> their logits (B, T_new, V); the caches in ``state``
    grow by T_new. Teacher forcing is one step from a fresh state.
    With ``need_weights=True``, ``.attention_weights`` holds per block a pair (self-attention
    (B, h, T_new, T_seen), encoder-decoder attention (B, h, T_new, T_src)) from that call.
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
        """The state before the first decoding step: empty self-attention caches, and the encoder
        outputs (B, T_src, d_model) projected once into every block's encoder-decoder cache."""
        if enc_outputs.dim() != 3:
            raise ValueError(f"enc_outputs must have shape (B, T_src, d_model), got "
                             f"{tuple(enc_outputs.shape)}")
        B, T_src, _ = enc_outputs.shape
        enc_valid_lens = _check_lengths("enc_valid_lens", enc_valid_lens, B, T_src, enc_outputs.device)
        return DecoderState(
            enc_valid_lens, [KVCache() for _ in self.blocks],
            [block.cross_attention.project_keys_values(enc_outputs, enc_outputs)
             for block in self.blocks])

    def step(self, tokens, state: DecoderState, need_weights: bool = False):
        """Feed new positions (B, T_new) after the ``state.num_decoded`` positions already seen;
        return their logits (B, T_new, V)."""
        X = self.embed(tokens, state.num_decoded)  # the new positions' places in the sequence
        for block, self_cache, cross_cache in zip(self.blocks, state.self_caches,
                                                  state.cross_caches):
            X = block.step(X, self_cache, cross_cache, state.enc_valid_lens, need_weights)
        return self.output(self.final_norm(X))

    def forward(self, tokens, enc_outputs, enc_valid_lens=None, need_weights: bool = False):
        return self.step(tokens, self.init_state(enc_outputs, enc_valid_lens), need_weights)

    @property
    def attention_weights(self) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
        return [(b.self_attention.attention_weights, b.cross_attention.attention_weights)
                for b in self.blocks]


class Transformer(nn.Module):
    """The encoder-decoder Transformer for sequence-to-sequence tasks such as translation.

    forward(src (B, T_src), src_valid_lens (B,), tgt_input (B, T_tgt)) -> logits (B, T_tgt, V_tgt).
    ``norm_first=False`` is the paper's post-norm; ``True`` gives pre-norm. ``need_weights=True``
    runs the readable attention and keeps every head's weights (``.encoder.attention_weights``,
    ``.decoder.attention_weights``); by default the fast path runs.
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 64,
                 num_heads: int = 4, ffn_hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.1, norm_first: bool = False, max_len: int = 1000) -> None:
        super().__init__()
        self.encoder = TransformerEncoder(src_vocab_size, d_model, num_heads, ffn_hidden,
                                          num_layers, dropout, norm_first, max_len)
        self.decoder = TransformerDecoder(tgt_vocab_size, d_model, num_heads, ffn_hidden,
                                          num_layers, dropout, norm_first, max_len)

    def forward(self, src, src_valid_lens, tgt_input, need_weights: bool = False):
        enc_outputs = self.encoder(src, src_valid_lens, need_weights)
        return self.decoder(tgt_input, enc_outputs, src_valid_lens, need_weights)


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
