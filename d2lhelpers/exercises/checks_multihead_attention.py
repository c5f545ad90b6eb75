"""The checks of notebook 04_multihead_attention's coding exercises."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..attention import MultiHeadAttention
from ..transformer import copy_to_torch_layer
from .cases import seeded_generator, randn, randint, random_sizes, size_text, case_label, random_module, random_lengths
from .runner import run_check

__all__ = ['check_per_head_weights', 'check_to_torch_multihead', 'check_packed_self_attention']


def _multihead_cases(generator, fixed: list[tuple[str, dict, str | None]], count: int,
                     bias: bool = False, masks: bool = True) -> list[tuple[str, tuple]]:
    """(description, (mha, queries, keys, valid_lens)) cases for a random d2lh.MultiHeadAttention.

    fixed: (what, sizes, lengths) with sizes d_model, h, B, T_q, T_k and lengths None, "per
    sequence", "per query" or "zero" (sequence 0 has no valid key); ``count`` random ones follow
    (without lengths unless ``masks``).
    """

    kinds = (None, "per sequence", "per query") if masks else (None,)
    fixed = list(fixed)
    for s in random_sizes(generator, count, d_k=(1, 4), h=(1, 4), B=(1, 3), T_q=(1, 5), T_k=(1, 5)):
        d_model = s.pop("d_k") * s["h"]
        kind = kinds[int(randint(generator, 0, len(kinds) - 1))]
        fixed.append(("", {"d_model": d_model, **s}, kind))
    cases = []
    for what, s, lengths in fixed:
        with torch.random.fork_rng(devices=[]):  # the constructor draws from the global stream
            mha = random_module(MultiHeadAttention(s["d_model"], s["h"], bias=bias), generator)
        queries = randn(generator, s["B"], s["T_q"], s["d_model"])
        keys = randn(generator, s["B"], s["T_k"], s["d_model"])
        valid_lens = None if lengths is None else random_lengths(
            generator, s, per_query=lengths == "per query", zero=lengths == "zero")
        mask = {None: "no valid_lens", "per sequence": "valid_lens (B,)",
                "per query": "valid_lens (B, T_q)",
                "zero": "a sequence with valid length 0"}[lengths]
        cases.append((case_label(what, f"{size_text(s)}, {mask}"), (mha, queries, keys, valid_lens)))
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
    cases = _multihead_cases(generator, fixed, count=2)

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
        for what, args in _multihead_cases(generator, fixed, 1, bias, masks=False):
            mha, queries, keys, _ = args
            values = keys.flip(1)  # values that differ from the keys
            cases.append((f"bias={bias}, {what}", (mha, queries, keys, values)))

    def outputs(layer, mha, queries, keys, values):  # what the layer computes on the inputs
        if not isinstance(layer, torch.nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(layer).__name__}")
        with torch.no_grad():
            return layer.eval()(queries, keys, values, need_weights=False)[0]

    def reference(mha, queries, keys, values):
        layer = torch.nn.MultiheadAttention(mha.d_model, mha.num_heads, batch_first=True,
                                            bias=mha.W_q.bias is not None)
        return copy_to_torch_layer(mha, layer)

    run_check("to_torch_multihead", lambda mha, queries, keys, values: fn(mha), cases, reference,
              compare_through=("applied to the queries, keys and values", outputs),
              hints=("PyTorch keeps the three input projections in one stacked matrix: in which "
                     "order? And where do the biases go?",
                     "nn.MultiheadAttention(d_model, h, bias=..., batch_first=True); copy "
                     "torch.cat([W_q, W_k, W_v] weights) into in_proj_weight (in that order), "
                     "W_o's weight into out_proj.weight, and when mha has biases, the three "
                     "biases into in_proj_bias and W_o's into out_proj.bias."),
              hint=hint)


def _self_attention_cases(generator) -> list[tuple[str, tuple]]:
    """(description, (mha, X, valid_lens)) for self-attention: a random d2lh.MultiHeadAttention
    (whose weights the learner's module receives), inputs X (B, T, d_model) and valid lengths."""
    fixed = [("", dict(d_model=8, h=2, B=2, T=5), None),
             ("", dict(d_model=12, h=3, B=2, T=4), "per sequence"),
             ("a causal mask", dict(d_model=8, h=4, B=2, T=5), "causal"),
             ("a single head", dict(d_model=6, h=1, B=3, T=4), "per sequence"),
             ("a single token", dict(d_model=8, h=2, B=2, T=1), None),
             ("", dict(d_model=8, h=2, B=2, T=3), "zero")]
    kinds = (None, "per sequence", "per query")
    for s in random_sizes(generator, 2, d_k=(1, 4), h=(1, 4), B=(1, 3), T=(1, 6)):
        d_model = s.pop("d_k") * s["h"]
        fixed.append(("", {"d_model": d_model, **s}, kinds[int(randint(generator, 0, 2))]))
    cases = []
    for what, s, lengths in fixed:
        with torch.random.fork_rng(devices=[]):  # the constructor draws from the global stream
            mha = random_module(MultiHeadAttention(s["d_model"], s["h"]), generator)
        X = randn(generator, s["B"], s["T"], s["d_model"])
        sizes = {"B": s["B"], "T_q": s["T"], "T_k": s["T"]}
        if lengths == "causal":
            valid_lens = torch.arange(1, s["T"] + 1).expand(s["B"], -1)
        elif lengths is not None:
            valid_lens = random_lengths(generator, sizes, per_query=lengths == "per query",
                                        zero=lengths == "zero")
        else:
            valid_lens = None
        mask = {None: "no valid_lens", "per sequence": "valid_lens (B,)",
                "per query": "valid_lens (B, T)", "causal": "valid_lens (B, T) = 1..T",
                "zero": "a sequence with valid length 0"}[lengths]
        cases.append((case_label(what, f"{size_text(s)}, {mask}"), (mha, X, valid_lens)))
    return cases


def check_packed_self_attention(cls: type, seed: int = 0, hint: int = 1) -> None:
    """cls(d_model, num_heads): multi-head self-attention with one packed projection
    ``W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)`` (output features: queries, then keys,
    then values) and ``W_o = nn.Linear(d_model, d_model, bias=False)``; ``forward(X, valid_lens)``
    with X (B, T, d_model) and valid_lens None, (B,) or (B, T) returns (B, T, d_model) and keeps
    the weights of every head in ``.attention_weights`` (B, h, T, T). Compared, outputs and
    weights, with d2lh.MultiHeadAttention holding the same weights."""
    cases = _self_attention_cases(seeded_generator(seed))

    def learner(mha, X, valid_lens):
        module = cls(mha.d_model, mha.num_heads)
        for name, shape in (("W_qkv", (3 * mha.d_model, mha.d_model)),
                            ("W_o", (mha.d_model, mha.d_model))):
            layer = getattr(module, name, None)
            if not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != shape:
                raise TypeError(f"the module needs {name} = nn.Linear with weight of shape {shape}, "
                                f"got {layer!r}")
        with torch.no_grad():
            module.W_qkv.weight.copy_(torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight]))
            module.W_o.weight.copy_(mha.W_o.weight)
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
