"""The checks of notebook 09_transformer_in_practice
(d2lhelpers/exercises/checks_transformer_in_practice.py): right and plausible wrong answers (see
checks_common.py)."""

from __future__ import annotations

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_transformer_in_practice


def real_token_smoothing(logits, targets, valid_lens, eps, real_tokens, divide_by_vocab=False,
                         naive_log=False, multiply_mask=False, dense=False, no_padding_mask=False,
                         total=False, swap_eps=False, real_sum=False, per_sentence=False,
                         others_only=False):
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
        real = real_tokens.expand_as(log_p)
        if others_only:  # eps over the real tokens other than the target
            real = real & (torch.arange(log_p.shape[-1]) != targets[..., None])
        summed = log_p.masked_fill(~real, 0).sum(dim=-1)
        count = logits.shape[-1] if divide_by_vocab else 1 if real_sum else real.sum(dim=-1)
        keep = eps if swap_eps else 1 - eps
        losses = keep * nll - (1 - keep) * summed / count
    valid = torch.arange(T)[None, :] < valid_lens[:, None]
    if multiply_mask:
        return (losses * valid).sum() / valid.sum()
    if no_padding_mask:
        return losses.mean()
    if per_sentence:
        return torch.stack([row[:n].mean() for row, n in zip(losses, valid_lens)]).mean()
    return losses[valid].sum() if total else losses[valid].mean()


def advance_beams(log_probs, lengths, finished, step_log_probs, eos, alpha, per_beam=False,
                  ignore_beams=False, swap_unravel=False, across_sentences=False, ascending=False,
                  extend_finished=False, grow_finished=False, normalise=True, mark_ended=True,
                  pay_eos=False, keep_lengths=False, return_scores=False, tokens_first=False,
                  drop_finished=False, multiply_penalty=False):
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
    scores = totals / new_lengths[..., None].float() ** alpha if normalise else totals
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
    if tokens_first:
        return kept, new_lengths.gather(1, parents), ended, tokens, parents
    return kept, new_lengths.gather(1, parents), ended, parents, tokens


def r_minus_one(logits, targets, valid_lens, eps, real_tokens):
    """The uniform part summed over the real tokens, target included, divided by R - 1."""
    valid = torch.arange(logits.shape[1])[None, :] < valid_lens[:, None]
    log_p = torch.log_softmax(logits[valid], dim=-1)
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)
    uniform = -log_p[:, real_tokens].sum(-1) / (real_tokens.sum() - 1)
    return ((1 - eps) * nll + eps * uniform).mean()


def target_weighted_one(logits, targets, valid_lens, eps, real_tokens):
    """The negative log-likelihood of the target in full, plus eps times the uniform part."""
    valid = torch.arange(logits.shape[1])[None, :] < valid_lens[:, None]
    log_p = torch.log_softmax(logits[valid], dim=-1)
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)
    return (nll - eps * log_p[:, real_tokens].mean(-1)).mean()


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


CHECKS = {
    "check_real_token_smoothing": (real_token_smoothing, {
        "smoothing over all V tokens": (
            lambda logits, targets, lens, eps, real: d2lh.masked_cross_entropy(logits, targets, lens,
                                                                               eps),
            "on input <pad> and <bos> not real", "over all V tokens"),
        "divided by V instead of the number of real tokens": (
            lambda *a: real_token_smoothing(*a, divide_by_vocab=True), "<pad> and <bos> not real",
            "divides by V"),
        "divided by R - 1": (r_minus_one, "differ", "divides by R - 1"),
        "the sum over the real tokens": (lambda *a: real_token_smoothing(*a, real_sum=True),
                                         "differ", "is a sum over the real tokens"),
        "log(softmax) instead of log_softmax": (
            lambda *a: real_token_smoothing(*a, naive_log=True), "a logit 200 above the others",
            "underflows"),
        "the target distribution times log p, over every token": (
            lambda *a: real_token_smoothing(*a, dense=True),
            "the logits of <pad> and <bos> are -inf", "multiplies the target distribution"),
        "padding removed by multiplying with a 0/1 mask": (
            lambda *a: real_token_smoothing(*a, multiply_mask=True), "the result holds NaN",
            "multiplying with a 0/1 mask"),
        "padding kept": (lambda *a: real_token_smoothing(*a, no_padding_mask=True), "differ",
                         "padding included"),
        "sum over the positions": (lambda *a: real_token_smoothing(*a, total=True), "differ",
                                   "sum over the valid positions"),
        "mean per sentence": (lambda *a: real_token_smoothing(*a, per_sentence=True), "differ",
                              "each sentence first"),
        "the target weighted 1": (target_weighted_one, "differ", "full weight"),
        "eps and 1 - eps swapped": (lambda *a: real_token_smoothing(*a, swap_eps=True), "differ",
                                    "swapped"),
        "the special tokens smoothed": (
            lambda logits, targets, lens, eps, real: real_token_smoothing(logits, targets, lens,
                                                                          eps, ~real),
            "on input", "that are not real"),
        "the first two tokens taken as the special ones": (
            lambda logits, targets, lens, eps, real: real_token_smoothing(
                logits, targets, lens, eps, torch.arange(len(real)) >= 2),
            "on input", "first two tokens"),
        "the target left out of the uniform part": (
            lambda *a: real_token_smoothing(*a, others_only=True), "differ", "leaves out the target"),
        "no smoothing at all": (lambda logits, targets, lens, eps, real: real_token_smoothing(
            logits, targets, lens, 0.0, real), "differ", None),
    }),
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
        "the beams' log-probabilities not added and the lengths never grow": (
            lambda *a: advance_beams(*a, ignore_beams=True, keep_lengths=True), "on input", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_transformer_in_practice
