"""The checks of notebook 11_beyond_2017 (d2lhelpers/exercises/checks_beyond_2017.py): right and
plausible wrong answers (see checks_common.py), each factory right by default and a mistake with
one flag flipped. Written independently of the checks' references (d2lhelpers.decoder_only)."""

from __future__ import annotations

import math

import torch
from torch import nn

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_beyond_2017


def rotary_at_positions(pairing="neighbours", sign=1, exponent=2, use_positions=True):
    """RoPE at given positions, right by default; each argument names a mistake."""

    def rotate(x, positions):
        T, d_k = x.shape[-2], x.shape[-1]
        dtype = x.dtype
        j = torch.arange(d_k // 2, dtype=dtype)
        omega = 10000.0 ** (-exponent * j / d_k)  # (d_k/2,)
        m = positions if use_positions else torch.arange(T)
        angles = m.to(dtype)[:, None] * omega  # (T, d_k/2)
        cos, sin = torch.cos(angles), sign * torch.sin(angles)
        if pairing == "neighbours":
            a, b = x[..., 0::2], x[..., 1::2]
        else:  # the first half with the second half ("rotate_half"): another layout
            a, b = x[..., : d_k // 2], x[..., d_k // 2:]
        first, second = a * cos - b * sin, a * sin + b * cos
        if pairing == "neighbours":
            return torch.stack([first, second], dim=-1).flatten(-2).to(x.dtype)
        return torch.cat([first, second], dim=-1).to(x.dtype)

    return rotate


def online_softmax_update(rescale_acc=True, rescale_l=True, guard=True, subtract_max=True,
                          running_max=True):
    """One online-softmax block, right by default; each flag off is one plausible mistake."""

    def update(m, l, acc, scores, values):
        block_max = scores.max(dim=-1, keepdim=True).values
        m_new = torch.maximum(m, block_max) if running_max else block_max
        if not subtract_max:
            reference = torch.zeros_like(m_new)
        elif guard:
            reference = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
        else:
            reference = m_new
        p = torch.exp(scores - reference)
        factor = torch.exp(m - reference)
        new_l = (l * factor if rescale_l else l) + p.sum(dim=-1, keepdim=True)
        new_acc = (acc * factor if rescale_acc else acc) + p @ values
        return m_new, new_l, new_acc

    return update


def cached_gqa_self_attention(rotate_queries=True, offset=True, interleave=True, causal=True,
                              cache_rotated=True, scale="d_k", rotate_values=False):
    """Notebook 10's CachedGQASelfAttention, right by default; each argument names a mistake."""

    class CachedGQASelfAttention(nn.Module):
        def __init__(self, d_model, num_heads, num_kv_heads):
            super().__init__()
            self.h, self.g, self.d_k = num_heads, num_kv_heads, d_model // num_heads
            self.W_q = nn.Linear(d_model, d_model, bias=False)
            self.W_k = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
            self.W_v = nn.Linear(d_model, num_kv_heads * self.d_k, bias=False)
            self.W_o = nn.Linear(d_model, d_model, bias=False)

        def forward(self, X, cache):
            B, T, d_model = X.shape
            start = len(cache) if offset else 0
            positions = torch.arange(start, start + T)
            Q = self.W_q(X).view(B, T, self.h, self.d_k).transpose(1, 2)
            K = self.W_k(X).view(B, T, self.g, self.d_k).transpose(1, 2)
            V = self.W_v(X).view(B, T, self.g, self.d_k).transpose(1, 2)
            if rotate_queries:
                Q = d2lh.apply_rotary(Q, positions)
            if rotate_values:
                V = d2lh.apply_rotary(V, positions)
            rotated = d2lh.apply_rotary(K, positions)
            cache.append(rotated if cache_rotated else K, V)
            keys = cache.keys
            if not cache_rotated:  # rotates what it reads: right outputs, unrotated cache
                keys = d2lh.apply_rotary(keys, torch.arange(keys.shape[2]))
            group = self.h // self.g
            if interleave:
                keys, values = keys.repeat_interleave(group, 1), cache.values.repeat_interleave(group, 1)
            else:  # tiles the key-value heads: query head i reads head i % g
                keys, values = keys.repeat(1, group, 1, 1), cache.values.repeat(1, group, 1, 1)
            scores = Q @ keys.transpose(-2, -1) / math.sqrt(self.d_k if scale == "d_k" else d_model)
            T_k = keys.shape[2]
            if causal:
                lens = torch.arange(T_k - T + 1, T_k + 1)  # query i sees keys 0 .. T_k - T + i
            else:
                lens = torch.full((T,), T_k)
            allowed = torch.arange(T_k)[None, :] < lens[:, None]  # (T, T_k)
            weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
            return self.W_o((weights @ values).transpose(1, 2).reshape(B, T, d_model))

    return CachedGQASelfAttention


def top_p_probs(cumulative="before", renormalise=True, descending=True, stable=True):
    """Nucleus (top-p) probabilities, right by default; each argument names a mistake."""

    def probs(logits, top_p):
        if stable:
            p = torch.softmax(logits, dim=-1)
        else:
            e = torch.exp(logits)
            p = e / e.sum(dim=-1, keepdim=True)
        kept = torch.zeros_like(p, dtype=torch.bool)
        for row in range(p.shape[0]):  # row by row, written differently from the reference
            total = 0.0
            for index in p[row].argsort(descending=descending).tolist():
                if cumulative == "before" and total >= top_p:
                    break
                if cumulative == "after" and total + p[row, index].item() > top_p:
                    break  # stops before the token that crosses top_p
                kept[row, index] = True
                total += p[row, index].item()
        out = p * kept
        return out / out.sum(dim=-1, keepdim=True) if renormalise else out

    return probs


CHECKS = {
    "check_rotary_at_positions": (rotary_at_positions(), {
        "the two halves paired instead of neighbours": (rotary_at_positions(pairing="halves"),
                                                        "values differ"),
        "rotated the other way": (rotary_at_positions(sign=-1), "values differ"),
        "frequency exponent j/d": (rotary_at_positions(exponent=1), "values differ"),
        "positions 0 .. T-1 whatever was asked": (rotary_at_positions(use_positions=False),
                                                  "the odd positions of a cache"),
    }),
    "check_online_softmax_update": (online_softmax_update(), {
        "acc not rescaled": (online_softmax_update(rescale_acc=False),
                             "the maximum grows: what was summed must be rescaled"),
        "l not rescaled": (online_softmax_update(rescale_l=False), "result 1 of the tuple"),
        "-inf minus -inf: NaN for a query with no valid key": (
            online_softmax_update(guard=False), "a query with no valid key yet"),
        "exp of the raw scores": (online_softmax_update(subtract_max=False),
                                  "result 1 of the tuple"),
        "the block's maximum instead of the running one": (
            online_softmax_update(running_max=False), "every new score below the running maximum"),
    }),
    "check_cached_gqa_self_attention": (cached_gqa_self_attention(), {
        "queries not rotated": (cached_gqa_self_attention(rotate_queries=False), "values differ"),
        "positions restart at 0 every step": (cached_gqa_self_attention(offset=False),
                                              "one position per step"),
        "key-value heads tiled (repeat), not interleaved": (
            cached_gqa_self_attention(interleave=False), "values differ"),
        "no causal mask among the new positions": (cached_gqa_self_attention(causal=False),
                                                   "several positions per step"),
        "keys cached before their rotation": (cached_gqa_self_attention(cache_rotated=False),
                                              "result 1 of the tuple"),
        "scaled by sqrt(d_model)": (cached_gqa_self_attention(scale="d_model"), "values differ"),
        "values rotated too": (cached_gqa_self_attention(rotate_values=True), "values differ"),
    }),
    "check_top_p_probs": (top_p_probs(), {
        "the token that crosses top_p left out": (top_p_probs(cumulative="after"), "a tiny top_p"),
        "not renormalised": (top_p_probs(renormalise=False), "a tiny top_p"),
        "the least probable tokens kept": (top_p_probs(descending=False), "a tiny top_p"),
        "exp without subtracting the largest logit": (top_p_probs(stable=False),
                                                      "the result holds NaN"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_beyond_2017
