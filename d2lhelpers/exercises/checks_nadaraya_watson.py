"""The checks of notebook 02_nadaraya_watson's coding exercises: Gaussian kernel regression on
inputs of several features as the package's dot-product attention, and the leave-one-out error of
Gaussian kernel regression."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

from ..attention import DotProductAttention
from .cases import labelled, randn, random_floats, random_sizes, seeded_generator
from .runner import N_, Symptom, _, exercise_check, run_check

__all__ = ['check_kernel_as_attention', 'check_loo_error']


def _regression_data(generator, n: int, dtype=torch.float32):
    """Sorted inputs in [0, 5) and random outputs, both of shape (n,)."""
    return (5 * torch.rand(n, generator=generator, dtype=dtype)).sort().values, \
        randn(generator, n, dtype=dtype)


# Gaussian kernel regression as dot-product attention: the classic mistakes ----------------------

def _wrong_kernel_as_attention(queries, keys, width, root="D", power=2, norm="-1/2"):
    """Queries (n_q, D) and keys (n_k, D), D = d + 1, under which d2lh.DotProductAttention gives
    the weights of the Gaussian kernel of this width; right by default, every other value of an
    argument is a classic mistake. root: what the keys are multiplied by to cancel the layer's
    division by sqrt(D); power: of the width; norm: the factor of |key|^2 in the extra feature
    (None: no extra feature)."""
    n_q, d = queries.shape
    D = d + (norm is not None)
    factor = {"D": math.sqrt(D), "2": math.sqrt(2), "none": 1.0}[root] / width ** power
    if norm is None:
        return queries, factor * keys
    squared = (keys ** 2).sum(dim=1, keepdim=True)  # (n_k, 1)
    q = torch.cat([queries, torch.ones(n_q, 1, dtype=queries.dtype)], dim=1)  # (n_q, D)
    k = factor * torch.cat([keys, {"-1/2": -0.5, "+1/2": 0.5, "-1": -1.0}[norm] * squared], dim=1)
    return q, k


def _attention_weights(result, queries, keys, width):
    """The weights (n_q, n_k) that d2lh.DotProductAttention gives with the queries and keys of
    ``result``."""
    q, k = result
    attention = DotProductAttention()
    attention(q[None], k[None], torch.zeros(1, k.shape[0], 1, dtype=k.dtype))
    return attention.attention_weights[0]


def _returns_weights(result, queries, keys, width) -> bool:
    """Whether the learner returned one tensor of the weights' shape (n_q, n_k)."""
    return (isinstance(result, torch.Tensor)
            and tuple(result.shape) == (queries.shape[0], keys.shape[0]))


_KERNEL_AS_ATTENTION_MISTAKES = {
    N_("You return the weights themselves: the exercise asks for queries and keys, (q, k), that "
       "give them in d2lh.DotProductAttention."): Symptom(_returns_weights),
    N_("Your keys do not cancel the layer's division by sqrt(D), D being the width of your "
       "queries and keys (d + 1 here): multiply them by sqrt(D)."): partial(
        _wrong_kernel_as_attention, root="none"),
    N_("Your keys are multiplied by sqrt(2), as in section 3 where the inputs had one feature: the "
       "layer divides by sqrt(D), D = d + 1 for inputs of d features."): partial(
        _wrong_kernel_as_attention, root="2"),
    N_("Your scores ignore the width: the kernel's exponent is -|x - x_i|^2 / (2 width^2)."):
        partial(_wrong_kernel_as_attention, power=0),
    N_("Your scores are divided by the width, not by its square: the kernel's exponent is "
       "-|x - x_i|^2 / (2 width^2)."): partial(_wrong_kernel_as_attention, power=1),
    N_("Your scores lack the key's own term -|x_i|^2 / 2, so they favour long keys, as a dot "
       "product does, not near ones (a term of the query alone would change nothing)."):
        partial(_wrong_kernel_as_attention, norm=None),
    N_("Your keys' extra feature is +|x_i|^2 / 2: expanding -|x - x_i|^2 / 2 gives x . x_i - "
       "|x_i|^2 / 2, minus a term of the query alone."): partial(_wrong_kernel_as_attention,
                                                                 norm="+1/2"),
    N_("Your keys' extra feature is -|x_i|^2, without the 1/2: expanding -|x - x_i|^2 / 2 gives "
       "x . x_i - |x_i|^2 / 2."): partial(_wrong_kernel_as_attention, norm="-1"),
}


@exercise_check
def check_kernel_as_attention(fn: Callable, seed: int = 0, hint: int = 1, *,
                              verbose: bool = False) -> None:
    """fn(queries (n_q, d), keys (n_k, d), width) -> (q (n_q, D), k (n_k, D)) with which
    d2lh.DotProductAttention's weights, softmax(q k^T / sqrt(D)), are those of the Gaussian
    kernel, softmax over the keys of -|x - x_i|^2 / (2 width^2). Any such q and k pass: they are
    judged by the weights they give."""
    generator = seeded_generator(seed)
    fixed = [("", 6, 5, 2, 1.0, torch.float32),
             (N_("one feature, as in section 3"), 4, 7, 1, 0.5, torch.float32),
             (N_("a single key"), 3, 1, 3, 1.0, torch.float32),
             (N_("a single query"), 1, 6, 2, 2.0, torch.float32),
             (N_("a narrow kernel, float64"), 5, 8, 3, 0.2, torch.float64)]
    widths = random_floats(generator, 2, low=0.5, scale=2)
    random = [("", s["n_q"], s["n_k"], s["d"], w, torch.float32) for s, w in
              zip(random_sizes(generator, 2, n_q=(1, 6), n_k=(1, 8), d=(1, 4)), widths)]
    entries = [(what, (5 * torch.rand(n_q, d, generator=generator, dtype=dtype),
                       5 * torch.rand(n_k, d, generator=generator, dtype=dtype), width))
               for what, n_q, n_k, d, width, dtype in fixed + random]
    cases = labelled(entries, lambda queries, keys, width: _(
        "queries {queries}, keys {keys}, width {width}").format(
            queries=tuple(queries.shape), keys=tuple(keys.shape), width=f"{width:.2f}"))

    run_check(_("kernel_as_attention (through d2lh.DotProductAttention)"), fn, cases,
              reference=_wrong_kernel_as_attention,  # every argument at its right value
              compare_through=(N_("used as the queries and keys of d2lh.DotProductAttention"),
                               _attention_weights),
              mistakes=_KERNEL_AS_ATTENTION_MISTAKES, verbose=verbose,
              hints=(N_("Expand -|x - x_i|^2 / (2 width^2): which part depends on both x and "
                        "x_i, which on x_i alone, which on x alone? A softmax does not see a term "
                        "that is the same for every key. And what does the layer do to q . k?"),
                     N_("-|x - x_i|^2 / 2 is x . x_i - |x_i|^2 / 2 - |x|^2 / 2, and the last "
                        "term is the same for every key. Put x in the query with an extra feature "
                        "1, and x_i with -|x_i|^2 / 2 in the key, scaled so that the layer's "
                        "1 / sqrt(D) and the width both come out right."),
                     N_("-|x - x_i|^2 / 2 = x . x_i - |x_i|^2 / 2 - |x|^2 / 2, and the last term "
                        "is the same for every key: take q = (x, 1) and k = c (x_i, -|x_i|^2 / "
                        "2), one feature more than the inputs (D = d + 1), with c = sqrt(D) / "
                        "width^2 to cancel the layer's 1 / sqrt(D) and to put the width in.")),
              hint=hint)


# The leave-one-out error: the classic mistakes, each as the function that makes it --------------

def _kernel_scores(queries, keys, width, kernel="gaussian"):
    """(n_q, n_k) scores whose softmax over the keys gives the kernel's weights; every kernel but
    "gaussian" is a classic mistake."""
    distances = queries[:, None] - keys[None, :]  # (n_q, n_k)
    return {"gaussian": lambda: -(distances / width) ** 2 / 2,
            "squared": lambda: -(distances / width) ** 2,
            "squared over width": lambda: -distances ** 2 / width,
            "squared over 2 width": lambda: -distances ** 2 / (2 * width),
            "laplace": lambda: -distances.abs() / width}[kernel]()


def _wrong_loo_error(x, y, width, leave_out="mask", kernel="gaussian", axis=1, error="mean"):
    n = len(x)
    scores = _kernel_scores(x, x, width, kernel)  # (n, n): query i, key j
    itself = torch.eye(n, dtype=torch.bool)
    if leave_out == "mask":
        scores = scores.masked_fill(itself, -math.inf)
    weights = torch.softmax(scores, dim=axis)
    if leave_out == "zero the weight":  # after the softmax, without renormalising
        weights = weights.masked_fill(itself, 0.0)
    residuals = weights @ y - y
    return {"mean": lambda: (residuals ** 2).mean(), "sum": lambda: (residuals ** 2).sum(),
            "root": lambda: (residuals ** 2).mean().sqrt(),
            "absolute": lambda: residuals.abs().mean(),
            "n - 1": lambda: (residuals ** 2).sum() / (n - 1),
            "signed": lambda: residuals.mean(), "signed sum": lambda: residuals.sum()}[error]()


_LOO_ERROR_MISTAKES = {
    N_("You return one error per point: the exercise asks for one number, their mean."):
        Symptom(lambda result, x, y, width: tuple(torch.as_tensor(result).shape) == (len(x),)),
    N_("Your point i is among its own keys: leave-one-out predicts y_i from the other points "
       "only."): partial(_wrong_loo_error, leave_out="none"),
    N_("Your weights leave point i out after the softmax without renormalising: the other "
       "points' weights no longer sum to 1."): partial(_wrong_loo_error,
                                                       leave_out="zero the weight"),
    N_("Your kernel divides the squared distance by the width, not by the width squared: the "
       "Gaussian kernel is -((x_i - x_j) / width)^2 / 2."): (
        partial(_wrong_loo_error, kernel="squared over width"),
        partial(_wrong_loo_error, kernel="squared over 2 width")),
    N_("Your kernel misses the factor 1/2 of the Gaussian: -((x_i - x_j) / width)^2 / 2."):
        partial(_wrong_loo_error, kernel="squared"),
    N_("Your kernel is the Laplace kernel (absolute distance): this exercise uses the Gaussian."):
        partial(_wrong_loo_error, kernel="laplace"),
    N_("Your weights are normalised over the queries (each column sums to 1): the weights that "
       "predict y_i must sum to 1 over the other points j."): partial(_wrong_loo_error, axis=0),
    N_("Your error is a sum over the points: the exercise asks for their mean."):
        partial(_wrong_loo_error, error="sum"),
    N_("Your error divides the sum by n - 1: the mean over the n points divides by n."):
        partial(_wrong_loo_error, error="n - 1"),
    N_("Your error is the root of the mean squared error: the exercise asks for the mean squared "
       "error itself."): partial(_wrong_loo_error, error="root"),
    N_("Your errors are not squared: positive and negative errors cancel out in a mean of signed "
       "errors."): (partial(_wrong_loo_error, error="signed"),
                    partial(_wrong_loo_error, error="signed sum")),
    N_("Your error is the mean absolute error: the exercise asks for the mean of the squared "
       "errors."): partial(_wrong_loo_error, error="absolute"),
}


@exercise_check
def check_loo_error(fn: Callable, seed: int = 0, hint: int = 1, *,
                    verbose: bool = False) -> None:
    """fn(x (n,), y (n,), width) -> the mean squared leave-one-out error (a number) of Gaussian
    kernel regression: each y_i predicted from the other points with weights
    softmax over j != i of -((x_i - x_j) / width)^2 / 2."""
    generator = seeded_generator(seed)
    fixed = [(N_("two points, each predicted by the other"), 2, 1.0, torch.float32),
             ("", 5, 1.0, torch.float32), (N_("a narrow kernel"), 20, 0.2, torch.float32),
             (N_("a wide kernel, float64"), 12, 3.0, torch.float64)]
    widths = random_floats(generator, 2, low=0.2, scale=2)
    random = [("", s["n"], w, torch.float32)
              for s, w in zip(random_sizes(generator, 2, n=(3, 30)), widths)]
    entries = [(what, (*_regression_data(generator, n, dtype), width))
               for what, n, width, dtype in fixed + random]
    cases = labelled(entries, lambda x, y, width: _("{count} points, width {width}").format(
        count=len(x), width=f"{width:.2f}"))

    def reference(x, y, width):
        scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2  # (n, n): query i, key j
        scores = scores.masked_fill(torch.eye(len(x), dtype=torch.bool), -math.inf)  # j != i
        return ((torch.softmax(scores, dim=1) @ y - y) ** 2).mean()

    run_check("loo_error", fn, cases, reference, mistakes=_LOO_ERROR_MISTAKES, verbose=verbose,
              hints=(N_("Leave-one-out means that point i never helps to predict itself: is "
                        "that so in your function? Is the error a mean or a sum?"),
                     N_("For point i, the keys are all the other points: mask the diagonal of the "
                        "Gaussian kernel's scores before the softmax; the error is the mean "
                        "squared difference between those predictions and the y_i."),
                     N_("query i must not be among its own keys (mask the diagonal, or use "
                        "keys_loo's trick); the kernel is -((x_i - x_j) / width)^2 / 2 before the "
                        "softmax; the error is the mean over the n points of (prediction - "
                        "y_i)^2.")),
              hint=hint)


MISTAKES = {"check_kernel_as_attention": _KERNEL_AS_ATTENTION_MISTAKES,
            "check_loo_error": _LOO_ERROR_MISTAKES}  # the catalogues, for the tests
