"""The checks of notebook 07_transformer_in_practice's coding exercises."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..decoding import select_beams
from .cases import seeded_generator, randn, randint, random_sizes, case_label
from .runner import run_check

__all__ = ['check_real_token_smoothing', 'check_expand_beams']


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
            valid_lens = randint(generator, 1, T, (B,))
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
    cases = [(case_label(what, f"logits {tuple(args[0].shape)}, valid_lens {args[2].tolist()}, "
                           f"eps={args[3]:g}, {int(args[4].sum())} real tokens of {len(args[4])}"), args)
             for what, args in fixed + random]
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


def check_expand_beams(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(beam_log_probs, next_log_probs) -> (log_probs, parents, tokens), each (B, k): for every
    sentence, the k best of its k * V continuations (beam j extended by token v, with total
    log-probability beam_log_probs[b, j] + next_log_probs[b, j, v]), best first; parents[b, i]
    is the beam j that candidate i extends and tokens[b, i] the token v.
    beam_log_probs (B, k) (-inf for a beam not yet started), next_log_probs (B, k, V)."""
    generator = seeded_generator(seed)

    def next_log_probs(B, k, V):
        return torch.log_softmax(2 * randn(generator, B, k, V), dim=-1)

    fixed = []
    fixed.append(("k = 1 (greedy decoding)", (randn(generator, 2, 1).abs().neg(),
                                              next_log_probs(2, 1, 6))))
    first = torch.full((2, 3), float("-inf"))
    first[:, 0] = 0.0  # only beam 0 is live: the first step of a search
    fixed.append(("the first step: beams 1 and 2 not started (-inf)", (first, next_log_probs(2, 3, 7))))
    one_parent = next_log_probs(1, 3, 5)
    fixed.append(("one beam far ahead: all survivors extend it",
                  (torch.tensor([[-0.5, -9.0, -10.0]]), one_parent)))
    behind = next_log_probs(1, 2, 6)
    behind[0, 0] = torch.log_softmax(0.01 * torch.arange(6.0), dim=-1)  # beam 0: none stands out
    behind[0, 1, 3] = -0.01  # beam 1: one almost certain token
    fixed.append(("a beam behind with one sure token overtakes", (torch.tensor([[-1.0, -1.5]]), behind)))
    random = []
    for s in random_sizes(generator, 2, B=(2, 4), k=(2, 5), V=(5, 12)):
        beams = -randn(generator, s["B"], s["k"]).abs() * 3
        random.append(("", (beams, next_log_probs(s["B"], s["k"], s["V"]))))
    cases = [(case_label(what, f"B={args[1].shape[0]}, k={args[1].shape[1]}, V={args[1].shape[2]}"), args)
             for what, args in fixed + random]

    run_check("expand_beams", fn, cases,
              reference=lambda beams, next_log_probs: select_beams(beams[..., None]
                                                                        + next_log_probs),
              hints=("A candidate's score adds its beam's log-probability to its token's. Compare "
                     "all k * V candidates of a sentence at once, then recover the beam and the "
                     "token from the candidate's index.",
                     "add each beam's log-probability to its next-token log-probabilities, (B, k, "
                     "1) + (B, k, V); flatten each sentence's candidates to (B, k * V) and take "
                     "topk(k, dim=-1) (largest first); candidate index c is beam c // V extended "
                     "by token c % V."),
              hint=hint)
