"""The checks of notebook 10_decoding's coding exercises: one step of beam search, and the beams
that survive it continuing from their parents."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

from ..attention import KVCache
from ..decoding import Beams, advance_beams
from .cases import labelled, randint, randn, random_sizes, seeded_generator
from .runner import N_, Symptom, exercise_check, run_check

__all__ = ['check_advance_beams', 'check_follow_parents']


def _wrong_advance_beams(log_probs, lengths, finished, step_log_probs, eos, alpha,
                         finished_continue="with <eos> free", totals="added", grow="unfinished",
                         rank="by sentence", order="best first", unravel="by V",
                         normalise=True, ended="parent or <eos>", returned="totals",
                         outputs="in order", select="topk", gather="by index",
                         penalty_lengths="new", reorder=("lengths", "finished")):
    """One beam-search step, right by default; each other value of an argument is a classic
    mistake. penalty_lengths "old": the length penalty of the lengths before this step; reorder:
    what is taken from each survivor's parent."""
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
    penalised = new_lengths if penalty_lengths == "new" else lengths
    penalty = penalised[..., None].to(candidates.dtype) ** (alpha if normalise != "length" else 1)
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
    done = finished.gather(1, parents) if "finished" in reorder else finished
    if ended == "parent or <eos>":
        done = done | (tokens == eos)
    if gather == "by parents and tokens":  # the candidates found again from what was unravelled
        index = parents * V + tokens
    chosen = (candidates if returned == "totals" else scores).reshape(B, k * V).gather(1, index)
    if returned == "parents' totals":  # the parent's total, without the chosen token
        chosen = log_probs.gather(1, parents)
    results = (chosen, new_lengths.gather(1, parents) if "lengths" in reorder else new_lengths,
               done, parents, tokens)
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
    N_("Your beams each keep their own best token: the k survivors are the best of all k * V "
       "candidates of the sentence, several of them may extend one beam."): _beams(rank="by beam"),
    N_("Your candidates' totals leave out their beam's log-probability: a candidate's total adds "
       "its beam's log-probability to its token's."): _beams(totals="step"),
    N_("Your candidate index is split with k instead of V: a sentence's k * V candidates are laid "
       "out beam by beam, V tokens each."): tuple(
        variant for unravel in ("by k", "divmod k")
        for gather in ("by index", "by parents and tokens")
        for variant in _beams(unravel=unravel, gather=gather)),
    N_("Your top k runs over the whole batch: each sentence keeps its own k best candidates."):
        _beams(rank="whole batch"),
    N_("Your survivors come worst first: the k best candidates, best first."): (
        *_beams(order="worst first"), Symptom(_worst_first)),
    N_("Your finished beams are extended like the others: a finished beam has one candidate, "
       "itself, continued by <eos> at no cost."): _beams(finished_continue="like the others"),
    N_("Your finished beams are dropped: a finished beam stays a candidate, itself, its "
       "log-probability and length unchanged."): _beams(finished_continue="dropped"),
    N_("Your finished beams pay for their <eos>: a finished beam continues at no cost, its "
       "log-probability unchanged."): _beams(finished_continue="with <eos> paid"),
    N_("Your finished beams grow longer: a finished beam keeps its length."): _beams(grow="all"),
    N_("Your lengths do not grow: a candidate that extends an unfinished beam is one token "
       "longer."):
        _beams(grow="none"),
    N_("Your candidates are ranked by their total log-probability: they are ranked by log P / "
       "length^alpha."): _beams(normalise=False),
    N_("Your scores multiply log P by the length penalty: they divide it by length^alpha."):
        _beams(normalise="multiplied"),
    N_("Your scores divide by the length itself: the length penalty divides by the length to the "
       "power alpha."): _beams(normalise="length"),
    N_("Your new log_probs are the length-normalised scores: the beams keep their total "
       "log-probabilities; the normalised score only ranks them."): _beams(returned="scores"),
    N_("Your beams that produce <eos> are not marked finished: a candidate whose token is <eos> is "
       "finished."): _beams(ended="parent only"),
    N_("You return tokens before parents: the results are (log_probs, lengths, finished, parents, "
       "tokens)."): _beams(outputs="swapped"),
    N_("Your length penalty uses the lengths before this step: a candidate that extends an "
       "unfinished beam is ranked with its new length, one token longer."):
        _beams(penalty_lengths="old"),
    N_("Your new log_probs leave out the chosen token's log-probability: a survivor's total is its "
       "parent's plus its token's."): _beams(returned="parents' totals"),
    N_("Your lengths or finished flags stay in the order of the old beams: each survivor takes "
       "those of its parent."): tuple(variant for reorder in (("finished",), ("lengths",), ())
                                  for variant in _beams(reorder=reorder)),
}


@exercise_check
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
    fixed.append((N_("k = 1 (greedy decoding)"),
                  (*fresh(randn(generator, 2, 1).abs().neg(), 3), next_log_probs(2, 1, 6), eos, 0.0)))
    first = torch.full((2, 3), float("-inf"))
    first[:, 0] = 0.0  # only beam 0 is live: the first step of a search
    fixed.append((N_("the first step: beams 1 and 2 not started (-inf)"),
                  (*fresh(first), next_log_probs(2, 3, 7), eos, 0.6)))
    fixed.append((N_("one beam far ahead: all survivors extend it"),
                  (*fresh(torch.tensor([[-0.5, -9.0, -10.0]]), 2), next_log_probs(1, 3, 5), eos, 0.0)))
    behind = next_log_probs(1, 2, 6)
    behind[0, 0] = torch.log_softmax(0.01 * torch.arange(6.0), dim=-1)  # beam 0: none stands out
    behind[0, 1, 3] = -0.01  # beam 1: one almost certain token
    fixed.append((N_("a beam behind with one sure token overtakes"),
                  (*fresh(torch.tensor([[-1.0, -1.5]]), 2), behind, eos, 0.0)))
    done = next_log_probs(1, 3, 6)
    fixed.append((N_("beam 0 finished: it survives as it is, its length kept"),
                  (torch.tensor([[-1.2, -2.0, -2.5]]), torch.tensor([[2, 4, 4]]),
                   torch.tensor([[True, False, False]]), done, eos, 1.0)))
    ending = next_log_probs(1, 2, 5)
    ending[0, 0, eos] = -0.05  # beam 0 almost surely ends now
    fixed.append((N_("a beam that produces <eos> becomes finished"),
                  (*fresh(torch.tensor([[-0.3, -0.4]]), 3), ending, eos, 0.6)))
    fixed.append((N_("alpha = 1: a longer beam with a better mean wins"),
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
              hints=(N_("A candidate's total adds its beam's log-probability to its token's; a "
                        "finished beam has a single candidate, itself. Rank all k * V candidates "
                        "of a sentence at once, by the score the length penalty gives them."),
                     N_("A finished beam's only candidate is itself, at no cost and no extra "
                        "length; every other candidate adds a token's log-probability and one to "
                        "the length. Score all k * V candidates of a sentence by total / length ** "
                        "alpha, keep the best k, and read each one's parent beam and token from "
                        "its index."),
                     N_("Where finished, replace the beam's step_log_probs by 0 for <eos> and -inf "
                        "for every other token; candidates = log_probs[..., None] + "
                        "step_log_probs; their lengths are lengths where finished, lengths + 1 "
                        "elsewhere; score = candidates / length[..., None] ** alpha; flatten each "
                        "sentence to (B, k * V), take topk(k) of the scores, candidate index c is "
                        "beam c // V with token c % V; gather the totals, the lengths (by parent) "
                        "and finished (by parent, or the token is <eos>).")),
              hint=hint, mistakes=_ADVANCE_BEAMS_MISTAKES, verbose=verbose)


# follow_parents: each surviving beam continues from its parent ---------------------------------

def _follow_parents(tokens, keys, values, parents, new_tokens):
    """The reference: the rows of the parents, copied as a decoding state's KVCache.reorder copies
    them, then the new tokens appended."""
    B, k = parents.shape
    rows = (torch.arange(B)[:, None] * k + parents).reshape(-1)  # (B*k,) the parents' rows
    cache = KVCache()
    cache.append(keys, values)
    cache.reorder(rows)
    return torch.cat([tokens[rows], new_tokens.reshape(-1, 1)], dim=1), cache.keys, cache.values


def _wrong_follow_parents(tokens, keys, values, parents, new_tokens, rows="b * k + parent",
                          copy="gather", append="after", cache="both", axis=0, order="by sentence"):
    """Each surviving beam continues from its parent, right by default; each other value of an
    argument is a classic mistake."""
    B, k = parents.shape
    sentence = torch.arange(B)[:, None]
    index = {"b * k + parent": sentence * k + parents, "parent": parents,
             "parent * B + b": parents * B + sentence,
             "b * B + parent": sentence * B + parents}[rows]
    added = new_tokens
    if order == "by beam":  # the output laid out beam-major too
        index, added = index.T, new_tokens.T
    index, added = index.reshape(-1), added.reshape(-1, 1)

    def moved(x, dim=0):
        if copy != "gather" and copy != "in place":  # each old row sent to where its child goes
            out = x.clone() if copy == "scatter" else torch.zeros_like(x)
            out[index] = x
            return out
        if copy == "in place":  # rows copied one by one into the same tensor
            out = x.clone()
            for r, parent in enumerate(index.tolist()):
                out.select(dim, r).copy_(out.select(dim, parent))
            return out
        return x.index_select(dim, index)

    if append == "before":  # the new tokens put beside the old rows, then the rows reordered
        new = moved(torch.cat([tokens, added], dim=1))
    elif append == "not reordered":
        new = torch.cat([tokens, added], dim=1)
    else:
        new = torch.cat([moved(tokens), added], dim=1)
    new_keys = moved(keys, axis) if cache in ("both", "keys") else keys
    new_values = moved(values, axis) if cache in ("both", "values") else values
    return new, new_keys, new_values


def _parents(**mistake):
    return partial(_wrong_follow_parents, **mistake)


_FOLLOW_PARENTS_MISTAKES = {
    N_("Your rows are the parents themselves: a parent numbers a beam of its own sentence (0 .. "
       "k-1), and sentence b's beams are rows b * k .. b * k + k - 1 of the batch."):
        _parents(rows="parent"),
    N_("Your rows take the batch as laid out otherwise: beam j of sentence b is row b * k + j, the "
       "k beams of a sentence side by side."): (
        _parents(rows="parent * B + b"), _parents(rows="parent * B + b", order="by beam"),
        _parents(rows="b * B + parent")),
    N_("Your new rows receive the old ones where their children go: each new row copies the row of "
       "its parent; several may copy one parent, and a beam with no child is dropped."):
        (_parents(copy="scatter"), _parents(copy="scatter into zeros")),
    N_("Your copies read rows already overwritten: copied one by one into the same tensor, a row "
       "gets a parent that an earlier copy replaced; read every parent from the old rows."):
        _parents(copy="in place"),
    N_("Your new tokens are placed before the rows are reordered: new_tokens is already in the "
       "order of the new beams, so it goes after the parents' tokens."): _parents(append="before"),
    N_("Your tokens so far stay where they were: a beam's tokens are its parent's, followed by its "
       "new token."): _parents(append="not reordered"),
    N_("Your keys and values do not follow the beams: a beam continues from its parent, so its "
       "cached keys and values, both of them, are its parent's."): (
        _parents(cache="none"), _parents(cache="keys"), _parents(cache="values")),
    N_("Your keys and values are reordered along another axis than the beams': the rows of the "
       "batch are their first axis, (B*k, h, t, d_k)."): (_parents(axis=1), _parents(axis=2)),
}


@exercise_check
def check_follow_parents(fn: Callable, seed: int = 0, hint: int = 1, *,
                         verbose: bool = False) -> None:
    """fn(tokens, keys, values, parents, new_tokens) -> (tokens, keys, values): each beam that
    survived a step of beam search continues from its parent. tokens (B*k, t): each beam's tokens
    so far; keys, values (B*k, h, t, d_k): a self-attention cache of those tokens; row b * k + j
    is beam j of sentence b. parents, new_tokens (B, k): what :func:`~d2lhelpers.advance_beams`
    returns, the beam (0 .. k-1 of its sentence) each new beam extends and its token. Returns the
    new beams' tokens (B*k, t + 1), their parents' tokens then their own, and their parents' keys
    and values, as ``KVCache.reorder`` keeps them."""
    generator = seeded_generator(seed)
    bos = 1

    def case(B, k, t, parents, h=2, d_k=3):
        tokens = randint(generator, 3, 19, (B * k, t))
        tokens[:, 0] = bos  # every beam starts with <bos>
        keys, values = randn(generator, B * k, h, t, d_k), randn(generator, B * k, h, t, d_k)
        return tokens, keys, values, parents, randint(generator, 2, 19, parents.shape)

    zeros = partial(torch.zeros, dtype=torch.long)
    fixed = [(N_("B = 1: the survivors extend beams 2, 0 and 1"),
              case(1, 3, 3, torch.tensor([[2, 0, 1]]))),
             (N_("k = 1 (greedy): every beam continues itself"), case(3, 1, 2, zeros(3, 1))),
             (N_("two survivors extend beam 0 of sentence 1"),
              case(2, 3, 2, torch.tensor([[0, 1, 2], [1, 0, 0]]))),
             (N_("two beams swap in sentence 1"),
              case(3, 2, 4, torch.tensor([[0, 1], [1, 0], [1, 1]]))),
             (N_("more heads than rows (h = 4)"), case(1, 2, 2, torch.tensor([[1, 1]]), h=4))]
    fixed.append((N_("the first step: every beam extends beam 0, after <bos> alone"),
                  case(2, 3, 1, zeros(2, 3))))
    random = []
    for s in random_sizes(generator, 2, B=(2, 4), k=(2, 4), t=(1, 5), h=(1, 3), d_k=(2, 4)):
        parents = randint(generator, 0, s["k"] - 1, (s["B"], s["k"]))
        random.append(("", case(s["B"], s["k"], s["t"], parents, s["h"], s["d_k"])))

    def details(tokens, keys, values, parents, new_tokens):
        B, k = parents.shape
        return f"B={B}, k={k}, t={tokens.shape[1]}, keys {tuple(keys.shape)}"

    cases = labelled(fixed + random, details)
    run_check("follow_parents", fn, cases, reference=_follow_parents,
              hints=(N_("New row b * k + j is beam j of sentence b, and parents[b, j] numbers a "
                        "beam of the same sentence: which old row is that? Several new beams may "
                        "share one parent."),
                     N_("Old row of new beam (b, j): sentence b's block of k rows, offset by "
                        "parents[b, j]. Gather the tokens and the cache's keys and values by those "
                        "rows, then add the new tokens as a column."),
                     N_("rows = b * k + parents[b, j] for every (b, j), flattened in that order to "
                        "(B*k,) (torch.arange(B)[:, None] * k + parents); index the old tokens, "
                        "keys and values with it along their first axis (indexing copies, so a "
                        "parent read twice is no problem); then append new_tokens, flattened the "
                        "same way, as the tokens' last column.")),
              hint=hint, mistakes=_FOLLOW_PARENTS_MISTAKES, verbose=verbose)


MISTAKES = {"check_advance_beams": _ADVANCE_BEAMS_MISTAKES,
            "check_follow_parents": _FOLLOW_PARENTS_MISTAKES}  # the catalogue, for the tests
