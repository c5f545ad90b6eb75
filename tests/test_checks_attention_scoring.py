"""The checks of notebook 03_attention_scoring (d2lhelpers/exercises/checks_attention_scoring.py):
right and plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers import exercises
from d2lhelpers.exercises import checks_attention_scoring


def sliding_window_weights(scores, window, valid_lens=None, lower=None, upper=0, lens="keys",
                           fill="min", zero=True, dim=-1):
    """As a learner writes it: keys j with lower < j - i <= upper (lower = -window by default)
    and, unless lens is "ignore", j < the valid length."""
    B, T, _ = scores.shape
    offset = torch.arange(T)[None, :] - torch.arange(T)[:, None]  # (T, T): j - i
    lower = -window if lower is None else lower(window)
    visible = ((offset > lower) & (offset <= upper)).expand(B, T, T)
    if valid_lens is not None and lens != "ignore":
        lengths = valid_lens if valid_lens.dim() == 2 else valid_lens[:, None].expand(B, T)
        positions = torch.arange(T)[None, None, :] if lens == "keys" else \
            torch.arange(T)[None, :, None]
        visible = visible & (positions < lengths[:, :, None])
    value = {"min": torch.finfo(scores.dtype).min, "-inf": float("-inf")}[fill]
    weights = torch.softmax(torch.where(visible, scores, value), dim=dim)
    return torch.where(visible, weights, 0.0) if zero else weights


def first_keys(scores, window, valid_lens):
    """Lengths (B, T) that let every query see the first window keys only (and no padding)."""
    B, T, _ = scores.shape
    lengths = torch.full((B, T), T) if valid_lens is None else (
        valid_lens if valid_lens.dim() == 2 else valid_lens[:, None].expand(B, T))
    return lengths.clamp(max=window)


def sliding_window_by_loop(scores, window, valid_lens=None):
    """Query by query, with the package's masked softmax on the keys it sees."""
    B, T, _ = scores.shape
    weights = torch.zeros_like(scores)
    for b in range(B):
        for i in range(T):
            length = T if valid_lens is None else int(valid_lens[b] if valid_lens.dim() == 1
                                                      else valid_lens[b, i])
            start, stop = max(0, i - window + 1), min(i + 1, length)
            if start < stop:
                weights[b, i, start:stop] = torch.softmax(scores[b, i, start:stop], dim=0)
    return weights


def sparsemax(scores):
    z, _ = torch.sort(scores, dim=-1, descending=True)
    k = torch.arange(1, scores.shape[-1] + 1, dtype=scores.dtype)
    cumulative = torch.cumsum(z, dim=-1)
    support = (1 + k * z > cumulative).sum(dim=-1, keepdim=True)
    tau = (torch.gather(cumulative, -1, support - 1) - 1) / support
    return torch.clamp(scores - tau, min=0)


def sparsemax_by_bisection(scores, steps=100):
    """tau solves sum(max(z - tau, 0)) = 1: bisect between max(z) - 1 and max(z)."""
    low = scores.max(dim=-1, keepdim=True).values - 1
    high = low + 1
    for _ in range(steps):
        middle = (low + high) / 2
        over = (scores - middle).clamp(min=0).sum(-1, keepdim=True) > 1
        low, high = torch.where(over, middle, low), torch.where(over, high, middle)
    return (scores - (low + high) / 2).clamp(min=0)


def sparsemax_with(order="descending", tau_from="support", clip=True, index_shift=1, minus=1,
                   sorted_weights=False):
    def wrong(scores):
        T = scores.shape[-1]
        if order == "descending":
            z = scores.sort(dim=-1, descending=True).values
        elif order == "ascending":
            z = scores.sort(dim=-1).values
        else:
            z = scores
        k = torch.arange(1, T + 1, dtype=scores.dtype)
        cumulative = z.cumsum(-1)
        support = (1 + k * z > cumulative).sum(-1, keepdim=True)
        if tau_from == "support":
            tau = (cumulative.gather(-1, support - index_shift) - minus) / support
        else:
            tau = (scores.sum(-1, keepdim=True) - 1) / T
        if sorted_weights:  # clamp(z_sorted - tau): the weights of the sorted scores
            scores = z
        return (scores - tau).clamp(min=0) if clip else scores - tau

    return wrong


CHECKS = {
    "check_sliding_window_weights": (sliding_window_weights, {
        "window + 1 keys": (lambda s, w, l: sliding_window_weights(s, w, l, lower=lambda w: -w - 1),
                            "differ", "window + 1 keys"),
        "window - 1 keys": (lambda s, w, l: sliding_window_weights(s, w, l, lower=lambda w: 1 - w),
                            "on input", "window - 1 keys"),
        "itself left out": (
            lambda s, w, l: sliding_window_weights(s, w, l, lower=lambda w: -w - 1, upper=-1),
            "on input", "do not see themselves"),
        "both sides of the query": (
            lambda s, w, l: sliding_window_weights(s, w, l, lower=lambda w: -w, upper=w - 1),
            "differ", "keys after themselves"),
        "plain causal": (lambda s, w, l: sliding_window_weights(s, s.shape[-1], l), "differ",
                         "every earlier key"),
        "the first window keys": (
            lambda s, w, l: sliding_window_weights(s, s.shape[-1], first_keys(s, w, l)),
            "differ", "stays at the start"),
        "padding ignored": (lambda s, w, l: sliding_window_weights(s, w, l, lens="ignore"),
                            "differ", "ignore valid_lens"),
        "lengths over the queries": (
            lambda s, w, l: sliding_window_weights(s, w, l, lens="queries"), "differ",
            "hide queries, not keys"),
        "-inf fill": (lambda s, w, l: sliding_window_weights(s, w, l, fill="-inf", zero=False),
                      "holds NaN at", "hold NaN"),
        "-inf fill, NaN zeroed after": (
            lambda s, w, l: sliding_window_weights(s, w, l, fill="-inf", zero=False).nan_to_num(
                nan=0.5), "differ", None),
        "finite fill, no zeros after": (
            lambda s, w, l: sliding_window_weights(s, w, l, zero=False), "differ",
            "spread a query that sees no key"),
        "softmax over the queries": (lambda s, w, l: sliding_window_weights(s, w, l, dim=-2),
                                     "differ", "Each column of your weights"),
    }),
    "check_sparsemax": (sparsemax, {
        "softmax": (lambda s: s.softmax(-1), "differ", "a softmax"),
        "ReLU / sum": (lambda s: s.relu() / s.relu().sum(-1, keepdim=True), "on input",
                       "ReLU / sum"),
        "sorted ascending": (sparsemax_with(order="ascending"), "on input", "increasing order"),
        "not sorted": (sparsemax_with(order="none"), "on input", "not sorted"),
        "cumsum read at k(z)": (sparsemax_with(index_shift=0), "on input", "one sorted score too"),
        "tau over every score": (sparsemax_with(tau_from="all"), "differ",
                                 "averages all the scores"),
        "no clipping": (sparsemax_with(clip=False), "differ", "go negative"),
        "tau without the - 1": (sparsemax_with(minus=0), "differ", "lacks its - 1"),
        "the weights in sorted order": (sparsemax_with(sorted_weights=True), "on input",
                                        "sorted order"),
        "over the queries": (lambda s: sparsemax(s.transpose(-2, -1)).transpose(-2, -1),
                             "on input", "another axis than the last"),
        "the largest score's weight only": (
            lambda s: torch.nn.functional.one_hot(s.argmax(-1), s.shape[-1]).to(s.dtype),
            "differ", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_attention_scoring


def test_other_right_answers_pass(capsys):
    exercises.check_sliding_window_weights(sliding_window_by_loop)
    exercises.check_sparsemax(sparsemax_by_bisection)
    assert capsys.readouterr().out.count("Correct") == 2


def test_a_window_as_long_as_the_sequence_is_the_causal_mask():
    scores = torch.randn(3, 6, 6)
    lens = torch.tensor([6, 4, 1])
    causal = d2lh.causal_valid_lens(3, 6).minimum(lens[:, None])  # (B, T): min(i + 1, length)
    torch.testing.assert_close(checks_attention_scoring._wrong_sliding_window(scores, 6, lens),
                               d2lh.masked_softmax(scores, causal))


def test_sparsemax_sums_to_one_sharpens_with_scale_and_gives_exact_zeros():
    scores = torch.randn(4, 3, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    weights = checks_attention_scoring._wrong_sparsemax(scores)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 3, dtype=torch.float64))
    assert (weights >= 0).all()
    # sparsemax keeps one key alone once the top score leads the second by at least 1
    top2 = scores.topk(2, dim=-1).values
    scale = 2 / (top2[..., 0] - top2[..., 1]).min()
    sharp = checks_attention_scoring._wrong_sparsemax(scale * scores)
    assert ((sharp > 0).sum(-1) == 1).all()  # one key keeps all the weight
    torch.testing.assert_close(checks_attention_scoring._wrong_sparsemax(scores + 3.0), weights)
