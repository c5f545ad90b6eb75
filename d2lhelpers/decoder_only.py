"""A decoder-only language model of today's kind: pre-norm blocks of causal grouped-query
self-attention with rotary position embeddings (RoPE), and its key-value cache.

The pieces come from the other modules: :class:`~d2lhelpers.attention.MultiHeadAttention` with
``num_kv_heads`` (grouped-query attention: g key-value heads shared by h query heads, so that the
cache holds g heads instead of h) and ``rotary=True`` (:class:`~d2lhelpers.positional.RotaryEmbedding`);
generation with temperature, top-k and top-p lives in :mod:`~d2lhelpers.decoding`
(:func:`~d2lhelpers.decoding.generate`).

The block takes the choices notebook 12 teaches: the norm (``"layer"``: LayerNorm, or ``"rms"``:
RMSNorm), the feed-forward network (``"relu"``: the 2017 FFN, or ``"swiglu"``: :class:`SwiGLU`),
biases on or off, and the model tied or separate embeddings. With ``norm="rms"``, ``ffn="swiglu"``
and ``bias=False`` it is the Llama architecture: :meth:`DecoderOnlyLM.from_llama` loads the
weights of Hugging Face transformers' ``LlamaForCausalLM`` (and :meth:`DecoderOnlyLM.llama_state_dict`
gives them back), the two layouts of RoPE's feature pairs handled by :func:`llama_rope_permutation`.

Shape legend (as in :mod:`~d2lhelpers.attention`): B batch, T positions, d_model model width,
h query heads, g key-value heads, d_k per-head width, V vocabulary size. Taught in notebook
12_decoder_only_lm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .basics import check_int, check_tokens
from .transformer import PositionwiseFFN

__all__ = ["DecoderOnlyBlock", "DecoderOnlyLM", "LMState", "SwiGLU", "llama_rope_permutation"]

NORMS, FFNS = ("layer", "rms"), ("relu", "swiglu")


class SwiGLU(nn.Module):
    """The gated feed-forward network of today's blocks (Shazeer, 2020):
    W_down(SiLU(W_gate x) * W_up x), at every position: (B, T, d_model) -> (B, T, d_model)."""

    def __init__(self, d_model: int, ffn_hidden: int, dropout: float = 0.0,
                 bias: bool = False) -> None:
        super().__init__()
        self.W_gate = nn.Linear(d_model, ffn_hidden, bias=bias)
        self.W_up = nn.Linear(d_model, ffn_hidden, bias=bias)
        self.W_down = nn.Linear(ffn_hidden, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.W_down(self.dropout(nn.functional.silu(self.W_gate(X)) * self.W_up(X)))


def _norm(kind: str, d_model: int, bias: bool, eps: float) -> nn.Module:
    if kind == "layer":
        return nn.LayerNorm(d_model, eps=eps, bias=bias)
    return nn.RMSNorm(d_model, eps=eps)  # a scale and no bias, whatever ``bias`` says


def _check_choice(value, name: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")


class DecoderOnlyBlock(nn.Module):
    """A pre-norm decoder-only block: X + attention(norm1(X)), then X + FFN(norm2(X)).

    The attention is causal grouped-query self-attention with RoPE, without biases (no encoder,
    no cross-attention; positions enter through the rotations only). ``norm``: ``"layer"``
    (LayerNorm) or ``"rms"`` (RMSNorm); ``ffn``: ``"relu"`` (:class:`PositionwiseFFN`) or
    ``"swiglu"`` (:class:`SwiGLU`); ``bias``: biases in the FFN and the LayerNorms (RMSNorm has
    none). ``forward(X)`` (B, T, d_model) -> (B, T, d_model) is training (every position at once,
    causal); ``step(X, cache)`` feeds new positions after those held in ``cache`` (a KVCache that
    grows by T_new). The two compute the same function.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None,
                 ffn_hidden: int = 128, dropout: float = 0.0, rotary_base: float = 10000.0,
                 norm: str = "layer", ffn: str = "relu", bias: bool = True,
                 norm_eps: float = 1e-5) -> None:
        super().__init__()
        _check_choice(norm, "norm", NORMS)
        _check_choice(ffn, "ffn", FFNS)
        self.norm1 = _norm(norm, d_model, bias, norm_eps)
        self.attention = MultiHeadAttention(d_model, num_heads, dropout, num_kv_heads=num_kv_heads,
                                            rotary=True, rotary_base=rotary_base)
        self.norm2 = _norm(norm, d_model, bias, norm_eps)
        self.ffn = (PositionwiseFFN if ffn == "relu" else SwiGLU)(d_model, ffn_hidden, dropout,
                                                                  bias=bias)
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


def llama_rope_permutation(d_k: int) -> torch.Tensor:
    """The one place where the two layouts of RoPE's feature pairs meet.

    The course (:func:`~d2lhelpers.positional.apply_rotary`, as notebook 05's rotation) turns
    the neighbouring features (2j, 2j+1) of a head by m * omega_j, as Meta's original Llama code
    does; transformers' Llama (``rotate_half``) turns features (j, j + d_k/2) by the same angle,
    its conversion script having reordered the rows of Meta's checkpoints the same way. Row ``perm[i]`` of a Llama query or key projection (within one head) is row ``i`` of
    ours: ``perm = [0, d_k/2, 1, d_k/2 + 1, ...]``; ``torch.argsort(perm)`` goes back. The scores
    q . k are sums over pairs, so reordering the rows of W_q and W_k alike changes nothing else.
    """
    check_int(d_k, "d_k")
    if d_k % 2:
        raise ValueError(f"d_k must be even (features are rotated in pairs), got d_k={d_k}")
    half = d_k // 2
    return torch.stack([torch.arange(half), torch.arange(half, d_k)], dim=1).flatten()


def _config_value(config, *names, default=None):
    """A LlamaConfig's field (an object with attributes, or a dict), trying ``names`` in turn."""
    for name in names:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if value is not None:
            return value
    return default


class DecoderOnlyLM(nn.Module):
    """A small decoder-only language model: token embedding, ``num_layers``
    :class:`DecoderOnlyBlock` s (pre-norm, causal, RoPE, g = ``num_kv_heads`` key-value heads), a
    final norm, and a linear layer to next-token scores (sharing the embedding's weights when
    ``tie_embeddings``). ``norm``, ``ffn`` and ``bias`` are the blocks' (``bias`` also gives the
    output layer a bias, unless tied); ``norm="rms", ffn="swiglu", bias=False`` is the Llama
    architecture (:meth:`from_llama`).

    ``forward(tokens (B, T))`` -> logits (B, T, V): position t scores the token after tokens 0..t.
    Generation: ``state = init_state()``, then ``step(new_tokens (B, T_new), state)`` -> their
    logits (B, T_new, V), the caches in ``state`` growing by T_new. ``forward`` is one step from a
    fresh state. No positional table: the model accepts sequences of any length. ``forward`` checks
    the token ids against the vocabulary (one host synchronisation), as :func:`generate` does the
    prompt's; ``step``, which generation calls with the model's own tokens, checks shapes only.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, num_heads: int = 4,
                 num_kv_heads: int | None = None, ffn_hidden: int = 128, num_layers: int = 2,
                 dropout: float = 0.1, rotary_base: float = 10000.0, norm: str = "layer",
                 ffn: str = "relu", bias: bool = True, tie_embeddings: bool = False,
                 norm_eps: float = 1e-5) -> None:
        super().__init__()
        check_int(vocab_size, "vocab_size")
        check_int(num_layers, "num_layers")
        _check_choice(norm, "norm", NORMS)
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            DecoderOnlyBlock(d_model, num_heads, num_kv_heads, ffn_hidden, dropout, rotary_base,
                             norm, ffn, bias, norm_eps)
            for _ in range(num_layers))
        self.final_norm = _norm(norm, d_model, bias, norm_eps)
        self.output = nn.Linear(d_model, vocab_size, bias=bias and not tie_embeddings)
        if tie_embeddings:
            self.output.weight = self.embedding.weight  # one (V, d_model) matrix, read both ways

    def init_state(self) -> LMState:
        """The state before the first token: an empty cache per block."""
        return LMState([KVCache() for _ in self.blocks])

    def step(self, tokens: torch.Tensor, state: LMState, need_weights: bool = False) -> torch.Tensor:
        """Feed new tokens (B, T_new) after the ``state.num_decoded`` already seen; return their
        logits (B, T_new, V)."""
        check_tokens(tokens, "tokens")  # their range is checked by forward and generate
        if len(state.caches) != len(self.blocks):
            raise ValueError(f"state holds {len(state.caches)} caches for {len(self.blocks)} blocks")
        X = self.dropout(self.embedding(tokens))  # (B, T_new, d_model); no positions added
        for block, cache in zip(self.blocks, state.caches):
            X = block.step(X, cache, need_weights)
        return self.output(self.final_norm(X))

    def forward(self, tokens: torch.Tensor, need_weights: bool = False) -> torch.Tensor:
        check_tokens(tokens, "tokens", self.vocab_size)
        return self.step(tokens, self.init_state(), need_weights)

    @classmethod
    def from_llama(cls, config, state_dict: Mapping[str, torch.Tensor]) -> DecoderOnlyLM:
        """The course's model holding the weights of a Hugging Face ``LlamaForCausalLM``.

        ``config``: its ``LlamaConfig`` (or a dict of the same fields); ``state_dict``: its
        ``state_dict()``. The model comes in evaluation mode, in the weights' dtype, and computes
        the same logits as the reference (the query and key rows reordered by
        :func:`llama_rope_permutation`). Raises ValueError for a configuration this architecture
        does not have (biases, another activation, RoPE scaling, a head width other than
        d_model / h).
        """
        d_model = _config_value(config, "hidden_size")
        num_heads = _config_value(config, "num_attention_heads")
        rope = _config_value(config, "rope_parameters", "rope_scaling", default={}) or {}
        unsupported = {
            "hidden_act": (_config_value(config, "hidden_act", default="silu"), "silu"),
            "attention_bias": (bool(_config_value(config, "attention_bias", default=False)), False),
            "mlp_bias": (bool(_config_value(config, "mlp_bias", default=False)), False),
            "head_dim": (_config_value(config, "head_dim", default=d_model // num_heads),
                         d_model // num_heads),
            "rope_type": (rope.get("rope_type", rope.get("type", "default")), "default"),
        }
        for field, (seen, wanted) in unsupported.items():
            if seen != wanted:
                raise ValueError(f"config.{field} must be {wanted!r} for this architecture, "
                                 f"got {seen!r}")
        model = cls(_config_value(config, "vocab_size"), d_model, num_heads,
                    _config_value(config, "num_key_value_heads", default=num_heads),
                    _config_value(config, "intermediate_size"),
                    _config_value(config, "num_hidden_layers"), dropout=0.0,
                    rotary_base=float(rope.get("rope_theta")
                                      or _config_value(config, "rope_theta", default=10000.0)),
                    norm="rms", ffn="swiglu", bias=False,
                    tie_embeddings=bool(_config_value(config, "tie_word_embeddings",
                                                      default=False)),
                    norm_eps=_config_value(config, "rms_norm_eps", default=1e-6))
        dtype = state_dict["model.embed_tokens.weight"].dtype
        model.to(dtype).load_state_dict(model._from_llama_names(state_dict))
        return model.eval()

    def llama_state_dict(self) -> dict[str, torch.Tensor]:
        """This model's weights under ``LlamaForCausalLM``'s names and layout (the inverse of
        :meth:`from_llama`); the model must have the Llama architecture."""
        block = self.blocks[0]
        if not (isinstance(self.final_norm, nn.RMSNorm) and isinstance(block.ffn, SwiGLU)
                and block.ffn.W_up.bias is None):
            raise ValueError("llama_state_dict needs norm='rms', ffn='swiglu' and bias=False")
        ours = self.state_dict()
        inverse = {ours_name: llama_name for llama_name, ours_name in self._llama_names().items()}
        out = {}
        for name, tensor in ours.items():
            if name in inverse:
                out[inverse[name]] = self._rope_rows(name, tensor, inverse=True)
        if self.output.weight is self.embedding.weight:
            out["lm_head.weight"] = out["model.embed_tokens.weight"]
        return out

    def _llama_names(self) -> dict[str, str]:
        """LlamaForCausalLM's parameter names -> ours."""
        names = {"model.embed_tokens.weight": "embedding.weight",
                 "model.norm.weight": "final_norm.weight", "lm_head.weight": "output.weight"}
        parts = {"input_layernorm.weight": "norm1.weight",
                 "post_attention_layernorm.weight": "norm2.weight",
                 "self_attn.q_proj.weight": "attention.W_q.weight",
                 "self_attn.k_proj.weight": "attention.W_k.weight",
                 "self_attn.v_proj.weight": "attention.W_v.weight",
                 "self_attn.o_proj.weight": "attention.W_o.weight",
                 "mlp.gate_proj.weight": "ffn.W_gate.weight",
                 "mlp.up_proj.weight": "ffn.W_up.weight",
                 "mlp.down_proj.weight": "ffn.W_down.weight"}
        for i in range(len(self.blocks)):
            names.update({f"model.layers.{i}.{theirs}": f"blocks.{i}.{ours}"
                          for theirs, ours in parts.items()})
        return names

    def _rope_rows(self, name: str, weight: torch.Tensor, inverse: bool = False) -> torch.Tensor:
        """W_q or W_k with each head's rows reordered between Llama's RoPE layout and ours."""
        if not name.endswith(("attention.W_q.weight", "attention.W_k.weight")):
            return weight
        d_k = self.blocks[0].attention.d_k
        perm = llama_rope_permutation(d_k)
        if inverse:
            perm = torch.argsort(perm)
        heads = weight.unflatten(0, (-1, d_k))  # (heads * d_k, d_model) -> (heads, d_k, d_model)
        return heads[:, perm].flatten(0, 1)

    def _from_llama_names(self, state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        names = self._llama_names()
        theirs = {k: v for k, v in state_dict.items() if not k.endswith("rotary_emb.inv_freq")}
        if self.output.weight is self.embedding.weight:
            theirs.pop("lm_head.weight", None)
            names.pop("lm_head.weight")
        missing, unexpected = set(names) - set(theirs), set(theirs) - set(names)
        if missing or unexpected:
            raise ValueError(f"state_dict does not match a LlamaForCausalLM of this config: "
                             f"missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
        ours = {name: self._rope_rows(name, theirs[llama]) for llama, name in names.items()}
        if self.output.weight is self.embedding.weight:
            ours["output.weight"] = ours["embedding.weight"]
        return ours
