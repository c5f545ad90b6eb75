"""The checks of notebook 01_queries_keys_values's coding exercises: a batched lookup whose
temperature runs from the hard lookup (0) to average pooling (infinity), and attention between two
sequences as a module."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from ..attention import DotProductAttention
from .cases import (labelled, load_linear_weights, randint, randn, random_floats, random_sizes,
                    seeded_generator)
from .runner import N_, Symptom, _, exercise_check, run_check

__all__ = ['check_lookup', 'check_cross_attention']


def _columns_sum_to_one(weights) -> bool:
    """Whether each column of the weights (..., T_q, T_k) sums to 1 over the queries while the
    rows do not sum to 1 over the keys."""
    A = torch.as_tensor(weights).double()
    return (A.dim() >= 2 and A.shape[-2] > 1 and A.shape[-1] > 1
            and torch.allclose(A.sum(-2), torch.ones_like(A.sum(-2)))
            and not torch.allclose(A.sum(-1), torch.ones_like(A.sum(-1))))


# The lookup with a temperature: the classic mistakes, each as the function that makes it ---------

def _hard_weights(scores: torch.Tensor, ties="share") -> torch.Tensor:
    """The limit of the softmax of scores / t as t falls to 0: equal weights on the keys of the
    largest score of each row ("share"); the mistakes: "first" (one-hot at the first of them) and
    "unnormalised" (1 on each of them)."""
    if ties == "first":
        return torch.nn.functional.one_hot(scores.argmax(-1), scores.shape[-1]).to(scores.dtype)
    top = (scores == scores.amax(-1, keepdim=True)).to(scores.dtype)
    return top if ties == "unnormalised" else top / top.sum(-1, keepdim=True)


def _wrong_lookup(queries, keys, values, temperature, use="divides", scale="sqrt d", zero="limit",
                  axis=-1, order="outputs first"):
    """The lookup, right by default; every other value of an argument is a classic mistake.
    use: what the temperature does to the scores; scale: what else divides them; zero: what
    temperature 0 gives ("limit": the hard lookup, "formula": the scores divided by 0, "first",
    "unnormalised": see _hard_weights); axis: that of the softmax."""
    d = queries.shape[-1]
    scores = queries @ keys.transpose(-2, -1)  # (B, T_q, T_k)
    if temperature == 0 and zero != "formula" and use in ("divides", "inside the root"):
        weights = _hard_weights(scores, ties="share" if zero == "limit" else zero)
    else:
        divisor = {"sqrt d": math.sqrt(d), "none": 1.0}[scale]
        if use == "divides":
            scores = scores / (temperature * divisor)
        elif use == "inside the root":
            scores = scores / math.sqrt(temperature * d)
        elif use == "multiplies":
            scores = scores * temperature / divisor
        else:  # the temperature ignored
            scores = scores / divisor
        weights = torch.softmax(scores, dim=axis)
    outputs = weights @ values  # (B, T_q, d_v)
    return (outputs, weights) if order == "outputs first" else (weights, outputs)


def _divided_by_zero(result, queries, keys, values, temperature) -> bool:
    """Whether the learner's function, at temperature 0, raised ZeroDivisionError or returned
    NaN weights."""
    if temperature != 0:
        return False
    if isinstance(result, ZeroDivisionError):
        return True
    return isinstance(result, (tuple, list)) and len(result) == 2 and bool(
        torch.as_tensor(result[1]).isnan().any())


_LOOKUP_MISTAKES = {
    N_("At temperature 0 your function divides by 0 (NaN weights, or ZeroDivisionError): "
       "temperature 0 is the limit of the softmax as the temperature falls to 0, a case of its "
       "own."): (partial(_wrong_lookup, zero="formula"), Symptom(_divided_by_zero)),
    N_("At temperature 0 your weights put 1 on a single key where several keys share the largest "
       "score: in the limit, tied keys share the weight equally."): partial(_wrong_lookup,
                                                                           zero="first"),
    N_("At temperature 0 your weights give 1 to each key of the largest score: when several keys "
       "tie, the row no longer sums to 1; they share it."): partial(_wrong_lookup,
                                                                    zero="unnormalised"),
    N_("Your temperature multiplies the scores: it divides them, so that a low temperature "
       "sharpens the weights and a high one flattens them."): partial(_wrong_lookup,
                                                                      use="multiplies"),
    N_("Your function ignores the temperature: the scores are divided by it."):
        partial(_wrong_lookup, use="ignored"),
    N_("Your scores are divided by sqrt(temperature * d): the temperature divides them as it is, "
       "and sqrt(d) on top of it."): partial(_wrong_lookup, use="inside the root"),
    N_("Your scores are not divided by sqrt(d): the lookup is scaled dot-product attention at "
       "temperature 1, softmax(Q K^T / (temperature sqrt(d)))."): (
        partial(_wrong_lookup, scale="none"), partial(_wrong_lookup, scale="none",
                                                      zero="formula")),
    N_("Each column of your weights sums to 1, over the queries: each query's weights must sum to "
       "1 over the keys. Which axis does your softmax normalise?"): (
        partial(_wrong_lookup, axis=-2), Symptom(lambda result, *args: _columns_sum_to_one(
            result[1]))),
    N_("You return (weights, outputs): the exercise asks for the outputs first, (outputs, "
       "weights)."): partial(_wrong_lookup, order="weights first"),
}


def _lookup_cases(generator) -> list[tuple[str, tuple]]:
    """(description, (queries, keys, values, temperature)) cases of check_lookup."""
    def draw(B, T_q, T_k, d, d_v, dtype=torch.float32, whole=False):
        if whole:  # whole numbers: scores tie exactly
            Q, K = randint(generator, -2, 2, (B, T_q, d)), randint(generator, -2, 2, (B, T_k, d))
            best = (Q[:, :1] @ K[:, :-1].transpose(1, 2))[:, 0].argmax(-1)  # (B,): query 0's
            K[:, -1] = K[torch.arange(B), best]  # its best key twice: a tie at the top
            Q, K = Q.to(dtype), K.to(dtype)
        else:
            Q = randn(generator, B, T_q, d, dtype=dtype)
            K = randn(generator, B, T_k, d, dtype=dtype)
        return Q, K, randn(generator, B, T_k, d_v, dtype=dtype)

    entries = [(N_("temperature 1"), (*draw(2, 3, 4, 2, 3), 1.0)),
               (N_("temperature 0 (the hard lookup), whole numbers with ties"),
                (*draw(2, 4, 5, 2, 3, whole=True), 0.0)),
               (N_("temperature 0, no ties"), (*draw(2, 3, 6, 3, 2), 0.0)),
               (N_("temperature inf (average pooling)"), (*draw(2, 2, 5, 3, 2), math.inf)),
               (N_("temperature 3"), (*draw(1, 4, 4, 4, 4), 3.0)),
               (N_("a single key"), (*draw(2, 3, 1, 2, 2), 0.5)),
               (N_("a single query, float64"), (*draw(3, 1, 5, 2, 1, torch.float64), 0.05))]
    temperatures = random_floats(generator, 2, low=0.2, scale=3)
    for s, t in zip(random_sizes(generator, 2, B=(1, 3), T_q=(1, 5), T_k=(1, 6), d=(1, 5),
                                 d_v=(1, 4)), temperatures):
        entries.append(("", (*draw(**s), t)))
    return labelled(entries, lambda Q, K, V, t: _(
        "queries {queries}, keys {keys}, values {values}, temperature {temperature}").format(
            queries=tuple(Q.shape), keys=tuple(K.shape), values=tuple(V.shape),
            temperature=f"{t:.3g}"))


def _reference_lookup(queries, keys, values, temperature):
    return _wrong_lookup(queries, keys, values, temperature)  # every argument at its right value


@exercise_check
def check_lookup(fn: Callable, seed: int = 0, hint: int = 1, *, verbose: bool = False) -> None:
    """fn(queries (B, T_q, d), keys (B, T_k, d), values (B, T_k, d_v), temperature) -> (outputs
    (B, T_q, d_v), weights (B, T_q, T_k)), the weights softmax(Q K^T / (temperature sqrt(d)))
    over the keys; at temperature 0 their limit, equal weights on the keys of the largest score
    (ties share), and at temperature inf equal weights on every key."""
    cases = _lookup_cases(seeded_generator(seed))
    run_check("lookup", fn, cases, _reference_lookup, mistakes=_LOOKUP_MISTAKES, verbose=verbose,
              hints=(N_("Two things decide the weights: what the temperature does to the "
                        "scores, and what is left of the softmax as the temperature falls to 0. "
                        "What do the weights of a row tend to when two keys share its largest "
                        "score?"),
                     N_("Divide the scores by temperature * sqrt(d) and take the softmax over the "
                        "keys; temperature 0 needs a case of its own: every key with the row's "
                        "largest score gets an equal share, the others 0."),
                     N_("scores = Q @ K^T (batched, keys transposed on their last two axes) "
                        "divided by temperature * sqrt(d), softmax over the keys (the last axis). "
                        "At temperature 0 divide by nothing: mark the keys whose score equals the "
                        "row's largest, and give each of them 1 / (their number). Return "
                        "(weights @ values, weights).")),
              hint=hint)


# Attention between two sequences: the classic mistakes, each as the function that makes it -------

def _wrong_cross_attention(W_q, W_k, W_v, queries, context, scale="d", axis=-1,
                           keys_from="context", queries_from="queries", values="projected",
                           mix="weights", order="outputs first"):
    """Attention of the queries over the context, right by default; every other value of an
    argument is a classic mistake."""
    sources = {"queries": queries, "context": context}
    Q = sources[queries_from] @ W_q.T                    # (B, T_q, d)
    K = sources[keys_from] @ W_k.T                       # (B, T_k, d)
    V = {"projected": lambda: sources[keys_from] @ W_v.T, "raw": lambda: sources[keys_from],
         "with W_k": lambda: sources[keys_from] @ W_k.T}[values]()  # (B, T_k, d_v)
    divisor = {"d": W_q.shape[0], "query width": W_q.shape[1], "context width": W_k.shape[1],
               "d_v": W_v.shape[0], "none": 1}[scale]
    weights = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(divisor), dim=axis)  # (B, T_q, T_k)
    outputs = (weights if mix == "weights" else weights.transpose(1, 2)) @ V
    return (outputs, weights) if order == "outputs first" else (weights, outputs)


_CROSS_ATTENTION_MISTAKES = {
    N_("Your scores are not scaled: by what does scaled dot-product attention divide them before "
       "the softmax?"): partial(_wrong_cross_attention, scale="none"),
    N_("Your scores are divided by the square root of an input's width (the queries' or the "
       "context's): the scale is the width d of the projected queries and keys."): (
        partial(_wrong_cross_attention, scale="query width"),
        partial(_wrong_cross_attention, scale="context width")),
    N_("Your scores are divided by the square root of the values' width d_v: the scale is the "
       "width d of the projected queries and keys."): partial(_wrong_cross_attention, scale="d_v"),
    N_("Each column of your weights sums to 1, over the queries: each query's weights must sum to "
       "1 over the context's tokens."): (partial(_wrong_cross_attention, axis=-2),
                                         Symptom(lambda result, *args: _columns_sum_to_one(
                                             result[1]))),
    N_("Your keys and values come from the queries' sequence (self-attention): in attention "
       "between two sequences they come from the context."): partial(_wrong_cross_attention,
                                                                     keys_from="queries"),
    N_("Your queries come from the context: they come from the sequence that asks, the first "
       "argument."): partial(_wrong_cross_attention, queries_from="context"),
    N_("Your outputs mix the context itself, not its values: project it with W_v first."):
        partial(_wrong_cross_attention, values="raw"),
    N_("Your values are projected with W_k: keys and values have projections of their own."):
        partial(_wrong_cross_attention, values="with W_k"),
    N_("Your outputs use the transposed weights: output i mixes the values with query i's row of "
       "weights."): partial(_wrong_cross_attention, mix="transposed"),
    N_("You return (weights, outputs): the exercise asks for the outputs first, (outputs, "
       "weights)."): partial(_wrong_cross_attention, order="weights first"),
}


def _cross_attention_cases(generator) -> list[tuple[str, tuple]]:
    """(description, (W_q, W_k, W_v, queries, context)) cases of check_cross_attention: weights in
    PyTorch's layout (out_features, in_features)."""
    fixed = [("", dict(B=2, T_q=3, T_k=6, d_query=5, d_context=3, d=4, d_v=2), torch.float32),
             (N_("queries and context of equal sizes"),
              dict(B=2, T_q=4, T_k=4, d_query=4, d_context=4, d=4, d_v=4), torch.float32),
             (N_("a single query"), dict(B=2, T_q=1, T_k=5, d_query=3, d_context=6, d=2, d_v=3),
              torch.float32),
             (N_("a context of one token"),
              dict(B=3, T_q=4, T_k=1, d_query=2, d_context=2, d=3, d_v=2), torch.float32),
             (N_("d = 1, float64"), dict(B=1, T_q=3, T_k=4, d_query=2, d_context=5, d=1, d_v=3),
              torch.float64)]
    random = [("", s, torch.float32) for s in random_sizes(
        generator, 2, B=(1, 3), T_q=(1, 5), T_k=(1, 5), d_query=(1, 5), d_context=(1, 5), d=(1, 5),
        d_v=(1, 4))]
    entries = []
    for what, s, dtype in fixed + random:
        shapes = [(s["d"], s["d_query"]), (s["d"], s["d_context"]), (s["d_v"], s["d_context"]),
                  (s["B"], s["T_q"], s["d_query"]), (s["B"], s["T_k"], s["d_context"])]
        tensors = [randn(generator, *shape, dtype=dtype) for shape in shapes]
        for i in range(3):  # weights of scale 1/sqrt(fan-in), as nn.Linear's
            tensors[i] = tensors[i] / math.sqrt(shapes[i][1])
        entries.append((what, tuple(tensors)))
    return labelled(entries, lambda W_q, W_k, W_v, queries, context: _(
        "queries {queries}, context {context}, d={d}, d_v={d_v}").format(
            queries=tuple(queries.shape), context=tuple(context.shape), d=W_q.shape[0],
            d_v=W_v.shape[0]))


@exercise_check
def check_cross_attention(cls: type, seed: int = 0, hint: int = 1, *,
                          verbose: bool = False) -> None:
    """cls(query_size, context_size, d, d_v): attention of one sequence's queries over another
    sequence, the context, with ``W_q = nn.Linear(query_size, d, bias=False)``, ``W_k =
    nn.Linear(context_size, d, bias=False)`` and ``W_v = nn.Linear(context_size, d_v,
    bias=False)``; ``forward(queries (B, T_q, query_size), context (B, T_k, context_size))``
    returns (outputs (B, T_q, d_v), weights (B, T_q, T_k)). Compared with d2lh.DotProductAttention
    on the projected queries, keys and values."""
    cases = _cross_attention_cases(seeded_generator(seed))

    def learner(W_q, W_k, W_v, queries, context):
        module = cls(W_q.shape[1], W_k.shape[1], W_q.shape[0], W_v.shape[0]).to(queries.dtype)
        load_linear_weights(module, {"W_q": W_q, "W_k": W_k, "W_v": W_v})
        with torch.no_grad():
            return module.eval()(queries, context)

    def reference(W_q, W_k, W_v, queries, context):
        attention = DotProductAttention()
        outputs = attention(queries @ W_q.T, context @ W_k.T, context @ W_v.T)
        return outputs, attention.attention_weights

    run_check("CrossAttention", learner, cases, reference, mistakes=_CROSS_ATTENTION_MISTAKES,
              verbose=verbose,
              hints=(N_("Which sequence gives the queries, which the keys and the values? And "
                        "by the square root of which width are the scores divided?"),
                     N_("The queries come from the queries' sequence through W_q; the keys and "
                        "values from the context through W_k and W_v. Scale by the square root "
                        "of the projected width and take the softmax over the keys."),
                     N_("Q = self.W_q(queries), K = self.W_k(context), V = self.W_v(context); the "
                        "weights are the softmax over the last axis of Q @ K.transpose(1, 2) / "
                        "sqrt(d), d being the width of Q and K (not of the inputs); return "
                        "(weights @ V, weights).")),
              hint=hint)


MISTAKES = {"check_lookup": _LOOKUP_MISTAKES,
            "check_cross_attention": _CROSS_ATTENTION_MISTAKES}  # the catalogues, for the tests
