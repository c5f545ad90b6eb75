"""The checks of notebook 09_training_recipe's coding exercise: label smoothing over the real
tokens only."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from .cases import labelled, randint, randn, random_lengths, random_sizes, seeded_generator
from .runner import run_check

__all__ = ['check_real_token_smoothing']


def _real_token_smoothing(logits, targets, valid_lens, eps, real_tokens):
    """The reference: label smoothing that spreads eps over the real tokens only."""
    T = logits.shape[1]
    valid = torch.arange(T)[None, :] < valid_lens[:, None]  # (B, T)
    log_p = torch.log_softmax(logits[valid], dim=-1)  # (N_valid, V): padding never enters
    nll = -log_p.gather(1, targets[valid][:, None]).squeeze(1)  # (N_valid,)
    uniform = -log_p[:, real_tokens].mean(dim=-1)  # (N_valid,): -(1/|real|) sum over real tokens
    return ((1 - eps) * nll + eps * uniform).mean()


# The classic mistakes, each as the function that makes it ----------------------------------------

def _wrong_smoothing(logits, targets, valid_lens, eps, real_tokens, spread="real", divide="R",
                     log="log_softmax", padding="selected", weights="right", average="positions",
                     uniform_part="mean", target_in_uniform=True, target_weight="1 - eps",
                     eps_used=True):
    """Label smoothing over the real tokens, right by default; each other value of an argument
    is a classic mistake. log: an axis is that of a log_softmax over another axis than the last."""
    B, T, V = logits.shape
    eps = eps if eps_used else 0.0
    valid = torch.arange(T)[None, :] < valid_lens[:, None]  # (B, T)
    log_p = (torch.log(torch.softmax(logits, dim=-1)) if log == "log(softmax)"
             else torch.log_softmax(logits, dim=log if isinstance(log, int) else -1))  # (B, T, V)
    nll = -log_p.gather(2, targets[..., None]).squeeze(2)  # (B, T)
    over = {"real": real_tokens, "all": torch.ones(V, dtype=torch.bool),
            "not real": ~real_tokens, "after two": torch.arange(V) >= 2}[spread]
    if log == "dense":  # the target distribution written out: 0 * -inf is NaN
        q = over.to(log_p.dtype) * eps / over.sum()
        q = q.expand_as(log_p).scatter_add(2, targets[..., None],
                                           torch.full_like(nll[..., None], 1 - eps))
        losses = -(q * log_p).sum(dim=-1)
    else:
        chosen = over.expand_as(log_p).clone()
        if not target_in_uniform:  # eps over the real tokens other than the target
            chosen.scatter_(2, targets[..., None], False)
        total = log_p.masked_fill(~chosen, 0.0).sum(dim=-1)  # over the chosen tokens only
        count = {"R": chosen.sum(dim=-1), "V": torch.full_like(nll, V),
                 "R - 1": chosen.sum(dim=-1) - 1}[divide]
        uniform = {"mean": lambda: -total / count, "sum": lambda: -total,
                   "none": lambda: torch.zeros_like(nll),  # no uniform part at all
                   "the target's": lambda: nll / count,  # eps / R on the target alone
                   "the target's, in full": lambda: nll}[uniform_part]()
        keep, smooth = (1 - eps, eps) if weights == "right" else (eps, 1 - eps)
        keep = 1.0 if target_weight == "1" else keep
        losses = keep * nll + smooth * uniform  # (B, T)
    if padding == "multiplied":
        return (losses * valid).sum() / valid.sum()
    if padding == "kept":
        return losses.mean()
    if average == "sum":
        return losses[valid].sum()
    if average == "sentences":
        return torch.stack([losses[b, :int(valid_lens[b])].mean() for b in range(B)]).mean()
    return losses[valid].mean()


_REAL_TOKEN_SMOOTHING_MISTAKES = {
    "Your smoothing spreads eps over all V tokens: here it goes to the real tokens only, none to "
    "<pad> or <bos>.": (partial(_wrong_smoothing, spread="all"),
                        partial(_wrong_smoothing, spread="all", log="dense")),
    "Your uniform part divides by V: eps is shared by the R real tokens, so the sum over them is "
    "divided by R.": partial(_wrong_smoothing, divide="V"),
    "Your uniform part divides by R - 1: eps is shared by the R real tokens, the target included, "
    "so the sum over them is divided by R.": partial(_wrong_smoothing, divide="R - 1"),
    "Your uniform part is a sum over the real tokens: it is their mean (eps / R each).":
        partial(_wrong_smoothing, uniform_part="sum"),
    "Your log-probabilities are the log of the softmax, which underflows to -inf for a very "
    "unlikely token: log_softmax computes them without that.": partial(_wrong_smoothing,
                                                                      log="log(softmax)"),
    "Your loss multiplies the target distribution by log p over every token: where a token is "
    "not real its -inf log-probability times 0 is NaN; sum over the real tokens only.":
        partial(_wrong_smoothing, log="dense"),
    "Your loss removes the padding by multiplying with a 0/1 mask: 0 * NaN is NaN; select the "
    "valid positions instead.": partial(_wrong_smoothing, padding="multiplied"),
    "Your loss averages over every position, padding included: only the valid positions count.":
        partial(_wrong_smoothing, padding="kept"),
    "Your loss is a sum over the valid positions: the exercise asks for their mean.":
        partial(_wrong_smoothing, average="sum"),
    "Your loss averages each sentence first, then the sentences: the mean is over all the valid "
    "positions together.": partial(_wrong_smoothing, average="sentences"),
    "Your weights are swapped: the target keeps 1 - eps and the uniform part gets eps.":
        partial(_wrong_smoothing, weights="swapped"),
    "Your target keeps its full weight: with smoothing it gets 1 - eps, and the real tokens "
    "share eps.": partial(_wrong_smoothing, target_weight="1"),
    "Your uniform part covers the tokens that are not real: it covers those where real_tokens is "
    "True.": partial(_wrong_smoothing, spread="not real"),
    "Your uniform part assumes that the first two tokens are the special ones: real_tokens says "
    "which tokens are real.": partial(_wrong_smoothing, spread="after two"),
    "Your uniform part leaves out the target: eps / R goes to every real token, the target "
    "included.": partial(_wrong_smoothing, target_in_uniform=False),
    "Your loss is the plain cross-entropy: with smoothing, the target keeps 1 - eps and the real "
    "tokens share eps.": partial(_wrong_smoothing, eps_used=False),
    "Your loss has no uniform part: besides (1 - eps) times the target's -log p, it adds eps "
    "times the mean of -log p over the real tokens.": partial(_wrong_smoothing,
                                                              uniform_part="none"),
    "Your uniform part uses the target's log-probability alone: eps is spread over all the real "
    "tokens, so it takes the mean of -log p over them.": tuple(
        partial(_wrong_smoothing, uniform_part=part, target_weight=weight)
        for part in ("the target's", "the target's, in full") for weight in ("1", "1 - eps")
        if (part, weight) != ("the target's, in full", "1 - eps")),
    "Your log-probabilities are normalised over another axis than the vocabulary (the positions "
    "or the batch): log_softmax runs over the last axis.": tuple(
        partial(_wrong_smoothing, log=axis) for axis in (0, 1)),
}


def check_real_token_smoothing(fn: Callable, seed: int = 0, hint: int = 1, *,
                               verbose: bool = False) -> None:
    """fn(logits, targets, valid_lens, eps, real_tokens) -> the label-smoothed cross-entropy whose
    uniform part covers the real tokens only: the target distribution at a position is
    (1 - eps) on the target plus eps / R on each of the R tokens where ``real_tokens`` (V,) is
    True, 0 on the others (<pad>, <bos>). logits (B, T, V), targets (B, T), valid_lens (B,);
    returns the mean over the valid positions, a scalar."""
    generator = seeded_generator(seed)

    def case(B, T, V, eps, num_special=2, valid_lens=None):
        logits = randn(generator, B, T, V)
        real = torch.ones(V, dtype=torch.bool)
        real[:num_special] = False  # tokens 0 .. num_special - 1 play <pad>, <bos>
        targets = randint(generator, num_special, V - 1, (B, T))  # valid targets are real tokens
        if valid_lens is None:
            valid_lens = random_lengths(generator, B, T)
            valid_lens[0] = T
        targets[torch.arange(T)[None, :] >= valid_lens[:, None]] = 0  # <pad> in the padding
        return logits, targets, valid_lens, eps, real

    fixed = []
    logits, targets, valid_lens, _, real = case(3, 5, 9, 0.1, valid_lens=torch.tensor([5, 3, 4]))
    fixed.append(("every token real (the notebook's smoothing)",
                  (logits, targets, valid_lens, 0.1, torch.ones(9, dtype=torch.bool))))
    fixed.append(("eps = 0 (plain cross-entropy)", (logits, targets, valid_lens, 0.0, real)))
    fixed.append(("<pad> and <bos> not real", (logits, targets, valid_lens, 0.1, real)))
    confident = torch.zeros(1, 1, 9)
    confident[0, 0, 4] = 200.0  # softmax underflows to 0 on every other token
    fixed.append(("a logit 200 above the others",
                  (confident, torch.tensor([[4]]), torch.tensor([1]), 0.1, real)))
    never = logits.clone()
    never[..., ~real] = float("-inf")  # a model that can never output <pad> or <bos>
    fixed.append(("the logits of <pad> and <bos> are -inf", (never, targets, valid_lens, 0.1, real)))
    garbage = logits.clone()
    garbage[1, 3:] = float("nan")  # padding positions holding garbage
    fixed.append(("NaN logits in the padding", (garbage, targets, valid_lens, 0.1, real)))
    random = [("", case(s["B"], s["T"], s["V"], 0.2, num_special=3))
              for s in random_sizes(generator, 2, B=(1, 4), T=(2, 7), V=(5, 20))]
    cases = labelled(fixed + random, lambda logits, targets, valid_lens, eps, real: (
        f"logits {tuple(logits.shape)}, valid_lens {valid_lens.tolist()}, eps={eps:g}, "
        f"{int(real.sum())} real tokens of {len(real)}"))
    run_check("real_token_smoothing", fn, cases, reference=_real_token_smoothing,
              hints=("Read the input your function failed on: a huge logit, -inf logits, NaN in "
                     "the padding? Each one trips a different step of the computation.",
                     "log_p = torch.log_softmax(logits, dim=-1) (never log(softmax): it "
                     "underflows to -inf); the uniform part is the mean of -log_p over the real "
                     "tokens only (log_p[..., real_tokens].mean(-1): divide by their number, not "
                     "by V), so the -inf of a token that is not real never enters; keep the valid "
                     "positions by selecting them (torch.where or indexing), never by multiplying "
                     "with a 0/1 mask, since 0 * NaN is NaN."),
              hint=hint, mistakes=_REAL_TOKEN_SMOOTHING_MISTAKES, verbose=verbose)


MISTAKES = {"check_real_token_smoothing": _REAL_TOKEN_SMOOTHING_MISTAKES}  # the catalogue, for the tests
