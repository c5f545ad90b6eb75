"""The checks of notebook 09_training_recipe (d2lhelpers/exercises/checks_training_recipe.py):
right and plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_training_recipe


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
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_training_recipe
