"""The checks of notebooks 11_modern_attention and 12_decoder_only_lm
(d2lhelpers/exercises/checks_beyond_2017.py): right and
plausible wrong answers (see checks_common.py), each factory right by default and a mistake with
one flag flipped. Written independently of the checks' references (d2lhelpers.decoder_only)."""

from __future__ import annotations

import math

import torch
from torch import nn

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_beyond_2017


def rotary_at_positions(pairing="neighbours", sign=1, exponent=2, use_positions=True,
                        angle_dtype=None, write_back="pairs", position_offset=0, swap_trig=False,
                        second_sign=1):
    """RoPE at given positions, right by default; each argument names a mistake. second_sign -1:
    y_2j = x_2j cos + x_2j+1 sin (the sign of the first component's sine flipped alone)."""

    def rotate(x, positions):
        T, d_k = x.shape[-2], x.shape[-1]
        dtype = angle_dtype or x.dtype
        j = torch.arange(d_k // 2, dtype=dtype)
        omega = 10000.0 ** (-exponent * j / d_k)  # (d_k/2,)
        m = (positions if use_positions else torch.arange(T)) + position_offset
        angles = m.to(dtype)[:, None] * omega  # (T, d_k/2)
        cos, sin = torch.cos(angles).to(x.dtype), sign * torch.sin(angles).to(x.dtype)
        if swap_trig:
            cos, sin = sin, cos
        if pairing == "neighbours":
            a, b = x[..., 0::2], x[..., 1::2]
        else:  # the first half with the second half ("rotate_half"): another layout
            a, b = x[..., : d_k // 2], x[..., d_k // 2:]
        first, second = a * cos - second_sign * b * sin, a * sin + b * cos
        if pairing == "neighbours" and write_back == "pairs":
            return torch.stack([first, second], dim=-1).flatten(-2).to(x.dtype)
        return torch.cat([first, second], dim=-1).to(x.dtype)

    return rotate


def online_softmax_update(rescale_acc=True, rescale_l=True, guard=True, subtract_max=True,
                          running_max=True, invert=False, old_shift=False, update_m=True,
                          normalise=False, block_factor=False, sum_keepdim=True, max_dim=-1):
    """One online-softmax block, right by default; each flag off is one plausible mistake."""

    def update(m, l, acc, scores, values):
        block_max = scores.max(dim=max_dim, keepdim=True).values
        m_new = torch.maximum(m, block_max) if running_max else block_max
        if not subtract_max:
            reference = torch.zeros_like(m_new)
        elif guard:
            reference = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
        else:
            reference = m_new
        old = torch.where(m == -math.inf, torch.zeros_like(m), m)
        p = torch.exp(scores - (old if old_shift else reference))
        factor = torch.exp(reference - m) if invert else torch.exp(m - reference)
        if block_factor:  # against the block's maximum alone
            factor = torch.exp(m - torch.where(block_max == -math.inf, 0.0, block_max))
        new_l = (l * factor if rescale_l else l) + p.sum(dim=-1, keepdim=sum_keepdim)
        new_acc = (acc * factor if rescale_acc else acc) + p @ values
        if normalise:
            new_acc = new_acc / new_l.clamp(min=1e-30)
        return (m_new if update_m else m), new_l, new_acc

    return update


def cached_gqa_self_attention(rotate_queries=True, offset=True, interleave=True, causal=True,
                              cache_rotated=True, scale="d_k", rotate_values=False,
                              rotate_keys=True, count_after_append=False, causal_offset=True,
                              rotate_cache_again=False, keys_from_zero=False, position_shift=0,
                              causal_shift=0, swap_kv=False, softmax_dim=-1):
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
            if count_after_append:
                start += T
            positions = torch.arange(start, start + T) + position_shift
            Q = self.W_q(X).view(B, T, self.h, self.d_k).transpose(1, 2)
            K = self.W_k(X).view(B, T, self.g, self.d_k).transpose(1, 2)
            V = self.W_v(X).view(B, T, self.g, self.d_k).transpose(1, 2)
            if swap_kv:
                K, V = V, K
            if rotate_queries:
                Q = d2lh.apply_rotary(Q, positions)
            if rotate_values:
                V = d2lh.apply_rotary(V, positions)
            rotated = d2lh.apply_rotary(K, torch.arange(T) if keys_from_zero else positions) \
                if rotate_keys else K
            cache.append(K if rotate_cache_again else rotated if cache_rotated else K, V)
            if rotate_cache_again:  # every cached key turned again, as if at its position
                cache.keys = d2lh.apply_rotary(cache.keys, torch.arange(cache.keys.shape[2]))
            keys = cache.keys
            if not cache_rotated:  # rotates what it reads: right outputs, unrotated cache
                keys = d2lh.apply_rotary(keys, torch.arange(keys.shape[2]))
            group = self.h // self.g
            if interleave:
                keys, values = keys.repeat_interleave(group, 1), cache.values.repeat_interleave(group, 1)
            else:  # tiles the key-value heads: query head i reads head i % g
                keys, values = keys.repeat(1, group, 1, 1), cache.values.repeat(1, group, 1, 1)
            scores = Q @ keys.transpose(-2, -1) / {"d_k": math.sqrt(self.d_k), "none": 1,
                                                   "d_model": math.sqrt(d_model),
                                                   "kv width": math.sqrt(self.g * self.d_k)}[scale]
            T_k = keys.shape[2]
            if causal and not causal_offset:
                lens = torch.arange(1, T + 1)  # as if nothing were cached
            elif causal:
                lens = torch.arange(T_k - T + 1, T_k + 1)  # query i sees keys 0 .. T_k - T + i
            else:
                lens = torch.full((T,), T_k)
            allowed = torch.arange(T_k)[None, :] < lens[:, None] + causal_shift  # (T, T_k)
            weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=softmax_dim)
            return self.W_o((weights @ values).transpose(1, 2).reshape(B, T, d_model))

    return CachedGQASelfAttention


def top_p_probs(cumulative="before", renormalise=True, descending=True, stable=True,
                sorted_order=False, on_logits=False, mask_in_sorted_order=False, unsorted=False,
                softmax_dim=-1, log=False):
    """Nucleus (top-p) probabilities, right by default; each argument names a mistake.
    cumulative "one more": the token after the one that crosses top_p kept too."""

    def probs(logits, top_p):
        if softmax_dim != -1:
            p = torch.softmax(logits, dim=softmax_dim)
        elif stable:
            p = torch.softmax(logits, dim=-1)
        else:
            e = torch.exp(logits)
            p = e / e.sum(dim=-1, keepdim=True)
        kept = torch.zeros_like(p, dtype=torch.bool)
        for row in range(p.shape[0]):  # row by row, written differently from the reference
            total, before = 0.0, 0.0
            order = range(p.shape[1]) if unsorted else p[row].argsort(descending=descending)
            for index in list(order if unsorted else order.tolist()):
                if on_logits:  # accumulates logits instead of probabilities
                    if total >= top_p:
                        break
                    kept[row, index] = True
                    total += logits[row, index].item()
                    continue
                if cumulative == "before" and total >= top_p:
                    break
                if cumulative == "one more" and before >= top_p:
                    break
                before = total
                if cumulative == "after" and total + p[row, index].item() > top_p:
                    break  # stops before the token that crosses top_p
                kept[row, index] = True
                total += p[row, index].item()
        if mask_in_sorted_order:  # the decisions of the sorted tokens, at the first places
            kept = kept.gather(1, p.argsort(dim=-1, descending=True))
        out = p * kept
        if sorted_order:
            out = out.sort(dim=-1, descending=True).values
        out = out / out.sum(dim=-1, keepdim=True) if renormalise else out
        return out.log() if log else out

    return probs


def float32_angles(x, positions):
    """RoPE as learner 11 first wrote it: no dtype on the arange, so the angles are float32."""
    d_k = x.shape[-1]
    omega = 10000 ** (-torch.arange(0, d_k, 2) / d_k)
    angles = positions[:, None] * omega
    cos, sin = torch.cos(angles), torch.sin(angles)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


CHECKS = {
    "check_rotary_at_positions": (rotary_at_positions(), {
        "float32 angles for a float64 x (learner 11)": (float32_angles, "far positions, float64",
                                                        "angles are float32"),
        "the two halves paired instead of neighbours": (rotary_at_positions(pairing="halves"),
                                                        "differ", "the two halves"),
        "neighbours rotated, written back as halves": (
            rotary_at_positions(write_back="halves"), "differ", "written back as two halves"),
        "rotated the other way": (rotary_at_positions(sign=-1), "differ", "the other way"),
        "frequency exponent j/d": (rotary_at_positions(exponent=1), "differ", "exponent j/d_k"),
        "frequency exponent 4j/d": (rotary_at_positions(exponent=4), "differ", "exponent 4j/d_k"),
        "frequencies growing": (rotary_at_positions(exponent=-2), "differ", "grow with j"),
        "positions 0 .. T-1 whatever was asked": (rotary_at_positions(use_positions=False),
                                                  "the odd positions of a cache",
                                                  "positions 0 .. T-1"),
        "positions counted from one past those given": (
            rotary_at_positions(position_offset=1), "differ", "positions are off by one"),
        "cos and sin swapped": (rotary_at_positions(swap_trig=True), "differ",
                                "cos and sin trade places"),
        "the first component's sine added": (rotary_at_positions(second_sign=-1), "differ",
                                             "not a rotation"),
        "the halves paired and rotated the other way": (
            rotary_at_positions(pairing="halves", sign=-1), "differ", None),
    }),
    "check_online_softmax_update": (online_softmax_update(), {
        "acc not rescaled": (online_softmax_update(rescale_acc=False),
                             "the maximum grows: what was summed must be rescaled",
                             "Your acc is not rescaled"),
        "l not rescaled": (online_softmax_update(rescale_l=False), "result 1 of the tuple",
                           "Your l is not rescaled"),
        "neither rescaled": (online_softmax_update(rescale_l=False, rescale_acc=False),
                             "result 1 of the tuple", "Your sums are not rescaled"),
        "factor inverted": (online_softmax_update(invert=True), "on input", "inverted"),
        "-inf minus -inf: NaN for a query with no valid key": (
            online_softmax_update(guard=False), "a query with no valid key yet", "turns NaN"),
        "exp of the raw scores": (online_softmax_update(subtract_max=False),
                                  "result 1 of the tuple", "raw scores"),
        "new block shifted by the old maximum": (online_softmax_update(old_shift=True),
                                                 "on input", "shifted by the old maximum"),
        "the block's maximum instead of the running one": (
            online_softmax_update(running_max=False), "every new score below the running maximum",
            "new block's alone"),
        "rescaled against the block's maximum": (online_softmax_update(block_factor=True),
                                                 "every new score below", "block's maximum alone"),
        "m not updated": (online_softmax_update(update_m=False), "result 0 of the tuple",
                          "m is not updated"),
        "acc normalised": (online_softmax_update(normalise=True), "result 2 of the tuple",
                           "divided by l"),
        "l's new sum without keepdim": (online_softmax_update(sum_keepdim=False),
                                        "result 1 of the tuple", "no keepdim"),
        "the block's maximum over the queries": (online_softmax_update(max_dim=-2), "on input",
                                                 "runs over the queries"),
        "m not updated and acc normalised": (
            online_softmax_update(update_m=False, normalise=True), "on input", None),
    }),
    "check_cached_gqa_self_attention": (cached_gqa_self_attention(), {
        "queries not rotated": (cached_gqa_self_attention(rotate_queries=False), "differ",
                                "queries are not rotated"),
        "keys not rotated": (cached_gqa_self_attention(rotate_keys=False), "differ",
                             "keys are not rotated"),
        "positions restart at 0 every step": (cached_gqa_self_attention(offset=False),
                                              "one position per step", "restart at 0"),
        "positions counted after appending": (cached_gqa_self_attention(count_after_append=True),
                                              "on input", "after appending"),
        "key-value heads tiled (repeat), not interleaved": (
            cached_gqa_self_attention(interleave=False), "differ", "tiled"),
        "no causal mask among the new positions": (cached_gqa_self_attention(causal=False),
                                                   "several positions per step",
                                                   "both directions"),
        "causal lengths without the cache": (cached_gqa_self_attention(causal_offset=False),
                                             "on input", "forget the cached"),
        "keys cached before their rotation": (cached_gqa_self_attention(cache_rotated=False),
                                              "result 1 of the tuple", "before their rotation"),
        "scaled by sqrt(d_model)": (cached_gqa_self_attention(scale="d_model"), "differ",
                                    "sqrt(d_model)"),
        "not scaled": (cached_gqa_self_attention(scale="none"), "differ", "not scaled"),
        "scaled by sqrt(g * d_k)": (cached_gqa_self_attention(scale="kv width"), "differ",
                                    "sqrt(g * d_k)"),
        "values rotated too": (cached_gqa_self_attention(rotate_values=True), "differ",
                               "values are rotated"),
        "the whole cache rotated again at each step": (
            cached_gqa_self_attention(rotate_cache_again=True), "one position per step",
            "rotated again at every step"),
        "keys rotated at 0 .. T-1, queries right": (
            cached_gqa_self_attention(keys_from_zero=True), "on input", "turn at different"),
        "positions one past len(cache)": (cached_gqa_self_attention(position_shift=1),
                                          "on input", "positions are off by one"),
        "each new position one key short": (cached_gqa_self_attention(causal_shift=-1),
                                            "on input", "causal lengths are off by one"),
        "keys and values swapped": (cached_gqa_self_attention(swap_kv=True), "on input",
                                    "trade places"),
        "softmax over the queries": (cached_gqa_self_attention(softmax_dim=-2), "on input",
                                     "runs over the queries"),
        "values rotated and heads tiled": (
            cached_gqa_self_attention(rotate_values=True, interleave=False), "differ", None),
    }),
    "check_top_p_probs": (top_p_probs(), {
        "the token that crosses top_p left out": (top_p_probs(cumulative="after"), "a tiny top_p",
                                                  "crosses top_p"),
        "not renormalised": (top_p_probs(renormalise=False), "a tiny top_p", "not renormalised"),
        "the least probable tokens kept": (top_p_probs(descending=False), "a tiny top_p",
                                           "least probable"),
        "exp without subtracting the largest logit": (top_p_probs(stable=False),
                                                      "the result holds NaN", "overflows"),
        "left in sorted order": (top_p_probs(sorted_order=True), "differ", "stay in sorted order"),
        "logits accumulated": (top_p_probs(on_logits=True), "differ", "accumulates the logits"),
        "the keep mask left in sorted order": (top_p_probs(mask_in_sorted_order=True), "differ",
                                               "keep mask is in sorted order"),
        "divided by top_p": (lambda logits, p: top_p_probs(renormalise=False)(logits, p) / p,
                             "differ", "divided by top_p"),
        "the tokens in vocabulary order, unsorted": (top_p_probs(unsorted=True), "differ",
                                                     "takes the tokens in vocabulary order"),
        "softmax over the batch": (top_p_probs(softmax_dim=0), "differ", "over the batch"),
        "log-probabilities returned": (top_p_probs(log=True), "on input", "under a softmax"),
        "one token past the one that crosses top_p": (top_p_probs(cumulative="one more"),
                                                      "on input", "not the right number"),
        "a plain softmax: every token kept": (lambda logits, top_p: torch.softmax(logits, -1),
                                              "differ", "not the right number"),
        "the nucleus of the logits doubled": (
            lambda logits, top_p: top_p_probs()(2 * logits, top_p), "differ", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_beyond_2017
