"""The checks of notebook 09_transformer_in_practice's coding exercises: label smoothing over the
real tokens only, and one step of beam search."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..decoding import Beams, advance_beams
from .cases import labelled, randint, randn, random_lengths, random_sizes, seeded_generator
from .runner import Symptom, run_check

__all__ = ['check_real_token_smoothing', 'check_advance_beams']


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
                     uniform_part="mean", target_in_uniform=True, target_weight="1 - eps"):
    """Label smoothing over the real tokens, right by default; each other value of an argument
    is a classic mistake."""
    B, T, V = logits.shape
    valid = torch.arange(T)[None, :] < valid_lens[:, None]  # (B, T)
    log_p = (torch.log(torch.softmax(logits, dim=-1)) if log == "log(softmax)"
             else torch.log_softmax(logits, dim=-1))  # (B, T, V)
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
        uniform = -total / count if uniform_part == "mean" else -total
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


def _wrong_advance_beams(log_probs, lengths, finished, step_log_probs, eos, alpha,
                         finished_continue="with <eos> free", totals="added", grow="unfinished",
                         rank="by sentence", order="best first", unravel="by V",
                         normalise=True, ended="parent or <eos>", returned="totals",
                         outputs="in order", select="topk", gather="by index"):
    """One beam-search step, right by default; each other value of an argument is a classic
    mistake."""
    B, k, V = step_log_probs.shape
    if finished_continue == "dropped":  # no candidate at all
        step_log_probs = step_log_probs.masked_fill(finished[..., None], float("-inf"))
    elif finished_continue != "like the others":
        carry = torch.full_like(step_log_probs, float("-inf"))
        carry[..., eos] = 0.0 if finished_continue == "with <eos> free" else \
            step_log_probs[..., eos]
        step_log_probs = torch.where(finished[..., None], carry, step_log_probs)
    candidates = log_probs[..., None] + step_log_probs if totals == "added" else step_log_probs
    new_lengths = {"unfinished": torch.where(finished, lengths, lengths + 1),
                   "all": lengths + 1, "none": lengths}[grow]
    penalty = new_lengths[..., None].to(candidates.dtype) ** (alpha if normalise != "length"
                                                              else 1)
    scores = candidates / penalty if normalise else candidates
    if normalise == "multiplied":
        scores = candidates * penalty
    if rank == "by beam":  # each beam keeps its own best token, beams ranked by it
        best_token = scores.argmax(dim=-1)  # (B, k)
        index = torch.arange(k)[None, :] * V + best_token
        index = index.gather(1, scores.reshape(B, k * V).gather(1, index).argsort(
            dim=-1, descending=True))
    elif rank == "whole batch":
        index = (scores.reshape(-1).topk(B * k).indices % (k * V)).reshape(B, k)
    else:
        flat = scores.reshape(B, k * V)  # (equal candidates, -inf ones say, come in either order)
        index = (flat.topk(k, dim=-1, largest=order == "best first").indices if select == "topk"
                 else flat.sort(dim=-1, descending=order == "best first").indices[:, :k])
    parents, tokens = {"by V": (index // V, index % V), "by k": (index % k, index // k),
                       "divmod k": (index // k, index % k)}[unravel]
    done = finished.gather(1, parents)
    if ended == "parent or <eos>":
        done = done | (tokens == eos)
    if gather == "by parents and tokens":  # the candidates found again from what was unravelled
        index = parents * V + tokens
    chosen = (candidates if returned == "totals" else scores).reshape(B, k * V).gather(1, index)
    results = (chosen, new_lengths.gather(1, parents), done, parents, tokens)
    return results if outputs == "in order" else results[:3] + (tokens, parents)


def _worst_first(result, log_probs, lengths, finished, step_log_probs, eos, alpha) -> bool:
    """Whether the survivors are the k worst candidates, worst first (whichever of tied
    candidates were taken)."""
    B, k, V = step_log_probs.shape
    carry = torch.full_like(step_log_probs, float("-inf"))
    carry[..., eos] = 0.0
    step = torch.where(finished[..., None], carry, step_log_probs)
    lengths = torch.where(finished, lengths, lengths + 1)
    scores = ((log_probs[..., None] + step) / lengths[..., None].to(step.dtype) ** alpha)
    worst = scores.reshape(B, k * V).sort(dim=-1).values[:, :k]  # (B, k), worst first
    parents, tokens = result[3], result[4]
    chosen = scores.reshape(B, k * V).gather(1, parents * V + tokens)
    return bool(torch.equal(chosen, worst))


def _beams(**mistake) -> tuple:
    """:func:`_wrong_advance_beams` making ``mistake``, choosing the survivors with topk, and with
    a sort (which orders equal candidates otherwise)."""
    return tuple(partial(_wrong_advance_beams, select=select, **mistake)
                 for select in ("topk", "sort"))


_ADVANCE_BEAMS_MISTAKES = {
    "Your beams each keep their own best token: the k survivors are the best of all k * V "
    "candidates of the sentence, several of them may extend one beam.": _beams(rank="by beam"),
    "Your candidates' totals leave out their beam's log-probability: a candidate's total adds "
    "its beam's log-probability to its token's.": _beams(totals="step"),
    "Your candidate index is split with k instead of V: a sentence's k * V candidates are laid "
    "out beam by beam, V tokens each.": tuple(
        variant for unravel in ("by k", "divmod k")
        for gather in ("by index", "by parents and tokens")
        for variant in _beams(unravel=unravel, gather=gather)),
    "Your top k runs over the whole batch: each sentence keeps its own k best candidates.":
        _beams(rank="whole batch"),
    "Your survivors come worst first: the k best candidates, best first.": (
        *_beams(order="worst first"), Symptom(_worst_first)),
    "Your finished beams are extended like the others: a finished beam has one candidate, "
    "itself, continued by <eos> at no cost.": _beams(finished_continue="like the others"),
    "Your finished beams are dropped: a finished beam stays a candidate, itself, its "
    "log-probability and length unchanged.": _beams(finished_continue="dropped"),
    "Your finished beams pay for their <eos>: a finished beam continues at no cost, its "
    "log-probability unchanged.": _beams(finished_continue="with <eos> paid"),
    "Your finished beams grow longer: a finished beam keeps its length.": _beams(grow="all"),
    "Your lengths do not grow: a candidate that extends an unfinished beam is one token longer.":
        _beams(grow="none"),
    "Your candidates are ranked by their total log-probability: they are ranked by log P / "
    "length^alpha.": _beams(normalise=False),
    "Your scores multiply log P by the length penalty: they divide it by length^alpha.":
        _beams(normalise="multiplied"),
    "Your scores divide by the length itself: the length penalty divides by the length to the "
    "power alpha.": _beams(normalise="length"),
    "Your new log_probs are the length-normalised scores: the beams keep their total "
    "log-probabilities; the normalised score only ranks them.": _beams(returned="scores"),
    "Your beams that produce <eos> are not marked finished: a candidate whose token is <eos> is "
    "finished.": _beams(ended="parent only"),
    "You return tokens before parents: the results are (log_probs, lengths, finished, parents, "
    "tokens).": _beams(outputs="swapped"),
}


def check_advance_beams(fn: Callable, seed: int = 0, hint: int = 1, *,
                        verbose: bool = False) -> None:
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
              hint=hint, mistakes=_ADVANCE_BEAMS_MISTAKES, verbose=verbose)


MISTAKES = {"check_real_token_smoothing": _REAL_TOKEN_SMOOTHING_MISTAKES,
            "check_advance_beams": _ADVANCE_BEAMS_MISTAKES}  # the catalogues, for the tests
