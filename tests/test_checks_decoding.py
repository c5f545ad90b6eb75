"""The checks of notebook 10_decoding (d2lhelpers/exercises/checks_decoding.py): right and
plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import torch

from checks_common import CheckTests
from d2lhelpers.exercises import checks_decoding


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
    CHECKS, MODULE = CHECKS, checks_decoding
