"""The checks of notebook 06_transformer (d2lhelpers/exercises/checks_transformer.py): right and
plausible wrong answers (see checks_common.py); the cached decoder-block step written from the
block's parts, each flag a mistake."""

from __future__ import annotations

import math

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_transformer


def layer_norm(X, eps=1e-5, dim=-1, unbiased=False, eps_inside=True, centre=True):
    mean = X.mean(dim=dim, keepdim=True)
    var = X.var(dim=dim, unbiased=unbiased, keepdim=True)
    centred = X - mean if centre else X
    if eps_inside:
        return centred / torch.sqrt(var + eps)
    return centred / (torch.sqrt(var) + eps)


def causal_additive_mask(T, offset=1, lower=False):
    M = torch.zeros(T, T)
    future = torch.ones(T, T, dtype=torch.bool)  # (T_q, T_k)
    future = future.tril(diagonal=-offset) if lower else future.triu(diagonal=offset)
    return M.masked_fill(future, -math.inf)


def attend(attention, x, keys, values, valid_lens):
    """Notebook 06's attention over projected keys and values, heads folded into the batch."""
    B, h = x.shape[0], attention.num_heads
    q = attention.split_heads(attention.W_q(x))
    lens = None if valid_lens is None else valid_lens.repeat_interleave(h, dim=0)
    heads = d2lh.DotProductAttention()(q.flatten(0, 1), keys.flatten(0, 1), values.flatten(0, 1),
                                       lens)
    return attention.W_o(attention.merge_heads(heads.unflatten(0, (B, h))))


def cached_block_step(post_norm_only=False, append=True, offset=True, causal=True,
                      pre_norm_only=False, cross_lens=True, read_cache=True, project_raw=False,
                      ffn_post_norm=False, swap_cross=False, extra_key=0, residual=True,
                      skip_ffn=False, norm_of=None):
    """A cached decoder-block step, right by default; each flag off is one plausible mistake."""

    def step(block, x, cache, enc_keys, enc_values, src_valid_lens):
        def sublayer(add_norm, x, f):
            if skip_ffn and add_norm is block.add_norm3:
                return x
            if norm_of is not None:  # the layers of another sublayer's add & norm
                add_norm = getattr(block, norm_of[add_norm is block.add_norm1 and "self"
                                                  or add_norm is block.add_norm2 and "cross"
                                                  or "ffn"])
            keep = x if residual else 0
            if ffn_post_norm and add_norm is block.add_norm3:
                return add_norm.norm(x + f(x))
            if (add_norm.norm_first and not post_norm_only) or pre_norm_only:
                return keep + f(add_norm.norm(x))
            return add_norm.norm(keep + f(x))

        block_input = x

        def masked_self_attention(h):
            attention = block.self_attention
            source = block_input if project_raw else h
            k = attention.split_heads(attention.W_k(source))
            v = attention.split_heads(attention.W_v(source))
            if append and not read_cache:  # stores them, but attends to the new positions only
                cache.append(k, v)
                keys, values = k, v
            elif append:
                cache.append(k, v)
                keys, values = cache.keys, cache.values
            else:  # attends to the cache and the new positions, but never stores them
                keys = k if cache.keys is None else torch.cat([cache.keys, k], dim=2)
                values = v if cache.values is None else torch.cat([cache.values, v], dim=2)
            seen_before = keys.shape[2] - h.shape[1] if offset else 0
            if causal:
                lens = d2lh.causal_valid_lens(h.shape[0], h.shape[1], seen_before + extra_key)
                lens = lens.clamp(max=keys.shape[2])  # (a mask j <= i + 1 would not raise)
            else:  # every new position sees all of the new positions
                lens = torch.full((h.shape[0],), keys.shape[2])
            return attend(attention, h, keys, values, lens)

        x = sublayer(block.add_norm1, x, masked_self_attention)
        if swap_cross:
            enc_keys, enc_values = enc_values, enc_keys
        x = sublayer(block.add_norm2, x, lambda h: attend(block.cross_attention, h, enc_keys,
                                                          enc_values,
                                                          src_valid_lens if cross_lens else None))
        return sublayer(block.add_norm3, x, block.ffn)

    return step


CHECKS = {
    "check_layer_norm": (layer_norm, {
        "unbiased variance": (
            lambda X, eps: layer_norm(X, eps, unbiased=True), "the worked example", "unbiased"),
        "torch.std and eps outside": (
            lambda X, eps: (X - X.mean(-1, keepdim=True)) / (X.std(-1, keepdim=True) + eps),
            "the worked example", "unbiased"),
        "normalised over the first axis": (
            lambda X, eps: layer_norm(X, eps, dim=0), "the worked example", "first axis"),
        "normalised over axis 1": (lambda X, eps: layer_norm(X, eps, dim=1), "3-D input",
                                   "axis 1"),
        "statistics over the whole tensor": (
            lambda X, eps: (X - X.mean()) / torch.sqrt(X.var(unbiased=False) + eps),
            "the worked example", "whole tensor"),
        "eps outside the square root": (
            lambda X, eps: layer_norm(X, eps, eps_inside=False), "eps matters", "outside"),
        "eps missing": (
            lambda X, eps: layer_norm(X, 0.0), "the result holds NaN", "eps is missing"),
        "over the last two axes": (
            lambda X, eps: (X - X.mean((-2, -1), keepdim=True))
            / (X.var((-2, -1), unbiased=False, keepdim=True) + eps).sqrt(), "the worked example",
            "whole tensor"),
        "not centred": (lambda X, eps: layer_norm(X, eps, centre=False), "the worked example",
                        "not centred"),
        "divided by the variance": (
            lambda X, eps: (X - X.mean(-1, keepdim=True)) / (X.var(-1, False, keepdim=True) + eps),
            "the worked example", "divided by the variance"),
        "with a learned scale of 2": (lambda X, eps: 2 * layer_norm(X, eps), "differ",
                                      "~times a constant (2 here)"),
        "the square of the right result": (lambda X, eps: layer_norm(X, eps) ** 2, "differ", None),
    }),
    "check_causal_additive_mask": (causal_additive_mask, {
        "diagonal masked too": (
            lambda T: causal_additive_mask(T, offset=0), "on input a single position, T=1",
            "diagonal too"),
        "transposed: the past masked": (
            lambda T: causal_additive_mask(T, lower=True), "at index (0, 1): expected -inf, got 0",
            "hides the past"),
        "a boolean mask": (
            lambda T: torch.ones(T, T, dtype=torch.bool).triu(diagonal=1), "raised TypeError",
            "boolean"),
        "a boolean mask of what is seen": (
            lambda T: torch.ones(T, T, dtype=torch.bool).tril(), "raised TypeError", "boolean"),
        "1 instead of -inf": (
            lambda T: torch.ones(T, T).triu(diagonal=1), "differ", "holds 1"),
        "-1e9 instead of -inf": (lambda T: torch.full((T, T), -1e9).triu(diagonal=1), "differ",
                                 "large negative"),
        "inverted": (lambda T: causal_additive_mask(T, offset=0, lower=True), "differ",
                     "inverted"),
        "a 0/1 mask times -inf": (lambda T: torch.ones(T, T).triu(1) * -math.inf, "NaN",
                                  "holds NaN"),
        "every key hidden": (lambda T: torch.full((T, T), -math.inf), "on input", None),
    }),
    "check_cached_block_step": (cached_block_step(), {
        "post-norm only (norm_first ignored)": (cached_block_step(post_norm_only=True),
                                                "pre-norm block", "as post-norm"),
        "the FFN always post-norm": (cached_block_step(ffn_post_norm=True), "pre-norm block",
                                     "do not all follow"),
        "pre-norm only": (cached_block_step(pre_norm_only=True), "post-norm block",
                          "as pre-norm"),
        "new keys and values never stored": (cached_block_step(append=False),
                                             "one position per step", "never sees"),
        "the cache stored but not read": (cached_block_step(read_cache=False),
                                          "one position per step", "never sees"),
        "causal lengths forget the cache": (cached_block_step(offset=False),
                                            "one position per step", "forget the cached"),
        "no causal mask among the new positions": (cached_block_step(causal=False),
                                                   "several positions per step",
                                                   "both directions"),
        "source padding not masked": (cached_block_step(cross_lens=False), "src_valid_lens",
                                      "ignores src_valid_lens"),
        "keys projected from the block's input": (cached_block_step(project_raw=True),
                                                  "pre-norm block", "block's input"),
        "the encoder's values used as keys, its keys as values": (
            cached_block_step(swap_cross=True), "on input", "trade places"),
        "each new position also sees the next one": (cached_block_step(extra_key=1),
                                                     "several positions per step", "off by one"),
        "no residual connections": (cached_block_step(residual=False), "on input",
                                    "residual connection"),
        "the FFN left out": (cached_block_step(skip_ffn=True), "on input", "leaves out a sublayer"),
        "the self-attention and cross-attention norms swapped": (
            cached_block_step(norm_of={"self": "add_norm2", "cross": "add_norm1",
                                       "ffn": "add_norm3"}), "on input", "each other's"),
        "pre-norm only and the cache never stored": (
            cached_block_step(pre_norm_only=True, append=False), "on input", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_transformer
