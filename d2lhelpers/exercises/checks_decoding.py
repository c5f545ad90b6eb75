"""The checks of notebook 10_decoding's coding exercise: one step of beam search."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..decoding import Beams, advance_beams
from .cases import labelled, randint, randn, random_sizes, seeded_generator
from .runner import run_check

__all__ = ['check_advance_beams']


def check_advance_beams(fn: Callable, seed: int = 0, hint: int = 1) -> None:
    """fn(log_probs, lengths, finished, step_log_probs, eos, alpha) -> (log_probs, lengths,
    finished, parents, tokens), each (B, k): one step of beam search, as ``d2lh.advance_beams``
    takes it. log_probs (B, k): each beam's total log-probability (-inf for a beam not started);
    lengths (B, k): its tokens so far; finished (B, k): whether it has produced <eos>;
    step_log_probs (B, k, V): the next token's log-probabilities after each beam. A finished beam
    continues only with <eos>, at no cost, its length unchanged; the k best candidates of each
    sentence by log P / length^alpha survive, best first."""
    generator = seeded_generator(seed)

    def next_log_probs(B, k, V):
        return torch.log_softmax(2 * randn(generator, B, k, V), dim=-1)

    def fresh(log_probs, step=1):  # no beam finished, every beam step - 1 tokens long
        return log_probs, torch.full(log_probs.shape, step - 1), torch.zeros(log_probs.shape, dtype=torch.bool)

    eos = 0
    fixed = []
    fixed.append(("k = 1 (greedy decoding)",
                  (*fresh(randn(generator, 2, 1).abs().neg(), 3), next_log_probs(2, 1, 6), eos, 0.0)))
    first = torch.full((2, 3), float("-inf"))
    first[:, 0] = 0.0  # only beam 0 is live: the first step of a search
    fixed.append(("the first step: beams 1 and 2 not started (-inf)",
                  (*fresh(first), next_log_probs(2, 3, 7), eos, 0.6)))
    fixed.append(("one beam far ahead: all survivors extend it",
                  (*fresh(torch.tensor([[-0.5, -9.0, -10.0]]), 2), next_log_probs(1, 3, 5), eos, 0.0)))
    behind = next_log_probs(1, 2, 6)
    behind[0, 0] = torch.log_softmax(0.01 * torch.arange(6.0), dim=-1)  # beam 0: none stands out
    behind[0, 1, 3] = -0.01  # beam 1: one almost certain token
    fixed.append(("a beam behind with one sure token overtakes",
                  (*fresh(torch.tensor([[-1.0, -1.5]]), 2), behind, eos, 0.0)))
    done = next_log_probs(1, 3, 6)
    fixed.append(("beam 0 finished: it survives as it is, its length kept",
                  (torch.tensor([[-1.2, -2.0, -2.5]]), torch.tensor([[2, 4, 4]]),
                   torch.tensor([[True, False, False]]), done, eos, 1.0)))
    ending = next_log_probs(1, 2, 5)
    ending[0, 0, eos] = -0.05  # beam 0 almost surely ends now
    fixed.append(("a beam that produces <eos> becomes finished",
                  (*fresh(torch.tensor([[-0.3, -0.4]]), 3), ending, eos, 0.6)))
    fixed.append(("alpha = 1: a longer beam with a better mean wins",
                  (torch.tensor([[-1.0, -1.5]]), torch.tensor([[1, 5]]),
                   torch.tensor([[True, False]]), torch.log_softmax(torch.tensor([[[0.0] * 4,
                                                                                 [0.0, 5.0, 0.0, 0.0]]]), -1),
                   eos, 1.0)))
    random = []
    for s in random_sizes(generator, 2, B=(2, 4), k=(2, 5), V=(5, 12), step=(2, 6)):
        log_probs = -randn(generator, s["B"], s["k"]).abs() * 3
        finished = randint(generator, 0, 1, (s["B"], s["k"])).bool()
        lengths = torch.where(finished, randint(generator, 1, s["step"] - 1, (s["B"], s["k"])),
                              s["step"] - 1)
        random.append(("", (log_probs, lengths, finished, next_log_probs(s["B"], s["k"], s["V"]),
                            eos, 0.6)))

    def reference(log_probs, lengths, finished, step_log_probs, eos, alpha):
        beams, parents, tokens = advance_beams(Beams(log_probs, lengths, finished), step_log_probs,
                                               eos, alpha)
        return (*beams, parents, tokens)

    def details(log_probs, lengths, finished, step_log_probs, eos, alpha):
        B, k, V = step_log_probs.shape
        return f"B={B}, k={k}, V={V}, eos={eos}, alpha={alpha}"

    cases = labelled(fixed + random, details)
    run_check("advance_beams", fn, cases, reference=reference,
              hints=("A candidate's total adds its beam's log-probability to its token's; a finished "
                     "beam has a single candidate, itself. Rank all k * V candidates of a sentence "
                     "at once, by the score the length penalty gives them.",
                     "Where finished, replace the beam's step_log_probs by 0 for <eos> and -inf for "
                     "every other token; candidates = log_probs[..., None] + step_log_probs; their "
                     "lengths are lengths where finished, lengths + 1 elsewhere; score = candidates / "
                     "length[..., None] ** alpha; flatten each sentence to (B, k * V), take "
                     "topk(k) of the scores, candidate index c is beam c // V with token c % V; "
                     "gather the totals, the lengths (by parent) and finished (by parent, or the "
                     "token is <eos>)."),
              hint=hint)
