"""The checks of notebook 03_attention_scoring's coding exercises: the weights of causal
sliding-window attention over padded sequences, and sparsemax, a normalisation with exact zeros."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from .cases import labelled, randint, randn, random_choice, random_floats, random_sizes, \
    seeded_generator
from .runner import N_, Symptom, _, exercise_check, run_check

__all__ = ['check_sliding_window_weights', 'check_sparsemax']


def _columns_sum_to_one(weights) -> bool:
    """Whether the columns of the weights (..., T_q, T_k) sum to 1 or 0 over the queries while
    their rows do not all sum to 1 or 0 over the keys."""
    A = torch.as_tensor(weights).double()
    if A.dim() < 2 or A.shape[-2] < 2 or A.isnan().any():
        return False
    columns, rows = A.sum(-2), A.sum(-1)
    return (bool(((columns - 1).abs() < 1e-5).logical_or(columns.abs() < 1e-5).all())
            and not bool(((rows - 1).abs() < 1e-5).logical_or(rows.abs() < 1e-5).all()))


# Sliding-window attention: the classic mistakes, each as the function that makes it --------------

def _window_mask(T: int, window: int, valid_lens, band="causal", lens="keys") -> torch.Tensor:
    """(B or 1, T, T) True where query i may see key j: i - window < j <= i and j < the valid
    length (None: every key; (B,): one per sequence; (B, T): one per query); the other ``band``
    and ``lens`` are classic mistakes."""
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]  # queries down, keys across
    allowed = {"causal": lambda: (j <= i) & (j > i - window),
               "one too wide": lambda: (j <= i) & (j >= i - window),
               "one too narrow": lambda: (j <= i) & (j > i - window + 1),
               "not itself": lambda: (j < i) & (j >= i - window),
               "both sides": lambda: (j - i).abs() < window,
               "no window": lambda: j <= i,
               "from the start": lambda: (j <= i) & (j < window)}[band]()[None]  # (1, T, T)
    if valid_lens is None or lens == "ignored":
        return allowed
    lengths = valid_lens[:, None] if valid_lens.dim() == 1 else valid_lens  # (B, 1) or (B, T)
    if lens == "queries":  # the lengths hide queries, not keys
        return allowed & (i[None] < lengths[:, :, None])
    return allowed & (j[None] < lengths[:, :, None])  # (B, T, T)


def _wrong_sliding_window(scores, window, valid_lens, band="causal", lens="keys", fill="zero",
                          axis=-1):
    """The weights, right by default; every other value of an argument is a classic mistake.
    fill: "zero" (the dtype's minimum, then zeros where masked), "-inf", "finite" (the dtype's
    minimum only)."""
    allowed = _window_mask(scores.shape[-1], window, valid_lens, band, lens)
    filled = scores.masked_fill(~allowed, -math.inf if fill == "-inf"
                                else torch.finfo(scores.dtype).min)
    weights = torch.softmax(filled, dim=axis)
    return weights.masked_fill(~allowed, 0.0) if fill == "zero" else weights


def _nan_where_nothing_is_seen(result, scores, window, valid_lens) -> bool:
    """Whether the result holds NaN, and only in rows where the query sees no key."""
    nan = torch.as_tensor(result).isnan()
    if not nan.any():
        return False
    seen = _window_mask(scores.shape[-1], window, valid_lens).expand(scores.shape).any(-1)
    return bool((nan.all(-1) == ~seen).all() and (nan.any(-1) == ~seen).all())


_SLIDING_WINDOW_MISTAKES = {
    N_("Your queries see window + 1 keys: query i sees keys i - window + 1 .. i, window of them, "
       "itself included."): partial(_wrong_sliding_window, band="one too wide"),
    N_("Your queries see window - 1 keys: query i sees keys i - window + 1 .. i, window of them, "
       "itself included."): partial(_wrong_sliding_window, band="one too narrow"),
    N_("Your queries do not see themselves: query i sees keys i - window + 1 .. i, itself "
       "included."): partial(_wrong_sliding_window, band="not itself"),
    N_("Your queries see keys after themselves: in causal attention query i sees no key j > i."):
        partial(_wrong_sliding_window, band="both sides"),
    N_("Your queries see every earlier key: the window limits them to the last window keys, "
       "i - window + 1 .. i."): partial(_wrong_sliding_window, band="no window"),
    N_("Your window stays at the start of the sequence: it slides with the query, keys "
       "i - window + 1 .. i."): partial(_wrong_sliding_window, band="from the start"),
    N_("Your weights ignore valid_lens: keys at or beyond a valid length are padding and get "
       "weight 0."): partial(_wrong_sliding_window, lens="ignored"),
    N_("Your valid lengths hide queries, not keys: a valid length says how many keys a query may "
       "see, counted from key 0."): partial(_wrong_sliding_window, lens="queries"),
    N_("Your weights hold NaN where a query sees no key (softmax of a row of -inf): such a row "
       "must be all 0."): (partial(_wrong_sliding_window, fill="-inf"),
                           Symptom(_nan_where_nothing_is_seen)),
    N_("Your weights spread a query that sees no key evenly over all keys (a finite fill, and no "
       "zeros after the softmax): such a row must be all 0."): partial(_wrong_sliding_window,
                                                                      fill="finite"),
    N_("Each column of your weights sums to 1, over the queries: each query's weights must sum to "
       "1 over the keys it sees."): (partial(_wrong_sliding_window, axis=-2),
                                     Symptom(lambda result, *args: _columns_sum_to_one(result))),
}


@exercise_check
def check_sliding_window_weights(fn: Callable, seed: int = 0, hint: int = 1, *,
                                 verbose: bool = False) -> None:
    """fn(scores (B, T, T), window, valid_lens) -> weights (B, T, T) of causal sliding-window
    self-attention: query i sees keys i - window + 1 .. i that lie before the valid length
    (valid_lens None, (B,) or (B, T)); softmax over the keys it sees, 0 elsewhere, and a row of 0
    where it sees none."""
    generator = seeded_generator(seed)
    fixed = [(N_("padding: queries beyond a length see no key"), 2, 6, 3, [6, 2]),
             (N_("no valid_lens"), 2, 5, 2, None),
             (N_("a window as long as the sequence: the causal mask"), 1, 5, 5, None),
             (N_("window 1: a query sees itself only"), 2, 4, 1, [4, 3]),
             (N_("one valid length per query, some 0"), 2, 5, 3, "per query"),
             (N_("a window longer than the sequence, float64"), 2, 4, 10, [3, 4])]
    random = [(s, random_choice(generator, (None, "per sequence", "per query")))
              for s in random_sizes(generator, 2, B=(1, 3), T=(1, 7), window=(1, 8))]
    fixed += [("", s["B"], s["T"], s["window"], kind) for s, kind in random]
    entries = []
    for what, B, T, window, lens in fixed:
        dtype = torch.float64 if "float64" in what else torch.float32
        scores = 2 * randn(generator, B, T, T, dtype=dtype)
        if lens == "per query":
            lens = randint(generator, 0, T, (B, T))
        elif lens == "per sequence":
            lens = randint(generator, 1, T, (B,))
        elif lens is not None:
            lens = torch.tensor(lens)
        entries.append((what, (scores, window, lens)))
    cases = labelled(entries, lambda scores, window, lens: _(
        "scores {scores}, window {window}, {lengths}").format(
            scores=tuple(scores.shape), window=window,
            lengths=_("no valid_lens") if lens is None
            else _("valid_lens {shape}").format(shape=tuple(lens.shape))))

    run_check("sliding_window_weights", fn, cases, _wrong_sliding_window,  # at its right values
              mistakes=_SLIDING_WINDOW_MISTAKES, verbose=verbose,
              hints=(N_("Draw the mask of one sequence on paper first, for T = 5 and window 2: "
                        "which keys does query 0 see, and query 4? Then add the padding. What "
                        "must a row that sees no key give?"),
                     N_("For T = 5 and window 2 the mask is 1 where i - 2 < j <= i: query 0 sees "
                        "key 0, query 4 keys 3 and 4; then also j < the valid length. Softmax "
                        "over the keys a query sees, and a row that sees none is all 0, not "
                        "uniform."),
                     N_("mask[b, i, j] = (j <= i) & (j > i - window) & (j < length), the length "
                        "of sequence b (valid_lens (B,)) or of its query i (valid_lens (B, T)); "
                        "fill the masked scores with torch.finfo(scores.dtype).min, take the "
                        "softmax over the last axis, then set the masked weights to exactly 0.")),
              hint=hint)


# Sparsemax: the classic mistakes, each as the function that makes it -----------------------------

def _wrong_sparsemax(scores, order="descending", ks="from 1", support="k(z)", clip=True,
                     normalise="sparsemax", axis=-1, minus_one=True, returned="scores' order"):
    """Sparsemax over ``axis``, right by default; every other value of an argument is a classic
    mistake. ks: "index" reads the sum of the k(z) largest scores one place too far; support:
    which scores the threshold tau averages ("k(z)": the support's; "all": every score);
    minus_one False: tau without its - 1; returned "sorted": the weights of the sorted scores."""
    if axis != -1:
        return _wrong_sparsemax(scores.transpose(axis, -1), order, ks, support, clip,
                                normalise, -1, minus_one, returned).transpose(axis, -1)
    if normalise == "softmax":
        return torch.softmax(scores, dim=-1)
    if normalise == "ReLU / sum":
        relu = torch.relu(scores)
        return relu / relu.sum(dim=-1, keepdim=True)
    T = scores.shape[-1]
    if support == "all":
        tau = (scores.sum(dim=-1, keepdim=True) - 1) / T
    else:
        z = {"descending": lambda: scores.sort(dim=-1, descending=True).values,
             "ascending": lambda: scores.sort(dim=-1).values,
             "unsorted": lambda: scores}[order]()
        k = torch.arange(1, T + 1, dtype=scores.dtype)  # 1, ..., T
        cumulative = z.cumsum(dim=-1)
        size = (1 + k * z > cumulative).sum(dim=-1, keepdim=True)  # k(z): a prefix holds it
        total = cumulative.gather(-1, size - 1 if ks == "from 1" else size)
        tau = (total - float(minus_one)) / size
        if returned == "sorted":
            scores = z
    return torch.relu(scores - tau) if clip else scores - tau


_SPARSEMAX_MISTAKES = {
    N_("Your weights are a softmax: sparsemax gives exact zeros to the keys far below the best."):
        partial(_wrong_sparsemax, normalise="softmax"),
    N_("Your weights are ReLU / sum of section 7: sparsemax subtracts a threshold tau from the "
       "scores before clipping at 0."): partial(_wrong_sparsemax, normalise="ReLU / sum"),
    N_("Your scores are not sorted: k(z) and tau come from the scores in decreasing order."):
        partial(_wrong_sparsemax, order="unsorted"),
    N_("Your tau adds up one sorted score too many: the sum runs over the k(z) largest scores, "
       "whose last sits at index k(z) - 1."): partial(_wrong_sparsemax, ks="index"),
    N_("Your tau averages all the scores (as it does when they are sorted in increasing order): "
       "it averages the k(z) largest only, the support, found with the scores in decreasing "
       "order."): (partial(_wrong_sparsemax, support="all"),
                   partial(_wrong_sparsemax, order="ascending")),
    N_("Your tau lacks its - 1: (z_(1) + ... + z_(k) - 1) / k; without it the weights sum to 0, "
       "not 1."): partial(_wrong_sparsemax, minus_one=False),
    N_("Your weights come in sorted order: subtract tau from the scores as they were given, so "
       "that each key keeps its place."): partial(_wrong_sparsemax, returned="sorted"),
    N_("Your weights go negative: sparsemax clips z - tau at 0 (the weights are max(z - tau, "
       "0))."): partial(_wrong_sparsemax, clip=False),
    N_("Your weights are normalised over another axis than the last: each query's weights sum to "
       "1 over the keys."): partial(_wrong_sparsemax, axis=-2),
}


@exercise_check
def check_sparsemax(fn: Callable, seed: int = 0, hint: int = 1, *, verbose: bool = False) -> None:
    """fn(scores (..., T_k)) -> weights of the same shape: sparsemax over the last axis,
    max(z - tau, 0) with tau = (z_(1) + ... + z_(k) - 1) / k for k = k(z), the largest k with
    1 + k z_(k) > z_(1) + ... + z_(k), z_(1) >= z_(2) >= ... the sorted scores."""
    generator = seeded_generator(seed)

    def draw(*shape, scale=2.0, dtype=torch.float32):
        return scale * randn(generator, *shape, dtype=dtype)

    entries = [("", draw(2, 3, 5)),
               (N_("one score far above the others: one-hot"),
                torch.tensor([[[0.0, 5.0, 1.0, -2.0]]])),
               (N_("equal scores: uniform"), torch.zeros(1, 2, 4)),
               (N_("two tied at the top"), torch.tensor([[[3.0, 0.0, 3.0, -1.0, 1.0]]])),
               (N_("a single key"), draw(2, 3, 1)),
               (N_("scores shifted by 10: the same weights"), draw(2, 2, 6) + 10),
               (N_("heads on an axis of their own, float64"),
                draw(2, 2, 3, 6, dtype=torch.float64))]
    scales = random_floats(generator, 2, low=0.2, scale=3)
    entries += [("", draw(s["B"], s["T_q"], s["T_k"], scale=c)) for s, c in
                zip(random_sizes(generator, 2, B=(1, 3), T_q=(1, 4), T_k=(2, 8)), scales)]
    cases = labelled([(what, (scores,)) for what, scores in entries],
                     lambda scores: _("scores {shape}").format(shape=tuple(scores.shape)))

    run_check("sparsemax", fn, cases, _wrong_sparsemax,  # every argument at its right value
              mistakes=_SPARSEMAX_MISTAKES, verbose=verbose,
              hints=(N_("Work one row by hand first, e.g. scores [3, 0, 3, -1, 1]: sort them, "
                        "find k(z), then tau. Which scores does tau average?"),
                     N_("Sort in decreasing order, z_(1) >= z_(2) >= ...; the condition 1 + k "
                        "z_(k) > z_(1) + ... + z_(k) holds for k = 1, 2, ... up to k(z) and not "
                        "after, so k(z) is a count (cumsum gives the sums); tau subtracts 1 from "
                        "the sum of the k(z) largest before dividing; the weights keep the "
                        "scores' order."),
                     N_("z = scores.sort(dim=-1, descending=True).values; k = 1, ..., T as a "
                        "tensor; k(z) = (1 + k * z > z.cumsum(-1)).sum(-1, keepdim=True) (the "
                        "condition holds for a prefix); tau = (z.cumsum(-1).gather(-1, k(z) - 1) "
                        "- 1) / k(z); return (scores - tau).clamp(min=0).")),
              hint=hint)


MISTAKES = {"check_sliding_window_weights": _SLIDING_WINDOW_MISTAKES,
            "check_sparsemax": _SPARSEMAX_MISTAKES}  # the catalogues, for the tests
