"""The checks of notebook 09_training_recipe (d2lhelpers/exercises/checks_training_recipe.py):
right and plausible wrong answers (see checks_common.py)."""

from __future__ import annotations

import math

import torch

import d2lhelpers as d2lh
from checks_common import CheckTests
from d2lhelpers.exercises import checks_training_recipe


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


def smoothing_of(logits, targets, valid_lens, eps, real_tokens, uniform, dim=-1):
    """(1 - eps) times the target's -log p plus eps times ``uniform(log_p, nll, real_tokens)``,
    averaged over the valid positions, log_p a log_softmax over ``dim``."""
    valid = torch.arange(logits.shape[1])[None, :] < valid_lens[:, None]
    log_p = torch.log_softmax(logits, dim=dim)[valid]
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)
    return ((1 - eps) * nll + eps * uniform(log_p, nll, real_tokens)).mean()


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


def adam_steps(grads, schedule, betas, eps, ascent=False, cumulative=False, reset=False,
               swap_average=False, swap_betas=False, plain_g=False, correct=(True, True),
               from_zero=False, no_root=False, eps_inside=False, no_eps=False, next_rate=False,
               rate_on_gradient=False, eps_before_correction=False):
    """Adam's steps; right by default, each flag a plausible mistake."""
    beta1, beta2 = reversed(betas) if swap_betas else betas
    m = v = 0.0
    steps = []
    for s in range(1, len(grads) + 1):
        g = grads[s - 1]
        lr = schedule(s + 1 if next_rate else s)
        if rate_on_gradient:
            g = g * lr
        if reset:
            m = v = 0.0
        square = g if plain_g else g ** 2
        if swap_average:
            m, v = (1 - beta1) * m + beta1 * g, (1 - beta2) * v + beta2 * square
        else:
            m, v = beta1 * m + (1 - beta1) * g, beta2 * v + (1 - beta2) * square
        t = s - 1 if from_zero else s
        m_hat = m / (1 - beta1 ** t) if correct[0] else m
        v_hat = v / (1 - beta2 ** t) if correct[1] else v
        if eps_before_correction:  # (sqrt(v) + eps) / sqrt(1 - beta2^s), the paper's eps-hat
            denominator = (v.sqrt() + eps) / math.sqrt(1 - beta2 ** t)
        elif eps_inside:
            denominator = torch.sqrt(v_hat + eps)
        else:
            denominator = (v_hat if no_root else torch.sqrt(v_hat)) + (0 if no_eps else eps)
        step = m_hat / denominator * (1 if rate_on_gradient else lr)
        steps.append(step if ascent else -step)
    steps = torch.stack(steps)
    return torch.cumsum(steps, 0) if cumulative else steps


def adam_by_torch(grads, schedule, betas, eps):
    """A right answer that lets PyTorch's Adam take the steps, with the schedule set per update."""
    theta = torch.zeros_like(grads[0], requires_grad=True)
    optimizer = torch.optim.Adam([theta], lr=schedule(1), betas=betas, eps=eps)
    steps = []
    for s, g in enumerate(grads, 1):
        optimizer.param_groups[0]["lr"] = schedule(s)
        before = theta.detach().clone()
        theta.grad = g.clone()
        optimizer.step()
        steps.append(theta.detach() - before)
    return torch.stack(steps)


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
            logits, targets, lens, 0.0, real), "differ", "plain cross-entropy"),
        "the uniform part left out": (
            lambda *a: smoothing_of(*a, uniform=lambda log_p, nll, real: 0.0), "differ",
            "no uniform part"),
        "eps / R on the target alone": (
            lambda *a: smoothing_of(*a, uniform=lambda log_p, nll, real: nll / real.sum()),
            "differ", "target's log-probability alone"),
        "log_softmax over the positions": (
            lambda *a: smoothing_of(*a, uniform=lambda log_p, nll, real: -log_p[:, real].mean(-1),
                                    dim=1), "on input", "another axis than the vocabulary"),
        "half the loss": (lambda *a: real_token_smoothing(*a) / 2, "differ", None),
    }),
    "check_adam_steps": (adam_steps, {
        "ascent": (lambda *a: adam_steps(*a, ascent=True), "one update", "go up the gradient"),
        "the parameters returned": (lambda *a: adam_steps(*a, cumulative=True), "on input",
                                    "the steps added up"),
        "moments reset at every update": (lambda *a: adam_steps(*a, reset=True), "on input",
                                          "start afresh"),
        "beta weights the new gradient": (lambda *a: adam_steps(*a, swap_average=True),
                                          "on input", "weight beta"),
        "betas swapped": (lambda *a: adam_steps(*a, swap_betas=True), "on input",
                          "betas are swapped"),
        "v averages the gradients": (lambda *a: adam_steps(*a, plain_g=True), "NaN",
                                     "not their squares"),
        "no bias correction": (lambda *a: adam_steps(*a, correct=(False, False)), "one update",
                               "no bias correction"),
        "the first moment corrected only": (lambda *a: adam_steps(*a, correct=(True, False)),
                                            "one update", "gradients' mean only"),
        "the second moment corrected only": (lambda *a: adam_steps(*a, correct=(False, True)),
                                             "one update", "squares' mean only"),
        "bias correction from 0": (lambda *a: adam_steps(*a, from_zero=True), "one update",
                                   "counts the updates from 0"),
        "no square root": (lambda *a: adam_steps(*a, no_root=True), "one update",
                           "mean of the squares itself"),
        "eps inside the root": (lambda *a: adam_steps(*a, eps_inside=True), "tiny gradients",
                                "inside the square root"),
        "no eps": (lambda *a: adam_steps(*a, no_eps=True), "always 0", "has no eps"),
        "the rate of the next update": (lambda *a: adam_steps(*a, next_rate=True), "warm-up",
                                        "update s + 1"),
        "the rate on the gradients": (lambda *a: adam_steps(*a, rate_on_gradient=True),
                                      "on input", "scales the gradients"),
        "eps added before the bias correction": (
            lambda *a: adam_steps(*a, eps_before_correction=True), "tiny gradients", None),
        "the schedule counted from 0": (
            lambda grads, schedule, betas, eps: adam_steps(grads, lambda s: schedule(s - 1),
                                                           betas, eps),
            "counts updates from 1", None),
    }),
}


class TestChecks(CheckTests):
    CHECKS, MODULE = CHECKS, checks_training_recipe


def test_adam_steps_passes_pytorch_s_adam_with_the_rate_set_at_each_update(capsys):
    checks_training_recipe.check_adam_steps(adam_by_torch)
    assert capsys.readouterr().out.startswith("Correct: ")
