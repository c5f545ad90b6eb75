"""The checks of notebook 03_attention_scoring's coding exercises: Luong's multiplicative scores,
and the valid lengths of a causal mask."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..attention import causal_valid_lens, masked_softmax
from .cases import labelled, randn, random_sizes, seeded_generator
from .runner import run_check

__all__ = ['check_multiplicative_scores', 'check_causal_lens']


def check_multiplicative_scores(fn: Callable, seed: int = 0, hint: int = 1) -> None:
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
              hint=hint)


def check_causal_lens(fn: Callable, seed: int = 0, hint: int = 1) -> None:
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
              hint=hint)
