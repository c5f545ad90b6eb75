"""The checks of notebook 09_training_recipe's coding exercise: label smoothing over the real
tokens only."""

from __future__ import annotations

from collections.abc import Callable

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


def check_real_token_smoothing(fn: Callable, seed: int = 0, hint: int = 1) -> None:
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
              hint=hint)
