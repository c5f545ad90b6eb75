"""The checks of notebook 04_multihead_attention's coding exercises."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..attention import MultiHeadAttention
from .cases import seeded_generator, randn, randint, random_sizes, size_text, case_label, random_module, random_lengths
from .runner import run_check

__all__ = ['check_per_head_weights', 'check_to_torch_multihead']


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


def check_per_head_weights(fn: Callable, seed: int = 0) -> None:
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
              hint="project with mha.W_q and mha.W_k, split the features into h heads of width "
                   "d_k = d_model / h (reshape to (B, T, h, d_k), then move the head axis next to "
                   "the batch), divide the scores by sqrt(d_k) (not sqrt(d_model)), give every "
                   "head of sequence b the lengths of b, and use d2lh.masked_softmax, which keeps "
                   "a row with no valid key at zero.")


def check_to_torch_multihead(fn: Callable, seed: int = 0) -> None:
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

    def outputs(mha, queries, keys, values):
        layer = fn(mha)
        if not isinstance(layer, torch.nn.MultiheadAttention):
            raise TypeError(f"expected a torch.nn.MultiheadAttention, got {type(layer).__name__}")
        with torch.no_grad():
            return layer.eval()(queries, keys, values, need_weights=False)[0]

    def reference(mha, queries, keys, values):
        with torch.no_grad():
            return mha(queries, keys, values)

    run_check("to_torch_multihead", outputs, cases, reference,
              hint="nn.MultiheadAttention(d_model, h, bias=..., batch_first=True); copy "
                   "torch.cat([W_q, W_k, W_v] weights) into in_proj_weight (in that order), "
                   "W_o's weight into out_proj.weight, and when mha has biases, the three biases "
                   "into in_proj_bias and W_o's into out_proj.bias.")
