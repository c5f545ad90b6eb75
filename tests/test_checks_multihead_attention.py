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
    if lens == "as they are":  # not repeated for the heads at all
        return valid_lens
    if lens == "flat":  # one length per sequence assumed: (B,) -> (B * h,)
        return valid_lens[:, None].expand(-1, h).reshape(-1)
    if lens == "interleave":
        return valid_lens.repeat_interleave(h, dim=0)
    return valid_lens.repeat(h, *[1] * (valid_lens.dim() - 1))


def per_head_weights(mha, queries, keys, valid_lens, fold=True, scale="d_k", lens="interleave",
                     fill="package", strided=False, softmax_dim=-1, key_layer="W_k",
                     by_hand=False, unfold="(B, h)"):
    h, d_k = mha.num_heads, mha.d_k

    def split(x):  # (B, T, d_model) -> (B*h, T, d_k)
        B, T, _ = x.shape
        if strided:  # features d_k-major: head i gets features i, i + h, i + 2h, ...
            return x.reshape(B, T, d_k, h).permute(0, 3, 1, 2).reshape(B * h, T, d_k)
        if fold:  # (B, T, h, d_k) -> (B, h, T, d_k) -> fold the heads into the batch
            return x.reshape(B, T, h, d_k).transpose(1, 2).reshape(B * h, T, d_k)
        return x.reshape(B * h, T, d_k)  # the classic mistake: no transpose

    def project(layer, x):
        return x @ layer.weight if by_hand else layer(x)  # by hand, forgetting the transpose

    Q, K = split(project(mha.W_q, queries)), split(project(getattr(mha, key_layer), keys))
    divisor = {"d_k": math.sqrt(d_k), "d_model": math.sqrt(mha.d_model), "none": 1,
               "h": math.sqrt(h)}[scale]
    scores = Q @ K.transpose(1, 2) / divisor
    if softmax_dim == -1:
        weights = attention_weights(scores, folded_lens(valid_lens, h, lens), fill)
    else:
        weights = torch.softmax(scores, dim=softmax_dim)
        if valid_lens is not None:
            weights = weights * d2lh.valid_lens_to_mask(folded_lens(valid_lens, h, lens),
                                                        *scores.shape[1:])
    if unfold == "(h, B)":
        return weights.reshape(h, queries.shape[0], *weights.shape[1:]).transpose(0, 1)
    return weights.reshape(queries.shape[0], h, *weights.shape[1:])  # (B*h, ...) -> (B, h, ...)


def keys_against_queries(mha, queries, keys, valid_lens):
    """Every head's scores as keys times queries transposed, (T_k, T_q), softmaxed and masked as
    if they were the right way round."""
    h, d_k, B = mha.num_heads, mha.d_k, queries.shape[0]
    Q = mha.W_q(queries).unflatten(-1, (h, d_k)).transpose(1, 2).flatten(0, 1)
    K = mha.W_k(keys).unflatten(-1, (h, d_k)).transpose(1, 2).flatten(0, 1)
    weights = attention_weights(K @ Q.mT / math.sqrt(d_k), folded_lens(valid_lens, h))
    return weights.unflatten(0, (B, h))


def own_mask(mha, queries, keys, valid_lens, keep=lambda key, length: key < length):
    """Every head's softmax over the keys where ``keep(key index, valid length)``, -inf elsewhere:
    the right mask by default; ``key >= length`` inverts it, ``key <= length`` is off by one."""
    h, d_k, B = mha.num_heads, mha.d_k, queries.shape[0]
    Q = mha.W_q(queries).unflatten(-1, (h, d_k)).transpose(1, 2)  # (B, h, T_q, d_k)
    K = mha.W_k(keys).unflatten(-1, (h, d_k)).transpose(1, 2)
    scores = Q @ K.mT / math.sqrt(d_k)
    if valid_lens is not None:
        lengths = valid_lens[:, None, None, None] if valid_lens.dim() == 1 else \
            valid_lens[:, None, :, None]
        scores = scores.masked_fill(~keep(torch.arange(keys.shape[1]), lengths), -math.inf)
    return torch.softmax(scores, dim=-1)


def softmax_over_heads(mha, queries, keys, valid_lens):
    """The heads' scores (B, h, T_q, T_k) softmaxed over the heads, the padding zeroed after."""
    h, d_k = mha.num_heads, mha.d_k
    Q = mha.W_q(queries).unflatten(-1, (h, d_k)).transpose(1, 2)
    K = mha.W_k(keys).unflatten(-1, (h, d_k)).transpose(1, 2)
    weights = torch.softmax(Q @ K.mT / math.sqrt(d_k), dim=1)
    if valid_lens is None:
        return weights
    return weights * d2lh.valid_lens_to_mask(valid_lens, queries.shape[1], keys.shape[1])[:, None]


def biases_swapped(mha):
    """The right layer, but the biases of the queries and the keys swapped."""
    layer = to_torch_multihead(mha)
    if mha.W_q.bias is not None:
        with torch.no_grad():
            layer.in_proj_bias.copy_(torch.cat([mha.W_k.bias, mha.W_q.bias, mha.W_v.bias]))
    return layer


def head_major(mha, queries, keys, valid_lens):
    """Heads folded head-major, (h, B), but each sequence's lengths repeated side by side, as
    for a batch-major fold."""
    h, d_k, B = mha.num_heads, mha.d_k, queries.shape[0]

    def fold(x):  # (B, T, h * d_k) -> (h * B, T, d_k)
        return x.unflatten(-1, (h, d_k)).permute(2, 0, 1, 3).flatten(0, 1)

    scores = fold(mha.W_q(queries)) @ fold(mha.W_k(keys)).transpose(1, 2) / math.sqrt(d_k)
    weights = attention_weights(scores, folded_lens(valid_lens, h))
    return weights.unflatten(0, (h, B)).transpose(0, 1)


def zeroed_after(mha, queries, keys, valid_lens):
    """Every head's softmax over all the keys, then the padding's weights set to 0."""
    weights = per_head_weights(mha, queries, keys, None)
    if valid_lens is None:
        return weights
    allowed = d2lh.valid_lens_to_mask(valid_lens, queries.shape[1], keys.shape[1])
    return weights * allowed[:, None]


def to_torch_multihead(mha, biases=True, order=("W_q", "W_k", "W_v"), batch_first=True,
                       heads=None, copy=("in", "out"), transpose=False):
    has_bias = mha.W_q.bias is not None
    layer = nn.MultiheadAttention(mha.d_model, heads or mha.num_heads, bias=has_bias,
                                  batch_first=batch_first)
    with torch.no_grad():
        if "in" in copy:
            weights = [getattr(mha, n).weight for n in order]
            layer.in_proj_weight.copy_(torch.cat([w.T if transpose in (True, "in") else w
                                                  for w in weights]))
        if "out" in copy:
            layer.out_proj.weight.copy_(mha.W_o.weight.T if transpose in (True, "out")
                                        else mha.W_o.weight)
        if has_bias and biases in (True, "in"):
            layer.in_proj_bias.copy_(torch.cat([getattr(mha, n).bias for n in order]))
        if has_bias and biases in (True, "out"):
            layer.out_proj.bias.copy_(mha.W_o.bias)
    return layer


def packed_self_attention(order=(0, 1, 2), transpose=True, scale="d_k", lens="interleave",
                          fill="package", project_out=True, store="heads", per_head=False,
                          merge_transpose=True, strided=False, softmax_dim=-1, keys_first=False,
                          keep=None, over_heads=False):
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
            if per_head:  # as if each head's q, k, v sat side by side
                chunks = [c.flatten(2) for c in self.W_qkv(X).unflatten(-1, (h, 3, d_k)).unbind(3)]

            def split(x):  # (B, T, h*d_k) -> (B, h, T, d_k)
                if strided:  # head i gets features i, i + h, i + 2h, ...
                    return x.reshape(B, T, d_k, h).permute(0, 3, 1, 2)
                if transpose:
                    return x.reshape(B, T, h, d_k).transpose(1, 2)
                return x.reshape(B, h, T, d_k)  # the classic mistake: no transpose

            Q, K, V = (split(chunks[i]) for i in order)
            scores = Q @ K.transpose(-1, -2) / {"d_k": math.sqrt(d_k), "none": 1, "h": math.sqrt(h),
                                                "d_model": math.sqrt(d_model)}[scale]
            if keys_first:  # keys times queries transposed
                scores = K @ Q.transpose(-1, -2) / math.sqrt(d_k)
            folded = scores.reshape(B * h, T, T)
            lengths = None if valid_lens is None else (
                valid_lens[:, None, None, None] if valid_lens.dim() == 1
                else valid_lens[:, None, :, None])
            if keep is not None:  # a mask of its own: keep(key index, valid length)
                weights = torch.softmax(scores if lengths is None else scores.masked_fill(
                    ~keep(torch.arange(T), lengths), -math.inf), dim=-1)
            elif over_heads:  # the softmax over the heads, the padding zeroed after
                weights = torch.softmax(scores, dim=1)
                if lengths is not None:
                    weights = weights * (torch.arange(T) < lengths)
            elif fill == "after" and valid_lens is not None:  # zeroed after the softmax
                weights = torch.softmax(folded, -1) * d2lh.valid_lens_to_mask(
                    folded_lens(valid_lens, h, lens), T, T)
            elif softmax_dim == -1:
                weights = attention_weights(folded, folded_lens(valid_lens, h, lens),
                                            "package" if fill == "after" else fill)
            else:  # the mask first (-inf), then the softmax over the queries
                allowed = torch.ones_like(folded, dtype=torch.bool) if valid_lens is None else \
                    d2lh.valid_lens_to_mask(folded_lens(valid_lens, h, lens), T, T)
                weights = torch.softmax(folded.masked_fill(~allowed, -math.inf), dim=softmax_dim)
            weights = weights.reshape(B, h, T, T)
            self.attention_weights = {"heads": weights, "folded": weights.reshape(B * h, T, T),
                                      "mean": weights.mean(dim=1),
                                      "transposed": weights.transpose(-1, -2),
                                      "unmasked": torch.softmax(scores, -1)}[store]
            heads = weights @ V  # (B, h, T, d_k)
            merged = (heads.transpose(1, 2) if merge_transpose else heads).reshape(B, T, d_model)
            return self.W_o(merged) if project_out else merged

    return PackedSelfAttention


CHECKS = {
    "check_per_head_weights": (per_head_weights, {
        "no transpose when splitting": (
            lambda *a: per_head_weights(*a, fold=False), "differ", "split without moving the head axis"),
        "heads take strided features": (
            lambda *a: per_head_weights(*a, strided=True), "differ", "every h-th feature"),
        "scaled by sqrt(d_model)": (
            lambda *a: per_head_weights(*a, scale="d_model"), "differ", "divided by sqrt(d_model)"),
        "not scaled": (lambda *a: per_head_weights(*a, scale="none"), "differ", "not scaled"),
        "repeat instead of repeat_interleave": (
            lambda *a: per_head_weights(*a, lens="repeat"), "valid_lens (B,)",
            "lengths of other sequences"),
        "mask forgotten": (lambda *a: per_head_weights(*a, lens="ignore"), "valid_lens (B,)",
                           "ignore valid_lens"),
        "heads folded head-major, lengths repeated per sequence": (
            head_major, "valid_lens (B,)", "lengths of other sequences"),
        "lengths not repeated for the heads": (
            lambda mha, q, k, lens: per_head_weights(mha, q, k, lens, lens="as they are"),
            "raised ValueError", "not repeated for the h heads"),
        "lengths repeated as if one per sequence": (
            lambda mha, q, k, lens: per_head_weights(mha, q, k, lens, lens="flat"),
            "valid_lens (B, T_q)", "one length per sequence (B,) only"),
        "the padding zeroed after the softmax": (zeroed_after, "valid_lens (B,)",
                                                 "zeroed on the padding"),
        "scaled by sqrt(h)": (lambda *a: per_head_weights(*a, scale="h"), "differ",
                              "another number than sqrt(d_k)"),
        "-inf fill, NaN in an empty row": (
            lambda *a: per_head_weights(*a, fill="-inf"),
            "a sequence with valid length 0: the result holds NaN", "hold NaN"),
        "-1e9 fill: an empty row uniform": (lambda *a: per_head_weights(*a, fill="-1e9"),
                                            "a sequence with valid length 0", "finite fill"),
        "softmax over the queries": (lambda *a: per_head_weights(*a, softmax_dim=1), "differ",
                                     "over the queries"),
        "keys projected with W_q": (lambda *a: per_head_weights(*a, key_layer="W_q"), "differ",
                                    "projected with W_q"),
        "projected by hand, weight untransposed": (
            lambda *a: per_head_weights(*a, by_hand=True), "differ", "untransposed"),
        "unfolded as (h, B)": (lambda *a: per_head_weights(*a, unfold="(h, B)"), "differ",
                               "wrong order"),
        "scores of the keys against the queries": (keys_against_queries, "expected shape",
                                                   "compare each key with the queries"),
        "the mask inverted": (
            lambda *a: own_mask(*a, keep=lambda key, length: key >= length), "valid_lens (B,)",
            "mask is inverted"),
        "the mask one key too long": (
            lambda *a: own_mask(*a, keep=lambda key, length: key <= length), "valid_lens (B,)",
            "off by one"),
        "a softmax over the heads": (softmax_over_heads, "differ", "over another axis"),
        "the weights of the first head only, for every head": (
            lambda *a: per_head_weights(*a)[:, :1].expand(-1, a[0].num_heads, -1, -1), "differ",
            None),
    }),
    "check_to_torch_multihead": (to_torch_multihead, {
        "biases forgotten": (lambda mha: to_torch_multihead(mha, biases=False), "bias=True",
                             "biases are not copied (they stay 0)"),
        "the output bias forgotten": (lambda mha: to_torch_multihead(mha, biases="in"),
                                      "bias=True", "output bias"),
        "biases stacked [b_k; b_q; b_v]": (lambda mha: biases_swapped(mha), "bias=True",
                                           "biases in another order"),
        "the input biases forgotten": (lambda mha: to_torch_multihead(mha, biases="out"),
                                       "bias=True", "input biases"),
        "[W_k; W_q; W_v]": (
            lambda mha: to_torch_multihead(mha, order=("W_k", "W_q", "W_v")), "differ",
            "projections in another order"),
        "batch_first forgotten": (
            lambda mha: to_torch_multihead(mha, batch_first=False), "on input", "batch_first"),
        "weights stacked side by side": (
            lambda mha: setattr(layer := to_torch_multihead(mha), "in_proj_weight", nn.Parameter(
                torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight], 1))) or layer,
            "raised", "does not have the shape"),
        "one head": (lambda mha: to_torch_multihead(mha, heads=1), "on input",
                     "another number of heads"),
        "weights transposed": (lambda mha: to_torch_multihead(mha, transpose=True), "differ",
                               "transposed"),
        "in_proj_weight not copied": (lambda mha: to_torch_multihead(mha, copy=("out",)),
                                      "differ", "input projection is not copied"),
        "out_proj not copied": (lambda mha: to_torch_multihead(mha, copy=("in",)), "differ",
                                "output projection"),
        "only the input weights transposed": (
            lambda mha: to_torch_multihead(mha, transpose="in"), "differ", "transposed"),
        "only the output weight transposed": (
            lambda mha: to_torch_multihead(mha, transpose="out"), "differ", "transposed"),
        "not a module": (lambda mha: mha, "expected a torch.nn.MultiheadAttention", None),
    }),
    # The learner's class is the answer: the check builds it and copies seeded weights into it.
    "check_packed_self_attention": (packed_self_attention(), {
        "keys cut out first, then queries": (
            packed_self_attention(order=(1, 0, 2)), "result 0 of the tuple: ", "another order"),
        "each head's q, k, v side by side": (packed_self_attention(per_head=True), "differ",
                                             "each head's query, key and value"),
        "heads split without the transpose": (packed_self_attention(transpose=False),
                                              "differ", "split without moving the head axis"),
        "scaled by sqrt(d_model)": (packed_self_attention(scale="d_model"), "differ",
                                    "divided by sqrt(d_model)"),
        "not scaled": (packed_self_attention(scale="none"), "differ", "not scaled"),
        "heads take strided features": (packed_self_attention(strided=True), "differ",
                                        "every h-th feature"),
        "softmax over the queries": (packed_self_attention(softmax_dim=1), "differ",
                                     "over the queries"),
        "repeat instead of repeat_interleave": (packed_self_attention(lens="repeat"),
                                                "valid_lens (B,)", "lengths of other sequences"),
        "mask forgotten": (packed_self_attention(lens="ignore"), "valid_lens (B,)",
                           "ignore valid_lens"),
        "-inf fill, NaN in an empty row": (
            packed_self_attention(fill="-inf"),
            "a sequence with valid length 0: result 0 of the tuple: the result holds NaN",
            "hold NaN"),
        "lengths repeated as if one per sequence": (packed_self_attention(lens="flat"),
                                                    "valid_lens (B, T)",
                                                    "one length per sequence (B,) only"),
        "lengths not repeated for the heads": (packed_self_attention(lens="as they are"),
                                               "raised ValueError", "not repeated for the h heads"),
        "the padding zeroed after the softmax": (packed_self_attention(fill="after"),
                                                 "valid_lens (B,)", "zeroed on the padding"),
        "scaled by sqrt(h)": (packed_self_attention(scale="h"), "differ",
                              "another number than sqrt(d_k)"),
        "weights kept before the mask": (packed_self_attention(store="unmasked"),
                                         "result 1 of the tuple", "ignore valid_lens"),
        "heads merged without the transpose": (packed_self_attention(merge_transpose=False),
                                               "differ", "without moving the head axis back"),
        "W_o forgotten": (packed_self_attention(project_out=False), "differ", "not projected"),
        "weights kept with the heads folded into the batch": (
            packed_self_attention(store="folded"), "result 1 of the tuple: expected shape",
            "fold the heads"),
        "weights averaged over the heads": (packed_self_attention(store="mean"),
                                            "result 1 of the tuple: expected shape", "averaged"),
        "weights kept transposed": (packed_self_attention(store="transposed"),
                                    "result 1 of the tuple", "attention_weights are transposed"),
        "-1e9 fill: an empty row uniform": (packed_self_attention(fill="-1e9"),
                                            "a sequence with valid length 0", "finite fill"),
        "scores of the keys against the queries (keys and queries swapped)": (
            packed_self_attention(keys_first=True), "differ", "another order"),
        "the mask inverted": (
            packed_self_attention(keep=lambda key, length: key >= length), "valid_lens (B,)",
            "mask is inverted"),
        "the mask one key short": (
            packed_self_attention(keep=lambda key, length: key < length - 1), "valid_lens (B,)",
            "off by one"),
        "a softmax over the heads": (packed_self_attention(over_heads=True), "differ",
                                     "over another axis"),
        "one projection per input instead of W_qkv": (d2lh.MultiHeadAttention, "needs W_qkv",
                                                      None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_multihead_attention
