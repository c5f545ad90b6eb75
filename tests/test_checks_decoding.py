"""The checks of notebook 10_decoding (d2lhelpers/exercises/checks_decoding.py): right and
plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_decoding


def advance_beams(log_probs, lengths, finished, step_log_probs, eos, alpha, per_beam=False,
                  ignore_beams=False, swap_unravel=False, across_sentences=False, ascending=False,
                  extend_finished=False, grow_finished=False, normalise=True, mark_ended=True,
                  pay_eos=False, keep_lengths=False, return_scores=False, tokens_first=False,
                  drop_finished=False, multiply_penalty=False, penalty_before=False,
                  parents_totals=False, lengths_unordered=False):
    """One beam-search step; right by default, each flag a plausible mistake."""
    B, k, V = step_log_probs.shape
    if not extend_finished:  # a finished beam continues with <eos> only, at no cost
        carry = torch.full_like(step_log_probs, float("-inf"))
        carry[..., eos] = step_log_probs[..., eos] if pay_eos else 0.0
        if drop_finished:
            carry[..., eos] = float("-inf")
        step_log_probs = torch.where(finished[..., None], carry, step_log_probs)
    totals = step_log_probs if ignore_beams else log_probs[..., None] + step_log_probs
    new_lengths = lengths + 1 if grow_finished else torch.where(finished, lengths, lengths + 1)
    if keep_lengths:
        new_lengths = lengths
    penalised = lengths if penalty_before else new_lengths
    scores = totals / penalised[..., None].float() ** alpha if normalise else totals
    if multiply_penalty:
        scores = totals * new_lengths[..., None].float() ** alpha
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
    kept = (scores if return_scores else totals).reshape(B, k * V).gather(1, index)
    if parents_totals:
        kept = log_probs.gather(1, parents)
    if tokens_first:
        return kept, new_lengths.gather(1, parents), ended, tokens, parents
    return (kept, new_lengths if lengths_unordered else new_lengths.gather(1, parents), ended,
            parents, tokens)


def worst_first_by_topk(log_probs, lengths, finished, step_log_probs, eos, alpha):
    """Beam search keeping the k worst candidates with topk(largest=False): ties (the -inf of
    beams not started) broken as topk breaks them."""
    B, k, V = step_log_probs.shape
    carry = torch.full_like(step_log_probs, float("-inf"))
    carry[..., eos] = 0.0
    step = torch.where(finished[..., None], carry, step_log_probs)
    totals = log_probs[..., None] + step
    new_lengths = torch.where(finished, lengths, lengths + 1)
    index = (totals / new_lengths[..., None] ** alpha).reshape(B, -1).topk(k, largest=False).indices
    parents, tokens = index // V, index % V
    return (totals.reshape(B, -1).gather(1, index), new_lengths.gather(1, parents),
            finished.gather(1, parents) | (tokens == eos), parents, tokens)


def follow_parents(tokens, keys, values, parents, new_tokens, offset="k", scatter=False,
                   loop_in_place=False, append_first=False, keep_tokens=False, cache="both",
                   dim=0, beam_major=False):
    """Each survivor continues from its parent; right by default, each flag a plausible mistake."""
    B, k = parents.shape
    step = {"k": k, "B": B, "none": 0}[offset]
    rows = [b * step + int(parents[b, j]) for b in range(B) for j in range(k)]
    if beam_major:  # beam j of sentence b taken to be row j * B + b
        rows = [int(parents[b, j]) * B + b for b in range(B) for j in range(k)]
    rows = torch.tensor(rows)
    added = new_tokens.flatten()[:, None]

    def take(x, dim=0):
        if scatter:
            out = torch.zeros_like(x)
            out.index_copy_(dim, rows, x)
            return out
        if loop_in_place:
            out = x.clone()
            for r in range(len(rows)):
                out.narrow(dim, r, 1).copy_(out.narrow(dim, int(rows[r]), 1))
            return out
        return x.index_select(dim, rows)

    if keep_tokens:
        new = torch.cat([tokens, added], dim=1)
    elif append_first:
        new = take(torch.cat([tokens, added], dim=1))
    else:
        new = torch.cat([take(tokens), added], dim=1)
    return (new, take(keys, dim) if cache in ("both", "keys") else keys,
            take(values, dim) if cache in ("both", "values") else values)


def follow_by_state(tokens, keys, values, parents, new_tokens):
    """A right answer through the package's own state: a KVCache reordered by the parents' rows."""
    B, k = parents.shape
    rows = (parents + k * torch.arange(B).unsqueeze(1)).flatten()
    cache = d2lh.KVCache(keys, values)
    cache.reorder(rows)
    return torch.cat([tokens[rows], new_tokens.flatten().unsqueeze(1)], 1), cache.keys, cache.values


CHECKS = {
    "check_advance_beams": (advance_beams, {
        "each beam keeps only its best token": (
            lambda *a: advance_beams(*a, per_beam=True), "the first step", "their own best token"),
        "the beams' log-probabilities not added": (
            lambda *a: advance_beams(*a, ignore_beams=True), "k = 1 (greedy decoding)",
            "leave out their beam's"),
        "candidate index unravelled with k instead of V": (
            lambda *a: advance_beams(*a, swap_unravel=True), "beams 1 and 2 not started",
            "split with k"),
        "one top-k over the whole batch": (
            lambda *a: advance_beams(*a, across_sentences=True), "on input", "whole batch"),
        "worst first": (lambda *a: advance_beams(*a, ascending=True), "k = 1", "worst first"),
        "finished beams extended like the others": (
            lambda *a: advance_beams(*a, extend_finished=True), "beam 0 finished",
            "extended like the others"),
        "finished beams pay for <eos>": (lambda *a: advance_beams(*a, pay_eos=True),
                                         "beam 0 finished", "pay for their <eos>"),
        "finished beams grow longer": (
            lambda *a: advance_beams(*a, grow_finished=True), "beam 0 finished", "grow longer"),
        "the length penalty multiplied": (lambda *a: advance_beams(*a, multiply_penalty=True),
                                          "on input", "multiply log P"),
        "divided by the length, alpha ignored": (lambda *a: advance_beams(*a[:5], 1.0),
                                                 "on input", "length itself"),
        "worst first by topk": (lambda *a: worst_first_by_topk(*a), "k = 1", "worst first"),
        "finished beams dropped": (lambda *a: advance_beams(*a, drop_finished=True),
                                   "beam 0 finished", "are dropped"),
        "lengths never grow": (lambda *a: advance_beams(*a, keep_lengths=True), "on input",
                               "do not grow"),
        "no length normalisation": (
            lambda *a: advance_beams(*a, normalise=False), "on input", "total log-probability"),
        "the normalised scores returned": (lambda *a: advance_beams(*a, return_scores=True),
                                           "on input", "length-normalised scores"),
        "a beam that ends is not marked finished": (
            lambda *a: advance_beams(*a, mark_ended=False), "on input", "not marked finished"),
        "tokens before parents": (lambda *a: advance_beams(*a, tokens_first=True), "on input",
                                  "tokens before parents"),
        "worst first and not normalised (the worst are -inf either way)": (
            lambda *a: advance_beams(*a, ascending=True, normalise=False), "on input",
            "worst first"),
        "the length penalty of the lengths before the step": (
            lambda *a: advance_beams(*a, penalty_before=True), "on input", "lengths before this"),
        "the parents' totals kept": (lambda *a: advance_beams(*a, parents_totals=True),
                                     "on input", "leave out the chosen token"),
        "the lengths not taken from the parents": (
            lambda *a: advance_beams(*a, lengths_unordered=True), "on input", "stay in the order"),
        "the beams' log-probabilities not added and the lengths never grow": (
            lambda *a: advance_beams(*a, ignore_beams=True, keep_lengths=True), "on input", None),
    }),
    "check_follow_parents": (follow_parents, {
        "no sentence offset": (lambda *a: follow_parents(*a, offset="none"), "k = 1 (greedy)",
                               "the parents themselves"),
        "offset by B": (lambda *a: follow_parents(*a, offset="B"), "on input",
                        "laid out otherwise"),
        "beam-major layout": (lambda *a: follow_parents(*a, beam_major=True), "on input",
                              "laid out otherwise"),
        "scattered to the children's rows": (lambda *a: follow_parents(*a, scatter=True),
                                             "B = 1", "where their children go"),
        "copied row by row in place": (lambda *a: follow_parents(*a, loop_in_place=True),
                                       "B = 1", "already overwritten"),
        "new tokens appended before reordering": (
            lambda *a: follow_parents(*a, append_first=True), "B = 1", "before the rows"),
        "tokens not reordered": (lambda *a: follow_parents(*a, keep_tokens=True), "B = 1",
                                 "stay where they were"),
        "cache not reordered": (lambda *a: follow_parents(*a, cache="none"), "B = 1",
                                "do not follow the beams"),
        "values not reordered": (lambda *a: follow_parents(*a, cache="keys"), "B = 1",
                                 "do not follow the beams"),
        "keys reordered along the heads": (lambda *a: follow_parents(*a, dim=1), "on input",
                                           "another axis"),
        "keys reordered along time": (lambda *a: follow_parents(*a, dim=2), "on input",
                                      "another axis"),
        "no offset and the cache left": (
            lambda *a: follow_parents(*a, offset="none", cache="none"), "on input", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_decoding


def test_follow_parents_passes_the_package_s_own_cache(capsys):
    checks_decoding.check_follow_parents(follow_by_state)
    assert capsys.readouterr().out.startswith("Correct: ")
