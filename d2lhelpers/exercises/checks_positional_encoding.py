"""The checks of notebook 05_self_attention_positional_encoding's coding exercises: the sinusoidal
table for any width, a head that attends by offset through the shift matrix M_delta, and
self-attention with learned relative biases."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from ..attention import masked_softmax, sequence_mask, valid_lens_to_mask
from ..positional import PositionalEncoding
from .cases import (MASK_KINDS, case_label, labelled, mask_inverted, randn, random_choice,
                    random_floats, random_sizes, seeded_generator, size_text, valid_lens_case)
from .runner import N_, Symptom, _, exercise_check, run_check

__all__ = ['check_sinusoidal_table', 'check_offset_attention', 'check_relative_self_attention']


# The classic mistakes, each as the function that makes it ----------------------------------------

def _omega(d: int, count: int, exponent: str = "2j") -> torch.Tensor:
    """The first ``count`` frequencies omega_j = 1 / 10000^(2j / d), float64; the other
    ``exponent`` are mistakes."""
    j = torch.arange(count, dtype=torch.float64)
    power = {"2j": 2 * j / d, "j": j / d, "4j": 4 * j / d, "-2j": -2 * j / d}[exponent]
    return 1 / 10000 ** power


def _wrong_table(max_len, d, exponent="2j", layout="interleave", first="sin", start=0,
                 cosine_own_index=False, odd="sine"):
    i = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    omega = _omega(d, (d + 1) // 2, exponent)  # (ceil(d/2),)
    sines = torch.sin(i * omega)
    if cosine_own_index:  # column 2j+1 with the exponent of its own index, (2j+1)/d
        cosines = torch.cos(i / 10000 ** (torch.arange(1, d + 1, 2, dtype=torch.float64) / d))
    else:
        cosines = torch.cos(i * omega)
    if first == "cos":
        sines, cosines = cosines, sines
    if layout == "halves":
        return torch.cat([sines, cosines], dim=1)[:, :d]
    P = torch.zeros(max_len, d, dtype=torch.float64)
    P[:, 0::2] = sines
    P[:, 1::2] = cosines[:, : d // 2]
    if odd == "zero" and d % 2:
        P[:, -1] = 0.0
    return P


def _other_frequencies(P, max_len, d) -> bool:
    """Whether the table alternates sin(i w_j) and cos(i w_j), with frequencies w_j other than
    1 / 10000^(2j/d)."""
    P = torch.as_tensor(P).double()
    if tuple(P.shape) != (max_len, d) or max_len < 2:
        return False
    i = torch.arange(max_len, dtype=torch.float64)[:, None]
    if d == 1:  # a sine alone: its angle at position 1 (a small one)
        w = torch.asin(P[1, :1].clamp(-1, 1))
    else:  # each pair's angle at position 1, in (-pi, pi]
        w = torch.atan2(P[1, 0:2 * (d // 2):2], P[1, 1::2])
    right = 1 / 10000 ** (torch.arange(0, 2 * len(w), 2, dtype=torch.float64) / d)
    return (not torch.allclose(w, right, atol=1e-5)
            and torch.allclose(P[:, 0:2 * len(w):2], torch.sin(i * w), atol=1e-4)
            and (d == 1 or torch.allclose(P[:, 1::2], torch.cos(i * w), atol=1e-4)))


def _one_column_too_many(P, max_len, d) -> bool:
    """Whether, for an odd width, the table has d + 1 columns whose first d are right."""
    P = torch.as_tensor(P).double()
    return (d % 2 == 1 and tuple(P.shape) == (max_len, d + 1)
            and torch.allclose(P[:, :d], _wrong_table(max_len, d), atol=1e-5))


_SINUSOIDAL_TABLE_MISTAKES = {
    N_("Your frequencies use the exponent j/d: pair j (columns 2j and 2j+1) uses 2j/d, the index "
       "of its sine column."): partial(_wrong_table, exponent="j"),
    N_("Your frequencies use the exponent 4j/d: pair j uses 2j/d; did you double an index that is "
       "already 2j?"): partial(_wrong_table, exponent="4j"),
    N_("Your positions are multiplied by 10000^(2j/d): they are divided by it (the frequencies "
       "fall from 1 as j grows)."): partial(_wrong_table, exponent="-2j"),
    N_("Your table puts all the sines first, then all the cosines: they alternate, sine in column "
       "2j, cosine in column 2j+1."): (partial(_wrong_table, layout="halves"),
                                      partial(_wrong_table, layout="halves", first="cos")),
    N_("Your table has the cosines in the even columns and the sines in the odd ones: column 2j "
       "holds the sine."): partial(_wrong_table, first="cos"),
    N_("Your cosine columns use their own index in the exponent, (2j+1)/d: the cosine of column "
       "2j+1 shares the frequency of the sine before it."):
        partial(_wrong_table, cosine_own_index=True),
    N_("Your positions start at 1: row i of the table is position i, counting from 0."):
        partial(_wrong_table, start=1),
    N_("Your last column of an odd width is 0: it holds a sine (without a cosine partner)."):
        partial(_wrong_table, odd="zero"),
    N_("Your table works for even widths only: with an odd d, the last column is a sine without "
       "its cosine partner, one more sine than cosines."): Symptom(
        lambda result, max_len, d: isinstance(result, Exception) and d % 2 == 1),
    N_("Your table alternates sines and cosines, but not at the frequencies 1 / 10000^(2j/d): "
       "check the base, the exponent, and that the angles are in radians."):
        Symptom(_other_frequencies),
    N_("Your table is transposed, (d, max_len): one row per position, (max_len, d), is expected."):
        lambda max_len, d: _wrong_table(max_len, d).T,
    N_("Your table has d + 1 columns for an odd width: it has d columns, the last one a sine "
       "without its cosine partner."): Symptom(_one_column_too_many),
}


@exercise_check
def check_sinusoidal_table(fn: Callable, seed: int = 0, hint: int = 1, *,
                           verbose: bool = False) -> None:
    """fn(max_len, d) -> the sinusoidal table P (max_len, d), for any width d (odd included):
    P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))."""

    generator = seeded_generator(seed)
    fixed = [(N_("the notebook's sizes"), (60, 32)), (N_("a single position"), (1, 4)),
             (N_("an odd width"), (10, 7)), (N_("d = 1"), (5, 1)), (N_("one column pair"), (3, 2))]
    random = [("", (s["max_len"], s["d"]))
              for s in random_sizes(generator, 2, max_len=(1, 80), d=(1, 40))]
    cases = labelled(fixed + random, lambda max_len, d: f"max_len={max_len}, d={d}")
    run_check("sinusoidal_table", fn, cases,
              reference=lambda max_len, d: PositionalEncoding(d, max_len=max_len).P[0],
              hints=(N_("Compare your table with the formula column by column: which columns hold "
                        "sines, which cosines, and which exponent does each pair use? Try an odd "
                        "width too."),
                     N_("Sines in the even columns, cosines in the odd ones; pair j (columns 2j "
                        "and 2j + 1) turns at omega_j = 1 / 10000^(2j / d); for an odd d the last "
                        "column is a sine with no cosine."),
                     N_("column 2j holds sin(i * omega_j) and column 2j+1 cos(i * omega_j), with "
                        "omega_j = 1 / 10000^(2j / d): the exponent uses 2j, the column index of "
                        "the sine. Interleave them (P[:, 0::2], P[:, 1::2]); with an odd d the "
                        "last sine has no cosine partner.")),
              hint=hint, mistakes=_SINUSOIDAL_TABLE_MISTAKES, verbose=verbose)


def _shift_matrix(delta, d, exponent="2j", angle="delta omega"):
    """M_delta (d, d), float64, right by default: block j rotates by delta * omega_j, so that
    p_{i+delta} = M p_i. Each other value of an argument is a classic mistake: exponent (see
    :func:`_omega`); angle "omega" forgets delta, "delta" forgets omega."""
    omega = _omega(d, d // 2, exponent)
    theta = {"delta omega": delta * omega, "omega": omega,
             "delta": torch.full_like(omega, float(delta))}[angle]
    cos, sin = torch.cos(theta), torch.sin(theta)
    blocks = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)
    return torch.block_diag(*blocks)  # (d, d)


def _table_at(positions: torch.Tensor, d: int) -> torch.Tensor:
    """The sinusoidal encodings (len(positions), d), float64, of any positions (negative
    included), d even."""
    angles = positions.double()[:, None] * _omega(d, d // 2)  # (T, d/2)
    return torch.stack([torch.sin(angles), torch.cos(angles)], -1).flatten(1)  # interleaved


def _moved_rows(P, delta, how):
    """Row j of P moved to row j - delta, as a learner may shift the table instead of rotating
    it; the rows that fall off the table are wrapped around ("roll"), the last or first row
    repeated ("clamp"), or zeros ("zeros")."""
    T = P.shape[0]
    if how == "roll":
        return torch.roll(P, -delta, dims=0)
    index = torch.arange(T) + delta  # row j wants the row of position j + delta
    if how == "clamp":
        return P[index.clamp(0, T - 1)]
    inside = (index >= 0) & (index < T)
    return torch.where(inside[:, None], P[index.clamp(0, T - 1)], torch.zeros_like(P))


def _offset_attention(P, delta, beta, exponent="2j", angle="delta omega", rotate="keys",
                      keys_from="rotation", scale="beta", axis=-1, causal=False):
    """The weights (T, T) of the exercise's head, right by default; each other value of an
    argument is a classic mistake. rotate: which of queries and keys M_delta turns ("queries"
    or "back": the head looks ahead; "both": it looks at itself); keys_from: "rotation" (right),
    rows of P moved ("roll", "clamp", "zeros"), or the table recomputed at positions j + delta
    counted from 0 ("from 0")."""
    T, d = P.shape
    M = _shift_matrix(delta, d, exponent, angle)  # (d, d): p_j -> p_(j+delta)
    queries, keys = P, P @ M.T  # row j of the keys: p_(j+delta)
    if rotate == "queries":
        queries, keys = P @ M.T, P
    elif rotate == "back":
        keys = P @ M  # M_-delta: row j becomes p_(j-delta)
    elif rotate == "both":
        queries = P @ M.T
    if keys_from == "from 0":
        keys = _table_at(torch.arange(T) + delta, d)
    elif keys_from != "rotation":
        keys = _moved_rows(P, delta, keys_from)
    factor = {"beta": beta, "beta / sqrt(d)": beta / math.sqrt(d), "none": 1.0}[scale]
    scores = factor * queries @ keys.T  # (T, T): query i against key j
    if causal:
        future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
        scores = scores.masked_fill(future, -math.inf)
    return torch.softmax(scores, dim=axis)


_OFFSET_ATTENTION_MISTAKES = {
    N_("Your head looks delta positions ahead (its weights peak at key i + delta): the key of "
       "position j must be p_(j+delta), which the query of position j + delta matches; check the "
       "direction of the rotation, and that it turns the keys, not the queries."): (
        partial(_offset_attention, rotate="back"), partial(_offset_attention, rotate="queries")),
    N_("Your head looks at its own position: only the keys are turned by M_delta (turning the "
       "queries by the same rotation too leaves every dot product as it was)."):
        partial(_offset_attention, rotate="both"),
    N_("Your keys are rows of P moved by delta: the keys of the last delta positions need the "
       "encodings of positions past the table (before it, for a negative delta), which the "
       "rotation M_delta p_j gives."): tuple(partial(_offset_attention, keys_from=how)
                                             for how in ("roll", "clamp", "zeros")),
    N_("Your keys are the encodings of positions j + delta counted from 0: the rows of P stand for "
       "T consecutive positions that need not start at 0; turn the given rows instead."):
        partial(_offset_attention, keys_from="from 0"),
    N_("Your rotation turns pair j at another frequency than omega_j = 1 / 10000^(2j/d): check the "
       "exponent (2j/d, with j counting pairs) and its sign."): tuple(
        partial(_offset_attention, exponent=e) for e in ("j", "4j", "-2j")),
    N_("Your rotation turns by omega_j whatever delta: a shift by delta positions turns pair j by "
       "delta * omega_j."): partial(_offset_attention, angle="omega"),
    N_("Your rotation turns every pair by delta: pair j turns by delta * omega_j, each at its own "
       "frequency."): partial(_offset_attention, angle="delta"),
    N_("Your scores are divided by sqrt(d): this head's only scale is beta, "
       "score = beta * p_i . k_j."):
        partial(_offset_attention, scale="beta / sqrt(d)"),
    N_("Your scores ignore beta: it multiplies every score, and sets how sharply the head looks."):
        partial(_offset_attention, scale="none"),
    N_("Each column of your weights sums to 1, over the queries: each query's weights must sum to "
       "1 over the keys."): partial(_offset_attention, axis=0),
    N_("Your weights are 0 above the diagonal (a causal mask): this head has no mask; the rotation "
       "alone makes it look back."): partial(_offset_attention, causal=True),
}


@exercise_check
def check_offset_attention(fn: Callable, seed: int = 0, hint: int = 1, *,
                           verbose: bool = False) -> None:
    """fn(P, delta, beta) -> the weights (T, T), float64, of a head that attends by offset alone:
    P (T, d), float64, d even, holds the sinusoidal encodings of T consecutive positions (not
    necessarily from 0); the query of row i is beta * p_i, the key of row j is M_delta p_j =
    p_(j+delta), and the weights are the softmax of the scores over the keys, with no mask."""
    generator = seeded_generator(seed)
    fixed = [("", (0, 6, 8, 1, 4.0)), (N_("positions not from 0"), (17, 8, 8, 2, 3.0)),
             (N_("a negative offset"), (5, 7, 6, -3, 2.0)), (N_("delta = 0"), (3, 5, 4, 0, 2.0)),
             (N_("an offset longer than the sequence"), (40, 4, 8, 6, 1.5)),
             (N_("one column pair"), (2, 5, 2, 1, 4.0)),
             (N_("the notebook's width, far positions"), (1000, 12, 32, 1, 8.0))]
    random = [("", (s["start"], s["T"], 2 * s["half_d"], s["delta"], beta))
              for s, beta in zip(random_sizes(generator, 2, start=(0, 300), T=(1, 16),
                                              half_d=(1, 16), delta=(-8, 8)),
                                 random_floats(generator, 2, low=0.5, scale=8.0))]
    cases = [(case_label(what, _("P of positions {first}..{last}").format(
                  first=start, last=start + T - 1) + f", d={d}, delta={delta}, beta={beta:g}"),
              (_table_at(torch.arange(start, start + T), d), delta, beta))
             for what, (start, T, d, delta, beta) in fixed + random]
    run_check("offset_attention", fn, cases, reference=_offset_attention,
              hints=(N_("The key of position j must match the query of position j + delta. Which "
                        "map of section 4 turns p_j into p_(j+delta), also past the last row of P, "
                        "and which side does it turn: the keys or the queries?"),
                     N_("Section 4's rotation M_delta turns p_j into p_(j + delta), for any row; "
                        "apply it to the keys (every row of P), then take the softmax over the "
                        "keys of beta times the queries' dot products with them, without a mask or "
                        "a sqrt(d)."),
                     N_("build M_delta = torch.block_diag of the rotations by delta * omega_j "
                        "(omega_j = 1 / 10000^(2j/d)); keys = P @ M_delta.T (row j becomes "
                        "p_(j+delta)); weights = softmax(beta * P @ keys.T) over the keys, the "
                        "last axis; no mask and no sqrt(d).")),
              hint=hint, mistakes=_OFFSET_ATTENTION_MISTAKES, verbose=verbose)


class _ReferenceRelativeAttention(nn.Module):
    """The parameters of the exercise's module, for the reference computation."""

    def __init__(self, d_model: int, max_distance: int) -> None:
        super().__init__()
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_model, bias=False) for _ in range(3))
        self.relative_bias = nn.Parameter(torch.zeros(2 * max_distance + 1))


def _relative_self_attention(module: nn.Module, X: torch.Tensor, valid_lens) -> tuple:
    """The reference: one head, scores Q K^T / sqrt(d) plus the bias of each offset j - i
    (clipped to +-max_distance), masked softmax, weighted values."""
    d, T = X.shape[-1], X.shape[1]
    max_distance = (module.relative_bias.numel() - 1) // 2
    positions = torch.arange(T)
    offsets = positions[None, :] - positions[:, None]  # (T_q, T_k): key j minus query i
    bias = module.relative_bias[offsets.clamp(-max_distance, max_distance) + max_distance]
    scores = module.W_q(X) @ module.W_k(X).transpose(1, 2) / math.sqrt(d) + bias  # (B, T, T)
    weights = masked_softmax(scores, valid_lens)
    return weights @ module.W_v(X), weights


def _wrong_relative_attention(d_model, max_distance, parameters, X, valid_lens, offsets="j - i",
                              clip=True, bias_at="scores", scale="d", mask="lengths", axis=-1,
                              keep="weights", fill="zero"):
    """(outputs, weights) of the exercise's module, right by default; each other value of an
    argument is a classic mistake."""
    T = X.shape[1]
    positions = torch.arange(T)
    delta = positions[None, :] - positions[:, None]  # (T_q, T_k): key j minus query i
    if offsets == "i - j":
        delta = -delta
    if clip == "one short":
        delta = delta.clamp(-max_distance + 1, max_distance - 1)
    elif clip:
        delta = delta.clamp(-max_distance, max_distance)
    index = {"unshifted": delta,  # negative offsets wrap around to the end of the table
             "unshifted, clamped": delta.clamp(0, 2 * max_distance),
             "distance": delta.abs() + max_distance,  # the direction of the offset dropped
             "distance, unshifted": delta.abs()}.get(offsets, delta + max_distance)
    bias = parameters["relative_bias"][index]  # (T, T)
    Q, K, V = (X @ parameters[name].T for name in ("W_q", "W_k", "W_v"))
    scores = Q @ K.transpose(1, 2)
    divisor = {"d": math.sqrt(d_model), "none": 1.0, "T": math.sqrt(T), "d itself": d_model}[scale]
    if bias_at == "scores":
        scores = scores / divisor + bias
    elif bias_at == "scaled scores":
        scores = (scores + bias) / divisor
    else:
        scores = scores / divisor
    allowed = None if valid_lens is None or mask == "none" else \
        valid_lens_to_mask(valid_lens, T, T)
    if mask in ("one more", "one fewer") and allowed is not None:  # the mask off by one
        lens = valid_lens + (1 if mask == "one more" else -1)
        allowed = sequence_mask(lens if lens.dim() == 2 else lens[:, None], T).expand(-1, T, -1)
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf if fill == "-inf" else
                                                   torch.finfo(scores.dtype).min), dim=-1)
        weights = weights if fill == "-inf" else weights.masked_fill(~allowed, 0.0)
        return weights @ V, weights
    if mask == "after" and allowed is not None:  # zeroed after the softmax, not renormalised
        weights = torch.softmax(scores, dim=-1) * allowed
        return weights @ V, weights
    if axis != -1:
        weights = torch.softmax(scores if allowed is None else scores.masked_fill(
            ~allowed, -math.inf), dim=axis)
    elif mask in ("-inf", "finite") and allowed is not None:
        weights = torch.softmax(scores.masked_fill(~allowed, -math.inf if mask == "-inf"
                                                   else -1e9), dim=-1)
    else:
        weights = masked_softmax(scores, None if allowed is None else valid_lens)
    if bias_at == "weights":
        weights = weights + bias
    return weights @ V, (weights.transpose(1, 2) if keep == "transposed" else weights)


def _raises_where_offsets_exceed(result, d_model, max_distance, parameters, X, valid_lens):
    """Whether the function raised an IndexError on a case with offsets beyond max_distance."""
    return isinstance(result, (IndexError, RuntimeError)) and X.shape[1] - 1 > max_distance


def _far_keys_otherwise(result, d_model, max_distance, parameters, X, valid_lens) -> bool:
    """Whether the weights are right wherever a query's keys all lie within max_distance of it,
    and, in the rows that have keys further away, right up to those keys' biases alone: the keys
    within max_distance keep the right ratios to each other (and the outputs follow the
    weights)."""
    output, weights = (torch.as_tensor(r).double() for r in result)
    right = _wrong_relative_attention(d_model, max_distance, parameters, X, valid_lens)[1].double()
    if weights.shape != right.shape:
        return False
    T = X.shape[1]
    offsets = (torch.arange(T)[None, :] - torch.arange(T)[:, None]).abs()  # (T, T)
    near = (offsets <= max_distance).expand_as(right)
    far_rows = ~near.all(-1)  # (B, T): rows with keys beyond max_distance
    if not bool(far_rows.any()) or torch.allclose(weights, right, atol=1e-5):
        return False
    if not torch.allclose(weights[~far_rows], right[~far_rows], atol=1e-5):
        return False
    seen = near & (right > 0)  # the near keys the query sees: their ratios must be right
    ratios = torch.where(seen, weights.clamp(min=1e-300).log() - right.clamp(min=1e-300).log(), 0.0)
    counts = seen.sum(-1, keepdim=True).clamp(min=1)
    centred = torch.where(seen, ratios - ratios.sum(-1, keepdim=True) / counts, 0.0)
    values = X.double() @ parameters["W_v"].double().T
    return (bool((weights[seen] > 0).all()) and bool((centred.abs() < 1e-4).all())
            and bool((weights[right == 0].abs() < 1e-6).all())
            and torch.allclose(output, weights @ values, atol=1e-4))


def _inverted_mask(result, d_model, max_distance, parameters, X, valid_lens) -> bool:
    """Whether the weights are those of an inverted mask (see :func:`_inverted`)."""
    weights = torch.as_tensor(result[1]).double()
    if valid_lens is None or weights.dim() != 3:
        return False
    allowed = valid_lens_to_mask(valid_lens, *weights.shape[1:])
    return mask_inverted(weights, allowed)


_RELATIVE_SELF_ATTENTION_MISTAKES = {
    N_("Your offsets are i - j (query minus key): the bias of query i and key j is that of the "
       "offset j - i, key minus query."): partial(_wrong_relative_attention, offsets="i - j"),
    N_("Your offsets are not clipped to [-max_distance, max_distance]: keys further away than "
       "max_distance share the bias of the largest offset."): (
        Symptom(_raises_where_offsets_exceed), partial(_wrong_relative_attention, clip=False),
        Symptom(_far_keys_otherwise)),
    N_("Your offsets are clipped one short: they are clipped to [-max_distance, max_distance], "
       "both ends included."): partial(_wrong_relative_attention, clip="one short"),
    N_("Your offsets index relative_bias without the shift by max_distance: entry 0 holds the bias "
       "of offset -max_distance."): (
        partial(_wrong_relative_attention, offsets="unshifted"),
        partial(_wrong_relative_attention, offsets="unshifted, clamped")),
    N_("Your bias is added to the weights after the softmax: it is added to the scores before it."):
        partial(_wrong_relative_attention, bias_at="weights"),
    N_("Your scores carry no relative bias: each score adds the bias of its offset."):
        partial(_wrong_relative_attention, bias_at="none"),
    N_("Your bias is divided by sqrt(d_model) with the scores: only q . k is scaled; the bias is "
       "added after."): partial(_wrong_relative_attention, bias_at="scaled scores"),
    N_("Your scores are not scaled: q . k is divided by sqrt(d_model) before the bias is added."):
        partial(_wrong_relative_attention, scale="none"),
    N_("Your scores are divided by the square root of the number of tokens: the scale is "
       "sqrt(d_model)."): partial(_wrong_relative_attention, scale="T"),
    N_("Your scores are divided by d_model itself (sqrt(d_model) twice?): q . k is divided by "
       "sqrt(d_model)."): partial(_wrong_relative_attention, scale="d itself"),
    N_("Your weights ignore valid_lens: the padded keys must get weight 0."):
        partial(_wrong_relative_attention, mask="none"),
    N_("Your weights are zeroed on the padding after the softmax, without renormalising: they no "
       "longer sum to 1 (mask the scores before the softmax)."):
        partial(_wrong_relative_attention, mask="after"),
    N_("Your weights hold NaN for a sequence with no valid key (softmax of a row of -inf): such a "
       "row must be all 0, as d2lh.masked_softmax gives."):
        partial(_wrong_relative_attention, mask="-inf"),
    N_("Your weights spread a sequence with no valid key evenly over its keys (a finite fill such "
       "as -1e9): such a row must be all 0, as d2lh.masked_softmax gives."):
        partial(_wrong_relative_attention, mask="finite"),
    N_("Each column of your weights sums to 1, over the queries: each query's weights must sum to "
       "1 over the keys."): partial(_wrong_relative_attention, axis=-2),
    N_("Your attention_weights are transposed: row i holds query i's weights over the keys."):
        partial(_wrong_relative_attention, keep="transposed"),
    N_("Your bias ignores the direction of the offset: a key d positions before the query and one "
       "d positions after it have different biases (offsets -d and +d)."): (
        partial(_wrong_relative_attention, offsets="distance"),
        partial(_wrong_relative_attention, offsets="distance, unshifted")),
    N_("Your mask is inverted: the weights go to the padded keys and none to the valid ones."):
        Symptom(_inverted_mask),
    N_("Your mask is off by one: a query sees exactly the first valid_len keys, positions 0 .. "
       "valid_len - 1."): tuple(partial(_wrong_relative_attention, mask=mask, fill=fill)
                                for mask in ("one more", "one fewer")
                                for fill in ("zero", "-inf")),
}


@exercise_check
def check_relative_self_attention(cls: type, seed: int = 0, hint: int = 1, *,
                                  verbose: bool = False) -> None:
    """cls(d_model, max_distance): one head of self-attention with a learned bias for each
    relative offset: score[i, j] = q_i . k_j / sqrt(d_model) + relative_bias[max_distance + delta],
    delta = j - i clipped to [-max_distance, max_distance]. It holds ``W_q``, ``W_k``, ``W_v``
    (nn.Linear(d_model, d_model, bias=False)) and ``relative_bias`` (2 * max_distance + 1,);
    ``forward(X, valid_lens)`` with X (B, T, d_model) and valid_lens None, (B,) or (B, T) returns
    (B, T, d_model) and keeps the weights in ``.attention_weights`` (B, T, T)."""
    generator = seeded_generator(seed)
    fixed = [(N_("offsets beyond max_distance"), dict(d_model=8, max_distance=2, B=2, T=6), None),
             ("", dict(d_model=4, max_distance=1, B=2, T=5), "per sequence"),
             (N_("max_distance beyond the sequence"), dict(d_model=6, max_distance=8, B=2, T=3),
              None),
             (N_("a single token"), dict(d_model=4, max_distance=2, B=1, T=1), None),
             (N_("a causal mask"), dict(d_model=8, max_distance=3, B=2, T=5), "causal"),
             ("", dict(d_model=4, max_distance=2, B=2, T=3), "zero")]
    random = [("", s, random_choice(generator, MASK_KINDS)) for s in
              random_sizes(generator, 2, d_model=(1, 8), max_distance=(0, 4), B=(1, 3), T=(1, 8))]
    cases = []
    for what, s, kind in fixed + random:
        parameters = {name: randn(generator, s["d_model"], s["d_model"]) / math.sqrt(s["d_model"])
                      for name in ("W_q", "W_k", "W_v")}
        parameters["relative_bias"] = 2 * randn(generator, 2 * s["max_distance"] + 1)
        X = randn(generator, s["B"], s["T"], s["d_model"])
        valid_lens, mask = valid_lens_case(generator, kind, s["B"], s["T"])
        cases.append((case_label(what, f"{size_text(s)}, {mask}"),
                      (s["d_model"], s["max_distance"], parameters, X, valid_lens)))

    def build(module_class, d_model, max_distance, parameters):
        module = module_class(d_model, max_distance)
        with torch.no_grad():
            for name, value in parameters.items():
                have = getattr(module, name, None)
                have = getattr(have, "weight", have)  # a Linear's weight, or the bias itself
                if not isinstance(have, torch.Tensor) or have.shape != value.shape:
                    raise TypeError(_("the module needs {name} of shape {shape} (see the "
                                      "exercise), got {got}").format(
                        name=name, shape=tuple(value.shape), got=repr(have)))
                have.copy_(value)
        return module.eval()

    def learner(d_model, max_distance, parameters, X, valid_lens):
        module = build(cls, d_model, max_distance, parameters)
        with torch.no_grad():
            output = module(X, valid_lens)
        return output, getattr(module, "attention_weights", None)

    def reference(d_model, max_distance, parameters, X, valid_lens):
        module = build(_ReferenceRelativeAttention, d_model, max_distance, parameters)
        with torch.no_grad():
            return _relative_self_attention(module, X, valid_lens)

    run_check("RelativeSelfAttention", learner, cases, reference,
              hints=(N_("Result 0 is forward's output, result 1 its attention_weights. For one "
                        "query i and one key j, which entry of relative_bias belongs to them, also "
                        "when they are further apart than max_distance, and where in the "
                        "computation is it added?"),
                     N_("The offset is key minus query, j - i; clip it to +-max_distance and shift "
                        "it to index relative_bias; add that (T, T) bias to the scaled scores, "
                        "before the masked softmax."),
                     N_("build the (T, T) table of offsets j - i (key minus query), clip it to "
                        "[-max_distance, max_distance], shift it by max_distance to index "
                        "relative_bias, and add that bias to the scaled scores before "
                        "d2lh.masked_softmax.")),
              hint=hint, mistakes=_RELATIVE_SELF_ATTENTION_MISTAKES, verbose=verbose)


MISTAKES = {"check_sinusoidal_table": _SINUSOIDAL_TABLE_MISTAKES,
            "check_offset_attention": _OFFSET_ATTENTION_MISTAKES,
            "check_relative_self_attention": _RELATIVE_SELF_ATTENTION_MISTAKES}  # for the tests
