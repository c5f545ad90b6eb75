"""Right and plausible wrong answers to the coding exercises of notebook 10 (beyond 2017): each
factory returns a right answer by default, and a mistake with one flag flipped. The CHECKS table of
tests/test_exercise_checks.py runs them through the checks. Written independently of the checks'
references (d2lhelpers.decoder_only)."""

from __future__ import annotations

import math

import torch
from torch import nn

import d2lhelpers as d2lh


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
