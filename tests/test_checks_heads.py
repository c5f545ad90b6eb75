"""The checks of notebook 13_what_heads_learn (d2lhelpers/exercises/checks_heads.py): right and
plausible wrong answers (see checks_common.py), each factory right by default and a mistake with
one argument changed. Written independently of the checks' references: loops over positions for
the score, a hook on W_o (or a head's term subtracted) for the ablation."""

from __future__ import annotations

import math

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import check_head_ablation, checks_heads


def induction_score(offset=1, every_query=False, copies="all", per_sequence=False,
                    transposed=False, over_heads=False, later_too=False, largest=False):
    """The induction score by loops, right by default; each argument names a mistake."""

    def score(weights, tokens):
        B, h, T, _ = weights.shape
        totals, counts = [], []
        for b in range(B):
            total, count = torch.zeros(h, dtype=weights.dtype), 0
            for t in range(T):
                copies_before = [s for s in range(T if later_too else t)
                                 if tokens[b, s] == tokens[b, t] and s != t]
                if copies == "last":
                    copies_before = copies_before[-1:]
                elif copies == "first":
                    copies_before = copies_before[:1]
                if copies_before or every_query:
                    count += 1
                on_keys = [weights[b, :, key, t] if transposed else weights[b, :, t, key]
                           for key in (s + offset for s in copies_before) if 0 <= key < T]
                if on_keys and largest:
                    total += torch.stack(on_keys).amax(0)
                elif on_keys:
                    total += sum(on_keys)
            totals.append(total)
            counts.append(count)
        if per_sequence:
            result = torch.stack([t / c for t, c in zip(totals, counts)]).mean(0)
        else:
            result = torch.stack(totals).sum(0) / sum(counts)
        return result.mean() if over_heads else result

    return score


def without_head(after_projection=False, strided=False, queries=False, keep_only=False,
                 shift=0, causal=True, project=True, subtract=False,
                 nothing=False):
    """A layer's output with one head zeroed, by a hook on W_o's input (or, with subtract, the
    whole layer minus the head's term), right by default; each other argument names a mistake."""

    def ablate(attention, X, head):
        h, d_k = attention.num_heads, attention.d_k
        chosen = (head + shift) % h
        keep = torch.ones(h, d_k)
        keep[chosen] = 0.0
        keep = keep.flatten()
        if strided:
            keep = torch.ones(h * d_k)
            keep[chosen::h] = 0.0
        if keep_only:
            keep = 1.0 - keep
        if nothing:
            keep = torch.ones(h * d_k)
        if subtract:
            whole = attention.step(X, d2lh.KVCache(), need_weights=True)
            values = attention.split_heads(attention.W_v(X))  # (B, h, T, d_k)
            head_out = attention.attention_weights[:, chosen] @ values[:, chosen]  # (B, T, d_k)
            return whole - head_out @ attention.W_o.weight[:, chosen * d_k:(chosen + 1) * d_k].T
        if queries:
            saved = attention.W_q.weight.detach().clone()
            with torch.no_grad():
                attention.W_q.weight[chosen * d_k:(chosen + 1) * d_k] = 0.0
            try:
                return attention.step(X, d2lh.KVCache())
            finally:
                with torch.no_grad():
                    attention.W_q.weight.copy_(saved)
        if not project:
            hook = attention.W_o.register_forward_hook(lambda layer, inputs, out: inputs[0] * keep)
        elif after_projection:
            hook = attention.W_o.register_forward_hook(lambda layer, inputs, out: out * keep)
        else:
            hook = attention.W_o.register_forward_pre_hook(lambda layer, inputs: inputs[0] * keep)
        try:
            if causal:
                return attention.step(X, d2lh.KVCache())
            return attention(X, X, X)  # no mask: every query sees every key
        finally:
            hook.remove()

    return ablate


def zeroed_in_place(restore=False, hook_left=False):
    """The head's columns of W_o zeroed in the layer itself (restored or not), or a hook on W_o
    that is never removed: the result is right, the layer is left changed."""

    def ablate(attention, X, head):
        d_k = attention.d_k
        if hook_left:
            keep = torch.ones(attention.num_heads * d_k)
            keep[head * d_k:(head + 1) * d_k] = 0.0
            attention.W_o.register_forward_pre_hook(lambda layer, inputs: inputs[0] * keep)
            return attention.step(X, d2lh.KVCache())
        saved = attention.W_o.weight.detach().clone()
        with torch.no_grad():
            attention.W_o.weight[:, head * d_k:(head + 1) * d_k] = 0.0
        out = attention.step(X, d2lh.KVCache())
        if restore:
            with torch.no_grad():
                attention.W_o.weight.copy_(saved)
        return out

    return ablate


def by_parts(rows=False, rotate=True, mean=False):
    """The layer computed from its parts (W_o has no bias), the head's output zeroed, or the
    head's rows of W_o zeroed (rows=True), or without the rotation, or replaced by its mean over
    the batch and the positions (mean=True: mean ablation)."""

    def ablate(attention, X, head):
        d_k = attention.d_k
        Q, K, V = (attention.split_heads(layer(X)) for layer in
                   (attention.W_q, attention.W_k, attention.W_v))
        if rotate and attention.rotary is not None:
            Q, K = attention.rotary(Q), attention.rotary(K)
        T = X.shape[1]
        scores = (Q @ K.transpose(-2, -1)) / math.sqrt(d_k)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        heads = scores.softmax(-1) @ V  # (B, h, T, d_k)
        weight = attention.W_o.weight.clone()
        if rows:
            weight[head * d_k:(head + 1) * d_k] = 0.0
        else:
            heads = heads.clone()
            heads[:, head] = heads[:, head].mean((0, 1), keepdim=True)[0] if mean else 0.0
        return attention.merge_heads(heads) @ weight.T

    return ablate


CHECKS = {
    "check_induction_score": (induction_score(), {
        "the earlier copy itself (a duplicate-token score)": (induction_score(offset=0), "differ",
                                                              "duplicate-token"),
        "the token before the earlier copy": (induction_score(offset=-1), "differ",
                                              "the token before the earlier copy"),
        "averaged over every query": (induction_score(every_query=True), "differ",
                                      "over every query"),
        "the last earlier copy only": (induction_score(copies="last"), "a token seen twice before",
                                       "most recent earlier copy"),
        "the first earlier copy only": (induction_score(copies="first"),
                                        "a token seen twice before", "the first earlier copy"),
        "each sequence averaged first": (induction_score(per_sequence=True), "two sequences",
                                         "averages each sequence first"),
        "weights read transposed": (induction_score(transposed=True), "differ", "transposed"),
        "later copies counted too": (induction_score(later_too=True), "differ",
                                     "copies that come later"),
        "the largest weight, not the sum": (induction_score(largest=True),
                                            "a token seen twice before", "largest weight"),
        "averaged over the heads": (induction_score(over_heads=True), "on input",
                                    "averaged over the heads"),
        "the before-copy score averaged over every query": (
            induction_score(offset=-1, every_query=True), "differ", None),
    }),
    "check_head_ablation": (without_head(), {
        "no head zeroed": (without_head(nothing=True), "differ", "still has every head"),
        "zeros after W_o": (without_head(after_projection=True), "differ", "after W_o"),
        "the head's queries zeroed": (without_head(queries=True), "differ", "zeroing its queries"),
        "every h-th feature": (without_head(strided=True), "differ", "every h-th feature"),
        "only that head kept": (without_head(keep_only=True), "differ", "keeps only that head"),
        "the next head zeroed": (without_head(shift=1), "differ", "the next one"),
        "no causal mask": (without_head(causal=False), "differ", "sees the future"),
        "W_o's columns zeroed in place, never restored": (zeroed_in_place(), "changed its input",
                                                          "~changed what it was given"),
        "a hook left on W_o": (zeroed_in_place(hook_left=True), "a hook left on W_o",
                               "~changed what it was given"),
        "the head's rows of W_o zeroed": (by_parts(rows=True), "differ", "after W_o"),
        "no rotation": (by_parts(rotate=False), "rotary positions", "not rotated"),
        "mean ablation": (by_parts(mean=True), "differ", "mean ablation"),
        "W_o left out": (without_head(project=False), "on input", "skips W_o"),
    }),
}


def test_subtracting_the_heads_term_is_right_too(capsys):
    check_head_ablation(without_head(subtract=True))
    check_head_ablation(by_parts())
    check_head_ablation(zeroed_in_place(restore=True))  # the layer as it was given, afterwards
    assert capsys.readouterr().out.count("Correct: ") == 3


def test_an_ideal_induction_head_scores_one():
    L = 5
    first = torch.arange(L)
    weights, tokens = checks_heads._ideal_heads(first)
    scores = checks_heads._induction_score(weights, tokens)
    assert math.isclose(scores[1].item(), 1.0) and scores[0].item() == 0.0


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_heads
