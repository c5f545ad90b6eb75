"""The checks of notebook 09_transformer_in_practice
(d2lhelpers/exercises/checks_transformer_in_practice.py): right and plausible wrong answers (see
checks_common.py)."""

from __future__ import annotations

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_transformer_in_practice


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


CHECKS = {
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
            lambda *a: real_token_smoothing(*a, dense=True),
            "the logits of <pad> and <bos> are -inf"),
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


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_transformer_in_practice
