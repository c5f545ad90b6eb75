"""Every exercise check passes a right answer and fails, naming the input, on plausible wrong ones.

For each check: one correct solution (written independently of the check's reference), then the
mistakes a learner is likely to make (forgetting the mask or the scaling, the wrong axis, the
wrong transpose, ...), each of which must raise ExerciseCheckFailed with a message that names the
input it failed on and ends with the check's hint.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import d2lhelpers as d2lh
from d2lhelpers import exercises
from d2lhelpers.exercises import ExerciseCheckFailed
from d2lhelpers.exercises.checks_positional_encoding import _shift_matrix as shift_matrix_reference

# ---------------------------------------------------------------------------------------------
# Notebook 01


def numpy_softmax_rows(S):
    E = np.exp(S - S.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def self_attention(X, W_q, W_k, W_v, scale_by=None, axis=1):
    Q, K, V = X @ W_q, X @ W_k, X @ W_v
    S = Q @ K.T / np.sqrt(Q.shape[1] if scale_by is None else scale_by(X, Q))
    E = np.exp(S - S.max(axis=axis, keepdims=True))
    A = E / E.sum(axis=axis, keepdims=True)
    return A @ V, A


def max_weights(Q, K, c):
    return numpy_softmax_rows(c * Q @ K.T / np.sqrt(Q.shape[1])).max(axis=1)


# ---------------------------------------------------------------------------------------------
# Notebook 02


def laplace_pooling(queries, keys, values, width):
    kernel = torch.exp(-(queries[:, None] - keys[None, :]).abs() / width)  # (n_q, n_k)
    return kernel / kernel.sum(dim=1, keepdim=True) @ values


def loo_error(x, y, width, leave_out=True, square_width=True, reduce=torch.mean):
    distances = x[:, None] - x[None, :]
    scores = -(distances / width) ** 2 / 2 if square_width else -distances ** 2 / (2 * width)
    if leave_out:
        scores = scores - torch.diag(torch.full_like(x, math.inf))
    return reduce((torch.softmax(scores, dim=1) @ y - y) ** 2).item()


# ---------------------------------------------------------------------------------------------
# Notebook 03


def multiplicative_scores(queries, keys, W):
    return torch.bmm(queries @ W, keys.transpose(1, 2))


def causal_lens(batch_size, num_queries):
    return torch.arange(1, num_queries + 1).expand(batch_size, -1)


# ---------------------------------------------------------------------------------------------
# Notebook 04


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
    if valid_lens is None or lens == "ignore":
        weights = torch.softmax(scores, dim=-1)
    else:
        if lens == "interleave":
            folded_lens = valid_lens.repeat_interleave(h, dim=0)
        else:  # tiles the whole batch: pairs heads with the wrong sequences
            folded_lens = valid_lens.repeat(h, *[1] * (valid_lens.dim() - 1))
        if fill == "package":
            weights = d2lh.masked_softmax(scores, folded_lens)
        else:  # -inf in masked places: a row with no valid key becomes NaN
            mask = d2lh.valid_lens_to_mask(folded_lens, scores.shape[1], scores.shape[2])
            weights = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
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


# ---------------------------------------------------------------------------------------------
# Notebook 05


def sinusoidal_table(max_len, d, exponent=2, layout="interleave"):
    i = torch.arange(max_len, dtype=torch.float64)[:, None]
    j = torch.arange((d + 1) // 2, dtype=torch.float64)
    angles = i / 10000 ** (exponent * j / d)  # (max_len, ceil(d/2))
    if layout == "halves":  # sines in the first half, cosines in the second
        return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)[:, :d]
    P = torch.empty(max_len, d, dtype=torch.float64)
    P[:, 0::2] = torch.sin(angles)
    P[:, 1::2] = torch.cos(angles[:, : d // 2])
    return P


def even_only_table(max_len, d):  # the notebook's section 3 code, which needs an even d
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d, 2) / d)
    P = torch.zeros(max_len, d)
    P[:, 0::2], P[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return P


def shift_matrix(delta, d, sign=1, exponent=2):
    M = torch.zeros(d, d, dtype=torch.float64)
    for j in range(d // 2):
        angle = torch.tensor(delta / 10000 ** (exponent * j / d), dtype=torch.float64)
        c, s = torch.cos(angle), sign * torch.sin(angle)
        block = torch.stack([torch.stack([c, s]), torch.stack([-s, c])])  # (2, 2)
        M[2 * j: 2 * j + 2, 2 * j: 2 * j + 2] = block
    return M


# ---------------------------------------------------------------------------------------------
# Notebook 06


def layer_norm(X, eps=1e-5, dim=-1, unbiased=False, eps_inside=True):
    mean = X.mean(dim=dim, keepdim=True)
    var = X.var(dim=dim, unbiased=unbiased, keepdim=True)
    if eps_inside:
        return (X - mean) / torch.sqrt(var + eps)
    return (X - mean) / (torch.sqrt(var) + eps)


def causal_additive_mask(T, offset=1, lower=False):
    M = torch.zeros(T, T)
    future = torch.ones(T, T, dtype=torch.bool)  # (T_q, T_k)
    future = future.tril(diagonal=-offset) if lower else future.triu(diagonal=offset)
    return M.masked_fill(future, -math.inf)


# ---------------------------------------------------------------------------------------------
# Notebook 07


def real_token_smoothing(logits, targets, valid_lens, eps, real_tokens, divide_by_vocab=False,
                         naive_log=False, multiply_mask=False, dense=False):
    T = logits.shape[1]
    log_p = (torch.log(torch.softmax(logits, dim=-1)) if naive_log
             else torch.log_softmax(logits, dim=-1))  # (B, T, V)
    nll = -log_p.gather(2, targets[..., None]).squeeze(2)  # (B, T)
    if dense:  # the target distribution written out, q * log_p over all V tokens
        q = real_tokens.float() * eps / real_tokens.sum()
        q = q.expand_as(log_p).clone()
        q.scatter_add_(2, targets[..., None], torch.full_like(nll[..., None], 1 - eps))
        losses = -(q * log_p).sum(dim=-1)
    else:
        real_sum = log_p.masked_fill(~real_tokens, 0).sum(dim=-1)
        count = logits.shape[-1] if divide_by_vocab else real_tokens.sum()
        losses = (1 - eps) * nll - eps * real_sum / count
    valid = torch.arange(T)[None, :] < valid_lens[:, None]
    if multiply_mask:
        return (losses * valid).sum() / valid.sum()
    return losses[valid].mean()


def advance_beams(log_probs, lengths, finished, step_log_probs, eos, alpha, per_beam=False,
                  ignore_beams=False, swap_unravel=False, across_sentences=False, ascending=False,
                  extend_finished=False, grow_finished=False, normalise=True, mark_ended=True):
    """One beam-search step; right by default, each flag a plausible mistake."""
    B, k, V = step_log_probs.shape
    if not extend_finished:  # a finished beam continues with <eos> only, at no cost
        carry = torch.full_like(step_log_probs, float("-inf"))
        carry[..., eos] = 0.0
        step_log_probs = torch.where(finished[..., None], carry, step_log_probs)
    totals = step_log_probs if ignore_beams else log_probs[..., None] + step_log_probs
    new_lengths = lengths + 1 if grow_finished else torch.where(finished, lengths, lengths + 1)
    scores = totals / new_lengths[..., None].float() ** alpha if normalise else totals
    if per_beam:  # each beam keeps its own best token
        _, tokens = scores.max(dim=-1)
        index = torch.arange(k)[None, :] * V + tokens
    elif across_sentences:  # one top-k over the whole batch
        flat = scores.reshape(-1).topk(B * k).indices
        index = (flat % (k * V)).reshape(B, k)
    else:
        index = scores.reshape(B, k * V).sort(dim=-1, descending=not ascending).indices[:, :k]
    parents, tokens = (index % k, index // k) if swap_unravel else (index // V, index % V)
    if per_beam:
        order = scores.reshape(B, k * V).gather(1, index).argsort(dim=-1, descending=True)
        parents, tokens, index = parents.gather(1, order), tokens.gather(1, order), index.gather(1, order)
    ended = finished.gather(1, parents) | (tokens == eos) if mark_ended else finished.gather(1, parents)
    return (totals.reshape(B, k * V).gather(1, index), new_lengths.gather(1, parents), ended,
            parents, tokens)


# ---------------------------------------------------------------------------------------------
# The table: check -> (right answer, {mistake: (wrong answer, what the failure must mention)}).


def scaled_scores(Q, K, c):
    return c * Q @ K.T / np.sqrt(Q.shape[1])


def laplace_weights(q, k, w, dim=1):
    return torch.softmax(-(q[:, None] - k).abs() / w, dim=dim)


CHECKS = {
    "check_self_attention": (self_attention, {
        "no scaling": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: 1), "values differ"),
        "scaled by the input width": (
            lambda *a: self_attention(*a, scale_by=lambda X, Q: X.shape[1]), "values differ"),
        "softmax over the wrong axis": (lambda *a: self_attention(*a, axis=0), "values differ"),
        "(A, Z) instead of (Z, A)": (lambda *a: self_attention(*a)[::-1], "result 0 of the tuple"),
    }),
    "check_max_weights": (max_weights, {
        "no scaling": (
            lambda Q, K, c: numpy_softmax_rows(c * Q @ K.T).max(axis=1), "values differ"),
        "max over the queries": (
            lambda Q, K, c: numpy_softmax_rows(scaled_scores(Q, K, c)).max(axis=0),
            "expected shape"),
        "c after the softmax": (
            lambda Q, K, c: c * numpy_softmax_rows(scaled_scores(Q, K, 1)).max(axis=1),
            "on input c = 0"),
    }),
    "check_laplace_pooling": (laplace_pooling, {
        "Gaussian instead of Laplace": (
            lambda q, k, v, w: torch.softmax(-((q[:, None] - k) / w) ** 2, dim=1) @ v,
            "values differ"),
        "normalised over the queries": (
            lambda q, k, v, w: laplace_weights(q, k, w, dim=0) @ v, "values differ"),
        "not normalised": (
            lambda q, k, v, w: torch.exp(-(q[:, None] - k).abs() / w) @ v, "values differ"),
    }),
    "check_loo_error": (loo_error, {
        "the point among its own keys": (
            lambda x, y, w: loo_error(x, y, w, leave_out=False), "expected"),
        "width not squared": (lambda x, y, w: loo_error(x, y, w, square_width=False), "expected"),
        "sum instead of mean": (lambda x, y, w: loo_error(x, y, w, reduce=torch.sum), "expected"),
    }),
    "check_multiplicative_scores": (multiplicative_scores, {
        "W transposed": (lambda q, k, W: q @ W.T @ k.transpose(1, 2), "raised RuntimeError"),
        "scaled like dot-product attention": (
            lambda q, k, W: q @ W @ k.transpose(1, 2) / math.sqrt(q.shape[-1]), "values differ"),
        "keys not transposed": (lambda q, k, W: q @ W @ k, "raised RuntimeError"),
        "computed in float32": (
            lambda q, k, W: q.float() @ W.float() @ k.float().transpose(1, 2),
            "expected dtype float64"),
    }),
    "check_causal_lens": (causal_lens, {
        "lengths 0 .. T-1": (lambda B, T: torch.arange(T).expand(B, -1), "values differ"),
        "one row, not one per sequence": (lambda B, T: torch.arange(1, T + 1), "raised ValueError"),
        "every key": (lambda B, T: torch.full((B, T), T), "values differ"),
    }),
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
    "check_sinusoidal_table": (sinusoidal_table, {
        "exponent j/d instead of 2j/d": (
            lambda n, d: sinusoidal_table(n, d, exponent=1), "values differ"),
        "sines then cosines": (
            lambda n, d: sinusoidal_table(n, d, layout="halves"), "values differ"),
        "even widths only": (even_only_table, "an odd width"),
    }),
    "check_shift_matrix": (shift_matrix, {
        "rotation transposed (shifts back)": (
            lambda delta, d: shift_matrix(delta, d, sign=-1), "values differ"),
        "frequency exponent j/d": (
            lambda delta, d: shift_matrix(delta, d, exponent=1), "values differ"),
    }),
    "check_layer_norm": (layer_norm, {
        "unbiased variance": (
            lambda X, eps: layer_norm(X, eps, unbiased=True), "the worked example"),
        "normalised over the first axis": (
            lambda X, eps: layer_norm(X, eps, dim=0), "the worked example"),
        "eps outside the square root": (
            lambda X, eps: layer_norm(X, eps, eps_inside=False), "eps matters"),
        "eps missing": (
            lambda X, eps: layer_norm(X, 0.0), "the result holds NaN"),
    }),
    "check_causal_additive_mask": (causal_additive_mask, {
        "diagonal masked too": (
            lambda T: causal_additive_mask(T, offset=0), "on input a single position, T=1"),
        "transposed: the past masked": (
            lambda T: causal_additive_mask(T, lower=True), "at index (0, 1) expected -inf, got 0"),
        "a boolean mask": (
            lambda T: torch.ones(T, T, dtype=torch.bool).triu(diagonal=1), "raised TypeError"),
        "1 instead of -inf": (
            lambda T: torch.ones(T, T).triu(diagonal=1), "values differ"),
    }),
    "check_real_token_smoothing": (real_token_smoothing, {
        "smoothing over all V tokens": (
            lambda logits, targets, lens, eps, real: d2lh.masked_cross_entropy(logits, targets, lens,
                                                                               eps),
            "on input <pad> and <bos> not real"),
        "divided by V instead of the number of real tokens": (
            lambda *a: real_token_smoothing(*a, divide_by_vocab=True), "<pad> and <bos> not real"),
        "log(softmax) instead of log_softmax": (
            lambda *a: real_token_smoothing(*a, naive_log=True), "a logit 200 above the others"),
        "the target distribution times log p, over every token": (
            lambda *a: real_token_smoothing(*a, dense=True), "the logits of <pad> and <bos> are -inf"),
        "padding removed by multiplying with a 0/1 mask": (
            lambda *a: real_token_smoothing(*a, multiply_mask=True), "the result holds NaN"),
    }),
    "check_advance_beams": (advance_beams, {
        "each beam keeps only its best token": (
            lambda *a: advance_beams(*a, per_beam=True), "the first step"),
        "the beams' log-probabilities not added": (
            lambda *a: advance_beams(*a, ignore_beams=True), "k = 1 (greedy decoding)"),
        "candidate index unravelled with k instead of V": (
            lambda *a: advance_beams(*a, swap_unravel=True), "beams 1 and 2 not started"),
        "one top-k over the whole batch": (
            lambda *a: advance_beams(*a, across_sentences=True), "on input"),
        "worst first": (lambda *a: advance_beams(*a, ascending=True), "k = 1"),
        "finished beams extended like the others": (
            lambda *a: advance_beams(*a, extend_finished=True), "beam 0 finished"),
        "finished beams grow longer": (
            lambda *a: advance_beams(*a, grow_finished=True), "beam 0 finished"),
        "no length normalisation": (
            lambda *a: advance_beams(*a, normalise=False), "on input"),
        "a beam that ends is not marked finished": (
            lambda *a: advance_beams(*a, mark_ended=False), "on input"),
    }),
}



# ---------------------------------------------------------------------------------------------
# Notebooks 04 and 05: the "build it" exercises, whole modules.


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
            if valid_lens is None or lens == "ignore":
                weights = torch.softmax(folded, dim=-1)
            else:
                folded_lens = (valid_lens.repeat_interleave(h, dim=0) if lens == "interleave"
                               else valid_lens.repeat(h, *[1] * (valid_lens.dim() - 1)))
                if fill == "package":
                    weights = d2lh.masked_softmax(folded, folded_lens)
                else:  # -inf in masked places: a row with no valid key becomes NaN
                    mask = d2lh.valid_lens_to_mask(folded_lens, T, T)
                    weights = torch.softmax(folded.masked_fill(~mask, -math.inf), dim=-1)
            weights = weights.reshape(B, h, T, T)
            self.attention_weights = weights if store == "heads" else weights.reshape(B * h, T, T)
            merged = (weights @ V).transpose(1, 2).reshape(B, T, d_model)
            return self.W_o(merged) if project_out else merged

    return PackedSelfAttention


def relative_self_attention(sign=1, clip=True, bias_at="scores", scale_bias=False, mask=True,
                            fill="package"):
    """Notebook 05's RelativeSelfAttention, right by default; each argument names a mistake."""

    class RelativeSelfAttention(nn.Module):
        def __init__(self, d_model, max_distance):
            super().__init__()
            self.max_distance = max_distance
            self.W_q = nn.Linear(d_model, d_model, bias=False)
            self.W_k = nn.Linear(d_model, d_model, bias=False)
            self.W_v = nn.Linear(d_model, d_model, bias=False)
            self.relative_bias = nn.Parameter(torch.zeros(2 * max_distance + 1))

        def forward(self, X, valid_lens=None):
            T, d = X.shape[1], X.shape[2]
            positions = torch.arange(T)
            offsets = sign * (positions[None, :] - positions[:, None])  # right: key minus query
            if clip:
                offsets = offsets.clamp(-self.max_distance, self.max_distance)
            bias = self.relative_bias[offsets + self.max_distance]  # (T, T)
            scores = self.W_q(X) @ self.W_k(X).transpose(1, 2)
            if bias_at == "scores":
                scores = (scores + bias) / math.sqrt(d) if scale_bias else scores / math.sqrt(d) + bias
            else:
                scores = scores / math.sqrt(d)
            if valid_lens is None or not mask:
                weights = torch.softmax(scores, dim=-1)
            elif fill == "package":
                weights = d2lh.masked_softmax(scores, valid_lens)
            else:
                allowed = d2lh.valid_lens_to_mask(valid_lens, T, T)
                weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
            if bias_at == "weights":
                weights = weights + bias
            self.attention_weights = weights
            return weights @ self.W_v(X)

    return RelativeSelfAttention


# The learner's class is the answer: the checks build it and copy seeded weights into it.
CHECKS["check_packed_self_attention"] = (packed_self_attention(), {
    "keys cut out first, then queries": (
        packed_self_attention(order=(1, 0, 2)), "result 0 of the tuple: values differ"),
    "heads split without the transpose": (packed_self_attention(transpose=False), "values differ"),
    "scaled by sqrt(d_model)": (packed_self_attention(scale="d_model"), "values differ"),
    "repeat instead of repeat_interleave": (packed_self_attention(lens="repeat"), "valid_lens (B,)"),
    "mask forgotten": (packed_self_attention(lens="ignore"), "valid_lens (B,)"),
    "-inf fill, NaN in an empty row": (
        packed_self_attention(fill="-inf"),
        "a sequence with valid length 0: result 0 of the tuple: the result holds NaN"),
    "W_o forgotten": (packed_self_attention(project_out=False), "values differ"),
    "weights kept with the heads folded into the batch": (
        packed_self_attention(store="folded"), "result 1 of the tuple: expected shape"),
    "one projection per input instead of W_qkv": (d2lh.MultiHeadAttention, "needs W_qkv"),
})
CHECKS["check_relative_self_attention"] = (relative_self_attention(), {
    "offset i - j instead of j - i": (relative_self_attention(sign=-1), "values differ"),
    "offsets not clipped": (relative_self_attention(clip=False), "raised IndexError"),
    "bias added to the weights": (
        relative_self_attention(bias_at="weights"), "offsets beyond max_distance"),
    "bias forgotten": (relative_self_attention(bias_at="none"), "values differ"),
    "bias divided by sqrt(d) too": (relative_self_attention(scale_bias=True), "values differ"),
    "mask forgotten": (relative_self_attention(mask=False), "valid_lens (B,)"),
    "-inf fill, NaN in an empty row": (relative_self_attention(fill="-inf"), "the result holds NaN"),
})


# ---------------------------------------------------------------------------------------------
# Notebooks 06 and 07: the answers live in test_exercise_checks_transformer.py

from test_exercise_checks_transformer import (  # noqa: E402
    cached_block_step,
    cached_greedy_decode,
    translation_log_prob,
)

CHECKS["check_cached_block_step"] = (cached_block_step(), {
    "post-norm only (norm_first ignored)": (cached_block_step(post_norm_only=True), "pre-norm block"),
    "new keys and values never stored": (cached_block_step(append=False), "one position per step"),
    "causal lengths forget the cache": (cached_block_step(offset=False), "one position per step"),
    "no causal mask among the new positions": (cached_block_step(causal=False),
                                               "several positions per step"),
})
CHECKS["check_cached_greedy_decode"] = (cached_greedy_decode(), {
    "<bos> kept": (cached_greedy_decode(keep_bos=True), "expected shape"),
    "never stops early": (cached_greedy_decode(stop_early=False), "expected shape"),
    "finished sentences not held at <eos>": (cached_greedy_decode(fill_eos=False), "values differ"),
    "the whole prefix fed with the cache": (cached_greedy_decode(feed_prefix=True), "on input"),
})

CHECKS["check_translation_log_prob"] = (translation_log_prob(), {
    "not shifted right (each token sees itself)": (translation_log_prob(shift=False), "values differ"),
    "counts past the first <eos>": (translation_log_prob(stop_at_eos=False), "values differ"),
    "<eos> left out": (translation_log_prob(include_eos=False), "values differ"),
})


# ---------------------------------------------------------------------------------------------
# Notebook 10 (beyond 2017): the answers live in test_exercise_checks_beyond.py

from test_exercise_checks_beyond import (  # noqa: E402
    cached_gqa_self_attention,
    online_softmax_update,
    rotary_at_positions,
    top_p_probs,
)

CHECKS["check_rotary_at_positions"] = (rotary_at_positions(), {
    "the two halves paired instead of neighbours": (rotary_at_positions(pairing="halves"),
                                                    "values differ"),
    "rotated the other way": (rotary_at_positions(sign=-1), "values differ"),
    "frequency exponent j/d": (rotary_at_positions(exponent=1), "values differ"),
    "positions 0 .. T-1 whatever was asked": (rotary_at_positions(use_positions=False),
                                              "the odd positions of a cache"),
})
CHECKS["check_online_softmax_update"] = (online_softmax_update(), {
    "acc not rescaled": (online_softmax_update(rescale_acc=False),
                         "the maximum grows: what was summed must be rescaled"),
    "l not rescaled": (online_softmax_update(rescale_l=False), "result 1 of the tuple"),
    "-inf minus -inf: NaN for a query with no valid key": (
        online_softmax_update(guard=False), "a query with no valid key yet"),
    "exp of the raw scores": (online_softmax_update(subtract_max=False), "result 1 of the tuple"),
    "the block's maximum instead of the running one": (
        online_softmax_update(running_max=False), "every new score below the running maximum"),
})
CHECKS["check_cached_gqa_self_attention"] = (cached_gqa_self_attention(), {
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
})
CHECKS["check_top_p_probs"] = (top_p_probs(), {
    "the token that crosses top_p left out": (top_p_probs(cumulative="after"), "a tiny top_p"),
    "not renormalised": (top_p_probs(renormalise=False), "a tiny top_p"),
    "the least probable tokens kept": (top_p_probs(descending=False), "a tiny top_p"),
    "exp without subtracting the largest logit": (top_p_probs(stable=False),
                                                  "the result holds NaN"),
})

from test_exercise_checks_rnn import RNN_CHECKS  # noqa: E402

CHECKS.update(RNN_CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
@pytest.mark.parametrize("seed", [0, 1])
def test_check_passes_a_right_answer(check, seed, capsys):
    right, _ = CHECKS[check]
    getattr(exercises, check)(right, seed=seed)
    line = capsys.readouterr().out
    assert line.startswith("Correct: ") and line.endswith(" checks.\n") and line.count("\n") == 1


WRONG = [(check, mistake)
         for check, (_, mistakes) in sorted(CHECKS.items()) for mistake in mistakes]


@pytest.mark.parametrize("check, mistake", WRONG, ids=[f"{c}-{m}" for c, m in WRONG])
def test_check_fails_a_plausible_wrong_answer_naming_the_input(check, mistake, capsys):
    wrong, must_mention = CHECKS[check][1][mistake]
    with pytest.raises(ExerciseCheckFailed) as failure:
        getattr(exercises, check)(wrong)
    message = str(failure.value)
    assert must_mention in message
    assert "on input " in message and "\nHint: " in message
    assert "Correct" not in capsys.readouterr().out


def test_every_check_of_the_module_is_tested():
    assert {name for name in exercises.__all__ if name.startswith("check_")} == set(CHECKS)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_a_stub_is_reported_as_not_implemented(check):
    def stub(*args):
        raise NotImplementedError()

    with pytest.raises(ExerciseCheckFailed, match="not implemented yet"):
        getattr(exercises, check)(stub)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_checks_leave_the_global_random_state_alone(check):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    getattr(exercises, check)(CHECKS[check][0])
    assert torch.equal(torch.rand(3), expected)


def test_checks_draw_other_cases_with_another_seed(capsys):
    seen = []

    def recording(queries, keys, W):
        seen.append(tuple(queries.shape) + tuple(keys.shape))
        return multiplicative_scores(queries, keys, W)

    for seed in (0, 1):
        exercises.check_multiplicative_scores(recording, seed=seed)
    half = len(seen) // 2
    assert seen[:4] == seen[half:half + 4]  # the fixed edge cases
    assert seen[4:half] != seen[half + 4:]  # the random ones
    with pytest.raises(ValueError, match="seed must be an int"):
        exercises.check_multiplicative_scores(multiplicative_scores, seed="0")


def test_float32_answers_pass_where_float32_is_enough(capsys):
    exercises.check_shift_matrix(lambda delta, d: shift_matrix(delta, d).float())
    exercises.check_sinusoidal_table(lambda max_len, d: sinusoidal_table(max_len, d).float())
    assert capsys.readouterr().out.count("Correct: ") == 2


def test_references_agree_with_the_package_and_the_definitions():
    # the shift matrix maps every row of the package's table to the row delta further
    P = d2lh.PositionalEncoding(16, max_len=40).P[0].double()
    for delta in (-3, 0, 5):
        M = shift_matrix_reference(delta, 16)
        rows = range(max(0, -delta), 40 - max(0, delta))
        shifted = P[[i + delta for i in rows]]
        torch.testing.assert_close(P[list(rows)] @ M.T, shifted, atol=1e-6, rtol=0)
    # Laplace pooling: the softmax form equals the kernel definition
    exercises.check_laplace_pooling(laplace_pooling)


def test_reference_of_the_relative_bias_is_the_definition():
    # entry by entry: score[i, j] = q_i . k_j / sqrt(d) + bias[clip(j - i) + max_distance]
    from d2lhelpers.exercises.checks_positional_encoding import (_ReferenceRelativeAttention,
                                                          _relative_self_attention)

    torch.manual_seed(0)
    module = _ReferenceRelativeAttention(4, max_distance=2)
    with torch.no_grad():
        module.relative_bias.copy_(torch.arange(5.0))
    X = torch.randn(1, 6, 4)
    with torch.no_grad():
        _, weights = _relative_self_attention(module, X, None)
        q, k = module.W_q(X)[0], module.W_k(X)[0]
    scores = torch.tensor([[q[i] @ k[j] / 2 + min(max(j - i, -2), 2) + 2 for j in range(6)]
                           for i in range(6)])
    torch.testing.assert_close(weights[0], torch.softmax(scores, dim=-1))

