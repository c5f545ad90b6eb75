"""The checks of notebook 04_multihead_attention's coding exercises: every head's weights, the layer
as torch.nn.MultiheadAttention, and self-attention with one packed projection."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..attention import MultiHeadAttention
from .cases import (MASK_KINDS, case_label, load_linear_weights, randn, random_choice,
                    random_head_sizes, seeded_generator, seeded_module, size_text, valid_lens_case)
from .runner import run_check

__all__ = ['check_per_head_weights', 'check_to_torch_multihead', 'check_packed_self_attention']


def _attention_cases(generator, fixed: list[tuple[str, dict, str | None]], count: int,
                     kinds=MASK_KINDS, bias: bool = False) -> list[tuple[str, tuple]]:
    """(description, (mha, *inputs, valid_lens)) cases for a random d2lh.MultiHeadAttention.

    fixed: (what, sizes, kind) with sizes d_model, h, B and either T_q, T_k (inputs: queries
    (B, T_q, d_model) and keys (B, T_k, d_model)) or T (self-attention, input: X (B, T, d_model));
    kind: a kind of valid lengths (see :func:`.cases.valid_lens_case`). ``count`` random cases
    follow, each with a kind drawn from ``kinds``.
    """
    self_attention = "T" in fixed[0][1]
    lengths = dict(T=(1, 6)) if self_attention else dict(T_q=(1, 5), T_k=(1, 5))
    random = [("", s, random_choice(generator, kinds)) for s in
              random_head_sizes(generator, count, d_k=(1, 4), h=(1, 4), B=(1, 3), **lengths)]
    cases = []
    for what, s, kind in list(fixed) + random:
        mha = seeded_module(generator, MultiHeadAttention, s["d_model"], s["h"], bias=bias)
        if self_attention:
            inputs = (randn(generator, s["B"], s["T"], s["d_model"]),)  # X
            valid_lens, mask = valid_lens_case(generator, kind, s["B"], s["T"])
        else:
            inputs = (randn(generator, s["B"], s["T_q"], s["d_model"]),  # queries
                      randn(generator, s["B"], s["T_k"], s["d_model"]))  # keys
            valid_lens, mask = valid_lens_case(generator, kind, s["B"], s["T_q"], s["T_k"])
        cases.append((case_label(what, f"{size_text(s)}, {mask}"), (mha, *inputs, valid_lens)))
    return cases


def check_per_head_weights(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(mha, queries (B, T_q, d_model), keys (B, T_k, d_model), valid_lens) -> the attention
    weights (B, h, T_q, T_k) of every head of the d2lh.MultiHeadAttention ``mha``, computed from
    its W_q and W_k without calling it. valid_lens: None, (B,) or (B, T_q)."""
    generator = seeded_generator(seed)
    fixed = [("", dict(d_model=8, h=2, B=2, T_q=3, T_k=4), None),
             ("", dict(d_model=12, h=3, B=2, T_q=4, T_k=5), "per sequence"),
             ("a single query", dict(d_model=8, h=4, B=3, T_q=1, T_k=6), "per sequence"),
             ("", dict(d_model=6, h=2, B=2, T_q=4, T_k=4), "per query"),
             ("", dict(d_model=8, h=2, B=2, T_q=2, T_k=3), "zero")]
    cases = _attention_cases(generator, fixed, count=2)

    def reference(mha, queries, keys, valid_lens):
        with torch.no_grad():
            mha(queries, keys, keys, valid_lens)  # the weights do not depend on the values
        return mha.attention_weights

    run_check("per_head_weights", fn, cases, reference,
              hints=("Each head works on its own slice of the projected features: which width "
                     "scales its scores, and which valid lengths belong to each head?",
                     "project with mha.W_q and mha.W_k, split the features into h heads of width "
                     "d_k = d_model / h (reshape to (B, T, h, d_k), then move the head axis next "
                     "to the batch), divide the scores by sqrt(d_k) (not sqrt(d_model)), give "
                     "every head of sequence b the lengths of b, and use d2lh.masked_softmax, "
                     "which keeps a row with no valid key at zero."),
              hint=hint)


def check_to_torch_multihead(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(mha) -> a torch.nn.MultiheadAttention (batch_first) computing the same function as the
    d2lh.MultiHeadAttention ``mha``, biases included when ``mha`` has them."""
    generator = seeded_generator(seed)
    fixed = [("", dict(d_model=8, h=2, B=2, T_q=3, T_k=4), None),
             ("a single head", dict(d_model=6, h=1, B=3, T_q=2, T_k=5), None),
             ("a single key", dict(d_model=12, h=3, B=1, T_q=4, T_k=1), None)]
    cases = []
    for bias in (True, False):
        for what, args in _attention_cases(generator, fixed, 1, kinds=(None,), bias=bias):
            mha, queries, keys, _ = args
            values = keys.flip(1)  # values that differ from the keys
            cases.append((f"bias={bias}, {what}", (mha, queries, keys, values)))

    def outputs(layer, mha, queries, keys, values):  # what the layer computes on the inputs
        if not isinstance(layer, torch.nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(layer).__name__}")
        with torch.no_grad():
            return layer.eval()(queries, keys, values, need_weights=False)[0]

    def reference(mha, queries, keys, values):
        return mha.to_torch()

    run_check("to_torch_multihead", lambda mha, queries, keys, values: fn(mha), cases, reference,
              compare_through=("applied to the queries, keys and values", outputs),
              hints=("PyTorch keeps the three input projections in one stacked matrix: in which "
                     "order? And where do the biases go?",
                     "nn.MultiheadAttention(d_model, h, bias=..., batch_first=True); copy "
                     "torch.cat([W_q, W_k, W_v] weights) into in_proj_weight (in that order), "
                     "W_o's weight into out_proj.weight, and when mha has biases, the three "
                     "biases into in_proj_bias and W_o's into out_proj.bias."),
              hint=hint)


def check_packed_self_attention(cls: type, seed: int = 0, hint: int = 1) -> None:
    """cls(d_model, num_heads): multi-head self-attention with one packed projection
    ``W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)`` (output features: queries, then keys,
    then values) and ``W_o = nn.Linear(d_model, d_model, bias=False)``; ``forward(X, valid_lens)``
    with X (B, T, d_model) and valid_lens None, (B,) or (B, T) returns (B, T, d_model) and keeps
    the weights of every head in ``.attention_weights`` (B, h, T, T). Compared, outputs and
    weights, with d2lh.MultiHeadAttention holding the same weights."""
    fixed = [("", dict(d_model=8, h=2, B=2, T=5), None),
             ("", dict(d_model=12, h=3, B=2, T=4), "per sequence"),
             ("a causal mask", dict(d_model=8, h=4, B=2, T=5), "causal"),
             ("a single head", dict(d_model=6, h=1, B=3, T=4), "per sequence"),
             ("a single token", dict(d_model=8, h=2, B=2, T=1), None),
             ("", dict(d_model=8, h=2, B=2, T=3), "zero")]
    cases = _attention_cases(seeded_generator(seed), fixed, count=2)  # (mha, X, valid_lens)

    def learner(mha, X, valid_lens):
        module = cls(mha.d_model, mha.num_heads)
        load_linear_weights(module, {  # W_qkv's output features: queries, keys, values
            "W_qkv": torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]),
            "W_o": mha.W_o.weight})
        with torch.no_grad():
            output = module.eval()(X, valid_lens)
        return output, getattr(module, "attention_weights", None)

    def reference(mha, X, valid_lens):
        with torch.no_grad():
            return mha(X, X, X, valid_lens), mha.attention_weights

    run_check("PackedSelfAttention", learner, cases, reference,
              hints=("Result 0 is forward's output, result 1 its attention_weights. Follow one "
                     "head from the packed projection to the output: which features are its "
                     "queries, its keys, its values, and which valid lengths does it use?",
                     "cut W_qkv(X) into queries, keys and values along the last axis (in that "
                     "order), split each into h heads of width d_k = d_model / h with the head "
                     "axis next to the batch axis, scale the scores by sqrt(d_k), give every head "
                     "of sequence b the lengths of b, use d2lh.masked_softmax (a row with no valid "
                     "key stays 0), then put the heads' outputs side by side again before W_o."),
              hint=hint)
