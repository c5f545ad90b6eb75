"""The RNN encoder-decoder with additive (Bahdanau) attention: the baseline the Transformer replaced.

Bahdanau, Cho and Bengio (2015), *Neural Machine Translation by Jointly Learning to Align and
Translate*, built bottom-up: a GRU encoder, a GRU decoder that attends over the encoder's outputs at
every step, and the model that joins them.

- The encoder reads the source tokens left to right; its output at position j, h_j, summarises the
  source up to token j. The outputs of all positions are the keys and values of the attention.
- At step i the decoder's **query is its previous hidden state** s_{i-1}. Additive attention
  (:class:`~d2lhelpers.attention.AdditiveAttention`, masked with the source lengths) gives the
  context c_i = sum_j alpha_ij h_j. The GRU reads [embedding of y_{i-1}; c_i] and moves to s_i;
  a linear layer predicts y_i from [s_i; c_i; embedding of y_{i-1}] (like the paper's output layer,
  it sees the context and the previous word directly; the paper's maxout is left out).
- As in the paper, the decoder starts from s_0 = tanh(W_s h_last), h_last being the encoder's
  output at each source sentence's last valid token.

The model serves the same training loop and decoders as the Transformer (see
:mod:`~d2lhelpers.decoding`): ``model(src, src_valid_lens, dec_input)`` -> logits;
``model.encoder(src, src_valid_lens)`` -> encoder outputs (a tensor); ``model.decoder(tokens,
enc_outputs, src_valid_lens)`` (teacher forcing); ``model.decoder.init_state(...)`` -> a
:class:`BahdanauDecoderState` that reorders itself; ``model.decoder.step(tokens, state)``.

Shapes: B batch, T_src source length, T_tgt target length, E embedding width, H hidden width
(d in the attention's legend), L GRU layers, V vocabulary size. Taught in notebook
08_bahdanau_attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import AdditiveAttention, check_valid_lens
from .basics import check_tokens

__all__ = ["GRUEncoder", "BahdanauDecoderState", "BahdanauDecoder", "BahdanauSeq2Seq"]


class GRUEncoder(nn.Module):
    """Embedding, then a GRU of ``num_layers`` layers read left to right.

    ``forward(tokens, src_valid_lens)``: tokens (B, T_src) indices -> outputs (B, T_src, H), the top
    layer's hidden state at every position. A GRU reads left to right, so the output at a valid
    position never depends on the padding after it. The source lengths (B,) enter the model here
    and are checked here, each in 1 .. T_src (every source has a token: the decoder starts from the
    last one); the decoder trusts them and masks the padding.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.dropout = nn.Dropout(dropout)
        self.rnn = nn.GRU(embed_size, num_hiddens, num_layers, batch_first=True,
                          dropout=dropout if num_layers > 1 else 0.0)

    def forward(self, tokens, src_valid_lens=None):
        B, T_src = check_tokens(tokens, "src", self.embedding.num_embeddings).shape
        check_valid_lens(src_valid_lens, B, None, T_src, name="src_valid_lens", keys_name="T_src",
                         minimum=1)
        X = self.dropout(self.embedding(tokens))  # (B, T_src, E)
        outputs, _ = self.rnn(X)  # (B, T_src, H); the final state is read from outputs later
        return outputs


@dataclass
class BahdanauDecoderState:
    """What the decoder keeps between steps: its GRU's hidden state (L, B, H), and the encoder
    outputs (B, T_src, H) and source lengths (B,) it attends over."""

    hidden: torch.Tensor
    enc_outputs: torch.Tensor
    src_valid_lens: torch.Tensor

    def reorder(self, rows: torch.Tensor) -> None:
        """Keep the rows ``rows`` (B_new,) of the batch, in that order: row r becomes old row
        ``rows[r]`` (beam search gives each surviving beam its parent's state)."""
        self.hidden = self.hidden[:, rows]  # the batch is axis 1 of a GRU state
        self.enc_outputs = self.enc_outputs[rows]
        self.src_valid_lens = self.src_valid_lens[rows]


class BahdanauDecoder(nn.Module):
    """A GRU decoder that attends over the encoder's outputs at every step.

    One step, from the previous token y (B,) and the state s (L, B, H)::

        c = attention(query=s[-1], keys=values=enc_outputs, valid_lens=src_valid_lens)  # (B, H)
        s = GRU([embedding(y); c], s)                                                   # (L, B, H)
        logits = output([s[-1]; c; embedding(y)])                                       # (B, V)

    ``step(tokens, state)``: tokens (B, T_new) fed one after the other -> logits (B, T_new, V);
    ``state`` then holds the new hidden state. ``forward(tokens, enc_outputs, src_valid_lens)`` is
    teacher forcing: the same steps from a fresh state. ``.attention_weights`` keeps the weights
    of the last call, (B, T_new, T_src), for plotting.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int = 1,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.num_layers, self.num_hiddens = num_layers, num_hiddens
        self.embedding = nn.Embedding(vocab_size, embed_size)
        self.attention = AdditiveAttention(num_hiddens, num_hiddens, num_hiddens, dropout)
        self.W_s = nn.Linear(num_hiddens, num_layers * num_hiddens)  # s_0 = tanh(W_s h_last)
        self.rnn = nn.GRU(embed_size + num_hiddens, num_hiddens, num_layers, batch_first=True,
                          dropout=dropout if num_layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(2 * num_hiddens + embed_size, vocab_size)  # [s_i; c_i; e(y_{i-1})]
        self.attention_weights: torch.Tensor | None = None

    def init_state(self, enc_outputs, src_valid_lens) -> BahdanauDecoderState:
        """The state before the first step: s_0 = tanh(W_s h_last), h_last (B, H) being the
        encoder's output at each sentence's last valid token; one s_0 per layer, (L, B, H).
        ``src_valid_lens`` (B,), each in 1 .. T_src, are trusted: the encoder checked them."""
        if not isinstance(enc_outputs, torch.Tensor) or enc_outputs.dim() != 3 \
                or enc_outputs.shape[-1] != self.num_hiddens:
            shape = tuple(enc_outputs.shape) if isinstance(enc_outputs, torch.Tensor) else type(
                enc_outputs).__name__
            raise ValueError(f"enc_outputs must have shape (B, T_src, H={self.num_hiddens}), "
                             f"got {shape}")
        B, T_src, H = enc_outputs.shape
        if src_valid_lens is None:  # every source position is a token
            src_valid_lens = torch.full((B,), T_src, device=enc_outputs.device)
        src_valid_lens = torch.as_tensor(src_valid_lens, device=enc_outputs.device)  # trusted
        # whole numbers, possibly floating point (as the encoder allows): indices must be integers
        h_last = enc_outputs[torch.arange(B, device=enc_outputs.device), src_valid_lens.long() - 1]
        s_0 = torch.tanh(self.W_s(h_last))  # (B, L*H)
        hidden = s_0.reshape(B, self.num_layers, H).transpose(0, 1).contiguous()  # (L, B, H)
        return BahdanauDecoderState(hidden, enc_outputs, src_valid_lens)

    def step(self, tokens, state: BahdanauDecoderState):
        """Feed tokens (B, T_new), one position after the other; return their logits (B, T_new, V)."""
        check_tokens(tokens, "tokens")  # their range is checked by forward, not at every step
        if tokens.shape[0] != state.hidden.shape[1]:
            raise ValueError(f"tokens have batch size {tokens.shape[0]} but the state holds "
                             f"{state.hidden.shape[1]} rows (hidden {tuple(state.hidden.shape)})")
        embedded = self.dropout(self.embedding(tokens))  # (B, T_new, E)
        keys = self.attention.W_k(state.enc_outputs)  # (B, T_src, H): projected once per call
        outputs, weights = [], []
        for t in range(tokens.shape[1]):  # one step per position: s_i depends on s_{i-1}
            query = self.attention.W_q(state.hidden[-1][:, None])  # (B, 1, H): previous top state
            context = self.attention.attend(query, keys, state.enc_outputs,
                                            state.src_valid_lens)  # (B, 1, H)
            x = torch.cat([embedded[:, t:t + 1], context], dim=-1)  # (B, 1, E + H)
            out, state.hidden = self.rnn(x, state.hidden)  # (B, 1, H), (L, B, H)
            outputs.append(torch.cat([out, context, embedded[:, t:t + 1]], dim=-1))  # (B, 1, 2H + E)
            weights.append(self.attention.attention_weights)  # (B, 1, T_src)
        self.attention_weights = torch.cat(weights, dim=1)  # (B, T_new, T_src)
        return self.output(self.dropout(torch.cat(outputs, dim=1)))  # (B, T_new, V)

    def forward(self, tokens, enc_outputs, src_valid_lens):
        check_tokens(tokens, "tokens", self.embedding.num_embeddings)
        return self.step(tokens, self.init_state(enc_outputs, src_valid_lens))


class BahdanauSeq2Seq(nn.Module):
    """The RNN encoder-decoder with Bahdanau attention, for translation.

    forward(src (B, T_src), src_valid_lens (B,), dec_input (B, T_tgt)) -> logits (B, T_tgt, V_tgt),
    the decoder fed ``dec_input`` (``<bos>`` then the target, shifted right: teacher forcing).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, embed_size: int = 64,
                 num_hiddens: int = 128, num_layers: int = 1, dropout: float = 0.1) -> None:
        super().__init__()
        self.encoder = GRUEncoder(src_vocab_size, embed_size, num_hiddens, num_layers, dropout)
        self.decoder = BahdanauDecoder(tgt_vocab_size, embed_size, num_hiddens, num_layers,
                                       dropout)

    def forward(self, src, src_valid_lens, dec_input):
        # an error names the argument the caller passed
        check_tokens(dec_input, "dec_input", self.decoder.embedding.num_embeddings)
        enc_outputs = self.encoder(src, src_valid_lens)
        return self.decoder(dec_input, enc_outputs, src_valid_lens)
