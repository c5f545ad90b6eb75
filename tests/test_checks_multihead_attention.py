"""The checks of notebook 04_multihead_attention
(d2lhelpers/exercises/checks_multihead_attention.py): right and plausible wrong answers (see
checks_common.py)."""

from __future__ import annotations

import math

import torch
from torch import nn

import d2lhelpers as d2lh
from checks_common import CheckTests, attention_weights
from d2lhelpers.exercises import checks_multihead_attention


def folded_lens(valid_lens, h, lens="interleave"):
    """valid_lens (B,) or (B, T_q) for the heads folded into the batch (B*h, ...): sequence b's
    lengths for each of its h heads (lens="interleave"); the mistakes "repeat" (tiles the whole
    batch: pairs heads with the wrong sequences) and "ignore" (the mask forgotten)."""
    if valid_lens is None or lens == "ignore":
        return None
    if lens == "interleave":
        return valid_lens.repeat_interleave(h, dim=0)
    return valid_lens.repeat(h, *[1] * (valid_lens.dim() - 1))


def per_head_weights(mha, queries, keys, valid_lens, fold=True, scale="d_k", lens="interleave",
                     fill="package"):
    h, d_k = mha.num_heads, mha.d_k

    def split(x):  # (B, T, d_model) -> (B*h, T, d_k)
        B, T, _ = x.shape
        if fold:  # (B, T, h, d_k) -> (B, h, T, d_k) -> fold the heads into the batch
            return x.reshape(B, T, h, d_k).transpose(1, 2).reshape(B * h, T, d_k)
        return x.reshape(B * h, T, d_k)  # the classic mistake: no transpose

    Q, K = split(mha.W_q(queries)), split(mha.W_k(keys))
    scores = Q @ K.transpose(1, 2) / math.sqrt(d_k if scale == "d_k" else mha.d_model)
    weights = attention_weights(scores, folded_lens(valid_lens, h, lens), fill)
    return weights.reshape(queries.shape[0], h, *weights.shape[1:])  # (B*h, ...) -> (B, h, ...)


def to_torch_multihead(mha, biases=True, order=("W_q", "W_k", "W_v"), batch_first=True):
    has_bias = mha.W_q.bias is not None
    layer = nn.MultiheadAttention(mha.d_model, mha.num_heads, bias=has_bias,
                                  batch_first=batch_first)
    with torch.no_grad():
        layer.in_proj_weight.copy_(torch.cat([getattr(mha, n).weight for n in order]))
        layer.out_proj.weight.copy_(mha.W_o.weight)
        if has_bias and biases:
            layer.in_proj_bias.copy_(torch.cat([getattr(mha, n).bias for n in order]))
            layer.out_proj.bias.copy_(mha.W_o.bias)
    return layer


def packed_self_attention(order=(0, 1, 2), transpose=True, scale="d_k", lens="interleave",
                          fill="package", project_out=True, store="heads"):
    """Notebook 04's PackedSelfAttention, right by default; each argument names a mistake."""

    class PackedSelfAttention(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.num_heads = num_heads
            self.W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)
            self.W_o = nn.Linear(d_model, d_model, bias=False)

        def forward(self, X, valid_lens=None):
            B, T, d_model = X.shape
            h = self.num_heads
            d_k = d_model // h
            chunks = self.W_qkv(X).chunk(3, dim=-1)

            def split(x):  # (B, T, h*d_k) -> (B, h, T, d_k)
                if transpose:
                    return x.reshape(B, T, h, d_k).transpose(1, 2)
                return x.reshape(B, h, T, d_k)  # the classic mistake: no transpose

            Q, K, V = (split(chunks[i]) for i in order)
            scores = Q @ K.transpose(-1, -2) / math.sqrt(d_k if scale == "d_k" else d_model)
            folded = scores.reshape(B * h, T, T)
            weights = attention_weights(folded, folded_lens(valid_lens, h, lens), fill)
            weights = weights.reshape(B, h, T, T)
            self.attention_weights = weights if store == "heads" else weights.reshape(B * h, T, T)
            merged = (weights @ V).transpose(1, 2).reshape(B, T, d_model)
            return self.W_o(merged) if project_out else merged

    return PackedSelfAttention


CHECKS = {
    "check_per_head_weights": (per_head_weights, {
        "no transpose when splitting": (
            lambda *a: per_head_weights(*a, fold=False), "values differ"),
        "scaled by sqrt(d_model)": (
            lambda *a: per_head_weights(*a, scale="d_model"), "values differ"),
        "repeat instead of repeat_interleave": (
            lambda *a: per_head_weights(*a, lens="repeat"), "valid_lens (B,)"),
        "mask forgotten": (lambda *a: per_head_weights(*a, lens="ignore"), "valid_lens (B,)"),
        "-inf fill, NaN in an empty row": (
            lambda *a: per_head_weights(*a, fill="-inf"),
            "a sequence with valid length 0: the result holds NaN"),
    }),
    "check_to_torch_multihead": (to_torch_multihead, {
        "biases forgotten": (lambda mha: to_torch_multihead(mha, biases=False), "bias=True"),
        "[W_k; W_q; W_v]": (
            lambda mha: to_torch_multihead(mha, order=("W_k", "W_q", "W_v")), "values differ"),
        "batch_first forgotten": (
            lambda mha: to_torch_multihead(mha, batch_first=False), "on input"),
        "not a module": (lambda mha: mha, "expected a torch.nn.MultiheadAttention"),
    }),
    # The learner's class is the answer: the check builds it and copies seeded weights into it.
    "check_packed_self_attention": (packed_self_attention(), {
        "keys cut out first, then queries": (
            packed_self_attention(order=(1, 0, 2)), "result 0 of the tuple: values differ"),
        "heads split without the transpose": (packed_self_attention(transpose=False),
                                              "values differ"),
        "scaled by sqrt(d_model)": (packed_self_attention(scale="d_model"), "values differ"),
        "repeat instead of repeat_interleave": (packed_self_attention(lens="repeat"),
                                                "valid_lens (B,)"),
        "mask forgotten": (packed_self_attention(lens="ignore"), "valid_lens (B,)"),
        "-inf fill, NaN in an empty row": (
            packed_self_attention(fill="-inf"),
            "a sequence with valid length 0: result 0 of the tuple: the result holds NaN"),
        "W_o forgotten": (packed_self_attention(project_out=False), "values differ"),
        "weights kept with the heads folded into the batch": (
            packed_self_attention(store="folded"), "result 1 of the tuple: expected shape"),
        "one projection per input instead of W_qkv": (d2lh.MultiHeadAttention, "needs W_qkv"),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_multihead_attention
