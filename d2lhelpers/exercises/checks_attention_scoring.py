"""The checks of notebook 03_attention_scoring's coding exercises: Luong's multiplicative scores,
and the valid lengths of a causal mask."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from ..attention import causal_valid_lens, masked_softmax
from .cases import labelled, randn, random_sizes, seeded_generator
from .runner import Symptom, run_check

__all__ = ['check_multiplicative_scores', 'check_causal_lens']


# The classic mistakes, each as the function that makes it ----------------------------------------

def _wrong_scores(queries, keys, W, transpose_W=False, scale=None, transpose_scores=False,
                  softmax=None, squash=False):
    """Luong's scores, right by default; each argument away from its default is a mistake."""
    scores = queries @ (W.T if transpose_W else W) @ keys.transpose(1, 2)  # (B, T_q, T_k)
    if scale == "queries":
        scores = scores / math.sqrt(queries.shape[-1])
    elif scale == "keys":
        scores = scores / math.sqrt(keys.shape[-1])
    elif scale in ("q_size", "k_size"):
        scores = scores / (queries if scale == "q_size" else keys).shape[-1]
    if softmax is not None:
        scores = torch.softmax(scores, dim=softmax)
    if squash:
        scores = torch.tanh(scores)
    return scores.transpose(1, 2) if transpose_scores else scores


_MULTIPLICATIVE_SCORES_MISTAKES = {
    "Your W is transposed: with W of shape (q_size, k_size), the query goes on its left and the "
    "key on its right, q W k.": partial(_wrong_scores, transpose_W=True),
    "Your scores are scaled by a width (or its square root): Luong's multiplicative score is "
    "q W k itself, without a scale.": tuple(partial(_wrong_scores, scale=scale)
                                            for scale in ("queries", "keys", "q_size", "k_size")),
    "Your scores are transposed, (B, T_k, T_q): row i must hold query i's scores against every "
    "key, (B, T_q, T_k).": partial(_wrong_scores, transpose_scores=True),
    "Your scores mix the sequences of the batch, (B * T_q, B * T_k): each sequence's queries "
    "score against its own keys only, a batched product.": Symptom(
        lambda got, queries, keys, W: tuple(got.shape) == (queries.shape[0] * queries.shape[1],
                                                           keys.shape[0] * keys.shape[1])),
    "Your scores go through a tanh, as in additive attention: the multiplicative score is q W k "
    "itself.": partial(_wrong_scores, squash=True),
    "You return attention weights (a softmax of the scores): the exercise asks for the scores "
    "themselves.": tuple(partial(_wrong_scores, softmax=dim) for dim in (-1, -2, 0)),
}


def check_multiplicative_scores(fn: Callable, seed: int = 0, hint: int = 1, *,
                                verbose: bool = False) -> None:
    """fn(queries (B, T_q, q_size), keys (B, T_k, k_size), W (q_size, k_size)) -> scores
    (B, T_q, T_k) with score[b, i, j] = queries[b, i] @ W @ keys[b, j]."""
    generator = seeded_generator(seed)
    fixed = [(dict(B=2, T_q=3, T_k=4, q_size=5, k_size=6), torch.float32, ""),
             (dict(B=1, T_q=1, T_k=7, q_size=3, k_size=3), torch.float32, "a single query"),
             (dict(B=3, T_q=2, T_k=1, q_size=4, k_size=2), torch.float32, "a single key"),
             (dict(B=2, T_q=2, T_k=3, q_size=2, k_size=5), torch.float64, "float64")]
    random = [(s, torch.float32, "") for s in
              random_sizes(generator, 2, B=(1, 3), T_q=(1, 5), T_k=(1, 5), q_size=(1, 6), k_size=(1, 6))]
    entries = [(what, (randn(generator, s["B"], s["T_q"], s["q_size"], dtype=dtype),
                       randn(generator, s["B"], s["T_k"], s["k_size"], dtype=dtype),
                       randn(generator, s["q_size"], s["k_size"], dtype=dtype)))
               for s, dtype, what in fixed + random]
    cases = labelled(entries, lambda *args: ", ".join(
        f"{name} {tuple(a.shape)}" for name, a in zip(("queries", "keys", "W"), args)))
    run_check("multiplicative_scores", fn, cases,
              reference=lambda queries, keys, W: torch.einsum("bip,pq,bjq->bij", queries, W, keys),
              hints=("Write the score of one query and one key first, then find the batched "
                     "product that computes them all; check on which side of W each one goes.",
                     "score [b, i, j] is queries[b, i] @ W @ keys[b, j]; batched products (@) "
                     "with keys.transpose(1, 2) compute all of them at once, shape (B, T_q, T_k). "
                     "W is (q_size, k_size): it goes between the queries and the keys, "
                     "untransposed."),
              hint=hint, mistakes=_MULTIPLICATIVE_SCORES_MISTAKES, verbose=verbose)


def _shaped(got, *shapes) -> bool:
    """Whether ``got`` is a tensor of one of the given shapes."""
    return isinstance(got, torch.Tensor) and tuple(got.shape) in shapes


def _causal_mask(got, B, T) -> bool:
    """Whether ``got`` is a causal mask of the keys (T, T) or (B, T, T): 1 (or True) where key j
    <= query i, 0 elsewhere."""
    if not _shaped(got, (B, T, T), (T, T)):
        return False
    seen = torch.ones(T, T).tril()
    return bool((got.to(torch.float64) == seen.to(torch.float64)).all())


_CAUSAL_LENS_MISTAKES = {
    "You return one row of lengths (T_q,): the exercise asks for one row per sequence, "
    "(B, T_q).": Symptom(lambda got, B, T: _shaped(got, (T,))),
    "Your lengths have shape (T_q, B): one row per sequence, (B, T_q), is expected.":
        Symptom(lambda got, B, T: _shaped(got, (T, B))),
    "You return one length per sequence (B,): a causal mask needs one per query, (B, T_q).":
        Symptom(lambda got, B, T: _shaped(got, (B,))),
    "You return a mask of the keys each query sees: the exercise asks for how many keys each "
    "query sees, a valid length per query (B, T_q).":
        Symptom(_causal_mask),
    "Your lengths are one short: query i sees keys 0 .. i; does it see itself?":
        lambda B, T: torch.arange(T).expand(B, T),
    "Your lengths are one too long: query i sees keys 0 .. i, and no further.":
        lambda B, T: torch.arange(2, T + 2).expand(B, T),
    "Your lengths let every query see all the keys: query i may see keys 0 .. i only.":
        lambda B, T: torch.full((B, T), T),
    "Your lengths let every query see key 0 only: query i sees keys 0 .. i.":
        lambda B, T: torch.ones(B, T, dtype=torch.long),
    "Your lengths run backwards (query 0 sees the most keys): query i sees keys 0 .. i.":
        lambda B, T: torch.arange(T, 0, -1).expand(B, T),
    "Your lengths grow along the batch, not along the queries: they count the keys of each "
    "query, and are the same for every sequence.":
        lambda B, T: torch.arange(1, B + 1)[:, None].expand(B, T),
}


def check_causal_lens(fn: Callable, seed: int = 0, hint: int = 1, *,
                      verbose: bool = False) -> None:
    """fn(batch_size, num_queries) -> valid lengths (B, T_q) under which d2lh.masked_softmax lets
    query i see keys 0 .. i only. Compared through the weights masked_softmax gives equal scores."""

    generator = seeded_generator(seed)
    sizes = [(2, 5), (1, 1), (3, 4)]
    sizes += [(s["B"], s["T"]) for s in random_sizes(generator, 2, B=(1, 4), T=(1, 9))]
    cases = [(f"B={B}, T_q={T}" + (" (a single query)" if T == 1 else ""), (B, T))
             for B, T in sizes]

    def weights(lengths, B, T):  # equal scores: uniform weights over the keys each query sees
        return masked_softmax(torch.zeros(B, T, T), lengths)

    run_check("causal_lens (through d2lh.masked_softmax)", fn, cases,
              reference=causal_valid_lens,  # (B, T): query i sees keys 0..i
              compare_through=("passed to d2lh.masked_softmax as valid lengths", weights),
              hints=("A valid length counts the keys a query may see, starting from key 0. How "
                     "many keys may query 0 see? And query 1?",
                     "query i sees keys 0..i, so its valid length is i + 1: lengths 1, 2, ..., "
                     "T_q for every sequence, shape (B, T_q)."),
              hint=hint, mistakes=_CAUSAL_LENS_MISTAKES, verbose=verbose)


MISTAKES = {"check_multiplicative_scores": _MULTIPLICATIVE_SCORES_MISTAKES,
            "check_causal_lens": _CAUSAL_LENS_MISTAKES}  # the catalogues, for the tests
