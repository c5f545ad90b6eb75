"""The checks of notebook 04_multihead_attention's coding exercises: every head's weights, the layer
as torch.nn.MultiheadAttention, and self-attention with one packed projection."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from ..attention import MultiHeadAttention, masked_softmax, sequence_mask, valid_lens_to_mask
from .cases import (MASK_KINDS, case_label, load_linear_weights, mask_inverted, randn,
                    random_choice, random_head_sizes, seeded_generator, seeded_module, size_text,
                    valid_lens_case)
from .runner import N_, Symptom, _, exercise_check, run_check

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
        details = _("{sizes}, {mask}").format(sizes=size_text(s), mask=mask)
        cases.append((case_label(what, details), (mha, *inputs, valid_lens)))
    return cases


# The classic mistakes, each as the function that makes it ----------------------------------------

def _split(x: torch.Tensor, h: int, split="heads first") -> torch.Tensor:
    """(B, T, h * d_k) -> (B, h, T, d_k), head i taking features i*d_k .. (i+1)*d_k - 1; the other
    ``split`` are mistakes: "no transpose" reshapes straight to (B, h, T, d_k), "strided" gives
    head i every h-th feature."""
    B, T, width = x.shape
    if split == "no transpose":
        return x.reshape(B, h, T, width // h)
    if split == "strided":
        return x.reshape(B, T, width // h, h).permute(0, 3, 1, 2)
    return x.reshape(B, T, h, width // h).transpose(1, 2)


def _head_weights(Q, K, valid_lens, scale="d_k", lens="interleave", fill="zero", axis=-1,
                  operands="queries, keys", shift=0):
    """Weights (B, h, T_q, T_k) of the heads Q (B, h, T_q, d_k) and K (B, h, T_k, d_k), right by
    default; each other value of an argument is a classic mistake. operands "keys, queries": the
    scores of the keys against the queries, (T_k, T_q); shift: each query sees valid_len + shift
    keys (a mask off by one)."""
    if operands == "keys, queries":
        Q, K = K, Q
    B, h, T_q, d_k = Q.shape
    T_k = K.shape[2]
    divisor = {"d_k": math.sqrt(d_k), "d_model": math.sqrt(h * d_k), "none": 1.0}[scale]
    scores = (Q @ K.transpose(-2, -1) / divisor).reshape(B * h, T_q, T_k)
    if valid_lens is None or lens == "ignore":
        folded = None
    elif lens == "interleave":  # sequence b's lengths for each of its heads
        folded = valid_lens.repeat_interleave(h, dim=0)
    else:  # "repeat": the whole batch tiled h times, heads paired with other sequences
        folded = valid_lens.repeat(h, *[1] * (valid_lens.dim() - 1))
    if shift and folded is not None:  # valid_len + shift keys seen, however many there are
        allowed = sequence_mask(folded + shift, T_k)
        allowed = (allowed[:, None] if folded.dim() == 1 else allowed).expand(-1, T_q, -1)
        if fill == "-inf":
            return torch.softmax(scores.masked_fill(~allowed, -math.inf), -1).reshape(
                B, h, T_q, T_k)
        weights = torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), -1)
        return weights.masked_fill(~allowed, 0.0).reshape(B, h, T_q, T_k)
    if axis != -1:  # masked before (with -inf), or after (zeroed), the softmax
        allowed = None if folded is None else valid_lens_to_mask(folded, T_q, T_k)
        if allowed is not None and fill == "-inf":
            scores = scores.masked_fill(~allowed, -math.inf)
        weights = torch.softmax(scores, dim=axis)
        if allowed is not None and fill == "zero":
            weights = weights * allowed
    elif fill == "zero" or folded is None:
        weights = masked_softmax(scores, folded)
    elif fill == "after":  # the padding's weights zeroed after the softmax, not renormalised
        weights = torch.softmax(scores, dim=-1) * valid_lens_to_mask(folded, T_q, T_k)
    else:  # -inf where masked: a row without a valid key is NaN; finite: it is uniform
        allowed = valid_lens_to_mask(folded, T_q, T_k)
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf if fill == "-inf"
                                                   else -1e9), dim=-1)
    return weights.reshape(B, h, T_q, T_k)


def _wrong_per_head_weights(mha, queries, keys, valid_lens, split="heads first", project="right",
                            unfold="batch first", **weights):
    h = mha.num_heads
    W_q, W_k = mha.W_q.weight, mha.W_k.weight
    if project == "same":
        W_k = W_q
    elif project == "untransposed":
        W_q, W_k = W_q.T, W_k.T
    Q, K = _split(queries @ W_q.T, h, split), _split(keys @ W_k.T, h, split)
    result = _head_weights(Q, K, valid_lens, **weights)
    if unfold == "heads first":  # folded batch-major, unfolded as if head-major
        B = result.shape[0]
        result = result.reshape(h, B, *result.shape[2:]).transpose(0, 1)
    return result


def _nan_rows(result, *args) -> bool:
    """Whether the results (weights, or outputs and weights) hold NaN, and only for the sequences
    with no valid key (``valid_lens``, the last argument, 0)."""
    valid_lens = args[-1]
    if valid_lens is None or not (valid_lens == 0).any():
        return False
    empty = (valid_lens == 0) if valid_lens.dim() == 1 else (valid_lens == 0).all(dim=1)  # (B,)
    seen = False
    for tensor in (result if isinstance(result, (tuple, list)) else (result,)):
        nan = torch.as_tensor(tensor).isnan()
        if nan.shape[:1] != empty.shape:
            return False
        seen = seen or bool(nan.any())
        if nan[~empty].any():
            return False
    return seen


def _heads(result, *args):
    """(scores (B, h, T_q, T_k) unscaled, d_k, valid_lens, the learner's weights (B, h, T_q,
    T_k)) from the arguments of either exercise: (mha, queries, keys, valid_lens) with the
    weights as result, or (mha, X, valid_lens) with the weights as result 1."""
    if len(args) == 4:
        mha, queries, keys, valid_lens = args
        weights = result
    else:
        (mha, queries, valid_lens), keys = args, args[1]
        weights = result[1]
    with torch.no_grad():
        Q, K = mha.split_heads(mha.W_q(queries)), mha.split_heads(mha.W_k(keys))
    weights = torch.as_tensor(weights).double()
    scores = (Q @ K.transpose(-2, -1)).double()
    if weights.shape != scores.shape:
        raise ValueError("weights of another shape")
    return scores, mha.d_k, valid_lens, weights


def _head_weights_of(scores, lens):
    """masked_softmax of scores (B, h, T_q, T_k) with lengths (B,) or (B, T_q) shared by the
    heads of a sequence."""
    B, h = scores.shape[:2]
    folded = None if lens is None else lens.repeat_interleave(h, dim=0)
    return masked_softmax(scores.flatten(0, 1), folded).unflatten(0, (B, h))


def _other_lengths(result, *args) -> bool:
    """Whether each head's weights are those of the lengths of some sequence of the batch, and
    some head's those of another sequence than its own."""
    scores, d_k, valid_lens, weights = _heads(result, *args)
    if valid_lens is None:
        return False
    B, h = scores.shape[:2]
    scores = scores / math.sqrt(d_k)
    matches = torch.stack([  # (B', B, h): the weights of every head with sequence b's lengths
        (_head_weights_of(scores, valid_lens[b:b + 1].expand_as(valid_lens)) - weights).abs()
        .flatten(2).amax(dim=-1) < 1e-5 for b in range(B)])
    own = matches[torch.arange(B), torch.arange(B)]  # (B, h)
    return bool(matches.any(dim=0).all()) and not bool(own.all())


def _scaled_otherwise(result, *args) -> bool:
    """Whether the weights are those of the scores times another factor than 1/sqrt(d_k), the
    same for every head."""
    scores, d_k, valid_lens, weights = _heads(result, *args)
    seen = weights > 0  # the keys a query sees: log w = factor * score + a row's constant
    if not bool(seen.any()):
        return False
    counts = seen.sum(dim=-1, keepdim=True).clamp(min=1)
    logs = torch.where(seen, weights.clamp(min=1e-300).log(), 0.0)
    centred_logs = torch.where(seen, logs - logs.sum(-1, keepdim=True) / counts, 0.0)
    centred = torch.where(seen, scores - torch.where(seen, scores, 0.0).sum(-1, keepdim=True)
                          / counts, 0.0)
    if float((centred ** 2).sum()) < 1e-12:
        return False
    factor = float((centred_logs * centred).sum() / (centred ** 2).sum())
    return (not math.isclose(factor, 1 / math.sqrt(d_k), rel_tol=1e-3) and torch.allclose(
        _head_weights_of(factor * scores, valid_lens), weights, atol=1e-5, rtol=1e-4))


def _lengths_not_repeated(result, *args) -> bool:
    """Whether the function raised on lengths of B sequences given for B*h folded rows."""
    mha, valid_lens = args[0], args[-1]
    return (isinstance(result, ValueError) and valid_lens is not None and mha.num_heads > 1
            and "valid_lens must have shape" in str(result))


def _per_sequence_lengths_only(result, *args) -> bool:
    """Whether the function raised on lengths per query (B, T_q), and only there."""
    valid_lens = args[-1]
    return isinstance(result, Exception) and valid_lens is not None and valid_lens.dim() == 2


def _weights_and_lens(result, *args):
    """(the learner's weights (B, h, T_q, T_k) as float64, valid_lens) from the arguments of
    either exercise (see :func:`_heads`)."""
    weights = result if len(args) == 4 else result[1]
    return torch.as_tensor(weights).double(), args[-1]


def _inverted_mask(result, *args) -> bool:
    """Whether the weights are those of an inverted mask (see :func:`_inverted`)."""
    weights, valid_lens = _weights_and_lens(result, *args)
    if valid_lens is None or weights.dim() != 4:
        return False
    B, h, T_q, T_k = weights.shape
    allowed = valid_lens_to_mask(valid_lens, T_q, T_k)[:, None].expand_as(weights)
    return mask_inverted(weights, allowed)


def _sums_over_another_axis(result, *args) -> bool:
    """Whether the weights sum to 1 (or 0: a row with nothing to see) along another axis than the
    keys (the queries, the heads or the batch), and not along the keys."""
    weights, _lens = _weights_and_lens(result, *args)
    if weights.dim() != 4 or not bool(torch.isfinite(weights).all()):
        return False
    over_keys = weights.sum(-1)
    if bool((((over_keys - 1).abs() < 1e-4) | (over_keys.abs() < 1e-6)).all()):
        return False
    scores, d_k, valid_lens, _weights = _heads(result, *args)
    right = _head_weights_of(scores / math.sqrt(d_k), valid_lens)
    if right.shape == weights.mT.shape and torch.allclose(weights, right.mT, atol=1e-5):
        return False  # the right weights, kept transposed
    for axis in (0, 1, 2):  # (an axis of size 1: weights of 1, a softmax over that axis)
        sums = weights.sum(axis)
        if bool((((sums - 1).abs() < 1e-4) | (sums.abs() < 1e-6)).all()) and bool(
                ((sums - 1).abs() < 1e-4).any()):
            return True
    return False


def _per_head_mistakes(wrong: Callable, module: bool = False) -> dict:
    """The mistakes shared by the exercises that compute every head's weights, ``wrong`` making
    them; ``module``: the exercise keeps the weights beside its output."""
    return {
        N_("Your heads are split without moving the head axis next to the batch: a plain reshape "
           "to (B, h, T, d_k) mixes the positions into the heads."):
            partial(wrong, split="no transpose"),
        N_("Your head i takes every h-th feature: head i owns a block of d_k neighbouring "
           "features, i*d_k .. (i+1)*d_k - 1."): partial(wrong, split="strided"),
        N_("Your scores are divided by sqrt(d_model): each head scales by the square root of its "
           "own width, d_k = d_model / h."): partial(wrong, scale="d_model"),
        N_("Your scores are not scaled: each head divides them by the square root of its width "
           "d_k."): partial(wrong, scale="none"),
        N_("Your heads use the lengths of other sequences: which sequence does each row of the "
           "heads folded into the batch belong to?"): (partial(wrong, lens="repeat"),
                                                       Symptom(_other_lengths)),
        N_("Your lengths are not repeated for the h heads folded into the batch: masked_softmax "
           "gets the B lengths of the sequences for B * h rows."): Symptom(_lengths_not_repeated),
        N_("Your lengths work for one length per sequence (B,) only: valid_lens may also hold one "
           "length per query, (B, T_q)."): Symptom(_per_sequence_lengths_only),
        N_("Your weights ignore valid_lens: the padded keys must get weight 0."): (
            partial(wrong, lens="ignore"), *((partial(wrong, keep="unmasked"),) if module
                                             else ())),
        N_("Your weights are zeroed on the padding after the softmax, without renormalising: they "
           "no longer sum to 1 (mask the scores before the softmax)."): partial(wrong,
                                                                                fill="after"),
        N_("Your weights hold NaN for a sequence with no valid key (softmax of a row of -inf): "
           "such a row must be all 0, as d2lh.masked_softmax gives."): (
            partial(wrong, fill="-inf"), Symptom(_nan_rows)),
        N_("Your weights spread a sequence with no valid key evenly over its keys (a finite fill "
           "such as -1e9): such a row must be all 0, as d2lh.masked_softmax gives."):
            partial(wrong, fill="finite"),
        N_("Each column of your weights sums to 1, over the queries: each query's weights must "
           "sum to 1 over the keys."): tuple(partial(wrong, axis=-2, fill=fill, lens=lens)
                                             for lens in ("interleave", "ignore")
                                             for fill in ("zero", "-inf")),
        N_("Your scores are divided by another number than sqrt(d_k), the square root of each "
           "head's width."): Symptom(_scaled_otherwise),
        **({} if module else {  # (in self-attention, the same as keys and queries swapped)
            N_("Your scores compare each key with the queries (keys times queries transposed): "
               "row i of a head's scores holds query i's dot products with the keys."):
                tuple(partial(wrong, operands="keys, queries", fill=fill)
                      for fill in ("zero", "-inf"))}),
        N_("Your mask is inverted: the weights go to the padded keys and none to the valid ones."):
            Symptom(_inverted_mask),
        N_("Your mask is off by one: a query sees exactly the first valid_len keys, positions "
           "0 .. valid_len - 1."): tuple(partial(wrong, shift=shift, fill=fill)
                                         for shift in (1, -1) for fill in ("zero", "-inf")),
        N_("Your weights sum to 1 over another axis than the keys (the queries, the heads or the "
           "batch): each query's weights must sum to 1 over the keys."):
            Symptom(_sums_over_another_axis),
    }


_PER_HEAD_WEIGHTS_MISTAKES = {
    **_per_head_mistakes(_wrong_per_head_weights),
    N_("Your keys are projected with W_q: the queries use mha.W_q, the keys mha.W_k."):
        partial(_wrong_per_head_weights, project="same"),
    N_("Your projections multiply by the weight matrices untransposed: nn.Linear computes x times "
       "the transpose of its weight (call the layer, or transpose the weight)."):
        partial(_wrong_per_head_weights, project="untransposed"),
    N_("Your heads come back in the wrong order: the rows you fold as (batch, head) must unfold "
       "the same way, (B, h, ...)."): partial(_wrong_per_head_weights, unfold="heads first"),
}


@exercise_check
def check_per_head_weights(fn: Callable, seed: int = 0, hint: int = 1, *,
                           verbose: bool = False) -> None:
    """fn(mha, queries (B, T_q, d_model), keys (B, T_k, d_model), valid_lens) -> the attention
    weights (B, h, T_q, T_k) of every head of the d2lh.MultiHeadAttention ``mha``, computed from
    its W_q and W_k without calling it. valid_lens: None, (B,) or (B, T_q)."""
    generator = seeded_generator(seed)
    fixed = [("", dict(d_model=8, h=2, B=2, T_q=3, T_k=4), None),
             ("", dict(d_model=12, h=3, B=2, T_q=4, T_k=5), "per sequence"),
             (N_("a single query"), dict(d_model=8, h=4, B=3, T_q=1, T_k=6), "per sequence"),
             ("", dict(d_model=6, h=2, B=2, T_q=4, T_k=4), "per query"),
             ("", dict(d_model=8, h=2, B=2, T_q=2, T_k=3), "zero")]
    cases = _attention_cases(generator, fixed, count=2)

    def reference(mha, queries, keys, valid_lens):
        with torch.no_grad():
            mha(queries, keys, keys, valid_lens)  # the weights do not depend on the values
        return mha.attention_weights

    run_check("per_head_weights", fn, cases, reference,
              hints=(N_("Each head works on its own slice of the projected features: which "
                        "width scales its scores, and which valid lengths belong to each head?"),
                     N_("Project, split the last axis into h heads of width d_k = d_model / h "
                        "with the heads next to the batch, scale by sqrt(d_k), and give every "
                        "head of a sequence that sequence's valid lengths; a row with no valid "
                        "key stays 0."),
                     N_("project with mha.W_q and mha.W_k, split the features into h heads of "
                        "width d_k = d_model / h (reshape to (B, T, h, d_k), then move the head "
                        "axis next to the batch), divide the scores by sqrt(d_k) (not "
                        "sqrt(d_model)), give every head of sequence b the lengths of b, and use "
                        "d2lh.masked_softmax, which keeps a row with no valid key at zero.")),
              hint=hint, mistakes=_PER_HEAD_WEIGHTS_MISTAKES, verbose=verbose)


def _wrong_torch_multihead(mha, queries, keys, values, order=("W_q", "W_k", "W_v"),
                           biases=("in", "out"), batch_first=True, transpose=False,
                           bias_order=None):
    has_bias = mha.W_q.bias is not None
    with torch.random.fork_rng(devices=[]):
        layer = nn.MultiheadAttention(mha.d_model, mha.num_heads, bias=has_bias,
                                      batch_first=batch_first)
    with torch.no_grad():
        weights = [getattr(mha, name).weight for name in order]
        transpose_in, transpose_out = transpose in (True, "in"), transpose in (True, "out")
        layer.in_proj_weight.copy_(torch.cat([w.T if transpose_in else w for w in weights]))
        layer.out_proj.weight.copy_(mha.W_o.weight.T if transpose_out else mha.W_o.weight)
        if has_bias and "in" in biases:  # (PyTorch initialises the biases to 0)
            layer.in_proj_bias.copy_(torch.cat([getattr(mha, name).bias
                                                for name in bias_order or order]))
        if has_bias and "out" in biases:
            layer.out_proj.bias.copy_(mha.W_o.bias)
    return layer


def _repaired(part: str) -> Symptom:
    """The symptom of a layer whose ``part`` alone was not copied: copying it makes it right."""

    def right_once_repaired(layer, mha, queries, keys, values):
        if not isinstance(layer, nn.MultiheadAttention) or not layer.batch_first:
            return False
        right = mha.to_torch()
        repaired = nn.MultiheadAttention(mha.d_model, layer.num_heads, bias=layer.in_proj_bias
                                         is not None, batch_first=True)
        repaired.load_state_dict(layer.state_dict())
        with torch.no_grad():
            if part == "in":
                repaired.in_proj_weight.copy_(right.in_proj_weight)
            else:
                repaired.out_proj.weight.copy_(right.out_proj.weight)
            have = repaired.eval()(queries, keys, values, need_weights=False)[0]
            want = right.eval()(queries, keys, values, need_weights=False)[0]
        return bool(torch.allclose(have, want, atol=1e-5, rtol=1e-4))

    return Symptom(right_once_repaired)


def _stacked_wrongly(layer, mha, *inputs) -> bool:
    """Whether the layer's in_proj_weight lost its shape (3 d_model, d_model)."""
    return tuple(layer.in_proj_weight.shape) != (3 * mha.d_model, mha.d_model)


_TO_TORCH_MULTIHEAD_MISTAKES = {
    N_("Your in_proj_weight does not have the shape (3 d_model, d_model): PyTorch stacks the three "
       "projections' weights one below the other."): Symptom(_stacked_wrongly),
    N_("Your layer has another number of heads than mha: the same weights split into another "
       "number of heads compute another function."):
        Symptom(lambda layer, mha, *inputs: layer.num_heads != mha.num_heads),
    N_("Your layer has no batch_first=True: it reads the inputs (B, T, d_model) as (T, B, "
       "d_model)."): partial(_wrong_torch_multihead, batch_first=False),
    N_("Your layer stacks the input projections in another order: PyTorch's in_proj_weight holds "
       "the queries' rows first, then the keys', then the values'."): tuple(
        partial(_wrong_torch_multihead, order=order)
        for order in itertools.permutations(("W_q", "W_k", "W_v"))
        if order != ("W_q", "W_k", "W_v")),
    N_("Your in_proj_bias stacks the biases in another order than the weights: the queries', then "
       "the keys', then the values'."): tuple(
        partial(_wrong_torch_multihead, bias_order=order)
        for order in itertools.permutations(("W_q", "W_k", "W_v"))
        if order != ("W_q", "W_k", "W_v")),
    N_("Your layer's biases are not copied (they stay 0): mha's biases go into in_proj_bias and "
       "out_proj.bias."): partial(_wrong_torch_multihead, biases=()),
    N_("Your layer's output bias is not copied: W_o's bias goes into out_proj.bias."):
        partial(_wrong_torch_multihead, biases=("in",)),
    N_("Your layer's input biases are not copied: the biases of W_q, W_k and W_v go into "
       "in_proj_bias, in that order."): partial(_wrong_torch_multihead, biases=("out",)),
    N_("Your weights are transposed: PyTorch's layers keep them as (out_features, in_features), "
       "as nn.Linear does."): tuple(partial(_wrong_torch_multihead, transpose=transpose)
                                    for transpose in (True, "in", "out")),
    N_("Your layer's input projection is not copied: in_proj_weight must hold mha's W_q, W_k and "
       "W_v."): _repaired("in"),
    N_("Your layer's output projection is not copied: out_proj.weight must hold mha's W_o."):
        _repaired("out"),
}


@exercise_check
def check_to_torch_multihead(fn: Callable, seed: int = 0, hint: int = 1, *,
                             verbose: bool = False) -> None:
    """fn(mha) -> a torch.nn.MultiheadAttention (batch_first) computing the same function as the
    d2lh.MultiHeadAttention ``mha``, biases included when ``mha`` has them."""
    generator = seeded_generator(seed)
    fixed = [("", dict(d_model=8, h=2, B=2, T_q=3, T_k=4), None),
             (N_("a single head"), dict(d_model=6, h=1, B=3, T_q=2, T_k=5), None),
             (N_("a single key"), dict(d_model=12, h=3, B=1, T_q=4, T_k=1), None)]
    cases = []
    for bias in (True, False):
        for what, args in _attention_cases(generator, fixed, 1, kinds=(None,), bias=bias):
            mha, queries, keys, _lens = args
            values = keys.flip(1)  # values that differ from the keys
            cases.append((_("bias={bias}, {case}").format(bias=bias, case=what),
                          (mha, queries, keys, values)))

    def outputs(layer, mha, queries, keys, values):  # what the layer computes on the inputs
        if not isinstance(layer, torch.nn.MultiheadAttention):
            raise TypeError(_("expected a torch.nn.MultiheadAttention, got {kind}").format(
                kind=type(layer).__name__))
        with torch.no_grad():
            return layer.eval()(queries, keys, values, need_weights=False)[0]

    def reference(mha, queries, keys, values):
        return mha.to_torch()

    run_check("to_torch_multihead", lambda mha, queries, keys, values: fn(mha), cases, reference,
              compare_through=(N_("applied to the queries, keys and values"), outputs),
              hints=(N_("PyTorch keeps the three input projections in one stacked matrix: in "
                        "which order? And where do the biases go?"),
                     N_("nn.MultiheadAttention stacks W_q, W_k and W_v (in that order) in "
                        "in_proj_weight and their biases in in_proj_bias; W_o is out_proj. Build "
                        "it with batch_first=True and the same bias setting, then copy the "
                        "weights without gradients."),
                     N_("nn.MultiheadAttention(d_model, h, bias=..., batch_first=True); copy "
                        "torch.cat([W_q, W_k, W_v] weights) into in_proj_weight (in that order), "
                        "W_o's weight into out_proj.weight, and when mha has biases, the three "
                        "biases into in_proj_bias and W_o's into out_proj.bias.")),
              hint=hint, mistakes=_TO_TORCH_MULTIHEAD_MISTAKES, verbose=verbose)


def _wrong_packed_self_attention(mha, X, valid_lens, order=(0, 1, 2), packing="blocks",
                                 merge="transpose", project_out=True, keep="heads",
                                 split="heads first", **weights):
    """Notebook 04's PackedSelfAttention (outputs, weights) with mha's weights, right by
    default; each other value of an argument is a classic mistake."""
    B, T, d_model = X.shape
    h = mha.num_heads
    d_k = d_model // h
    W_qkv = torch.cat([mha.W_q.weight, mha.W_k.weight, mha.W_v.weight])  # (3 d_model, d_model)
    packed = X @ W_qkv.T  # (B, T, 3 d_model)
    if packing == "per head":  # read as each head's q, k and v side by side
        chunks = packed.reshape(B, T, h, 3, d_k).unbind(3)
        chunks = [c.reshape(B, T, d_model) for c in chunks]
    else:
        chunks = packed.chunk(3, dim=-1)
    Q, K, V = (_split(chunks[i], h, split) for i in order)
    A = _head_weights(Q, K, valid_lens, **weights)  # (B, h, T, T)
    heads = A @ V  # (B, h, T, d_k)
    merged = (heads.reshape(B, T, d_model) if merge == "reshape"
              else heads.transpose(1, 2).reshape(B, T, d_model))
    output = merged @ mha.W_o.weight.T if project_out else merged
    kept = {"heads": A, "folded": A.reshape(B * h, T, T), "mean": A.mean(dim=1),
            "transposed": A.transpose(-2, -1)}.get(keep)
    if keep == "unmasked":  # the output masked, the weights kept before the mask
        kept = _head_weights(Q, K, None, **weights)
    return output, kept


_PACKED_SELF_ATTENTION_MISTAKES = {
    N_("Your queries, keys and values are cut out of W_qkv's outputs in another order: they come "
       "as queries, then keys, then values."): tuple(
        partial(_wrong_packed_self_attention, order=order)
        for order in itertools.permutations(range(3)) if order != (0, 1, 2)),
    N_("Your packed outputs are read as each head's query, key and value side by side: W_qkv's "
       "outputs are all the queries (d_model features), then all the keys, then all the "
       "values."): partial(_wrong_packed_self_attention, packing="per head"),
    **_per_head_mistakes(_wrong_packed_self_attention, module=True),
    N_("Your heads' outputs are put side by side without moving the head axis back: a plain "
       "reshape of (B, h, T, d_k) mixes the positions into the features."):
        partial(_wrong_packed_self_attention, merge="reshape"),
    N_("Your output is not projected by W_o: the heads' outputs, side by side, go through it."):
        partial(_wrong_packed_self_attention, project_out=False),
    N_("Your attention_weights fold the heads into the batch (B*h, T, T): keep them as (B, h, T, "
       "T)."): partial(_wrong_packed_self_attention, keep="folded"),
    N_("Your attention_weights are averaged over the heads: keep every head's, (B, h, T, T)."):
        partial(_wrong_packed_self_attention, keep="mean"),
    N_("Your attention_weights are transposed: row i holds query i's weights over the keys."):
        partial(_wrong_packed_self_attention, keep="transposed"),
}


@exercise_check
def check_packed_self_attention(cls: type, seed: int = 0, hint: int = 1, *,
                                verbose: bool = False) -> None:
    """cls(d_model, num_heads): multi-head self-attention with one packed projection
    ``W_qkv = nn.Linear(d_model, 3 * d_model, bias=False)`` (output features: queries, then keys,
    then values) and ``W_o = nn.Linear(d_model, d_model, bias=False)``; ``forward(X, valid_lens)``
    with X (B, T, d_model) and valid_lens None, (B,) or (B, T) returns (B, T, d_model) and keeps
    the weights of every head in ``.attention_weights`` (B, h, T, T). Compared, outputs and
    weights, with d2lh.MultiHeadAttention holding the same weights."""
    fixed = [("", dict(d_model=8, h=2, B=2, T=5), None),
             ("", dict(d_model=12, h=3, B=2, T=4), "per sequence"),
             (N_("a causal mask"), dict(d_model=8, h=4, B=2, T=5), "causal"),
             (N_("a single head"), dict(d_model=6, h=1, B=3, T=4), "per sequence"),
             (N_("a single token"), dict(d_model=8, h=2, B=2, T=1), None),
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
              hints=(N_("Result 0 is forward's output, result 1 its attention_weights. Follow "
                        "one head from the packed projection to the output: which features are "
                        "its queries, its keys, its values, and which valid lengths does it use?"),
                     N_("The packed projection's output is queries, keys and values side by "
                        "side, in that order; split each into heads with the heads next to the "
                        "batch, scale by sqrt(d_k), mask each head with its sequence's lengths, "
                        "and put the heads side by side again before W_o."),
                     N_("cut W_qkv(X) into queries, keys and values along the last axis (in that "
                        "order), split each into h heads of width d_k = d_model / h with the "
                        "head axis next to the batch axis, scale the scores by sqrt(d_k), give "
                        "every head of sequence b the lengths of b, use d2lh.masked_softmax (a "
                        "row with no valid key stays 0), then put the heads' outputs side by side "
                        "again before W_o.")),
              hint=hint, mistakes=_PACKED_SELF_ATTENTION_MISTAKES, verbose=verbose)


MISTAKES = {"check_per_head_weights": _PER_HEAD_WEIGHTS_MISTAKES,
            "check_to_torch_multihead": _TO_TORCH_MULTIHEAD_MISTAKES,
            "check_packed_self_attention": _PACKED_SELF_ATTENTION_MISTAKES}  # for the tests
