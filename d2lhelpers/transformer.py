"""The encoder-decoder Transformer, built bottom-up: feed-forward network -> add & norm ->
encoder block -> encoder -> decoder block (with its key-value cache) -> decoder -> Transformer.

Shapes: B batch, T_src source length, T_tgt target length, d_model width, h heads, V vocabulary size.
One mask convention (see ``attention``): valid lengths. The source lengths ``src_valid_lens`` (B,)
enter through the encoder, which checks them (the model's one host synchronisation); the blocks and
the decoder trust them. The decoder's causal mask is the per-query length 1, 2, ..., T_tgt.
Taught in notebook 06_transformer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention, check_valid_lens
from .basics import check_tokens
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
]


class PositionwiseFFN(nn.Module):
    """The same two-layer MLP applied at every position: (B, T, d_model) -> (B, T, d_model)."""

    def __init__(self, d_model: int, ffn_hidden: int, dropout: float = 0.0,
                 bias: bool = True) -> None:
        super().__init__()
        self.linear1 = nn.Linear(d_model, ffn_hidden, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(ffn_hidden, d_model, bias=bias)

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


def _copy_block_into(block, theirs, attentions: list[str], num_norms: int):
    """Copy a block's weights into PyTorch's layer ``theirs`` of the same sizes, built by the
    block's ``to_torch``: its attention layers (replaced by their own ``to_torch()``), FFN and
    LayerNorms."""
    for ours_name, theirs_name in attentions:
        setattr(theirs, theirs_name, getattr(block, ours_name).to_torch())
    theirs.linear1.load_state_dict(block.ffn.linear1.state_dict())
    theirs.linear2.load_state_dict(block.ffn.linear2.state_dict())
    for i in range(1, num_norms + 1):
        getattr(theirs, f"norm{i}").load_state_dict(getattr(block, f"add_norm{i}").norm.state_dict())
    return theirs.to(block.ffn.linear1.weight.device).train(block.training)


def _torch_layer_sizes(block) -> dict:
    """The keyword arguments of PyTorch's layer of the same sizes as ``block``."""
    attention = block.self_attention
    return dict(d_model=attention.d_model, nhead=attention.num_heads,
                dim_feedforward=block.ffn.linear1.out_features, dropout=block.add_norm1.dropout.p,
                batch_first=True, norm_first=block.add_norm1.norm_first,
                dtype=block.ffn.linear1.weight.dtype)


class EncoderBlock(nn.Module):
    """Multi-head self-attention, then the FFN, each wrapped in add & norm.

    X: (B, T_src, d_model), src_valid_lens: None or (B,) on X's device, trusted (the encoder checked
    them). Returns (B, T_src, d_model). ``need_weights=True`` keeps the attention weights (readable
    path) in ``.self_attention.attention_weights``; by default the fast path runs.
    """

    def __init__(self, d_model, num_heads, ffn_hidden, dropout=0.0, norm_first=False) -> None:
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, bias=True)
        self.add_norm1 = AddNorm(d_model, dropout, norm_first)
        self.ffn = PositionwiseFFN(d_model, ffn_hidden, dropout)
        self.add_norm2 = AddNorm(d_model, dropout, norm_first)

    def forward(self, X, src_valid_lens=None, need_weights: bool = False):
        attention = self.self_attention

        def self_attend(x):  # queries, keys and values: the same positions
            return attention.attend(x, attention.project_keys_values(x, x), src_valid_lens,
                                    need_weights)

        X = self.add_norm1(X, self_attend)
        return self.add_norm2(X, self.ffn)

    def to_torch(self) -> nn.TransformerEncoderLayer:
        """``nn.TransformerEncoderLayer`` (batch_first, same sizes, ``norm_first`` and dropout)
        holding a copy of these weights: the same function, in eval mode or with dropout 0."""
        theirs = nn.TransformerEncoderLayer(**_torch_layer_sizes(self))
        return _copy_block_into(self, theirs, [("self_attention", "self_attn")], 2)


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
        return self.positional_encoding(self.embedding(tokens) * math.sqrt(self.d_model), offset)


class TransformerEncoder(nn.Module):
    """Embedding + positional encoding, then ``num_layers`` encoder blocks.

    tokens: (B, T_src) indices, src_valid_lens: None or (B,), checked here, where the source
    lengths enter the model. Returns (B, T_src, d_model). With ``need_weights=True``,
    ``.attention_weights`` holds one (B, h, T_src, T_src) tensor per block, from that call.
    """

    def __init__(self, vocab_size, d_model, num_heads, ffn_hidden, num_layers, dropout=0.0,
                 norm_first=False, max_len=1000) -> None:
        super().__init__()
        self.embed = _Embedding(vocab_size, d_model, dropout, max_len)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, ffn_hidden, dropout, norm_first) for _ in range(num_layers))
        # pre-norm leaves the last block's output unnormalised: normalise it once at the end
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, tokens, src_valid_lens=None, need_weights: bool = False):
        B, T_src = check_tokens(tokens, "src", self.embed.embedding.num_embeddings).shape
        src_valid_lens = check_valid_lens(src_valid_lens, B, None, T_src, name="src_valid_lens",
                                          keys_name="T_src", device=tokens.device)
        X = self.embed(tokens)
        for block in self.blocks:
            X = block(X, src_valid_lens, need_weights)
        return self.final_norm(X)

    @property
    def attention_weights(self) -> list[torch.Tensor | None]:
        return [block.self_attention.attention_weights for block in self.blocks]


class DecoderBlock(nn.Module):
    """Masked self-attention, encoder-decoder attention, then the FFN, each in add & norm.

    Training (teacher forcing), ``forward``: X (B, T_tgt, d_model) holds every target position;
    position i attends to positions 0..i only. enc_outputs: (B, T_src, d_model); src_valid_lens:
    None or (B,), trusted. Returns (B, T_tgt, d_model).

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

    def forward(self, X, enc_outputs, src_valid_lens=None, need_weights: bool = False):
        cross_cache = self.cross_attention.project_keys_values(enc_outputs, enc_outputs)
        return self.step(X, KVCache(), cross_cache, src_valid_lens, need_weights)

    def step(self, X, self_cache: KVCache, cross_cache: KVCache, src_valid_lens=None,
             need_weights: bool = False):
        def masked_self_attend(x):  # the new positions join the cache, then attend to all of it
            return self.self_attention.step(x, self_cache, need_weights)

        def cross_attend(x):  # queries from the decoder, keys and values from the encoder
            return self.cross_attention.attend(x, cross_cache, src_valid_lens, need_weights)

        X = self.add_norm1(X, masked_self_attend)
        X = self.add_norm2(X, cross_attend)
        return self.add_norm3(X, self.ffn)

    def to_torch(self) -> nn.TransformerDecoderLayer:
        """``nn.TransformerDecoderLayer`` (batch_first, same sizes, ``norm_first`` and dropout)
        holding a copy of these weights: the same function, in eval mode or with dropout 0."""
        theirs = nn.TransformerDecoderLayer(**_torch_layer_sizes(self))
        return _copy_block_into(self, theirs, [("self_attention", "self_attn"),
                                               ("cross_attention", "multihead_attn")], 3)


@dataclass
class DecoderState:
    """What a Transformer decoder keeps between decoding steps: the source lengths and, per block,
    the key-value caches of its self-attention (growing by each new position) and of its
    encoder-decoder attention (the projected encoder outputs, filled once by
    :meth:`TransformerDecoder.init_state`)."""

    src_valid_lens: torch.Tensor | None
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
        if self.src_valid_lens is not None:
            self.src_valid_lens = self.src_valid_lens[rows]


class TransformerDecoder(nn.Module):
    """Embedding + positional encoding, ``num_layers`` decoder blocks, then a linear layer to
    vocabulary scores.

    ``forward(tokens, enc_outputs, src_valid_lens)``, teacher forcing: tokens (B, T_tgt) target
    indices (shifted right: <bos> first) -> logits (B, T_tgt, V).
    Decoding: ``state = init_state(enc_outputs, src_valid_lens)``, then ``step(tokens, state)`` for
    each batch of new positions (B, T_new) -> their logits (B, T_new, V); the caches in ``state``
    grow by T_new. Teacher forcing is one step from a fresh state. ``src_valid_lens`` (B,) are
    trusted: the encoder checked them.
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

    def init_state(self, enc_outputs, src_valid_lens=None) -> DecoderState:
        """The state before the first decoding step: empty self-attention caches, and the encoder
        outputs (B, T_src, d_model) projected once into every block's encoder-decoder cache."""
        if not isinstance(enc_outputs, torch.Tensor) or enc_outputs.dim() != 3:
            shape = tuple(enc_outputs.shape) if isinstance(enc_outputs, torch.Tensor) else type(
                enc_outputs).__name__
            raise ValueError(f"enc_outputs must have shape (B, T_src, d_model), got {shape}")
        if src_valid_lens is not None:  # trusted values; a list becomes a tensor (no host read)
            src_valid_lens = torch.as_tensor(src_valid_lens, device=enc_outputs.device)
        return DecoderState(
            src_valid_lens, [KVCache() for _ in self.blocks],
            [block.cross_attention.project_keys_values(enc_outputs, enc_outputs)
             for block in self.blocks])

    def step(self, tokens, state: DecoderState, need_weights: bool = False):
        """Feed new positions (B, T_new) after the ``state.num_decoded`` positions already seen;
        return their logits (B, T_new, V)."""
        check_tokens(tokens, "tokens")  # their range is checked by forward, not at every step
        X = self.embed(tokens, state.num_decoded)  # the new positions' places in the sequence
        for block, self_cache, cross_cache in zip(self.blocks, state.self_caches,
                                                  state.cross_caches):
            X = block.step(X, self_cache, cross_cache, state.src_valid_lens, need_weights)
        return self.output(self.final_norm(X))

    def forward(self, tokens, enc_outputs, src_valid_lens=None, need_weights: bool = False):
        check_tokens(tokens, "tokens", self.embed.embedding.num_embeddings)
        return self.step(tokens, self.init_state(enc_outputs, src_valid_lens), need_weights)

    @property
    def attention_weights(self) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
        return [(b.self_attention.attention_weights, b.cross_attention.attention_weights)
                for b in self.blocks]


class Transformer(nn.Module):
    """The encoder-decoder Transformer for sequence-to-sequence tasks such as translation.

    forward(src (B, T_src), src_valid_lens (B,), dec_input (B, T_tgt)) -> logits (B, T_tgt, V_tgt),
    the decoder fed ``dec_input`` (``<bos>`` then the target, shifted right: teacher forcing).
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

    def forward(self, src, src_valid_lens, dec_input, need_weights: bool = False):
        # an error names the argument the caller passed
        check_tokens(dec_input, "dec_input", self.decoder.embed.embedding.num_embeddings)
        enc_outputs = self.encoder(src, src_valid_lens, need_weights)  # checks the lengths
        return self.decoder(dec_input, enc_outputs, src_valid_lens, need_weights)

    def to_torch(self) -> nn.Transformer:
        """``nn.Transformer(norm_first=True, batch_first=True)`` of the same sizes holding a copy of
        every block's weights and the final LayerNorm of each stack (embeddings, positional encoding
        and the output layer are ours alone: ``nn.Transformer`` has none). Pre-norm only: a
        post-norm Transformer has no PyTorch twin, as ``nn.Transformer`` always ends both stacks
        with a LayerNorm, which the paper's post-norm stacks do not have."""
        if not isinstance(self.encoder.final_norm, nn.LayerNorm):
            raise ValueError("this Transformer is post-norm (norm_first=False): nn.Transformer ends "
                             "each stack with a LayerNorm that the paper's post-norm stacks do not "
                             "have; build it with norm_first=True")
        encoder_layers = [block.to_torch() for block in self.encoder.blocks]
        decoder_layers = [block.to_torch() for block in self.decoder.blocks]
        sizes = _torch_layer_sizes(self.encoder.blocks[0])
        theirs = nn.Transformer(sizes["d_model"], sizes["nhead"], len(encoder_layers),
                                len(decoder_layers), sizes["dim_feedforward"], sizes["dropout"],
                                batch_first=True, norm_first=True, dtype=sizes["dtype"])
        theirs.encoder.layers = nn.ModuleList(encoder_layers)
        theirs.decoder.layers = nn.ModuleList(decoder_layers)
        theirs.encoder.norm.load_state_dict(self.encoder.final_norm.state_dict())
        theirs.decoder.norm.load_state_dict(self.decoder.final_norm.state_dict())
        return theirs.to(self.encoder.final_norm.weight.device).train(self.training)
